"""A content hash over a checkpoint or a model file, computed last when it is written and checked first when it is
read, so that a file edited or corrupted after the run wrote it (one tensor changed, a counter nudged) is refused in
one line instead of resuming or sampling silently.

The hash is BLAKE2b over a canonical walk of the payload (``content_digest``): every tensor's dtype, shape and bytes,
every plain value's ``repr``, mappings in sorted key order, so it does not depend on how ``torch.save`` lays the file
out. It detects edits, not authors: whoever can write the file can recompute it (a signature would need a key the
kit does not have); ``torch.load(weights_only=True)`` and the readers' own checks stay the defence against a crafted
file.

Hashing reads every tensor's bytes, so the shape a file *claims* is checked against the storage it *holds* before any
byte is read (``check_layout``): a view with a zero stride (``expand``: a 172 KB file claiming 2^28 elements took 31 s
and 1 GiB to refuse, larger ones ran out of memory), one that reaches past its storage, or one with more elements
than its storage has room for (overlapping strides) is refused — the kit writes none of them. Together the tensors may
read as at most ``MAX_INFLATION`` times the distinct storage bytes the file holds (one tensor kept under several names
reads more than once).
"""
from __future__ import annotations

import hashlib
from typing import Any

import torch

from islands_kit.config import ConfigError

KEY = "content_blake2b"
MAX_INFLATION = 4  # bytes the tensors read as, per byte of distinct storage: the kit's files stay at 1 (tests check)


def check_layout(x: torch.Tensor) -> None:
    """Refuse (ValueError, one line) a tensor that is not dense or whose claimed shape its storage does not hold:
    checked from sizes and strides alone, before a byte of it is read."""
    shape = tuple(x.shape)
    if x.layout != torch.strided:  # the kit writes dense tensors only; a sparse one is a crafted file
        raise ValueError(f"holds a {x.layout} tensor of shape {shape} (the kit writes dense tensors only)")
    if x.numel() == 0:
        return
    if any(n > 1 and st == 0 for n, st in zip(x.shape, x.stride())):
        raise ValueError(f"holds an expanded tensor of shape {shape} (a zero stride: {x.numel()} elements read from "
                         "fewer stored ones; the kit never writes one)")
    if any(st < 0 for st in x.stride()):
        raise ValueError(f"holds a tensor of shape {shape} with a negative stride {x.stride()}")
    have = x.untyped_storage().nbytes()
    reach = (x.storage_offset() + sum((n - 1) * st for n, st in zip(x.shape, x.stride())) + 1) * x.element_size()
    if reach > have or x.numel() * x.element_size() > have:
        raise ValueError(f"holds a tensor of shape {shape} and strides {x.stride()} that its storage of {have} bytes "
                         "cannot hold (it reaches past it, or its elements overlap)")


def _tensors(x: Any, out: list[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, dict):
        for k, v in x.items():
            _tensors(k, out)
            _tensors(v, out)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _tensors(v, out)
    return out


def check_tensors_fit(payload: Any) -> None:
    """Every tensor of ``payload`` passes :func:`check_layout`, and all of them read as at most ``MAX_INFLATION``
    times the distinct storage bytes they hold (ValueError, one line)."""
    tensors = _tensors(payload, [])
    storages: dict[tuple[str, int], int] = {}
    for t in tensors:
        check_layout(t)
        s = t.untyped_storage()
        storages[(str(t.device), s.data_ptr())] = s.nbytes()
    reads = sum(t.numel() * t.element_size() for t in tensors)
    held = sum(storages.values())
    if reads > MAX_INFLATION * held + 4096:
        raise ValueError(f"holds tensors that read as {reads} bytes from {held} bytes of storage (more than "
                         f"{MAX_INFLATION}x: views of one storage repeated)")


def _feed(h: Any, x: Any) -> None:
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous().reshape(-1)  # at most the storage's bytes (check_tensors_fit ran first)
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
    dense or that its storage does not hold (:func:`check_tensors_fit`, before any byte is read)."""
    body = {k: v for k, v in payload.items() if k != KEY}
    check_tensors_fit(body)
    h = hashlib.blake2b(digest_size=32)
    _feed(h, body)
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
