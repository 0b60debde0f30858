"""How an arm is tuned: successive halving over the tuning seeds, and grid axes extended until the pick is inside them.

The protocol (docs/methods.md, "The comparison protocol"; Charles et al. 2025 extend every grid until its minimum is
interior, lr in powers of sqrt 2):

* **Rungs.** Every trial runs at the first tuning seed; the best ``ceil(n / halving)`` (at least 2) by their mean so
  far run at the next tuning seed, and so on. The pick is the trial with the lowest mean tuning-split bpb among those
  that ran at every tuning seed (one seed cannot separate settings 0.1% apart). ``halving = 1`` runs every trial at
  every tuning seed.
* **Edges.** Read along each axis through the pick (the trials that differ from it on that axis alone): when the pick
  holds the smallest or largest value there (two-value axes too), the axis is extended one step past it — lr-like
  axes by half an octave (x sqrt 2), the global ``batch`` to the next batch at least half an octave away that splits
  into whole per-island batches at whole steps, a laddered axis (momentum) to the ladder's next value — and the new
  trial is tuned like the others. This repeats until the pick is interior on every axis or sits on a bound the study
  declares (``bounds``: the range a numeric axis may reach; a ladder's ends), which the report then names.

Everything here is a function of the finished runs on disk: the runner asks ``tune`` what to run next, the report
asks it what was picked and why. A study under protocol 2 (one tuning seed that may also score, no extension) is the
special case ``halving = 1`` without extension, so its old reports are re-made unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from islands_kit.protocol.batch import BATCH_KEY
from islands_kit.protocol.runs import Run, machines
from islands_kit.protocol.study import Study, StudyError, Trial

SQRT2 = math.sqrt(2.0)
MIN_KEEP = 2  # a rung keeps at least two trials: the pick and a runner-up to measure its margin against
MAX_TRIALS = 64  # an arm's tuning never grows past this many trials, whatever the bounds say


def number_text(v: float) -> str:
    """A grid value as the study files spell them: three significant digits, ``8.49e-3`` below 0.01."""
    if v == 0 or 0.01 <= abs(v) < 1e4:
        return f"{v:.3g}"
    mant, exp = f"{v:.2e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


@dataclass
class Tuning:
    """One arm's tuning as the finished runs leave it: ``need`` (tuning runs to make now; empty once tuned), the
    ``pick`` (None while tuning or when every finished trial diverged), every trial so far with its tuning runs'
    results by seed, and for the pick each axis' state (``interior``, a bound, or an extension under way)."""

    arm: str
    trials: list[Trial]
    results: dict[Trial, dict[int, dict[str, Any]]]
    need: list[tuple[Trial, int]]
    pick: Trial | None = None
    axes: dict[str, str] = field(default_factory=dict)
    rungs: list[int] = field(default_factory=list)  # trials run at each tuning seed

    @property
    def done(self) -> bool:
        return not self.need

    def scores(self, trial: Trial) -> list[float]:
        """``trial``'s tuning-split bpb at each tuning seed it ran (inf where it diverged)."""
        return [tune_value(r) for _, r in sorted(self.results.get(trial, {}).items())]

    def mean(self, trial: Trial) -> float:
        s = self.scores(trial)
        return sum(s) / len(s) if s else math.inf

    def finalists(self, n_seeds: int) -> list[Trial]:
        """The trials that ran at every tuning seed, best mean first."""
        return sorted((t for t in self.trials if len(self.results.get(t, {})) == n_seeds), key=self.mean)


def tune_value(res: dict[str, Any]) -> float:
    v = res.get("final_tune_bpb")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else math.inf


def _result(study: Study, trial: Trial, seed: int, root: Path) -> dict[str, Any] | None:
    return Run(trial, seed, study.preset, root, "tune").result()


def make_trial(study: Study, arm: str, label: dict[str, str]) -> Trial:
    a = study.arms[arm]
    sets = study.expand(a.experiment, {**a.fixed, **label})
    return Trial(arm, a.experiment, tuple(label.items()), tuple(sorted(sets.items())))


