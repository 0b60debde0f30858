"""``islands-kit study``: run a study file resumably, say what it will cost first, and write its report.

    islands-kit study run benchmarks/studies/headline-demo.toml --jobs 2      # resumable; two runs at a time
    islands-kit study run benchmarks/studies/headline-demo.toml --dry-run    # runs, finished, CPU-hours, then stop
    islands-kit study report benchmarks/studies/headline-demo.toml --write   # JSON + its table in RESULTS.md
"""
from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from islands_kit.config import ConfigError, apply_overrides
from islands_kit.io import OutputError, atomic_write_bytes, dumps_strict, finite, replace_marked_block
from islands_kit.protocol.ledger import ledger_path, overlay, restore, write_ledger
from islands_kit.protocol.points import point_root, point_studies, run_points
from islands_kit.protocol.report import make_report
from islands_kit.protocol.runner import arm_of, check_arms, known_runs, run_study
from islands_kit.protocol.runs import Run, machine_folder, this_machine
from islands_kit.protocol.study import Study, StudyError, Trial, load_study
from islands_kit.protocol.tables import render
from islands_kit.train.estimate import estimate_within
from islands_kit.train.preflight import preflight

RESULTS = Path("benchmarks") / "RESULTS.md"


def default_root(study: Study) -> Path:
    return Path("runs") / "studies" / study.name


def all_runs(study: Study, base: Path, machine: str) -> list[Run]:
    """Every run the study will make on ``machine``: the tuning runs, each arm's scoring runs and every row's (for an
    arm whose pick is not known yet, its first trial stands in: the same experiment and the same count)."""
    runs, picks = known_runs(study, base, machine)
    root = base / machine
    stand_in = {arm: picks.get(arm, study.trials(arm)[0]) for arm in study.arms}
    planned = {r.dir: r for r in runs}
    for arm in study.arms:
        for s in study.seeds:
            r = Run(stand_in[arm], s, study.preset, root, "score")
            planned.setdefault(r.dir, r)
    for row in study.rows:
        t = study.row_trial(row, stand_in)
        for s in row.seeds:
            r = Run(t, s, study.preset, root, "row")
            planned.setdefault(r.dir, r)
    return list(planned.values())


def _cost_key(t: Trial) -> str:
    """Runs that cost the same: the same config but for learning rates and outer-step sizes."""
    return json.dumps([t.experiment, [(k, v) for k, v in t.sets if not k.endswith(("lr", "momentum"))]])


def dry_run(study: Study, base: Path, say: Any = print, machine: str | None = None,
            arms: list[str] | None = None) -> dict[str, Any]:
    """What running ``study`` on this machine would cost (only ``arms``' runs when given, as ``run --arms`` makes).
    Nothing is written: the finished runs (the folders' and the ledger's) are gathered in a scratch copy, since a pick
    another machine finished decides what is left here. Every distinct config left to run gets the checks ``run
    --dry-run`` makes (config, device, the memory a step needs) before any is timed: StudyError naming the run."""
    machine = machine_folder(machine)
    with overlay(study, base) as scratch:
        runs = [r for r in all_runs(study, scratch, machine) if arms is None or arm_of(study, r) in arms]
        done = [r for r in runs if r.result() is not None]
        left = [r for r in runs if r.result() is None]
    checked: set[str] = set()
    for r in left:  # what the run itself would refuse at its start, refused now
        cfg = apply_overrides(study.base_config(r.trial.experiment), {**r.trial.overrides, "seed": str(r.seed)})
        key = json.dumps([r.trial.experiment, r.trial.sets])  # the seed moves no check
        if key not in checked:
            checked.add(key)
            try:
                preflight(cfg, None)
            except ConfigError as e:
                raise StudyError(f"{r.trial.arm} ({r.trial.describe()}): {e}") from None
    seconds: dict[str, float] = {}
    total = 0.0
    for r in left:
        key = _cost_key(r.trial)
        if key not in seconds:
            cfg = apply_overrides(study.base_config(r.trial.experiment), r.trial.overrides)
            try:
                seconds[key] = estimate_within(cfg).total_s
            except RuntimeError as e:
                raise StudyError(f"{r.trial.arm} ({r.trial.describe()}): {e}") from None
        total += seconds[key]
    only = f" of {', '.join(a for a in study.arms if a in arms)}" if arms is not None else ""
    say(f"study {study.name}: {len(runs)} runs{only} ({sum(r.phase == 'tune' for r in runs)} tuning, "
        f"{sum(r.phase == 'score' for r in runs)} scoring, {sum(r.phase == 'row' for r in runs)} rows), "
        f"{len(done)} finished, {len(left)} to run: about {total / 3600:.1f} CPU-hours on this machine ({machine}) "
        f"(one thread each; measured from {len(seconds)} configs' first steps, rough)")
    return {"runs": len(runs), "finished": len(done), "left": len(left), "cpu_hours": total / 3600}


def report_of(study: Study, root: Path, command: str) -> dict[str, Any]:
    """The study's report from its runs under ``root`` and its ledger's (read in a scratch copy: nothing is written
    into ``root``, so ``compare`` never meets a restored run there)."""
    with overlay(study, root) as scratch:
        return finite(make_report(study, scratch, command))


def write_report(study: Study, root: Path, results: Path = RESULTS) -> dict[str, Any]:
    cmd = f"islands-kit study run {study.path} --jobs 2 && islands-kit study report {study.path} --write"
    doc = report_of(study, root, cmd)
    if study.report:
        atomic_write_bytes(Path(study.report), (dumps_strict(doc, indent=1) + "\n").encode())
        ledger = ledger_path(study)
        assert ledger is not None
        write_ledger(study, root, ledger)
    replace_marked_block(results, f"study:{study.name}", render(doc))
    return doc


