"""Runs one study shares with another: a study that names others in ``share`` takes, before it runs anything, every
finished run of theirs that is one of its own runs — the same experiment, the same config once every override is
applied (``ExperimentConfig.to_dict``, so an override that restates a preset's default, ``optim.name=adamw`` on an
AdamW preset, still matches), the same seed and the same machine — instead of training it again.

Which runs are the same is decided on the resolved configs, never on names: each finished run of a source study
(its run folders under ``runs/studies/<name>`` and its ledger, gathered in a scratch copy as ``study report`` reads
them) is laid on each arm of this study with the same experiment, with the source trial's grid label (its batch, lr,
momentum ...) expanded by this study's own rules (its ``[set]``, the arm's ``fixed``); the run is shared only when the
two configs are equal field for field. A shared run is written into this study's folder like a ledger-restored one
(``restored_from`` names the source ledger, ``shared_from`` the source study and key), so every report table that
uses it says it was made elsewhere, and it enters this study's ledger with its ``shared_from``.

The orbital study's ground baseline and the inner-optimizer study's AdamW arms are the headline's baseline and two_site
arms run again (the same grids, tuning seeds, scoring seeds and bounds): shared, those runs cost nothing a second time.
Only arms' runs are matched, and only at the seeds this study runs: a source run is laid on an arm whose grid has the
same axes as the run's label (a row or an equal-time run, labelled with more, is the source's own question).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from islands_kit.config import apply_overrides
from islands_kit.protocol.ledger import ledger_key, ledger_path, overlay, write_finished
from islands_kit.protocol.runner import known_runs
from islands_kit.protocol.runs import Run, default_root, machines
from islands_kit.protocol.study import EXPANSION_ERRORS, Study, StudyError, load_study
from islands_kit.protocol.tuning import make_trial


def _warn(msg: str) -> None:
    print(f"islands-kit study: {msg}", file=sys.stderr)


def fingerprint(study: Study, run: Run) -> str:
    """What a run computes: its experiment, preset, seed and every config field after its overrides."""
    cfg = apply_overrides(study.base_config(run.trial.experiment), {**run.trial.overrides, "seed": str(run.seed)})
    return json.dumps([run.trial.experiment, study.preset, cfg.to_dict()], sort_keys=True, default=str)


def sources(study: Study) -> list[Study]:
    """The studies ``study`` shares runs with, loaded: StudyError naming ``share`` for a file that is not a study, is
    this study, or keeps no ledger (a report path) — before any run starts."""
    out = []
    for path in study.share:
        try:
            src = load_study(path)
        except StudyError as e:
            raise StudyError(f"{study.path}: share: {e}") from None
        if src.name == study.name:
            raise StudyError(f"{study.path}: share: {path} is this study ({src.name}); a study shares with others")
        if src.points:
            raise StudyError(f"{study.path}: share: {path} is a study with points (share with one of its points' "
                             "files instead)")
        if ledger_path(src) is None:
            raise StudyError(f"{study.path}: share: {path} names no report, so it keeps no ledger to share")
        out.append(src)
    return out


def share(study: Study, base: Path, say: Callable[[str], None] = _warn,
          source_root: Callable[[Study], Path] = default_root) -> dict[str, int]:
    """Write into ``base`` (this study's runs folder) every finished run of the ``share`` studies that is one of this
    study's arms' runs (see the module docstring) and is not finished here yet; how many came from each study."""
    counts: dict[str, int] = {}
    for src in sources(study):
        n = 0
        with overlay(src, source_root(src)) as scratch:
            for machine in machines(scratch):
                runs, _ = known_runs(src, scratch, machine)
                for r in runs:
                    res = r.result()
                    target = None if res is None else _target(study, base / machine, src, r)
                    if res is None or target is None:
                        continue
                    history = (r.dir / "history.jsonl").read_bytes() if (r.dir / "history.jsonl").is_file() else b""
                    # a run the source itself shared keeps the study and key it was first made under
                    origin = res.get("shared_from") or f"{src.name}:{ledger_key(r)}"
                    n += write_finished(base, f"{machine}/{target.key}", {
                        **res, "restored_from": str(ledger_path(src)), "shared_from": origin}, history,
                        f"{study.path}: share: {src.name}", say)
        counts[src.name] = n
        if n:
            say(f"{n} finished runs shared from study {src.name} (the same experiment, config, seed and machine)")
    return counts


def _target(study: Study, root: Path, src: Study, r: Run) -> Run | None:
    """The run of one of ``study``'s arms (under ``root``, this machine's folder) that source run ``r`` is, when it is
    one and is not finished there yet."""
    if r.seed not in (*study.tune_seeds, *study.seeds):  # a seed this study never runs is none of its runs
        return None
    mine = None
    for arm, a in study.arms.items():
        if a.experiment != r.trial.experiment or {k for k, _ in r.trial.label} != set(a.grid):
            continue  # an arm's own runs (tuning, scores) are labelled by its grid's axes; rows, equal time are not
        try:
            trial = make_trial(study, arm, dict(r.trial.label))
        except (StudyError, *EXPANSION_ERRORS):  # a label this arm cannot make is not one of its runs
            continue
        target = Run(trial, r.seed, study.preset, root, r.phase)
        if target.finished:
            continue
        mine = mine if mine is not None else fingerprint(src, r)
        if fingerprint(study, target) == mine:
            return target
    return None
