"""The run lock under contention, and a stopped study runner: six processes racing to take one stale lock never
both hold it (the takeover used to be check-then-delete, so two takers that both judged it stale could both end up
holding it), and SIGTERM or SIGINT to ``study run`` ends the runs it started instead of leaving them as orphans."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from islands_kit.records import locks

ROUNDS = 30
TAKERS = 6


def _taker(lock: str, marker: str, barrier, rounds: int, violations) -> None:  # noqa: ANN001 - mp proxies
    # widen the window between judging a lock stale and removing it, where the old takeover raced
    real_unlink = os.unlink

    def slow_unlink(path, *a, **k):  # noqa: ANN001, ANN002, ANN003
        time.sleep(0.005)
        return real_unlink(path, *a, **k)

    os.unlink = slow_unlink
    for _ in range(rounds):
        barrier.wait()  # the round's stale lock is in place
        if locks.acquire(Path(lock)) is None:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # only one holder may get here at a time
                os.close(fd)
            except FileExistsError:
                with violations.get_lock():
                    violations.value += 1
            else:
                time.sleep(0.02)
                real_unlink(marker)
            locks.release(Path(lock))
        barrier.wait()  # every taker done: the next round's stale lock goes in


def test_concurrent_takers_of_a_stale_lock_never_both_hold_it(tmp_path):
    ctx = mp.get_context("fork")  # the takers only touch files: no torch state is used after the fork
    lock, marker = tmp_path / "run.lock", tmp_path / "holding"
    barrier = ctx.Barrier(TAKERS + 1)
    violations = ctx.Value("i", 0)
    procs = [ctx.Process(target=_taker, args=(str(lock), str(marker), barrier, ROUNDS, violations))
             for _ in range(TAKERS)]
    for p in procs:
        p.start()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    try:
        for _ in range(ROUNDS):
            # a lock left by a process that is gone: every taker judges it stale at once
            lock.write_text(json.dumps({"pid": int(dead.stdout), "host": locks._HOST, "started": "1"}))
            barrier.wait(timeout=60)
            barrier.wait(timeout=60)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    assert violations.value == 0, f"a second taker held the lock at once {violations.value} times in {ROUNDS} rounds"


def test_a_killed_holders_lock_is_free_at_once_and_a_live_ones_holds(tmp_path):
    lock = tmp_path / "run.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from islands_kit.records.locks import acquire\n"
                               f"assert acquire(Path({str(lock)!r})) is None\nprint('held', flush=True)\n"
                               "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert locks.acquire(lock) == f"process {holder.pid} on {locks._HOST}"
        assert locks.holder(lock) == f"process {holder.pid} on {locks._HOST}"
    finally:
        holder.kill()
        holder.wait()
    assert locks.holder(lock) is None  # SIGKILL: the kernel dropped its flock; the file it left is free
    assert locks.acquire(lock) is None
    locks.release(lock)
    assert not lock.exists()


_RUNNER = """
import sys, time
from pathlib import Path
from islands_kit.protocol import runs
from islands_kit.protocol.runner import run_study
from islands_kit.protocol.study import parse_study

# each run is a child that sleeps (a stand-in for a long training run) after writing its pid
runs.Run.command = lambda self: [sys.executable, "-c",
    "import os, sys, time; open(sys.argv[1], 'a').write(str(os.getpid()) + chr(10)); time.sleep(300)",
    str(Path(sys.argv[1]) / "children")]
study = parse_study({"name": "t", "preset": "smoke", "seeds": [0, 1], "tune_seeds": [0, 1],
                     "set": {"data.tune_fraction": "0.05"},
                     "arms": {"baseline": {"experiment": "baseline", "grid": {"optim.lr": ["1e-3", "2e-3"]}}}})
run_study(study, Path(sys.argv[1]) / "runs", jobs=2, say=lambda s: print(s, flush=True), machine="box-0123abcd")
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) is not running
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_study_run_ends_its_runs_and_a_restart_finds_no_orphan(tmp_path, sig):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    runner = subprocess.Popen([sys.executable, "-c", _RUNNER, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    children = tmp_path / "children"
    deadline = time.monotonic() + 120
    while (not children.is_file() or len(children.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [int(p) for p in children.read_text().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    runner.send_signal(sig)
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 128 + sig, err
    assert err.strip().splitlines() == [f"islands-kit study: stopped by {signal.Signals(sig).name}; 2 run(s) in "
                                        "progress ended (their folders hold no result.json: the next invocation "
                                        "makes them again)"], err
    time.sleep(0.5)
    assert not any(_alive(p) for p in pids), "a run survived its stopped runner"
    # the restart takes every run's lock: nothing holds one
    held = [p for p in (tmp_path / "runs").rglob("run.lock") if locks.holder(p) is not None]
    assert held == []
