"""A content hash over a checkpoint or a model file, computed last when it is written and checked first when it is
read, so that a file edited or corrupted after the run wrote it (one tensor changed, a counter nudged) is refused in
one line instead of resuming or sampling silently.

The hash is BLAKE2b over a canonical walk of the payload (``content_digest``): every tensor's dtype, shape and bytes,
every plain value's ``repr``, mappings in sorted key order, so it does not depend on how ``torch.save`` lays the file
out. It detects edits, not authors: whoever can write the file can recompute it (a signature would need a key the
kit does not have); ``torch.load(weights_only=True)`` and the readers' own checks stay the defence against a crafted
file.
"""
from __future__ import annotations

import hashlib
from typing import Any

import torch

from islands_kit.config import ConfigError

KEY = "content_blake2b"


def _feed(h: Any, x: Any) -> None:
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:  # the kit writes dense tensors only; a sparse one is a crafted file
            raise ValueError(f"holds a {x.layout} tensor of shape {tuple(x.shape)} (the kit writes dense tensors only)")
        t = x.detach().cpu().contiguous().reshape(-1)
        h.update(f"T{t.dtype}{tuple(x.shape)}:".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(x, dict):
        h.update(f"D{len(x)}:".encode())
        for k in sorted(x, key=repr):
            _feed(h, k)
            _feed(h, x[k])
    elif isinstance(x, (list, tuple)):
        h.update(f"{'L' if isinstance(x, list) else 'U'}{len(x)}:".encode())
        for v in x:
            _feed(h, v)
    else:  # str, int, float, bool, None: repr is exact (floats round-trip) and tells the types apart
        r = repr(x).encode()
        h.update(f"S{len(r)}:".encode() + r)


def content_digest(payload: dict[str, Any]) -> str:
    """BLAKE2b (32 bytes, hex) of ``payload`` without its own ``KEY`` entry; ValueError for a tensor that is not
    dense."""
    h = hashlib.blake2b(digest_size=32)
    _feed(h, {k: v for k, v in payload.items() if k != KEY})
    return h.hexdigest()


def seal(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with its content hash added (the last thing computed before the file is written)."""
    return {**payload, KEY: content_digest(payload)}


def check_seal(payload: dict[str, Any], where: str) -> None:
    """Refuse a payload whose content hash is missing or does not match: ConfigError ``"{where}: ..."``."""
    got = payload.get(KEY)
    if not isinstance(got, str):
        raise ConfigError(f"{where}: has no content hash ({KEY}); refused (written by an older kit, or edited)")
    try:
        want = content_digest(payload)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}; refused") from None
    if got != want:
        raise ConfigError(f"{where}: its content does not match the content hash written with it (edited or "
                          "corrupted after the run wrote it); refused")
