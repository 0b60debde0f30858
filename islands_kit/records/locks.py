"""Locks on folders, so one process at a time makes a run: a run's writer holds its output folder
(:func:`folder_lock`, ``.islands_kit.lock``), the study runner each run it starts (``run.lock``).

A lock is a file created with O_EXCL holding JSON ``{"pid", "host", "started"}``: ``started`` is the process's
start time (/proc), so a pid reused by a later process is not taken for the holder. A lock whose process is gone
from this host, or whose pid now names a later process, is stale and taken over; one from another host cannot be
judged and holds (the refusal names the file to remove).
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Iterator

from islands_kit.config import ConfigError
from islands_kit.io import output_error, pid_alive

LOCK_FILE = ".islands_kit.lock"  # a run's output folder
_HOST = socket.gethostname()


def _start_time(pid: int) -> str:
    """The start time of process ``pid`` (clock ticks since boot), '' where /proc cannot tell."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def holder(lock: Path) -> str | None:
    """Who holds the lock file ``lock`` — ``"process PID on HOST"`` — or None when it is free or stale."""
    try:
        text = lock.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        text = ""
    try:
        d = json.loads(text) if text else {}
    except ValueError:
        d = None
    if not isinstance(d, dict) or not isinstance(d.get("pid"), int) or not isinstance(d.get("host"), str):
        # half-written (its writer died while taking it) or not ours
        return None if text == "" else f"an unknown holder ({lock.name} holds {text[:40]!r})"
    pid, started = d["pid"], str(d.get("started", ""))
    if d["host"] == _HOST and (not pid_alive(pid) or (started and _start_time(pid) not in ("", started))):
        return None
    return f"process {pid} on {d['host']}"


def acquire(lock: Path) -> str | None:
    """Take ``lock`` for this process (a stale one is taken over): None once taken, else who holds it."""
    me = json.dumps({"pid": os.getpid(), "host": _HOST, "started": _start_time(os.getpid())})
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            owner = holder(lock)
            if owner is not None:
                return owner
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)  # stale: its process is gone
            continue
        except OSError as e:
            raise output_error(lock, len(me), e) from None
        with os.fdopen(fd, "w") as f:
            f.write(me)
        return None
    return "another process that keeps taking it"


def release(lock: Path) -> None:
    """Remove ``lock`` if this process holds it."""
    with contextlib.suppress(OSError, ValueError):
        if json.loads(lock.read_text()).get("pid") == os.getpid():
            os.unlink(lock)


def lock_owner(folder: str | Path) -> str | None:
    """Who holds run folder ``folder`` (``holder`` of its ``LOCK_FILE``)."""
    return holder(Path(folder) / LOCK_FILE)


@contextlib.contextmanager
def folder_lock(folder: str | Path) -> Iterator[None]:
    """Hold run folder ``folder`` (created if needed; removed again if the run left it empty): a ConfigError naming
    the folder and the holder while another live run holds it. Released on exit."""
    d = Path(folder)
    created = not d.exists()
    d.mkdir(parents=True, exist_ok=True)
    owner = acquire(d / LOCK_FILE)
    if owner is not None:
        raise ConfigError(f"--out: {d} is in use by another run ({owner}); wait for it to end or choose another "
                          f"--out (if that run is gone, remove {d / LOCK_FILE})")
    try:
        yield
    finally:
        release(d / LOCK_FILE)
        if created:  # a run refused before it wrote anything leaves no folder behind
            with contextlib.suppress(OSError):
                d.rmdir()
