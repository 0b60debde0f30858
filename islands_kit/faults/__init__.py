"""Faults and attacks on the aggregation (Streaming DiLoCo only): a compromised island (``attacks.py``), the
defences that check, quarantine and robustly aggregate the islands' updates (``defense.py``, with the rules as pure
functions in ``robust.py``), and the wiring into a run (:func:`install`, :func:`detection_summary`).
"""
from __future__ import annotations

from typing import Any

from islands_kit.config import ConfigError, ExperimentConfig
from islands_kit.faults.attacks import DELTA_ATTACKS, WIRE_ATTACKS, Adversary, inject_non_finite
from islands_kit.faults.defense import DETECTORS, Defense, FlagReport
from islands_kit.faults.robust import default_trim, trimmed_mean, trimmed_mean_reference, weighted_median, weighted_median_reference
from islands_kit.sync.decoupled import DecoupledDiLoCo
from islands_kit.sync.diloco import DiLoCo
from islands_kit.sync.schedule import diloco_schedule

__all__ = ["DELTA_ATTACKS", "DETECTORS", "WIRE_ATTACKS", "Adversary", "Defense", "FlagReport", "default_trim",
           "detection_summary", "inject_non_finite", "install", "trimmed_mean", "trimmed_mean_reference",
           "weighted_median", "weighted_median_reference"]


def install(strategy: Any, cfg: ExperimentConfig) -> tuple[Adversary | None, Defense | None]:
    """Set ``strategy.tamper`` / ``tamper_payload`` / ``aggregator`` (lock-step) or ``screen`` (decoupled) as
    ``cfg.faults`` asks; nothing (and (None, None)) when attack and defense are both 'none'. Only DiLoCo has the hooks
    (the butterfly has no aggregation step)."""
    f = cfg.faults
    if f.attack == "none" and f.defense == "none":
        return None, None
    if not isinstance(strategy, (DiLoCo, DecoupledDiLoCo)):
        name = "faults.attack" if f.attack != "none" else "faults.defense"
        raise ConfigError(f"{name}: attacks and defences need sync.strategy=diloco, the only strategy with an "
                          f"aggregation step (got sync.strategy={cfg.sync.strategy!r})")
    adversary = defense = None
    if f.attack != "none":
        adversary = Adversary(f, cfg.seed)
        strategy.tamper = adversary.tamper
        strategy.tamper_payload = adversary.tamper_payload
    if f.defense != "none":
        local = list(strategy.transport.local_islands)
        honest = [i for i in local if f.attack == "none" or i != f.attack_island] or local
        defense = Defense(f, len(cfg.islands), window=cfg.sync.H, observer=honest[0])
        if isinstance(strategy, DecoupledDiLoCo):  # the synchroniser checks each contribution, drops a flagged island
            screen = defense.screen
            strategy.screen = lambda t, p, fresh: screen(t, p, [(c.island, float(c.tokens), c.delta) for c in fresh])
        else:
            strategy.aggregator = defense.aggregate
    return adversary, defense


def detection_summary(report: list[dict[str, Any]], cfg: ExperimentConfig) -> dict[int, dict[str, Any]]:
    """Per fragment: the first sync posted at step >= attack_start (the final sync of ``finalize`` counts, at
    ``cfg.steps``), the first step a detector (not a quarantine) flagged the attacker there, and whether that is the
    same sync — "detected within one sync window"."""
    f, s = cfg.faults, cfg.sync
    syncs = diloco_schedule(cfg)
    out: dict[int, dict[str, Any]] = {}
    for p in range(s.n_fragments):
        steps = [t for t, q in syncs if q == p and t >= f.attack_start] + [cfg.steps]
        first = min(steps) if f.attack_start <= cfg.steps else None
        hits = [r["step"] for r in report if r["island"] == f.attack_island and r["fragment"] == p
                and r["reason"] in DETECTORS]
        detected = min(hits) if hits else None
        out[p] = {"first_attacked_sync": first, "first_detection": detected,
                  "within_one_window": detected is not None and detected == first}
    return out
