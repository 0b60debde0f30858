"""A study with points (``[[points]]``, protocol/study.py): every point is the study's arms and grids with the point's
knobs set, tuned and scored on its own — its runs under ``<root>/<point>``, its report and ledger under the study's
``point_reports``. The runner keeps ``jobs`` runs going from one queue across the points (the earliest point's runs
first; a later point's fill a free slot, so the last point left still uses every slot), resumable like any study.

``execute_in_process`` makes a run in this process (no subprocess start-up): the notebook's smoke points and the
tests use it; the real runs go through ``runner.execute`` (one process and one thread per run).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.protocol.runner import execute, run_parts
from islands_kit.protocol.runs import Run
from islands_kit.protocol.study import Point, Study
from islands_kit.run import run_experiment


def point_studies(study: Study) -> list[tuple[Point, Study]]:
    return [(p, study.at_point(p)) for p in study.points]


def point_root(root: Path, point: Point) -> Path:
    return Path(root) / point.name


def run_points(study: Study, root: Path, jobs: int = 2, say: Callable[[str], None] = print,
               execute_run: Callable[[Run], dict[str, Any] | None] = execute, arms: list[str] | None = None,
               machine: str | None = None, points: list[str] | None = None) -> list[Run]:
    """Run every point of ``study`` (or only those named in ``points``), ``jobs`` runs at a time from one queue across
    the points (the earliest point's runs first, so points land in order and the last one left still uses every
    slot), resumably; the runs made."""
    return run_parts([(sub, point_root(root, p), f"[{p.name}] ") for p, sub in point_studies(study)
                      if points is None or p.name in points], jobs, say, execute_run, arms, machine)


def execute_in_process(run: Run) -> dict[str, Any]:
    """Make ``run`` in this process (finished runs are read back, not re-made); its result.json."""
    done = run.result()
    if done is not None:
        return done
    run.dir.mkdir(parents=True, exist_ok=True)
    (run.dir / "settings.json").write_text(json.dumps(
        {"arm": run.trial.arm, "experiment": run.trial.experiment, "preset": run.preset, "seed": run.seed,
         "label": dict(run.trial.label), "overrides": dict(run.trial.sets), "phase": run.phase}, indent=1))
    cfg = apply_overrides(get_preset(run.trial.experiment, run.preset), {**run.trial.overrides, "seed": str(run.seed)})
    run_experiment(cfg, run.dir)
    res = run.result()
    if res is None:
        raise RuntimeError(f"{run.trial.arm} seed {run.seed}: no result.json in {run.dir}")
    return res
