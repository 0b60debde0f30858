"""Equal simulated time as a trained run, not a reading of a curve.

An island arm and its reference finish their equal tokens at different simulated times. Reading the slower arm's
validation curve at the faster one's finishing time compares a model mid-schedule (not annealed, scored on the
curve's subset) with a finished one. Instead the slower of the two is trained again with its whole schedule — warm-up
and decay — fitted into the faster one's finishing time: its pick with fewer steps (the ``length`` knob, which scales
the warm-up and the cadences with the steps), so fewer tokens, and scored on all held-out bytes at the scoring seeds
like every run. The simulated time per step comes from the two picks' own tuning runs (the mean over the tuning
seeds), which are finished before any score starts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from islands_kit.config import apply_overrides
from islands_kit.protocol.batch import BATCH_KEY, global_batch
from islands_kit.protocol.knobs import LENGTH
from islands_kit.protocol.study import Study, Trial
from islands_kit.protocol.tuning import make_trial, tune


@dataclass(frozen=True)
class EqualTime:
    """For island arm ``arm``: ``slower`` (the arm retrained: the reference, or the island arm itself) trained as
    ``trial`` (``steps`` steps) to finish at ``target_s``, the faster one's mean finishing time on the tuning runs."""

    arm: str
    slower: str
    faster: str
    trial: Trial
    steps: int
    target_s: float
    per_step_s: float


def time_name(slower: str, faster: str) -> str:
    """The retrained run's arm name: ``<slower>@time-of-<faster>``."""
    return f"{slower}@time-of-{faster}"


def island_arm(study: Study, name: str) -> str:
    """The island arm a retrained run (``time_name``) belongs to: of its two arms, the one that is not a reference."""
    slower, faster = name.split("@time-of-")
    return faster if study.arms[slower].ref == slower else slower


def _sim_times(tuned: dict[int, dict[str, Any]]) -> list[float]:
    return [float(r["sim_wall_clock_s"]) for r in tuned.values()
            if isinstance(r.get("sim_wall_clock_s"), (int, float)) and math.isfinite(r["sim_wall_clock_s"])]


def equal_time_trial(study: Study, arm: str, picks: dict[str, Trial], tuned_on: dict[str, Path]) -> EqualTime | None:
    """The retrained run that reads ``arm`` against its reference at equal simulated time; None for a reference arm,
    a study without ``equal_time``, or while either pick is unknown. ``tuned_on``: each arm's tuning folder."""
    a = study.arms[arm]
    if not study.equal_time or a.ref == arm or arm not in picks or a.ref not in picks:
        return None
    times: dict[str, tuple[float, int]] = {}
    for name in (arm, a.ref):
        t = tune(study, name, tuned_on[name])
        sims = _sim_times(t.results.get(picks[name], {}))
        if not sims:
            return None
        steps = apply_overrides(study.base_config(study.arms[name].experiment), picks[name].overrides).steps
        times[name] = (sum(sims) / len(sims), steps)
    slower, faster = (a.ref, arm) if times[a.ref][0] > times[arm][0] else (arm, a.ref)
    target, (slow_s, slow_steps) = times[faster][0], times[slower]
    per_step = slow_s / slow_steps
    label = dict(picks[slower].label)
    # ``length`` counts steps at the preset's global batch and the pick's ``batch`` then rescales them: the steps
    # wanted at the pick's batch must be a multiple of the batch factor's denominator to stay whole
    base = study.base_config(study.arms[slower].experiment)
    f = Fraction(int(label[BATCH_KEY]), global_batch(base)) if BATCH_KEY in label else Fraction(1)
    # f = num / den: the steps at the pick, length / f, are whole for length = num x k (then steps = den x k)
    k = max(1, round(target / per_step / f.denominator))
    length = f.numerator * k
    trial = make_trial(study, slower, {**label, LENGTH: str(length)})
    trial = Trial(time_name(slower, faster), trial.experiment, trial.label, trial.sets)
    steps = apply_overrides(base, trial.overrides).steps
    return EqualTime(arm, slower, faster, trial, steps, target, per_step)
