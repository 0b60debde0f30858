"""A study with points (``[[points]]``, protocol/study.py): every point is the study's arms and grids with the point's
knobs set, tuned and scored on its own — its runs under ``<root>/<point>``, its report and ledger under the study's
``point_reports``. The runner keeps ``jobs`` runs going across the points (each point in flight runs one at a time,
``jobs`` points at once), resumable like any study.

``execute_in_process`` makes a run in this process (no subprocess start-up): the notebook's smoke points and the
tests use it; the real runs go through ``runner.execute`` (one process and one thread per run).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.protocol.runner import execute, run_study
from islands_kit.protocol.runs import Run
from islands_kit.protocol.study import Point, Study
from islands_kit.run import run_experiment


def point_studies(study: Study) -> list[tuple[Point, Study]]:
    return [(p, study.at_point(p)) for p in study.points]


def point_root(root: Path, point: Point) -> Path:
    return Path(root) / point.name


def run_points(study: Study, root: Path, jobs: int = 2, say: Callable[[str], None] = print,
               execute_run: Callable[[Run], dict[str, Any] | None] = execute, arms: list[str] | None = None) -> list[Run]:
    """Run every point of ``study`` (``jobs`` points at a time, one run each), resumably; the runs made."""
    subs = point_studies(study)

    def one(item: tuple[Point, Study]) -> list[Run]:
        p, sub = item
        return run_study(sub, point_root(root, p), jobs=1, say=lambda s: say(f"[{p.name}] {s}"),
                         execute_run=execute_run, arms=arms)

    if jobs <= 1:
        return [r for item in subs for r in one(item)]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return [r for made in pool.map(one, subs) for r in made]


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
