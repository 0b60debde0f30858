"""Did-you-mean for mistyped keys: the closest valid keys, and where a key that moved lives now."""
from __future__ import annotations

import difflib
import typing
from typing import Any


def dotted_keys(d: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a config dict, sections included (``sync``, ``sync.H``, ``islands.0.batch_size``)."""
    items = d.items() if isinstance(d, dict) else enumerate(d) if isinstance(d, list) else ()
    out = []
    for k, v in items:
        out.append(f"{prefix}{k}")
        out.extend(dotted_keys(v, f"{prefix}{k}."))
    return out


# Keys of the flat SyncConfig before the per-strategy sub-configs -> where each lives now, so old files still resolve.
MOVED_KEYS: dict[str, str] = {
    **{f"sync.{k}": f"sync.diloco.{k}" for k in ("alpha", "outer_lr", "outer_momentum", "nesterov", "merge", "final_codec",
                                                 "warm_start_steps", "outer_momentum_warmup", "eager")},
    **{f"sync.{k}": f"sync.butterfly.{k}" for k in ("exchanges_per_window", "exact_average_every", "final_average")},
    "sync.butterfly_merge": "sync.butterfly.merge", "sync.butterfly_eval": "sync.butterfly.eval", "sync.delay": "sync.tau",
}


def nearest(key: str, valid: typing.Iterable[str], prefix: str = "") -> str:
    """' (did you mean X?)' for the valid keys closest to a mistyped one (difflib), else ''; a key that moved
    (``MOVED_KEYS``) names its new place."""
    if prefix + key in MOVED_KEYS:
        return f" (did you mean {MOVED_KEYS[prefix + key]}? the key moved there)"
    same_depth = [v for v in valid if v.count(".") == key.count(".")]
    near = difflib.get_close_matches(key, same_depth, n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(prefix + n for n in near)}?)" if near else ""
