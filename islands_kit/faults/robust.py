"""Robust aggregation rules as pure functions, beside plain per-coordinate loops they are tested against.

``xs`` is (n, d): one row per island's update, ``weights`` the islands' token counts. The trimmed mean drops, per
coordinate, the ``trim`` lowest and highest values and averages the rest by weight (Yin et al. 2018, "Byzantine-robust
distributed learning"); the weighted median takes the coordinate-wise weighted median. Both sort stably, so ties are
broken in island order, and accumulate in float64.
"""
from __future__ import annotations

import math

import torch

TRIM_FRACTION = 0.2  # trimmed mean: share of the islands removed at each end (at least one)


def default_trim(n: int) -> int:
    """Values removed at each end by the trimmed mean of n updates: max(1, ceil(0.2 n)), at most (n − 1) // 2."""
    return min(max(1, math.ceil(TRIM_FRACTION * n - 1e-9)), (n - 1) // 2)


def trimmed_mean(xs: torch.Tensor, weights: torch.Tensor, trim: int) -> torch.Tensor:
    """Coordinate-wise weighted trimmed mean of ``xs`` (n, d): per coordinate drop the ``trim`` lowest and ``trim``
    highest values (ties in island order: a stable sort), then the ``weights``-weighted mean of the rest. (d,) fp32."""
    n = xs.shape[0]
    if not 0 <= 2 * trim < n:
        raise ValueError(f"trimmed_mean: trim must satisfy 0 <= 2*trim < n={n} (got {trim})")
    vals, order = xs.double().sort(dim=0, stable=True)  # (n, d) each
    w = weights.double().to(xs.device)[order]  # (n, d): weight of the island at each sorted position
    w[:trim] = 0.0
    w[n - trim:] = 0.0
    return ((vals * w).sum(0) / w.sum(0)).float()


def weighted_median(xs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise weighted median of ``xs`` (n, d): the mean of the lower and upper weighted medians (the first
    sorted position whose cumulative weight reaches W/2, resp. exceeds W/2), i.e. the usual median for equal weights.
    Returns (d,) fp32."""
    n = xs.shape[0]
    vals, order = xs.double().sort(dim=0, stable=True)  # (n, d)
    cum = weights.double().to(xs.device)[order].cumsum(0)  # (n, d)
    half = cum[-1:] / 2  # (1, d)
    lo = (cum < half).sum(0, keepdim=True).clamp(max=n - 1)  # (1, d)
    hi = (cum <= half).sum(0, keepdim=True).clamp(max=n - 1)  # (1, d)
    return ((vals.gather(0, lo) + vals.gather(0, hi)) / 2).squeeze(0).float()


def trimmed_mean_reference(xs: torch.Tensor, weights: list[float], trim: int) -> torch.Tensor:
    """Plain loop over coordinates (the reference ``trimmed_mean`` is tested against)."""
    n, d = xs.shape
    out = []
    for c in range(d):
        kept = sorted((float(xs[k, c]), k) for k in range(n))[trim:n - trim]
        out.append(sum(v * weights[k] for v, k in kept) / sum(weights[k] for _, k in kept))
    return torch.tensor(out, dtype=torch.float32)


def weighted_median_reference(xs: torch.Tensor, weights: list[float]) -> torch.Tensor:
    """Plain loop over coordinates (the reference ``weighted_median`` is tested against)."""
    n, d = xs.shape
    total = sum(weights)
    out = []
    for c in range(d):
        pairs = sorted((float(xs[k, c]), k) for k in range(n))
        acc = 0.0
        lo: float | None = None
        hi: float | None = None
        for v, k in pairs:
            acc += weights[k]
            if lo is None and acc >= total / 2:
                lo = v
            if hi is None and acc > total / 2:
                hi = v
        last = pairs[-1][0]  # cumulative weight reaches the total there, so lo is set by then when weights are > 0
        out.append(((lo if lo is not None else last) + (hi if hi is not None else last)) / 2)
    return torch.tensor(out, dtype=torch.float32)
