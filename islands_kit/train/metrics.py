"""Bits per byte: the model's figure on the validation windows, and the compressor floors on the same bytes.

bits-per-byte (bpb) = (summed cross-entropy in nats) / (number of predicted bytes) / ln 2. For a byte-level model it
is directly comparable with a compressor's output size: ``8 * compressed_bytes / input_bytes``. A model that is
uniform over the 256 byte values scores exactly 8.0. Compressors do worse on small inputs, so the kit computes their
figures on exactly its own validation bytes (DESIGN.md: xz -9e gives 2.50 on the whole Shakespeare corpus but 2.76 on
its last 5%).
"""
from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import math
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from islands_kit.io import atomic_write_bytes, cache_root

LN2 = math.log(2.0)
_COMPRESSORS_VERSION = 1  # bump when the settings below change, so cached figures are not reused


class NonFiniteLoss(ValueError):
    """The loss summed for bpb is NaN/inf (or negative): the model scored is broken, not the caller's arguments."""


def bits_per_byte(nll_nats_sum: float, n_bytes: int) -> float:
    """bpb from a summed negative log-likelihood in nats over ``n_bytes`` predicted bytes: nats/byte / ln 2."""
    if not (isinstance(n_bytes, int) and n_bytes >= 1):
        raise ValueError(f"n_bytes: must be an integer >= 1 (got {n_bytes!r})")
    if not math.isfinite(nll_nats_sum) or nll_nats_sum < 0:
        raise NonFiniteLoss(f"nll_nats_sum: must be a finite number >= 0 (got {nll_nats_sum!r})")
    return float(nll_nats_sum) / n_bytes / LN2


def _compressed_sizes(data: bytes) -> dict[str, int]:
    """Sizes from the three standard compressors at their strongest settings (gzip -9, bzip2 -9, xz -9e)."""
    return {
        "gzip": len(gzip.compress(data, compresslevel=9, mtime=0)),
        "bz2": len(bz2.compress(data, compresslevel=9)),
        "xz": len(lzma.compress(data, format=lzma.FORMAT_XZ, preset=9 | lzma.PRESET_EXTREME)),
    }


def compressor_bpb(data: bytes, cache_dir: str | Path | None = None) -> dict[str, float]:
    """``{"gzip", "bz2", "xz"}`` -> ``8 * compressed_len / len(data)`` for ``data`` (the validation bytes).

    Results are cached as JSON keyed by the sha256 of ``data`` (in ``cache_dir``, default
    ``cache_root()/compressor_bpb``), so repeated calls on the same bytes are instant; the file also holds the sizes.
    xz -9e on a few MB takes seconds, which is why the cache exists.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data: must be bytes (got {type(data).__name__})")
    data = bytes(data)
    if len(data) == 0:
        raise ValueError("data: must not be empty")
    sha = hashlib.sha256(data).hexdigest()
    folder = Path(cache_dir) if cache_dir is not None else cache_root() / "compressor_bpb"
    path = folder / f"v{_COMPRESSORS_VERSION}-{sha}.json"
    if path.is_file():
        try:
            rec = json.loads(path.read_text())
            if rec.get("sha256") == sha and rec.get("n_bytes") == len(data):
                return {k: float(rec["bpb"][k]) for k in ("gzip", "bz2", "xz")}
        except (ValueError, KeyError, TypeError):
            pass  # unreadable cache entry: recompute and overwrite it
    sizes = _compressed_sizes(data)
    bpb = {k: 8.0 * v / len(data) for k, v in sizes.items()}
    rec = {"sha256": sha, "n_bytes": len(data), "sizes": sizes, "bpb": bpb,
           "settings": {"gzip": "level 9, mtime 0", "bz2": "level 9", "xz": "preset 9 | PRESET_EXTREME"}}
    atomic_write_bytes(path, json.dumps(rec, indent=1).encode())
    return bpb


@torch.no_grad()
def evaluate_bpb(model_fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor, batch_size: int,
                 *, device: torch.device | str | None = None) -> float:
    """bpb of ``model_fn`` on the windows ``(x, y)`` (each (N, T) int64, e.g. from ``data.eval_windows``).

    ``model_fn(x_chunk)`` must return logits of shape (b, T, 256). Chunks of ``batch_size`` windows are scored under
    ``torch.no_grad``; the cross-entropy is computed in float64 and summed in float64, so the figure does not depend on
    the chunking. ``device``: where chunks are moved before calling ``model_fn`` (default: left where they are).
    The caller sets eval/train mode; this helper knows nothing of models.
    """
    if x.shape != y.shape or x.dim() != 2:
        raise ValueError(f"x, y: must both be (N, T) (got {tuple(x.shape)} and {tuple(y.shape)})")
    if not (isinstance(batch_size, int) and batch_size >= 1):
        raise ValueError(f"batch_size: must be an integer >= 1 (got {batch_size!r})")
    if x.numel() == 0:
        raise ValueError("x: must hold at least one window")
    total: torch.Tensor | None = None  # float64 on the windows' device: one read-back at the end, not one per chunk
    for i in range(0, x.shape[0], batch_size):
        xb, yb = x[i:i + batch_size], y[i:i + batch_size]  # (b, T)
        if device is not None:
            xb, yb = xb.to(device), yb.to(device)
        logits = model_fn(xb)  # (b, T, V)
        if logits.shape != (*xb.shape, 256):
            raise ValueError(f"model_fn: must return logits of shape (b, T, 256) = {(*xb.shape, 256)} "
                             f"(got {tuple(logits.shape)})")
        nll = F.cross_entropy(logits.reshape(-1, 256).double(), yb.reshape(-1), reduction="sum")  # scalar, nats
        total = nll if total is None else total + nll
    assert total is not None
    return bits_per_byte(total.item(), y.numel())
