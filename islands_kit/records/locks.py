"""Locks on folders, so one process at a time makes a run: a run's writer holds its output folder
(:func:`folder_lock`, ``.islands_kit.lock``), the study runner each run it starts (``run.lock``).

A lock is a file its holder keeps open under an exclusive ``flock`` for as long as it holds it, with JSON ``{"pid",
"host", "started"}`` inside to name the holder. The kernel drops the flock when the holder's process ends, however it
ends, so a lock left by a dead process is simply free: taking it over is taking the flock, with no check-then-delete
window in which two takers could both judge it stale. A holder removes the file while it still holds the flock, and a
taker keeps a flock only on the file that is at the path (not one removed meanwhile). A lock naming another host
cannot be judged from here (flock does not reach across machines on every file system) and holds: the refusal names
the file to remove.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
from pathlib import Path
from typing import Iterator

from islands_kit.config import ConfigError
from islands_kit.io import output_error

LOCK_FILE = ".islands_kit.lock"  # a run's output folder
_HOST = socket.gethostname()
_HELD: dict[str, int] = {}  # lock path -> the descriptor holding its flock, in this process
_GUARD = threading.Lock()


def _start_time(pid: int) -> str:
    """The start time of process ``pid`` (clock ticks since boot), '' where /proc cannot tell."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _describe(text: str, lock: Path) -> str:
    """Who a lock file's text names."""
    try:
        d = json.loads(text) if text else None
    except ValueError:
        d = None
    if isinstance(d, dict) and isinstance(d.get("pid"), int) and isinstance(d.get("host"), str):
        return f"process {d['pid']} on {d['host']}"
    return f"an unknown holder ({lock.name} holds {text[:40]!r})" if text else "a process taking it now"


def _foreign(text: str, lock: Path) -> str | None:
    """The holder a free lock's text still names: one on another host (which no flock here can judge) or one that is
    not a kit lock at all; None when the text is the kit's own from this host, or empty (its taker died first)."""
    if not text:
        return None
    try:
        d = json.loads(text)
    except ValueError:
        d = None
    if not isinstance(d, dict) or not isinstance(d.get("pid"), int) or not isinstance(d.get("host"), str):
        return _describe(text, lock)
    return None if d["host"] == _HOST else _describe(text, lock)


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode(errors="replace")


def holder(lock: Path) -> str | None:
    """Who holds the lock file ``lock`` — ``"process PID on HOST"`` — or None when it is free."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return f"an unknown holder ({lock.name} cannot be opened)"
    try:
        text = _read(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _describe(text, lock)
        return _foreign(text, lock)
    finally:
        os.close(fd)  # drops the shared flock, if taken


def acquire(lock: Path) -> str | None:
    """Take ``lock`` for this process (a lock whose holder is gone is free): None once taken, else who holds it."""
    me = json.dumps({"pid": os.getpid(), "host": _HOST, "started": _start_time(os.getpid())}).encode()
    key = str(lock)
    for _ in range(100):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise output_error(lock, len(me), e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = _read(fd)
            os.close(fd)
            return _describe(text, lock)
        try:
            same = os.fstat(fd).st_ino == os.stat(lock, follow_symlinks=False).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # its holder removed it between our open and our flock: take the file at the path instead
            os.close(fd)
            continue
        with _GUARD:
            mine = key in _HELD
        foreign = None if mine else _foreign(_read(fd), lock)
        if mine or foreign is not None:
            os.close(fd)
            return foreign or _describe(me.decode(), lock)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, me)
        with _GUARD:
            _HELD[key] = fd
        return None
    return "another process that keeps taking it"


def release(lock: Path) -> None:
    """Remove ``lock`` if this process holds it (the file goes first, then the flock)."""
    with _GUARD:
        fd = _HELD.pop(str(lock), None)
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.unlink(lock)
    os.close(fd)


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
