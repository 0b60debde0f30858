"""A study's ledger: one line per finished run (``benchmarks/<study>.runs.jsonl``, beside its report), holding what
the report reads from the run — the figures, the machine, the evaluation curve on the simulated clock.

Run folders are scratch (kept out of git, lost with a machine); the ledger is committed with the report, so a study
resumes on a new checkout: ``islands-kit study run`` first restores every ledger run whose folder is missing (a
result.json marked ``restored_from`` and its history.jsonl), and a restored run is finished like any other. A line's
key is ``<machine>/<arm>/<hash>/seed<k>``: a run restored from another machine goes back into that machine's folder,
where it still counts as a tuning result (its arm is not tuned again) but is paired only with its own machine's runs.
``study report`` and ``study run --dry-run`` restore into a scratch copy (``overlay``) and leave ``runs/`` as it was.

A ledger arrives in pull requests, so every line is read as a stranger's: at most ``MAX_LINE`` bytes, nested at most
``MAX_DEPTH`` levels, its key in the runner's own shape (so it names a folder under the study's, never elsewhere), and
its figures plausible (bpb in (0, 8], byte and token counts whole and >= 0, times finite, the seed the key's). A line
that fails (a torn write, a forged value) is named — file, line, rule — and skipped; the rest of the ledger stands.
A restored run says so in every report table that uses it.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from islands_kit.comm.control import nesting_depth
from islands_kit.io import atomic_write_bytes, confined, dumps_strict, finite
from islands_kit.protocol.fields import MAX_SEED, NAME
from islands_kit.protocol.runner import known_runs
from islands_kit.protocol.runs import SLUG, Run, machines
from islands_kit.protocol.study import Study, StudyError

KEYS = ("experiment", "preset", "seed", "final_val_bpb", "final_tune_bpb", "sim_wall_clock_s", "cross_site_bytes",
        "ddp_equivalent_bytes", "tokens", "steps", "params_active", "wall_time_s", "cpu_time_s", "versions",
        "compute_utilization", "ledger", "shared_from")
# ledger: the byte ledger's channels and directed links (a few dozen numbers); shared_from: the study and key a run was
# made under when another study shares it (protocol/share.py)
HISTORY_KEYS = ("step", "tokens", "sim_time_s", "val_bpb", "final", "val_bpb_subset")
# the runner's own folder shape (runs.Run.key under a machine_slug folder): nothing else is a ledger key
KEY = re.compile(rf"(?P<machine>{SLUG.pattern})/[A-Za-z0-9_-]{{1,60}}/[0-9a-f]{{12}}/seed(?P<seed>0|[1-9][0-9]{{0,9}})")
SHARED = re.compile(rf"{NAME.pattern}:{KEY.pattern}")  # a shared run's origin: study:key
MAX_LINE = 1 << 20  # bytes per line; a committed line holds a few KB (a run's figures and its evaluation curve)
MAX_FILE = 256 << 20  # bytes per ledger
MAX_DEPTH = 8  # a line nests 4 levels (record, result, ledger, channel)
MAX_BPB = 8.0  # bits per byte: a model worse than a uniform guess over 256 byte values is not a result
MAX_COUNT = 2 ** 63  # byte, token and step counts


def _warn(msg: str) -> None:
    print(f"islands-kit study: {msg}", file=sys.stderr)


def ledger_path(study: Study) -> Path | None:
    return None if not study.report else Path(study.report).with_suffix(".runs.jsonl")


def ledger_key(run: Run) -> str:
    """``<machine>/<arm>/<hash>/seed<k>``: the run's folder under the study's folder."""
    return f"{run.root.name}/{run.key}"


def record_of(run: Run) -> dict[str, Any] | None:
    res = run.result()
    if res is None:
        return None
    rows = run.history()
    return finite({"key": ledger_key(run), "arm": run.trial.arm, "overrides": run.trial.overrides,
                   "result": {k: res[k] for k in KEYS if k in res},
                   "history": [{k: h[k] for k in HISTORY_KEYS if k in h} for h in rows if "val_bpb" in h]})


# -- what a line may say -----------------------------------------------------------------------------------------
def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _bpb(v: Any, field: str, optional: bool) -> str | None:
    if v is None and optional:  # a diverged run's bpb is written as null
        return None
    if not _num(v) or not 0.0 < float(v) <= MAX_BPB:
        return f"{field}: {str(v)[:40]} is not a bpb in (0, {MAX_BPB:g}]"
    return None


def _count(v: Any, field: str) -> str | None:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < MAX_COUNT:
        return f"{field}: {str(v)[:40]} is not a whole count in [0, 2^63)"
    return None


def _time(v: Any, field: str) -> str | None:
    if v is None or (_num(v) and math.isfinite(v) and v >= 0):
        return None
    return f"{field}: {str(v)[:40]} is not a finite time >= 0"


def check_record(rec: Any) -> str | None:
    """Why ledger line ``rec`` (parsed) cannot be believed, or None when it can (see the module docstring)."""
    if not isinstance(rec, dict) or set(rec) - {"key", "arm", "overrides", "result", "history"}:
        return "not a ledger record (a table of key, arm, overrides, result, history)"
    key = rec.get("key")
    m = KEY.fullmatch(key) if isinstance(key, str) else None
    if m is None:
        return (f"key: {str(key)[:80]!r} is not a run's folder (<machine slug>/<arm: letters, digits, - and _, "
                "<= 60>/<12 hex digits>/seed<k>)")
    res, hist = rec.get("result"), rec.get("history", [])
    if not isinstance(res, dict) or not isinstance(hist, list):
        return "result must be a table and history a list"
    if not isinstance(rec.get("arm"), str) or not isinstance(rec.get("overrides", {}), dict):
        return "arm must be a string and overrides a table"
    seed = res.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < MAX_SEED or seed != int(m["seed"]):
        return f"result.seed: {str(seed)[:40]} is not the key's seed {m['seed']} (in [0, 2^32))"
    checks = [_bpb(res.get("final_val_bpb", "missing"), "result.final_val_bpb", True),
              _bpb(res.get("final_tune_bpb"), "result.final_tune_bpb", True),
              _time(res.get("sim_wall_clock_s", "missing"), "result.sim_wall_clock_s"),
              _time(res.get("wall_time_s"), "result.wall_time_s"), _time(res.get("cpu_time_s"), "result.cpu_time_s"),
              *(_count(res.get(k, "missing"), f"result.{k}") for k in ("cross_site_bytes", "ddp_equivalent_bytes")),
              *(_count(res[k], f"result.{k}") for k in ("tokens", "steps", "params_active") if k in res)]
    shared = res.get("shared_from")
    if shared is not None and not (isinstance(shared, str) and SHARED.fullmatch(shared)):
        checks.append(f"result.shared_from: {str(shared)[:80]!r} is not <study name>:<ledger key>")
    u = res.get("compute_utilization")
    if u is not None and not (_num(u) and 0.0 <= u <= 1.0):
        checks.append(f"result.compute_utilization: {str(u)[:40]} is not in [0, 1]")
    if not isinstance(res.get("versions", {}), dict):
        checks.append("result.versions: must be a table")
    for i, h in enumerate(hist):
        if not isinstance(h, dict) or set(h) - set(HISTORY_KEYS):
            checks.append(f"history[{i}]: must be a table of {', '.join(HISTORY_KEYS)}")
            break
        checks += [_bpb(h.get("val_bpb"), f"history[{i}].val_bpb", True),
                   _time(h.get("sim_time_s"), f"history[{i}].sim_time_s"),
                   *(_count(h[k], f"history[{i}].{k}") for k in ("step", "tokens") if k in h)]
    return next((c for c in checks if c is not None), None)


def read_ledger(path: Path, say: Callable[[str], None] = _warn) -> dict[str, dict[str, Any]]:
    """The believable records of the ledger at ``path`` by key; every other line is named to ``say`` (file, line,
    why) and skipped. StudyError for a ledger over ``MAX_FILE`` bytes."""
    if not path.is_file():
        return {}
    size = path.stat().st_size
    if size > MAX_FILE:
        raise StudyError(f"{path}: a ledger of {size:,} bytes, over the limit of {MAX_FILE:,}; refused unread")
    out: dict[str, dict[str, Any]] = {}
    with open(path, "rb") as f:
        for n, line in enumerate(_lines(f), 1):
            if line is None:
                say(f"{path}:{n}: skipped (a line over the limit of {MAX_LINE:,} bytes)")
                continue
            if not line.strip():
                continue
            why = None
            rec: Any = None
            if nesting_depth(line) > MAX_DEPTH:
                why = f"nested deeper than {MAX_DEPTH} levels"
            else:
                try:
                    rec = json.loads(line.rstrip(b"\r\n"))
                except ValueError as e:  # a torn write, or not JSON
                    why = f"not a JSON record ({str(e)[:80]})"
            why = why or check_record(rec)
            if why is not None:
                say(f"{path}:{n}: skipped ({why})")
                continue
            out[rec["key"]] = rec
    return out


def _lines(f: Any) -> Iterator[bytes | None]:
    """The lines of binary file ``f``, each at most ``MAX_LINE`` bytes; None for a longer one (read past, not kept)."""
    while True:
        line = f.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            while (more := f.readline(MAX_LINE)) and not more.endswith(b"\n"):
                pass
            yield None
        else:
            yield line


def write_ledger(study: Study, base: Path, path: Path) -> int:
    """Add every finished run of ``study`` under ``base`` (every machine's) to the ledger at ``path`` (kept records
    stay; lines that cannot be believed are named and dropped), written whole (temporary file, then rename); the
    count."""
    records = read_ledger(path)
    for machine in machines(base):
        for run in known_runs(study, base, machine)[0]:
            rec = record_of(run)
            if rec is not None:
                records[rec["key"]] = rec
    atomic_write_bytes(path, "".join(dumps_strict(records[k]) + "\n" for k in sorted(records)).encode())
    return len(records)


def restore(study: Study, base: Path, path: Path, say: Callable[[str], None] = _warn) -> int:
    """Write back every ledger run whose folder (under ``base``, in its machine's folder) has no result.json; how many
    were restored. Each file is written whole, never through a symbolic link; a key whose folder would pass through
    one is named and skipped."""
    n = 0
    for key, rec in read_ledger(path, say).items():
        history = "".join(dumps_strict(h) + "\n" for h in rec["history"]).encode()
        n += write_finished(base, key, {**rec["result"], "restored_from": str(path)}, history, f"{path}: key", say)
    return n


def write_finished(base: Path, key: str, result: dict[str, Any], history: bytes, what: str,
                   say: Callable[[str], None] = _warn) -> int:
    """Write a finished run made elsewhere into its folder ``base / key`` unless that folder already holds a
    result.json: 1 when written, 0 otherwise. Each file is written whole, never through a symbolic link (a key whose
    folder would pass through one is named as ``what`` and skipped)."""
    try:
        d = confined(base, key, what)
    except ValueError as e:
        say(f"{e}; skipped")
        return 0
    if (d / "result.json").is_file():
        return 0
    atomic_write_bytes(d / "history.jsonl", history)
    # result.json last and whole: a runner reading this folder meanwhile sees an unfinished run, never half a file
    atomic_write_bytes(d / "result.json", dumps_strict(result).encode())
    return 1


RUN_FILES = ("result.json", "history.jsonl")


@contextlib.contextmanager
def overlay(study: Study, base: Path) -> Iterator[Path]:
    """A scratch folder holding the finished runs under ``base`` (their result.json and history.jsonl, copied) and
    every run of the study's ledger restored beside them: what ``study report`` and the dry run read, so neither
    writes into ``base``. Only folders of the runner's own shape are copied, and no symbolic link is followed."""
    ledger = ledger_path(study)
    with tempfile.TemporaryDirectory(prefix="islands-kit-study-") as tmp:
        scratch = Path(tmp)
        for res in base.glob("*/*/*/seed*/result.json") if base.is_dir() else []:
            rel = res.parent.relative_to(base)
            try:
                src = confined(base, rel, "run folder")
            except ValueError:
                continue
            if not KEY.fullmatch(rel.as_posix()):
                continue
            (scratch / rel).mkdir(parents=True, exist_ok=True)
            for name in RUN_FILES:
                if (src / name).is_file() and not (src / name).is_symlink():
                    shutil.copyfile(src / name, scratch / rel / name)
        if ledger is not None:
            restore(study, scratch, ledger)
        yield scratch
