"""Faults and attacks on the aggregation (Streaming DiLoCo only): a compromised island (``attacks.py``), the
defences that check, quarantine and robustly aggregate the islands' updates (``defense.py``, with the rules as pure
functions in ``robust.py``), and how they attach to a run's hook points (:func:`attach`; :func:`detection_summary`).
"""
from __future__ import annotations

from typing import Any, Sequence

from islands_kit.config import ExperimentConfig
from islands_kit.faults.attacks import DELTA_ATTACKS, WIRE_ATTACKS, Adversary, inject_non_finite
from islands_kit.faults.defense import DETECTORS, Defense, FlagReport
from islands_kit.faults.robust import default_trim, trimmed_mean, trimmed_mean_reference, weighted_median, weighted_median_reference
from islands_kit.sync.hooks import Hooks
from islands_kit.sync.schedule import diloco_schedule

__all__ = ["DELTA_ATTACKS", "DETECTORS", "WIRE_ATTACKS", "Adversary", "Defense", "FlagReport", "default_trim",
           "attach", "detection_summary", "inject_non_finite", "trimmed_mean", "trimmed_mean_reference",
           "weighted_median", "weighted_median_reference"]


def attach(hooks: Hooks, cfg: ExperimentConfig, local_islands: Sequence[int]) -> None:
    """``cfg.faults``' attack and defence on the run's hook points (``sync/hooks.py``): a compromised island's
    attack on what it sends (``outgoing``, ``outgoing_payload``), a defence's robust rule in place of the lock-step
    mean (``merge``; the transport then all-gathers) and its checks before a decoupled merge (``screen``; a
    contribution held for want of a trusted reference: ``rescreen`` at later rounds, ``not_merged``), the state a
    checkpoint carries (``adversary``, ``defense``: None when off) and result.json's ``faults_report``. The
    strategies that call those points are the ones with an aggregation step (``traits.takes_faults``: validation
    refuses an attack or a defence for the others)."""
    f = cfg.faults
    adversary = defense = None
    if f.attack != "none":
        adversary = Adversary(f, cfg.seed)
        hooks.on("outgoing", adversary.tamper)
        hooks.on("outgoing_payload", adversary.tamper_payload)
    if f.defense != "none":
        local = list(local_islands)
        honest = [i for i in local if f.attack == "none" or i != f.attack_island] or local
        defense = Defense(f, len(cfg.islands), window=cfg.sync.H, observer=honest[0])
        hooks.on("merge", defense.aggregate)  # lock-step: the robust rule merges
        # decoupled: the synchroniser checks each contribution, drops a flagged island, holds one it cannot judge yet
        hooks.on("screen", defense.screen)
        hooks.on("rescreen", defense.rescreen)
        hooks.on("not_merged", defense.not_merged)
    hooks.state["adversary"], hooks.state["defense"] = adversary, defense
    hooks.on("result", lambda timeline, span_s: {"faults_report": defense.report() if defense is not None else []})


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
