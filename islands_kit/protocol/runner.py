"""One runner for every study: each run its own ``islands-kit run`` process with one torch thread, ``jobs`` at a time,
resumable, and safe to start twice.

A run is (trial, seed) on one machine; its folder is ``OUT/<machine>/<arm>/<hash of experiment, preset and --set
overrides>/seed<k>`` (protocol/runs.py). A run
with a result.json is finished and never run again; a run being made holds ``run.lock`` (O_EXCL, with its pid and
host), so a second invocation of the same study skips it instead of starting it twice, and a lock left by a dead
process is taken over. Scoring runs need their arm's pick, so the runner works in waves: every run whose config is
known is started, and when an arm's tuning runs have all finished its pick's scoring runs (and its rows) join. An arm
already tuned on another machine is not tuned again: its pick is scored here at every seed.

Stopping the runner stops its runs: SIGTERM or SIGINT (``kill``, Ctrl-C, a CI timeout) ends every ``islands-kit run``
it started before it exits with one line, so no run trains on as an orphan holding its folder (which would make the
next invocation fail on that folder's lock); the next invocation starts those runs again.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from islands_kit.protocol.equal_time import equal_time_trial, island_arm
from islands_kit.protocol.runs import Run, machine_folder
from islands_kit.protocol.study import Study, StudyError, Trial
from islands_kit.protocol.tuning import tune, tuned_pick
from islands_kit.records.locks import acquire, release


def take_lock(d: Path) -> bool:
    """Create ``d/run.lock`` for this process; False while another live process holds it (a stale lock is taken
    over: ``locks.acquire``)."""
    d.mkdir(parents=True, exist_ok=True)
    return acquire(d / "run.lock") is None


def release_lock(d: Path) -> None:
    release(d / "run.lock")


_CHILDREN: set[subprocess.Popen[str]] = set()  # the runs this process is making now
_CHILDREN_GUARD = threading.Lock()
STOP_GRACE_S = 10.0  # how long a stopped run gets to exit on SIGTERM before it is killed


def stop_children() -> int:
    """End every run this process started that is still going (SIGTERM, then SIGKILL after ``STOP_GRACE_S``); how
    many there were."""
    with _CHILDREN_GUARD:
        children = list(_CHILDREN)
    for c in children:
        if c.poll() is None:
            c.terminate()
    for c in children:
        try:
            c.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            c.kill()
            c.wait()
    return len(children)


@contextmanager
def children_stop_with_us() -> Iterator[None]:
    """While inside: SIGTERM and SIGINT end this process's runs first, then the process, with one line and exit
    status 128 + the signal (only the main thread can install handlers; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: Any) -> None:
        n = stop_children()
        print(f"islands-kit study: stopped by {signal.Signals(signum).name}; {n} run(s) in progress ended (their "
              "folders hold no result.json: the next invocation makes them again)", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum)

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def execute(run: Run, cwd: Path | None = None) -> dict[str, Any] | None:
    """Make one run (in its own process, one thread) unless it is finished or another process holds it; its
    result.json, or None when someone else is making it. A failed run raises with its log's tail."""
    done = run.result()
    if done is not None:
        return done
    if not take_lock(run.dir):
        return None
    try:
        done = run.result()  # finished between the first look and the lock
        if done is not None:
            return done
        (run.dir / "settings.json").write_text(json.dumps(
            {"arm": run.trial.arm, "experiment": run.trial.experiment, "preset": run.preset, "seed": run.seed,
             "label": dict(run.trial.label), "overrides": dict(run.trial.sets), "phase": run.phase}, indent=1))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
        proc = subprocess.Popen(run.command(), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        with _CHILDREN_GUARD:
            _CHILDREN.add(proc)
        try:
            out, err = proc.communicate()
        finally:
            with _CHILDREN_GUARD:
                _CHILDREN.discard(proc)
        (run.dir / "log.txt").write_text(out + err)
        res = run.result()
        if proc.returncode != 0 or res is None:
            raise RuntimeError(f"{run.trial.arm} seed {run.seed} ({run.trial.describe()}) failed, see "
                               f"{run.dir / 'log.txt'}:\n{err[-1500:]}")
        return res
    finally:
        release_lock(run.dir)


def known_runs(study: Study, base: Path, machine: str) -> tuple[list[Run], dict[str, Trial]]:
    """Every run of ``machine`` (under ``base / machine``) whose config is known now: the tuning runs each arm's
    tuning needs next (its current rung, or the trials that extend its grid: protocol/tuning.py) while no machine has
    finished tuning it, then the scoring runs of each arm whose pick is known, the equal-time runs whose two picks are
    known (protocol/equal_time.py) and the rows (with the picks). Every arm's tuning comes before any scoring: a
    finished tuning carries over to another machine, a score does not, so a session that ends early leaves the most
    that the next one (perhaps on another CPU) can use."""
    root = base / machine
    runs: list[Run] = []
    scores: list[Run] = []
    picks: dict[str, Trial] = {}
    tuned_on: dict[str, Path] = {}
    for arm in study.arms:
        here = tune(study, arm, root)
        found = (here.pick, machine) if here.pick is not None else tuned_pick(study, arm, base, machine)
        if found is None or found[1] == machine:  # tuned here or nowhere yet (protocol 2: seed 0's doubles as a score)
            runs += [Run(t, s, study.preset, root, "tune") for t in here.trials for s in sorted(here.results[t])]
            runs += [Run(t, s, study.preset, root, "tune") for t, s in here.need]
        if found is not None:
            picks[arm], tuned_on[arm] = found[0], base / found[1]
            scores += [Run(found[0], s, study.preset, root, "score") for s in study.seeds]
    runs += scores
    for arm in study.arms:
        et = equal_time_trial(study, arm, picks, tuned_on)
        if et is not None:
            runs += [Run(et.trial, s, study.preset, root, "equal_time") for s in study.seeds]
    for row in study.rows:
        if row.arm is None or row.arm in picks:
            t = study.row_trial(row, picks)
            runs += [Run(t, s, study.preset, root, "row") for s in row.seeds]
    seen: set[Path] = set()
    unique = []
    for r in runs:
        if r.dir not in seen:
            seen.add(r.dir)
            unique.append(r)
    return unique, picks


def arm_of(study: Study, run: Run) -> str:
    """The arm a run belongs to (a row's: the arm it changes, or the study's first arm for a standalone row)."""
    if run.trial.arm in study.arms:
        return run.trial.arm
    if run.phase == "equal_time":
        return island_arm(study, run.trial.arm)
    row = next(r for r in study.rows if r.name == run.trial.arm)
    return row.arm if row.arm is not None else next(iter(study.arms))


def check_arms(arms: list[str] | None, known: list[str]) -> None:
    """Raise StudyError naming every arm of ``arms`` (``--arms``) that is not in ``known`` (the study's arms)."""
    unknown = sorted(set(arms or []) - set(known))
    if unknown:
        raise StudyError(f"--arms: {', '.join(unknown)} not an arm of this study ({', '.join(dict.fromkeys(known))})")


def run_study(study: Study, base: Path, jobs: int = 2, say: Callable[[str], None] = print,
              execute_run: Callable[[Run], dict[str, Any] | None] = execute, arms: list[str] | None = None,
              machine: str | None = None) -> list[Run]:
    """Run every run of ``study`` on this machine (``machine``: its folder under ``base``; default the one running
    this) — only those of ``arms`` when given: an arm's tuning, scoring and rows — ``jobs`` at a time, until nothing is
    left that this invocation can start; the runs it made. Rows and scoring runs join as soon as their arm's pick is
    known."""
    return run_parts([(study, base, "")], jobs, say, execute_run, arms, machine)


def run_parts(parts: list[tuple[Study, Path, str]], jobs: int = 2, say: Callable[[str], None] = print,
              execute_run: Callable[[Run], dict[str, Any] | None] = execute, arms: list[str] | None = None,
              machine: str | None = None) -> list[Run]:
    """``run_study`` over several studies at once (a scaling study's points: each ``(study, base, prefix)``, ``prefix``
    leading its lines), ``jobs`` runs at a time from one queue: the first part's runs first, a later part's as soon as
    a slot is free, so the last unfinished part still gets every slot. The runs it made."""
    machine = machine_folder(machine)
    check_arms(arms, [a for study, _, _ in parts for a in study.arms])  # a point may run only some of the arms
    made: list[Run] = []
    started: set[Path] = set()
    with children_stop_with_us(), ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        running: dict[Future[dict[str, Any] | None], tuple[Run, str]] = {}
        while True:
            todo: list[tuple[Run, str]] = []
            for study, base, prefix in parts:
                runs, _ = known_runs(study, base, machine)
                todo += [(r, prefix) for r in runs if r.dir not in started and not r.finished
                         and (arms is None or arm_of(study, r) in arms)]
            while todo and len(running) < max(1, jobs):
                r, prefix = todo.pop(0)
                started.add(r.dir)
                say(f"{prefix}start {r.phase} {r.trial.arm} seed {r.seed}: {r.trial.describe()}")
                running[pool.submit(execute_run, r)] = (r, prefix)
            if not running:
                return made
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                r, prefix = running.pop(fut)
                res = fut.result()
                if res is None:
                    say(f"{prefix}skip  {r.trial.arm} seed {r.seed}: another process is making it ({r.dir})")
                    continue
                made.append(r)
                say(f"{prefix}done  {r.phase} {r.trial.arm} seed {r.seed}: tune {res.get('final_tune_bpb')} "
                    f"val {res.get('final_val_bpb')}")