def _arms(args: argparse.Namespace, known: list[str]) -> list[str] | None:
    """``--arms`` read and checked against the study's arms: None for every arm, [] (said why) when it names one the
    study lacks or none at all."""
    if not getattr(args, "arms", None):
        return None
    arms = [a for a in str(args.arms).split(",") if a]
    try:
        if not arms:
            raise StudyError(f"--arms: none given (the arms of {args.study}: {', '.join(dict.fromkeys(known))})")
        check_arms(arms, known)
    except StudyError as e:
        print(f"islands-kit study: {e}")
        return []
    return arms


def points_command(args: argparse.Namespace, study: Study, root: Path) -> int:
    """``study run|report`` of a study with points: per point its dry run, its runs or its report and ledger."""
    subs = point_studies(study)
    if getattr(args, "points", None):
        wanted = [n for n in str(args.points).split(",") if n]
        names = [p.name for p, _ in subs]
        unknown = [n for n in wanted if n not in names]
        if unknown or not wanted:
            print(f"islands-kit study: --points: {', '.join(unknown) or '(none given)'} is not a point of "
                  f"{study.path} (its points: {', '.join(names)})")
            return 2
        subs = [(p, sub) for p, sub in subs if p.name in wanted]
    arms = _arms(args, [a for _, sub in subs for a in sub.arms])
    if arms == []:
        return 2
    if args.action == "run" and args.dry_run:
        try:
            costs = [dry_run(sub, point_root(root, p), arms=arms) for p, sub in subs]
        except StudyError as e:
            print(f"islands-kit study: {e}")
            return 2
        print(f"study {study.name}: {len(subs)} points, {sum(c['runs'] for c in costs)} runs, "
              f"{sum(c['left'] for c in costs)} to run: about {sum(c['cpu_hours'] for c in costs):.1f} CPU-hours")
        return 0
    if args.action == "run":
        for p, sub in subs:
            ledger = ledger_path(sub)
            if ledger is not None and (n := restore(sub, point_root(root, p), ledger)):
                print(f"study {sub.name}: {n} finished runs restored from {ledger}")
        made = run_points(study, root, jobs=args.jobs, arms=arms, points=[p.name for p, _ in subs])
        print(f"study {study.name}: {len(made)} runs made in this invocation; report: "
              f"islands-kit study report {shlex.quote(args.study)} --write")
        return 0
    for p, sub in subs:
        with overlay(sub, point_root(root, p)) as scratch:  # the ledger's runs read, none written into runs/
            doc = finite(make_report(sub, scratch, f"islands-kit study run {study.path} --jobs 2"))
        if args.write and sub.report:
            atomic_write_bytes(Path(sub.report), (dumps_strict(doc, indent=1) + "\n").encode())
            ledger = ledger_path(sub)
            assert ledger is not None
            write_ledger(sub, point_root(root, p), ledger)
        print(render(doc))
    return 0


def _cmd(args: argparse.Namespace) -> int:
    try:
        study = load_study(args.study)
    except StudyError as e:
        print(f"islands-kit study: {e}")
        return 2
    root = Path(args.out) if args.out else default_root(study)
    if study.points:
        return points_command(args, study, root)
    if getattr(args, "points", None):
        print(f"islands-kit study: --points: {study.path} has no [[points]]")
        return 2
    arms = _arms(args, list(study.arms))
    if arms == []:
        return 2
    if args.action == "run" and args.dry_run:
        try:
            dry_run(study, root, arms=arms)
        except StudyError as e:
            print(f"islands-kit study: {e}")
            return 2
        return 0
    if args.action == "run":
        ledger = ledger_path(study)  # a run starts from every finished run the ledger holds
        if ledger is not None and (n := restore(study, root, ledger)):
            print(f"study {study.name}: {n} finished runs restored from {ledger}")
        try:
            made = run_study(study, root, jobs=args.jobs, arms=arms)
        except StudyError as e:
            print(f"islands-kit study: {e}")
            return 2
        print(f"study {study.name}: {len(made)} runs made in this invocation on {this_machine()}; report: "
              f"islands-kit study report {shlex.quote(args.study)} --write")
        return 0
    try:
        doc = write_report(study, root) if args.write else report_of(study, root, "islands-kit study report")
    except (StudyError, OutputError) as e:
        print(f"islands-kit study: {e}")
        return 2
    print(render(doc))
    return 0


def add_study_command(sub: Any) -> None:
    p = sub.add_parser("study", help="run a study file (arms, grids, seeds as data) resumably, or write its report")
    p.add_argument("action", choices=["run", "report"])
    p.add_argument("study", help="a study file (benchmarks/studies/*.toml)")
    p.add_argument("--out", default=None, help="the runs' folder (default runs/studies/NAME)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each (default 2)")
    p.add_argument("--arms", default=None, help="run: only these arms (comma-separated): their tuning, scoring and rows")
    p.add_argument("--points", default=None,
                   help="a study with [[points]]: only these points (comma-separated): run, dry run or report")
    p.add_argument("--dry-run", action="store_true", help="say how many runs, how many finished, the CPU-hours; run none")
    p.add_argument("--write", action="store_true", help="report: write the study's JSON and its table in RESULTS.md")
    p.set_defaults(fn=_cmd)
