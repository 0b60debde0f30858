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


# Keys that moved -> where each lives now, so old files still resolve. A strategy's section adds the keys that moved
# into it when it registers (config/sync.py: Section.moved).
MOVED_KEYS: dict[str, str] = {"sync.delay": "sync.tau"}


# names other training code uses for the kit's fields (the last part of a dotted key)
SYNONYMS: dict[str, str] = {
    "learning_rate": "lr", "learningrate": "lr", "max_steps": "steps", "num_steps": "steps", "total_steps": "steps",
    "n_steps": "steps", "iters": "steps", "batch": "batch_size", "bs": "batch_size", "hidden_size": "d_model",
    "dim": "d_model", "num_layers": "n_layers", "layers": "n_layers", "num_experts": "n_experts",
    "experts": "n_experts", "topk": "top_k", "num_heads": "n_heads", "block_size": "seq_len", "seq_length": "seq_len",
    "context_length": "seq_len", "warmup": "warmup_steps", "dataset": "corpus", "eval_interval": "eval_every",
    "optimizer": "name", "wd": "weight_decay", "sync_every": "H", "inner_steps": "H", "delay": "tau",
    # nanoGPT's names
    "max_iters": "steps", "n_layer": "n_layers", "n_embd": "d_model", "n_head": "n_heads", "warmup_iters": "warmup_steps",
}


def nearest(key: str, valid: typing.Iterable[str], prefix: str = "") -> str:
    """' (did you mean X?)' for the valid keys closest to a mistyped one, else ''. A key that moved (``MOVED_KEYS``)
    names its new place; then, in the same section, a common synonym (``learning_rate`` -> ``lr``), an acronym of
    the typed words (``learning_rate`` -> ``lr``) or a name containing / contained in the typed one; then a field of
    that name (or synonym) in another section (nanoGPT's flat ``lr``, ``batch_size``, ``max_iters`` -> ``optim.lr``,
    ``islands.<i>.batch_size``, ``steps``; the shallowest such keys only); then the closest spellings (difflib)."""
    if prefix + key in MOVED_KEYS:
        return f" (did you mean {MOVED_KEYS[prefix + key]}? the key moved there)"
    same_depth = [v for v in valid if v.count(".") == key.count(".")]
    section, _, last = key.rpartition(".")
    siblings = [v for v in same_depth if v.rpartition(".")[0] == section]
    acronym = "".join(w[0] for w in last.split("_") if w)

    def named_alike(v: str) -> bool:
        name = v.rpartition(".")[2]
        return (SYNONYMS.get(last.lower()) == name or (len(acronym) > 1 and acronym == name)
                or (min(len(name), len(last)) >= 3 and (name in last or last in name)))

    near = [v for v in siblings if named_alike(v)]
    if not near:
        want = {last.lower(), SYNONYMS.get(last.lower(), "")}
        near = [v for v in valid if v.rpartition(".")[2] in want]
        near = [v for v in near if v.count(".") == min(n.count(".") for n in near)]  # optim.lr before optim.snoo.lr
    near += [v for v in difflib.get_close_matches(key, same_depth, n=3, cutoff=0.6) if v not in near]
    near = near[:3]
    return f" (did you mean {' or '.join(prefix + n for n in near)}?)" if near else ""