def _rungs(study: Study, tuning: Tuning) -> list[tuple[Trial, int]]:
    """The tuning runs still to make, rung by rung (a later rung waits for the earlier one to finish); records each
    rung's size in ``tuning.rungs``."""
    alive = list(tuning.trials)
    tuning.rungs = []
    for i, seed in enumerate(study.tune_seeds):
        tuning.rungs.append(len(alive))
        missing = [(t, seed) for t in alive if seed not in tuning.results.get(t, {})]
        if missing:
            return missing
        if i + 1 < len(study.tune_seeds):
            keep = len(alive) if study.halving <= 1 else max(MIN_KEEP, math.ceil(len(alive) / study.halving))
            seen = study.tune_seeds[: i + 1]
            alive = sorted(alive, key=lambda t: sum(tune_value(tuning.results[t][s]) for s in seen) / len(seen))[:keep]
    return []


def _line(tuning: Tuning, pick: Trial, key: str) -> list[str]:
    """The values ``key`` takes among the trials that agree with ``pick`` on every other axis."""
    mine = dict(pick.label)
    out = []
    for t in tuning.trials:
        lab = dict(t.label)
        if all(lab.get(k) == v for k, v in mine.items() if k != key) and key in lab:
            out.append(lab[key])
    return out


def _axis_value(study: Study, arm: str, key: str, v: str) -> float:
    ladder = study.arms[arm].ladders.get(key)
    if ladder is not None:
        return float(next(i for i, x in enumerate(ladder) if _close(float(x), float(v))))
    return float(v)


def _next_value(study: Study, arm: str, pick: Trial, key: str, up: bool) -> tuple[str | None, str]:
    """The value one step past ``pick``'s on axis ``key`` (upwards or downwards), or None and the bound that stops it."""
    a = study.arms[arm]
    v = dict(pick.label)[key]
    side = "largest" if up else "smallest"
    if key in a.ladders:
        ladder = a.ladders[key]
        i = int(_axis_value(study, arm, key, v)) + (1 if up else -1)
        if not 0 <= i < len(ladder):
            return None, f"at the study's bound ({side} of its ladder, {v})"
        return _valid(study, arm, pick, key, ladder[i], side)
    lo, hi = a.bounds[key]
    x = float(v)
    if key == BATCH_KEY:
        b = int(x)
        cands = range(math.ceil(b * SQRT2 - 1e-9), int(hi) + 1) if up else range(math.floor(b / SQRT2 + 1e-9),
                                                                                   max(1, math.ceil(lo)) - 1, -1)
        for c in cands:
            label = {**dict(pick.label), key: str(c)}
            try:
                make_trial(study, arm, label)
            except ValueError:
                continue
            return str(c), ""
        return None, f"at the study's bound (no whole batch {'up to' if up else 'down to'} {number_text(hi if up else lo)})"
    nxt = x * SQRT2 if up else x / SQRT2
    if (up and nxt > hi * (1 + 1e-2)) or (not up and nxt < lo * (1 - 1e-2)):  # 3-digit values round by < 1%
        return None, f"at the study's bound ({key} {number_text(hi if up else lo)})"
    return _valid(study, arm, pick, key, number_text(nxt), side)


def _valid(study: Study, arm: str, pick: Trial, key: str, value: str, side: str) -> tuple[str | None, str]:
    """``value`` if ``pick`` moved to it on ``key`` makes a valid config, else None and the config's rule."""
    try:
        make_trial(study, arm, {**dict(pick.label), key: value})
    except ValueError as e:
        return None, f"at the config's limit ({side} valid value; {key}={value}: {str(e)[:120]})"
    return value, ""


