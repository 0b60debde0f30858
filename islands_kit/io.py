"""Files the kit writes: the cache folder and the one atomic-write helper (temp file + fsync + ``os.replace``).

Checkpoints, result.json, history.jsonl, the assembled corpora and the cached compressor floors all go through
:func:`atomic_write_bytes`, so a reader (or a resumed run) never sees a partial file.

A write killed before its rename leaves its temporary file behind. The temporary's name says whose it is —
``TARGET.<pid>@<host>.<random>.kit.tmp`` — so :func:`sweep_stale_temporaries` removes exactly those whose writer (a
process on this host) is gone, and never a file another live process is still writing or one the kit did not write.
Each write sweeps its own target's stale temporaries; a run sweeps its whole output folder when it starts.

A write that fails (a full disk, a read-only mount) is an :class:`OutputError` naming the file: its temporary is
removed and the file that was there before is untouched.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import socket
import tempfile
from pathlib import Path

RESULT_FILE = "result.json"  # a run writes it last: a folder holding it is a finished run, one without it is not
_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:48] or "host"
_TMP_SUFFIX = ".kit.tmp"
_TMP_NAME = re.compile(r"(?P<target>.+)\.(?P<pid>\d+)@(?P<host>[A-Za-z0-9-]+)\.[A-Za-z0-9_]+" + re.escape(_TMP_SUFFIX))


class OutputError(RuntimeError):
    """A file the kit writes could not be written (full disk, read-only, no permission); the message names it."""


def cache_root() -> Path:
    """Root of the kit's caches: ``$ISLANDS_KIT_CACHE`` if set, else ``~/.cache/islands_kit``."""
    env = os.environ.get("ISLANDS_KIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "islands_kit"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace`` (readers never see a
    partial file, and two processes racing write the same bytes). The file gets the mode a plain ``open`` would give
    it (0644 under the usual umask 022), not mkstemp's private 0600."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale_temporaries(path.parent, path.name)
        fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.{os.getpid()}@{_HOST}.", suffix=_TMP_SUFFIX, dir=path.parent)
    except OSError as e:
        raise output_error(path, len(data), e) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise output_error(path, len(data), e) from None
        raise


def output_error(path: Path, n: int, e: OSError) -> OutputError:
    """The ``OutputError`` for writing ``n`` bytes to ``path`` failing with ``e``."""
    why = e.strerror or type(e).__name__
    hint = " (free some space: df -h " + str(path.parent) + ")" if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return OutputError(f"cannot write {path} ({n:,} bytes): {why}{hint}; nothing half-written is left and the file "
                       "there before, if any, is untouched")


def sweep_stale_temporaries(folder: str | Path, target: str | None = None) -> list[Path]:
    """Remove the temporaries of killed atomic writes in ``folder`` (those of ``target`` only, when given): files
    named by :func:`atomic_write_bytes` whose writing process, on this host, no longer exists. Returns what went."""
    gone: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no folder (yet), or not readable: nothing to sweep
        return gone
    for e in entries:
        m = _TMP_NAME.fullmatch(e.name)
        if m is None or (target is not None and m["target"] != target) or m["host"] != _HOST:
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or pid_alive(pid) or not e.is_file(follow_symlinks=False):
            continue
        with contextlib.suppress(OSError):
            os.unlink(e.path)
            gone.append(Path(e.path))
    return gone


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)  # signal 0: existence check only
    except ProcessLookupError:
        return False
    except OSError:  # it exists but belongs to someone else, or we cannot tell: leave its files alone
        return True
    return True


def _umask() -> int:
    """The process umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data`` (the corpus fingerprint recorded in result.json)."""
    return hashlib.sha256(data).hexdigest()


def replace_marked_block(path: Path, name: str, text: str, *, at_top: bool = False) -> None:
    """Put ``text`` between the markers ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` of the markdown file
    ``path`` (how the benchmark scripts write their tables into benchmarks/RESULTS.md), keeping every other line.
    Without the markers the block is added: before the first ``## `` section if ``at_top``, else at the end. A file
    with only one of the two markers is refused (ValueError) before anything is written."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    doc = path.read_text()
    block = f"{begin}\n{text.strip(chr(10))}\n{end}"
    if (begin in doc) != (end in doc) or (begin in doc and doc.index(begin) > doc.index(end)):
        raise ValueError(f"{path}: the markers {begin} ... {end} must both be present, in that order, or both absent")
    if begin in doc:
        doc = doc[: doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    elif at_top and "\n## " in doc:
        head, _, rest = doc.partition("\n## ")
        doc = head + "\n" + block + "\n\n## " + rest
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    atomic_write_bytes(path, doc.encode())
