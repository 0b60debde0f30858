"""Where a study's runs live and what they say: a run is (trial, seed) in its own folder
``OUT/<arm>/<hash of experiment, preset and --set overrides>/seed<k>``, finished when its result.json exists; an arm's
pick is the trial with the lowest mean ``final_tune_bpb`` over the study's tuning seeds (the tuning split only: the
validation bytes play no part), known once all of the arm's tuning runs have finished. A diverged trial never wins.
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islands_kit.protocol.study import Study, Trial


@dataclass(frozen=True)
class Run:
    trial: Trial
    seed: int
    preset: str
    root: Path
    phase: str  # tune | score | row

    @property
    def key(self) -> str:
        """``<arm>/<hash of experiment, preset and overrides>/seed<k>``: the run's folder under the study's root and its
        line in the ledger."""
        key = json.dumps([self.trial.experiment, self.preset, sorted(self.trial.sets)])
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.trial.arm)[:60]
        return f"{safe}/{hashlib.sha256(key.encode()).hexdigest()[:12]}/seed{self.seed}"

    @property
    def dir(self) -> Path:
        return self.root / self.key

    def result(self) -> dict[str, Any] | None:
        p = self.dir / "result.json"
        return json.loads(p.read_text()) if p.is_file() else None

    def command(self) -> list[str]:
        """The ``islands-kit run`` command line of this run (what a reader re-runs: ``--set`` keys and the seed)."""
        cmd = [sys.executable, "-m", "islands_kit", "run", self.trial.experiment, "--preset", self.preset,
               "--out", str(self.dir)]
        for k, v in [*self.trial.sets, ("seed", str(self.seed))]:
            cmd += ["--set", f"{k}={v}"]
        return cmd


def tune_score(res: dict[str, Any] | None) -> float | None:
    """A finished run's tuning-split bpb; None if unfinished, inf if it diverged or was not scored on the split."""
    if res is None:
        return None
    v = res.get("final_tune_bpb")
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.inf


def trial_scores(study: Study, arm: str, root: Path) -> list[tuple[Trial, list[dict[str, Any] | None]]]:
    """Every trial of ``arm`` with its tuning runs' results (None where a run has not finished), seed by seed."""
    return [(t, [Run(t, s, study.preset, root, "tune").result() for s in study.tune_seeds]) for t in study.trials(arm)]


def pick(study: Study, arm: str, root: Path) -> Trial | None:
    """``arm``'s tuned setting, or None until every one of its tuning runs has finished."""
    best: tuple[float, Trial] | None = None
    for trial, results in trial_scores(study, arm, root):
        scores = [tune_score(r) for r in results]
        if any(s is None for s in scores):
            return None
        mean = sum(s for s in scores if s is not None) / len(scores)
        if best is None or mean < best[0]:
            best = (mean, trial)
    return None if best is None or not math.isfinite(best[0]) else best[1]
