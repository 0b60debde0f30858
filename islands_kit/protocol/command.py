"""``islands-kit study``: run a study file resumably, say what it will cost first, and write its report.

    islands-kit study run benchmarks/studies/headline-demo.toml --jobs 2      # resumable; two runs at a time
    islands-kit study run benchmarks/studies/headline-demo.toml --dry-run    # runs, finished, CPU-hours, then stop
    islands-kit study report benchmarks/studies/headline-demo.toml --write   # JSON + its table in RESULTS.md
    islands-kit study run FILE --executor slurm --partition cpu --jobs 200     # each run one Slurm job (docs/distributed.md)
    islands-kit study status FILE                                            # queued, running, finished, failed runs
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from islands_kit.config import ConfigError, apply_overrides
from islands_kit.io import OutputError, atomic_write_bytes, dumps_strict, finite, replace_marked_block
from islands_kit.protocol.equal_time import time_name
from islands_kit.protocol.executor import Cluster, Settings, known_machine, make_executor, settings_from
from islands_kit.protocol.ledger import ledger_path, overlay, restore, write_ledger
from islands_kit.protocol.points import point_root, point_studies, run_points
from islands_kit.protocol.report import make_report
from islands_kit.protocol.runner import arm_of, check_arms, execute, known_runs, run_study
from islands_kit.protocol.runs import Run, default_root, machine_folder, machines, this_machine
from islands_kit.protocol.share import share
from islands_kit.protocol.status import STATES, Jobs, show_status, show_submissions
from islands_kit.protocol.study import Study, StudyError, Trial, load_study
from islands_kit.protocol.tables import render
from islands_kit.protocol.tuning import MIN_KEEP, tune
from islands_kit.train.estimate import estimate_within
from islands_kit.train.preflight import preflight

RESULTS = Path("benchmarks") / "RESULTS.md"


def all_runs(study: Study, base: Path, machine: str) -> list[Run]:
    """Every run the study will make on ``machine``: the tuning runs, each arm's scoring runs and every row's (for an
    arm whose pick is not known yet, its first trial stands in: the same experiment and the same count; such a run is
    marked ``stand_in``, whatever its folder holds)."""
    runs, picks = known_runs(study, base, machine)
    root = base / machine
    stand_in = {arm: picks.get(arm, study.trials(arm)[0]) for arm in study.arms}
    planned = {r.dir: r for r in runs}
    for arm in study.arms:  # the later rungs of a tuning under way: its first trials stand in for the survivors
        if arm in picks:
            continue
        rungs = tune(study, arm, root).rungs
        n = len(study.trials(arm))
        for i, seed in enumerate(study.tune_seeds):
            n = n if i == 0 or study.halving <= 1 else max(MIN_KEEP, math.ceil(n / study.halving))
            if i >= len(rungs):
                for t in study.trials(arm)[:n]:
                    r = Run(t, seed, study.preset, root, "tune", stand_in=True)
                    planned.setdefault(r.dir, r)
    known_time = {r.trial.arm for r in runs if r.phase == "equal_time"}
    for arm, a in study.arms.items():  # equal time: at most the slower arm's whole run again, at every scoring seed
        if study.equal_time and a.ref != arm and not {time_name(a.ref, arm), time_name(arm, a.ref)} & known_time:
            t = stand_in[a.ref]
            for s in study.seeds:
                r = Run(Trial(time_name(a.ref, arm), t.experiment, t.label, t.sets), s, study.preset, root,
                        "equal_time", stand_in=True)
                planned.setdefault(r.dir, r)
    for arm in study.arms:
        for s in study.seeds:
            r = Run(stand_in[arm], s, study.preset, root, "score", stand_in=arm not in picks)
            planned.setdefault(r.dir, r)
    for row in study.rows:
        t = study.row_trial(row, stand_in)
        for s in row.seeds:
            r = Run(t, s, study.preset, root, "row", stand_in=row.arm is not None and row.arm not in picks)
            planned.setdefault(r.dir, r)
    return list(planned.values())


def _cost_key(t: Trial) -> str:
    """Runs that cost the same: the same config but for learning rates and outer-step sizes."""
    return json.dumps([t.experiment, [(k, v) for k, v in t.sets if not k.endswith(("lr", "momentum"))]])


def dry_run(study: Study, base: Path, say: Any = print, machine: str | None = None,
            arms: list[str] | None = None, show: Callable[[list[Run]], Any] | None = None) -> dict[str, Any]:
    """What running ``study`` on this machine would cost (only ``arms``' runs when given, as ``run --arms`` makes).
    Nothing is written: the finished runs (the folders' and the ledger's) are gathered in a scratch copy, since a pick
    another machine finished decides what is left here. Every distinct config left to run gets the checks ``run
    --dry-run`` makes (config, device, the memory a step needs) before any is timed: StudyError naming the run."""
    machine = machine_folder(machine)
    with overlay(study, base) as scratch:
        shared = share(study, scratch, say=lambda _: None)  # what another study made already is not left to run
        runs = [r for r in all_runs(study, scratch, machine) if arms is None or arm_of(study, r) in arms]
        finished = [not r.stand_in and (r.dir / "result.json").is_file() for r in runs]
        done = [r for r, f in zip(runs, finished) if f]
        left = [dataclasses.replace(r, root=base / machine) for r, f in zip(runs, finished) if not f]  # out of the scratch copy
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
    eq = sum(r.phase == "equal_time" for r in runs)
    say(f"study {study.name}: {len(runs)} runs{only} ({sum(r.phase == 'tune' for r in runs)} tuning, "
        f"{sum(r.phase == 'score' for r in runs)} scoring, {sum(r.phase == 'row' for r in runs)} rows"
        + (f", {eq} equal-time" if eq else "") + f"), "
        f"{len(done)} finished"
        + "".join(f" ({n} shared from study {name})" for name, n in shared.items() if n)
        + f", {len(left)} to run: about {total / 3600:.1f} CPU-hours on this machine ({machine}) "
        f"(one thread each; measured from {len(seconds)} configs' first steps, rough"
        + ("; equal-time runs counted at full length, an upper bound; a grid extended past an edge adds one run per "
           "tuning seed it reaches, not counted" if study.protocol >= 3 else "") + ")")
    if show is not None:
        show(left)
    return {"runs": len(runs), "finished": len(done), "left": len(left), "cpu_hours": total / 3600, "shared": shared}


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


def points_command(args: argparse.Namespace, study: Study, root: Path, cluster: Cluster | None = None) -> int:
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
        show = None if cluster is None else (lambda left: show_submissions(left, cluster))
        machine = None if cluster is None else cluster.known_machine()
        try:
            costs = [dry_run(sub, point_root(root, p), arms=arms, machine=machine, show=show) for p, sub in subs]
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
        made = run_points(study, root, jobs=args.jobs, arms=arms, points=[p.name for p, _ in subs],
                          execute_run=execute if cluster is None else cluster.execute,
                          machine=None if cluster is None else cluster.machine())
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


def study_command(args: argparse.Namespace) -> int:
    """``islands-kit study run|report FILE`` (its parser: ``commands/subcommands.py``)."""
    try:
        study = load_study(args.study)
    except StudyError as e:
        print(f"islands-kit study: {e}")
        return 2
    root = Path(args.out) if args.out else default_root(study)
    try:
        settings = settings_from(study.executor, _executor_flags(args), f"{study.path}: executor")
        if args.action == "status":
            return status_command(study, root, settings)
        cluster = None if args.action != "run" or settings.kind == "local" else make_executor(settings.kind, settings, root / ".cluster")
    except StudyError as e:
        print(f"islands-kit study: {e}")
        return 2
    assert cluster is None or isinstance(cluster, Cluster)
    if study.points:
        return points_command(args, study, root, cluster)
    if getattr(args, "points", None):
        print(f"islands-kit study: --points: {study.path} has no [[points]]")
        return 2
    arms = _arms(args, list(study.arms))
    if arms == []:
        return 2
    if args.action == "run" and args.dry_run:
        try:
            if cluster is None:
                dry_run(study, root, arms=arms)
            else:
                dry_run(study, root, arms=arms, machine=cluster.known_machine(),
                        show=lambda left: show_submissions(left, cluster))
        except StudyError as e:
            print(f"islands-kit study: {e}")
            return 2
        return 0
    if args.action == "run":
        ledger = ledger_path(study)  # a run starts from every finished run the ledger holds
        if ledger is not None and (n := restore(study, root, ledger)):
            print(f"study {study.name}: {n} finished runs restored from {ledger}")
        try:
            share(study, root, say=lambda msg: print(f"study {study.name}: {msg}"))
            machine = None if cluster is None else cluster.machine()
            made = run_study(study, root, jobs=args.jobs, arms=arms, machine=machine,
                             execute_run=execute if cluster is None else cluster.execute)
        except StudyError as e:
            print(f"islands-kit study: {e}")
            return 2
        print(f"study {study.name}: {len(made)} runs made in this invocation on {machine or this_machine()}; report: "
              f"islands-kit study report {shlex.quote(args.study)} --write")
        return 0
    try:
        doc = write_report(study, root) if args.write else report_of(study, root, "islands-kit study report")
    except (StudyError, OutputError) as e:
        print(f"islands-kit study: {e}")
        return 2
    print(render(doc))
    return 0


def _executor_flags(args: argparse.Namespace) -> dict[str, Any]:
    return {"kind": getattr(args, "executor", None), "partition": getattr(args, "partition", None),
            "account": getattr(args, "account", None), "time_min": getattr(args, "time_min", None),
            "cpus_per_run": getattr(args, "cpus_per_run", None), "constraint": getattr(args, "constraint", None)}


def status_command(study: Study, root: Path, settings: Settings) -> int:
    """``study status``: every run of the study (each point's) on the machine its jobs are planned for and on every
    machine that made runs, with its state; a failed run's log tail."""
    folder = root / ".cluster"
    planned = (known_machine(settings, folder) if settings.kind != "local" else None) or this_machine()
    parts = [(sub, point_root(root, p), f"[{p.name}] ") for p, sub in point_studies(study)] if study.points else [(study, root, "")]
    jobs = Jobs(folder, settings if settings.kind != "local" else None)
    counts: Counter[str] = Counter()
    elsewhere: Counter[str] = Counter()
    for sub, base, prefix in parts:
        for m in dict.fromkeys([planned, *machines(base)]):
            here = show_status([(f"{prefix}{sub.name} on {m}", all_runs(sub, base, m))], jobs)
            # every machine's folder plans the whole study: the total is the planned machine's (a run made elsewhere
            # and landed there counts as finished); another machine's folder only says how many it finished
            if m == planned:
                counts += here
            else:
                elsewhere[m] += here["finished"]
    print(f"study {study.name} on {planned}: " + ", ".join(f"{counts[s]} {s}" for s in STATES if counts[s])
          + "".join(f"; {m}'s folder: {n} finished" for m, n in elsewhere.items()))
    return 0
