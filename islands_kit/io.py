"""Files the kit writes: the cache folder and the one atomic-write helper (temp file + fsync + ``os.replace``).

Checkpoints, result.json, history.jsonl, the assembled corpora and the cached compressor floors all go through
:func:`atomic_write_bytes`, so a reader (or a resumed run) never sees a partial file.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    """Root of the kit's caches: ``$ISLANDS_KIT_CACHE`` if set, else ``~/.cache/islands_kit``."""
    env = os.environ.get("ISLANDS_KIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "islands_kit"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace`` (readers never see a
    partial file, and two processes racing write the same bytes). The file gets the mode a plain ``open`` would give
    it (0644 under the usual umask 022), not mkstemp's private 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data`` (the corpus fingerprint recorded in result.json)."""
    return hashlib.sha256(data).hexdigest()
