"""Stops that stop: SIGTERM or SIGINT to ``islands-kit notebook`` ends every process it started, then the command
itself, with one line and no traceback.

Why it takes more than Python's default: papermill starts each kernel in a session of its own (jupyter_client does,
so that a kernel can be interrupted alone), and the compare notebook's kernel starts one runner process per
experiment, each with a kernel of its own. A signal to the command, or to its process group (what ``kill``, Ctrl-C
and a CI timeout send), reaches none of those: they went on training under PID 1. So the handler walks the command's
process tree (parent links cross sessions), stops every process in it first (SIGSTOP: a stopped process starts no
new one, so the tree cannot grow while it is ended), then kills them all. Results already written stay: every file
the kit writes is written atomically.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Iterator

import psutil

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def end_descendants(root: psutil.Process | None = None) -> int:
    """Stop, then kill, every process below ``root`` (default: this one), the ones started while the tree was
    walked included; returns how many it ended."""
    me = root or psutil.Process()
    seen: dict[int, psutil.Process] = {}
    while True:  # walk again until a walk finds nobody new: a process forked before its parent stopped is caught
        try:
            fresh = [p for p in me.children(recursive=True) if p.pid not in seen]
        except psutil.NoSuchProcess:
            break
        if not fresh:
            break
        for p in fresh:
            seen[p.pid] = p
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                p.suspend()
    for p in seen.values():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            p.kill()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in seen.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(seen)


def _alive(p: psutil.Process) -> bool:
    """Running and not a zombie (a killed process whose parent has not reaped it yet computes nothing)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _stop(signum: int, _frame: FrameType | None) -> None:
    n = end_descendants()
    name = signal.Signals(signum).name
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    print(f"islands-kit notebook: stopped by {name}; ended the {n} processes it had started (runs and kernels); "
          "finished runs' files are kept", file=sys.stderr, flush=True)
    # no unwinding: papermill's and asyncio's clean-up would now wait on the kernels just ended, and print tracebacks
    os._exit(128 + signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While inside, SIGTERM and SIGINT end the whole process tree (``end_descendants``) and exit 128 + signal (the
    shell's convention: 143, 130). Python sets handlers from the main thread only: elsewhere this changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, _stop) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
