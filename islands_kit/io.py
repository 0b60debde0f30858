"""Files the kit writes: the cache folder, the one atomic-write helper (temp file + fsync + ``os.replace``), and
result.json / history.jsonl as strict JSON (non-finite floats written as ``null``, read back by ``load_result``
checked for the contract's keys with NaN restored).

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
import json
import math
import os
import re
import socket
import tempfile
from pathlib import Path
from typing import Any

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


def confined(root: Path, rel: str | Path, what: str) -> Path:
    """``root / rel`` for a path a file names (a study's report, a ledger's key): ValueError naming ``what`` when
    ``rel`` is absolute or empty, holds a ``..`` component, or when any part of it under ``root`` that exists is a
    symbolic link — so whatever the file says, the kit reads and writes under ``root`` only."""
    p = Path(rel)
    if not str(rel) or p.is_absolute() or not p.parts or ".." in p.parts or "\\" in str(rel):
        raise ValueError(f"{what}: {str(rel)!r} must be a relative path under {root} (no '..', not absolute)")
    cur = root
    for part in p.parts:
        cur = cur / part
        if cur.is_symlink():
            raise ValueError(f"{what}: {cur} is a symbolic link (the kit never reads or writes through one)")
    return root / p


def read_limited(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, refused (ValueError naming the file and the limit) when it holds more than ``limit``
    bytes: the size is read from the file system and checked again while reading, so an oversized file costs nothing
    to refuse."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise ValueError(f"{path}: {max(size, len(data)):,} bytes, over the limit of {limit:,} for {what}")
    return data


def parse_object(text: str) -> dict[str, Any]:
    """The JSON object in ``text``; ValueError saying why not (the parser's message, nested too deeply, or another
    JSON kind)."""
    try:
        doc = json.loads(text)  # a JSONDecodeError is a ValueError whose message says where
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(doc, dict):
        raise ValueError(f"a JSON {type(doc).__name__}, not an object")
    return doc


def read_object(path: Path, limit: int, what: str) -> dict[str, Any]:
    """The JSON object in file ``path``, read within ``limit`` bytes (``read_limited``) as UTF-8 (never UTF-16);
    ValueError saying why not, the size refusal naming the file."""
    return parse_object(read_limited(path, limit, what).decode("utf-8"))  # UnicodeDecodeError is a ValueError


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


RESULT_KEYS = (
    "experiment", "preset", "seed", "corpus", "corpus_sha256", "tokens", "steps", "params_total", "params_active",
    "final_val_bpb", "val_curve", "compressor_bpb", "cross_site_bytes", "ddp_equivalent_bytes", "routing_sync_bytes",
    "peak_link_bytes_per_s", "sim_wall_clock_s", "compute_utilization", "wall_time_s", "versions", "git_sha", "config",
)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to a temporary file in the same folder, fsync, then rename: readers never see a partial file.

    Strict JSON: a NaN/inf (a diverged run's bpb) is written as ``null``; :func:`load_result` reads it back as NaN."""
    atomic_write_bytes(Path(path), dumps_strict(obj, indent=1).encode())


def dumps_strict(obj: Any, indent: int | None = None) -> str:
    """``json.dumps`` that any JSON reader accepts: non-finite floats become ``null``."""
    return json.dumps(finite(obj), indent=indent, default=_jsonable, allow_nan=False)


def finite(o: Any) -> Any:
    """``o`` with every non-finite float replaced by None (JSON ``null``)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v) for v in o]
    return o


def _jsonable(o: Any) -> Any:
    if hasattr(o, "item"):
        return finite(o.item())
    if isinstance(o, (set, tuple)):
        return [finite(v) for v in o]
    return str(o)


MAX_RESULT_BYTES = 64 << 20  # a result.json (a long run's holds a few MB: its config, curve and link timeline)
_COUNTS = ("cross_site_bytes", "ddp_equivalent_bytes", "tokens", "steps")


def _check_result(res: dict[str, Any], p: Path) -> None:
    """The figures a comparison computes with, each a number of its kind: ValueError naming the file and the key
    (``"abc"`` for a bpb, ``10**4000`` bytes or a negative bpb used to raise inside the table, or print nonsense)."""
    def bad(key: str, v: Any, rule: str) -> ValueError:
        return ValueError(f"compare: {p}: {key} = {str(v)[:40]} {rule}")

    v = res["final_val_bpb"]
    if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not (v > 0 or math.isnan(v))):
        raise bad("final_val_bpb", v, "is not a bpb (a number > 0, or null for a diverged run)")
    for k in _COUNTS:
        n = res[k]
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < 2 ** 63:
            raise bad(k, n, "is not a whole count in [0, 2^63)")
    t = res["sim_wall_clock_s"]
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not (math.isfinite(t) and t >= 0):
        raise bad("sim_wall_clock_s", t, "is not a finite time >= 0")
    curve = res["val_curve"]
    if not isinstance(curve, list) or not all(
            isinstance(pt, list) and len(pt) == 2 and all(x is None or (isinstance(x, (int, float))
                                                          and not isinstance(x, bool)) for x in pt) for pt in curve):
        raise bad("val_curve", "...", "is not a list of [tokens, bpb] pairs")


def load_result(path: str | Path) -> dict[str, Any]:
    """A run's result.json (``path``: the file or its folder), checked for the contract's keys and the kinds of the
    figures a comparison uses, at most ``MAX_RESULT_BYTES``; a diverged run's ``null`` bpb comes back as NaN, and
    ``dir`` records the folder as given (compare labels rows with it). ValueError naming the file otherwise."""
    p = Path(path)
    if p.is_dir():
        p = p / "result.json"
    if not p.exists():
        raise FileNotFoundError(f"compare: no result.json at {p}")
    try:
        res = json.loads(read_limited(p, MAX_RESULT_BYTES, "a result.json"))
    except RecursionError:
        raise ValueError(f"compare: {p} is nested too deeply to be a result.json") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"compare: {p} is not UTF-8 JSON ({e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"compare: {p} is not JSON ({e})") from None
    if not isinstance(res, dict):
        raise ValueError(f"compare: {p} is not a JSON object")
    if res.get("restored_from"):
        raise ValueError(f"compare: {p} was restored from the study ledger {str(res['restored_from'])[:80]} "
                         "(its figures only, not a run's whole record)")
    missing = [k for k in RESULT_KEYS if k not in res]
    if missing:
        raise ValueError(f"compare: {p} lacks result keys {missing}")
    _check_result(res, p)
    # a diverged run's bpb is stored as null (strict JSON): NaN again here, so tables and ratios stay numeric
    if res["final_val_bpb"] is None:
        res["final_val_bpb"] = math.nan
    res["val_curve"] = [[t, math.nan if b is None else b] for t, b in res["val_curve"]]
    res["dir"] = str(path if Path(path).is_dir() else Path(path).parent)  # the run's label in a comparison
    return res
