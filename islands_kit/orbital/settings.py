"""The ``orbital`` experiment's settings (its row of ``config/experiment_table.py``): a ground station's island and
four training satellites in a ring of nine, the time compression of each preset, and the controls that isolate what
the orbit costs. Torch-free and config-free: the config table reads it (and puts it on the ``leo-orbit`` link of
``config/link.py``), so nothing here imports the config back.

Islands. Island 0 is the ground station's own island: the decoupled synchroniser sits with island 0
(``sync/decoupled.py``), so the global model lives on the ground, beside the station, and that island trains its
share of the batch too (a ground site next to the antenna). Islands 1..4 are satellites 0..3 of the ring
(``link.orbit``'s island ids: stations first). Five equal islands of 8 sequences: the baseline's 40 a step.

The ring. Nine satellites evenly spaced in one plane at 550 km (``RING``): the fewest whose neighbours see each
other over the Earth with an 80 km grazing margin (``geometry.ring``; eight would be 45° apart, their line of sight
passing 23 km above the surface), so the inter-satellite links of ``link.orbit.isl=true`` exist. Four of them train;
the other five only relay (store and forward over the ring) — they are no islands. The alternative, nine smaller
training satellites of 4 sequences, would change two things at once: ten replicas instead of five (DiLoCo's gap
grows with the replica count) as well as the orbit; docs/methods.md says why the relays were chosen.

Time compression (``link.orbit.time_compression``, orbital seconds per simulated second). A satellite sees one
ground station for a few minutes a pass, a few passes a day; at real time a demo run (~66 simulated seconds of
compute) would fall between two passes and never sync. Compressing the orbit instead makes one inner step stand
for minutes of orbital time — a pre-training run of days, as a real one would be: the demo spans ~8 days of orbits,
the smoke preset ~14 hours in its 24 steps (a plumbing check: its passes are shorter than the link's round trip).
Only the ratio of compute to orbit changes: passes and eclipses keep their lengths relative to each other; the
link's rate and round trip are not compressed.

Equal tokens. The orbital demo plans the baseline's budget (1200 steps of the schedule x 40 sequences: what
``compare`` checks); satellites in eclipse (37% of each orbit at 550 km) compute at half speed, so they process
fewer of those tokens, as a straggler would (result.json's ``tokens`` and ``tokens_per_island`` say how many).
``train/orbit.py``'s ``steps_for_tokens`` plans the ticks that process the budget instead (a study's
``equal_tokens`` knob); compare then needs ``--allow-mismatch``: the planned budgets differ.
"""
from __future__ import annotations

from typing import Any

LINK = "leo-orbit"  # the named link of config/link.py the satellites' ground links use
RING = 9  # satellites in the plane (geometry.ring at 550 km with an 80 km grazing margin)
N_TRAINING = 4  # of them, the ones that train (islands 1..4); the rest relay
BATCH = 8  # sequences a step per island: (1 + 4) x 8 = the baseline's 40

SMOKE_COMPRESSION = 1e6  # 24 smoke steps (~0.05 simulated s) ~ 14 hours of orbits
DEMO_COMPRESSION = 1.1e4  # 1200 demo steps (~66 simulated s) ~ 8.5 days of orbits

# The controls that take the orbit apart one effect at a time, each a set of ``--set`` overrides on the orbital
# experiment (the same five islands and batches throughout); the ground baseline is ``islands-kit run baseline``.
# Read them in order: each row adds one effect to the row before it (docs/methods.md, "Controls").
CONTROLS: dict[str, dict[str, str]] = {
    # (i) the same islands on the ground: the link always up (leo-orbit's rate and noise), no eclipse
    "ground": {"link.schedule": "periodic"},
    # (ii) (i) plus eclipse throttling of the satellites' islands, still always connected
    "ground+eclipse": {"link.schedule": "periodic", "link.orbit.eclipse": "on"},
    # (iii) the orbit: ground passes only (each satellite through its own passes), eclipses
    "passes": {"link.orbit.isl": "false"},
    # (iv) ground passes plus the inter-satellite links that exist (relayed through the ring)
    "passes+isl": {"link.orbit.isl": "true"},
}


def station_and_satellites(hw: Any, k: int) -> list[dict[str, Any]]:
    """Island 0 on the ground beside the station, islands 1..4 in orbit; one accelerator of the preset's cell
    hardware each, the same profile on the ground and in orbit (``hw``: the table's ``Hardware``, not imported
    here since the table imports this module)."""
    names = ["ground"] + [f"sat-{j}" for j in range(N_TRAINING)]
    return [dict(name=n, batch_size=BATCH * k, micro_batch_size=BATCH * k, dp_ranks=1, hardware=hw.cell,
                 n_accelerators=1) for n in names]



def orbit_section(compression: float, isl: bool = False) -> dict[str, Any]:
    """``link.orbit``'s settings over the ring with the orbit's time compression (and inter-satellite links when
    ``isl``); the table puts them on the ``LINK`` link."""
    return dict(n_satellites=RING, time_compression=compression, isl=isl)
