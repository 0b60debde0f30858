"""Where a study's runs live and what they say: a run is (trial, seed) in its own folder
``OUT/<machine>/<arm>/<hash of experiment, preset and --set overrides>/seed<k>``, finished when its result.json exists.

``<machine>`` names the CPU, kernel set and torch build that made the run (``machine_slug``): a demo run moves by up to
a seed's spread between machines, so each machine keeps its own runs and a report pairs runs of one machine only.
An arm's pick is the trial with the lowest mean ``final_tune_bpb`` over the study's tuning seeds (the tuning split
only: the validation bytes play no part), known once all of the arm's tuning runs on one machine have finished. A
diverged trial never wins. Tuning is a choice, not a measurement: an arm tuned on one machine is not tuned again on
another (``tuned_pick``); its scoring runs are made on every machine the study runs on, every seed included.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islands_kit.protocol.study import Study, StudyError, Trial


def machine_slug(fingerprint: str) -> str:
    """A folder name for a machine fingerprint (``train.result.machine_fingerprint``): the CPU model and kernel set
    readable, then a hash of the whole fingerprint (torch build, flags) so two machines never share one."""
    parts = [p.strip() for p in fingerprint.split("|")]
    readable = " ".join(parts[2:3] + parts[1:2]) if len(parts) >= 3 else fingerprint
    words = "".join(c.lower() if c.isalnum() else "-" for c in readable.replace("(R)", "").replace("(TM)", ""))
    words = "-".join(w for w in words.split("-") if w and w not in {"x86", "64", "processor", "cpu"})[:40]
    return f"{words or 'machine'}-{hashlib.sha256(fingerprint.encode()).hexdigest()[:8]}"


def this_machine() -> str:
    """This machine's folder name."""
    from islands_kit.train.result import machine_fingerprint

    return machine_slug(machine_fingerprint())


SLUG = re.compile(r"[a-z0-9-]*-[0-9a-f]{8}")  # machine_slug's shape: readable words, then 8 hex digits


def machine_folder(machine: str | None) -> str:
    """``machine`` (default: this machine), checked to be a ``machine_slug`` name: the only folders ``machines`` reads."""
    if machine is None:
        return this_machine()
    if not SLUG.fullmatch(machine):
        raise StudyError(f"machine: {machine!r} is not a machine folder name (lower-case words and digits joined by "
                         "'-', ending in 8 hex digits: machine_slug)")
    return machine


def machines(base: Path) -> list[str]:
    """The machines that made runs under a study's folder ``base``: its folders named as ``machine_slug`` names
    them (any other folder there, e.g. an arm's from before runs were kept per machine, is not a machine)."""
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and SLUG.fullmatch(p.name))


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


def tuned_pick(study: Study, arm: str, base: Path, machine: str) -> tuple[Trial, str] | None:
    """``arm``'s pick and the machine it was tuned on: this machine's complete tuning if it has one, else the first
    other machine's (in name order) under ``base``; None while no machine has finished the arm's tuning."""
    for m in [machine] + [m for m in machines(base) if m != machine]:
        chosen = pick(study, arm, base / m)
        if chosen is not None:
            return chosen, m
    return None
