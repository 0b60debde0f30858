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