def _extensions(study: Study, tuning: Tuning, pick: Trial) -> list[dict[str, str]]:
    """New labels that move ``pick`` one step past each edge it sits on; fills ``tuning.axes``."""
    arm = tuning.arm
    new: list[dict[str, str]] = []
    for key in sorted(study.arms[arm].grid):
        values = [_axis_value(study, arm, key, v) for v in _line(tuning, pick, key)]
        mine = _axis_value(study, arm, key, dict(pick.label)[key])
        edges = [up for up in (False, True) if _close(mine, max(values) if up else min(values))]
        if not edges:
            tuning.axes[key] = "interior"
            continue
        states = []
        for up in edges:
            if not study.extends:
                states.append(f"on the grid's {'largest' if up else 'smallest'} value (not extended: protocol "
                              f"{study.protocol})")
                continue
            nxt, bound = _next_value(study, arm, pick, key, up)
            if nxt is None:
                states.append(bound)
            else:
                new.append({**dict(pick.label), key: nxt})
                states.append(f"edge: extending to {nxt}")
        tuning.axes[key] = "; ".join(states)
    return new


def tune(study: Study, arm: str, root: Path) -> Tuning:
    """``arm``'s tuning on the machine folder ``root``: what to run next, or the pick (see the module docstring)."""
    tuning = Tuning(arm, list(study.trials(arm)), {}, [])
    labels = [dict(t.label) for t in tuning.trials]
    while True:
        for t in tuning.trials:
            if t not in tuning.results:
                tuning.results[t] = {s: r for s in study.tune_seeds if (r := _result(study, t, s, root)) is not None}
        tuning.need = _rungs(study, tuning)
        if tuning.need:
            return tuning
        final = tuning.finalists(len(study.tune_seeds))
        if not final or not math.isfinite(tuning.mean(final[0])):
            tuning.pick = None  # every trial diverged: nothing to score
            return tuning
        tuning.pick = final[0]
        tuning.axes = {}
        new = [lab for lab in _extensions(study, tuning, final[0])
               if not any(_same_label(study, arm, lab, old) for old in labels)]
        if not new:
            return tuning
        if len(tuning.trials) + len(new) > MAX_TRIALS:
            raise StudyError(f"arms.{arm}: extending the grid past {MAX_TRIALS} trials (declare tighter bounds)")
        for lab in new:
            labels.append(lab)
            tuning.trials.append(make_trial(study, arm, lab))
        tuning.pick = None


def _same_label(study: Study, arm: str, a: dict[str, str], b: dict[str, str]) -> bool:
    return a.keys() == b.keys() and all(_close(_axis_value(study, arm, k, a[k]), _axis_value(study, arm, k, b[k]))
                                        for k in a)


def margin(tuning: Tuning, n_seeds: int) -> dict[str, Any]:
    """The pick's lead over the runner-up (relative, on the tuning split's mean over the tuning seeds) against the
    tuning seeds' own spread (the median over the finalists of the standard error of their mean, relative): a margin
    inside the spread says the tuning could not tell the two apart."""
    final = [t for t in tuning.finalists(n_seeds) if math.isfinite(tuning.mean(t))]
    if len(final) < 2:
        return {"margin": None, "seed_spread": None, "runner_up": None}
    best, second = tuning.mean(final[0]), tuning.mean(final[1])
    ses = []
    for t in final:
        s = tuning.scores(t)
        if len(s) >= 2:
            m = sum(s) / len(s)
            sd = math.sqrt(sum((x - m) ** 2 for x in s) / (len(s) - 1))
            ses.append(sd / math.sqrt(len(s)) / m)
    ses.sort()
    spread = ses[len(ses) // 2] if ses else None
    return {"margin": second / best - 1.0, "seed_spread": spread, "runner_up": dict(final[1].label)}


def pick(study: Study, arm: str, root: Path) -> Trial | None:
    """``arm``'s tuned setting on the machine folder ``root``, or None until its tuning is complete."""
    return tune(study, arm, root).pick


def tuned_pick(study: Study, arm: str, base: Path, machine: str) -> tuple[Trial, str] | None:
    """``arm``'s pick and the machine it was tuned on: this machine's complete tuning if it has one, else the first
    other machine's (in name order) under ``base``; None while no machine has finished the arm's tuning."""
    for m in [machine] + [m for m in machines(base) if m != machine]:
        chosen = pick(study, arm, base / m)
        if chosen is not None:
            return chosen, m
    return None
