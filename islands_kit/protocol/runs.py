"""Where a study's runs live and what they say: a run is (trial, seed) in its own folder
``OUT/<machine>/<arm>/<hash of experiment, preset and --set overrides>/seed<k>``, finished when its result.json exists.

``<machine>`` names the CPU, kernel set and torch build that made the run (``machine_slug``): a demo run moves by up to
a seed's spread between machines, so each machine keeps its own runs and a report pairs runs of one machine only.
How an arm's pick is made from its tuning runs (the tuning split only: the validation bytes play no part) is
protocol/tuning.py. Tuning is a choice, not a measurement: an arm tuned on one machine is not tuned again on another
(``tuning.tuned_pick``); its scoring runs are made on every machine the study runs on, every seed included.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islands_kit.io import MAX_RESULT_BYTES, parse_object, read_limited, read_object
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


def default_root(study: Study) -> Path:
    """Where a study's runs go unless ``--out`` says otherwise: ``runs/studies/<name>``."""
    return Path("runs") / "studies" / study.name


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
    phase: str  # tune | score | row | equal_time
    # a planned run whose config is not known yet (an arm's pick, or the survivors of a tuning rung): its first trial
    # stands in, for the count and the cost; ``study status`` says it waits, and it is never counted as finished
    stand_in: bool = False

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

    @property
    def finished(self) -> bool:
        """Whether the run's result.json exists (written whole by the run, or by a ledger's restore), without reading
        it: what ``study status`` and the runner's queue ask of every planned run."""
        return (self.dir / "result.json").is_file()

    def result(self) -> dict[str, Any] | None:
        """The run's result.json, None before it exists (``read_result`` says what is refused)."""
        p = self.dir / "result.json"
        return read_result(p) if p.is_file() else None

    def history(self) -> list[dict[str, Any]]:
        """The rows of the run's history.jsonl ([] where it has none), read like its result.json: within
        ``MAX_RESULT_BYTES``, UTF-8, every row an object; StudyError naming the file, the line and the remedy."""
        p = self.dir / "history.jsonl"
        if not p.is_file():
            return []
        try:
            text = read_limited(p, MAX_RESULT_BYTES, f"a run's {p.name}").decode("utf-8")
        except ValueError as e:  # over the limit, or UnicodeDecodeError
            raise _refused(p, e) from None
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(parse_object(line))
                except ValueError as e:
                    raise _refused(p, e, f"line {n}: ") from None
        return rows

    def command(self) -> list[str]:
        """The ``islands-kit run`` command line of this run (what a reader re-runs: ``--set`` keys and the seed)."""
        cmd = [sys.executable, "-m", "islands_kit", "run", self.trial.experiment, "--preset", self.preset,
               "--out", str(self.dir)]
        for k, v in [*self.trial.sets, ("seed", str(self.seed))]:
            cmd += ["--set", f"{k}={v}"]
        return cmd


def read_result(p: Path) -> dict[str, Any]:
    """A run's result.json at ``p``, read within ``MAX_RESULT_BYTES`` as UTF-8 JSON (never UTF-16); a file too big,
    torn or not an object is refused (StudyError naming the file, the rule and the remedy) rather than read whole or
    half-used."""
    try:
        return read_object(p, MAX_RESULT_BYTES, f"a run's {p.name}")
    except ValueError as e:
        raise _refused(p, e) from None


def _refused(p: Path, e: ValueError, where: str = "") -> StudyError:
    why = str(e).removeprefix(f"{p}: ")  # the size refusal names the file; the message names it once
    return StudyError(f"{p}: {where}not a run's {p.name} ({why}); remove {p.parent} to run it again")
