"""result.json and history.jsonl as strict JSON: written atomically with non-finite floats as ``null``, and read back
(``load_result``) checked for the contract's keys with NaN restored."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from islands_kit.io import atomic_write_bytes

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


def load_result(path: str | Path) -> dict[str, Any]:
    """A run's result.json (``path``: the file or its folder), checked for the contract's keys; a diverged run's
    ``null`` bpb comes back as NaN, and ``dir`` records the folder as given (compare labels rows with it)."""
    p = Path(path)
    if p.is_dir():
        p = p / "result.json"
    if not p.exists():
        raise FileNotFoundError(f"compare: no result.json at {p}")
    with open(p) as f:
        res = json.load(f)
    missing = [k for k in RESULT_KEYS if k not in res]
    if missing:
        raise ValueError(f"compare: {p} lacks result keys {missing}")
    # a diverged run's bpb is stored as null (strict JSON): NaN again here, so tables and ratios stay numeric
    if res["final_val_bpb"] is None:
        res["final_val_bpb"] = math.nan
    res["val_curve"] = [[t, math.nan if b is None else b] for t, b in res["val_curve"]]
    res["dir"] = str(path if Path(path).is_dir() else Path(path).parent)  # the run's label in a comparison
    return res
