"""The ``orbital`` experiment's settings (its row of ``config/experiment_table.py``): a ground station's island and
four satellites in low Earth orbit, the ``leo-orbit`` link, and the time compression of each preset.

Islands. Island 0 is the ground station's own island: the decoupled synchroniser sits with island 0
(``sync/decoupled.py``), so the global model lives on the ground, beside the station, and that island trains its
share of the batch too (a ground site next to the antenna). Islands 1..4 are the satellites (``link.orbit``'s
island ids: stations first). Five equal islands of 8 sequences: the baseline's 40 a step.

Time compression (``link.orbit.time_compression``, orbital seconds per simulated second). A satellite sees one
ground station for ~4.5 minutes a pass, ~4 passes a day (550 km, 53°, Redu, 25° mask); at real time a demo
run (~66 simulated seconds of compute) would fall between two passes and never sync. Compressing the orbit instead
makes one inner step stand for minutes of orbital time — a pre-training run of days, as a real one would be:
the demo spans ~8 days of orbits (~35 passes a satellite, about one per outer round of H = 50 steps), the smoke
preset ~14 hours in its 24 steps (a plumbing check: its passes are shorter than the link's round trip). Only the
ratio of compute to orbit changes: passes and eclipses keep their lengths relative to each other; the link's rate
and round trip are not compressed.

Equal tokens. The orbital demo plans the baseline's budget (1200 steps of the schedule x 40 sequences: what
``compare`` checks); satellites in eclipse (37% of each orbit at 550 km) compute at half speed, so they process
fewer of those tokens — ~85% in all, (1 + 4 x (0.63 + 0.37 x 0.5)) / 5 — as a straggler would (result.json's
``tokens`` and ``tokens_per_island`` say how many). ``--set steps=1410`` gives equal *processed* tokens instead
(compare then needs ``--allow-mismatch``: the budgets differ).
"""
from __future__ import annotations

from typing import Any

from islands_kit.config.link import LINK_PRESETS

N_SATELLITES = 4
BATCH = 8  # sequences a step per island: (1 + 4) x 8 = the baseline's 40

SMOKE_COMPRESSION = 1e6  # 24 smoke steps (~0.05 simulated s) ~ 14 hours of orbits
DEMO_COMPRESSION = 1.1e4  # 1200 demo steps (~66 simulated s) ~ 8.5 days of orbits


def station_and_satellites(hw: Any, k: int) -> list[dict[str, Any]]:
    """Island 0 on the ground beside the station, islands 1..4 in orbit; one accelerator of the preset's cell
    hardware each, the same profile on the ground and in orbit (``hw``: the table's ``Hardware``, not imported
    here since the table imports this module)."""
    names = ["ground"] + [f"sat-{j}" for j in range(N_SATELLITES)]
    return [dict(name=n, batch_size=BATCH * k, micro_batch_size=BATCH * k, dp_ranks=1, hardware=hw.cell,
                 n_accelerators=1) for n in names]


def link(compression: float, isl: bool = False) -> dict[str, Any]:
    """The ``leo-orbit`` link with the orbit's time compression (and inter-satellite links when ``isl``)."""
    return dict(LINK_PRESETS["leo-orbit"], preset="leo-orbit",
                orbit=dict(n_satellites=N_SATELLITES, time_compression=compression, isl=isl))
