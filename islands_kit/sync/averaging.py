"""How a merge turns the islands' outer gradients into one: the averaging rules of the DiLoCo family, shared, under one key
(``sync.diloco.average``), by the lock-step strategy (:mod:`islands_kit.sync.diloco`) and the decoupled synchroniser
(:mod:`islands_kit.sync.quorum`).

With weights w_i >= 0 (tokens processed, or the decoupled efficiency weighting) and outer gradients Δ_i:

    mean:               Δ̄ = Σ w_i Δ_i / Σ w_i
    radial_directional: Δ̄ = (Σ w_i ‖Δ_i‖ / Σ w_i) · u / ‖u‖,   u = Σ w_i Δ_i / ‖Δ_i‖

Radial-directional averaging (Decoupled DiLoCo, Douillard et al. 2026, arXiv 2604.21428; the formula is our reading
of the paper's description) averages the norms and the directions separately: outer gradients that disagree in
direction no longer shrink the step as a plain mean does, and outer gradients that agree give the plain mean back.
"""
from __future__ import annotations

from typing import Sequence

import torch

from islands_kit.comm.transport import weighted_mean

AVERAGES = ("mean", "radial_directional")


def combine(deltas: Sequence[torch.Tensor], weights: Sequence[float], average: str) -> torch.Tensor:
    """The merged outer gradient Δ̄ (module doc), accumulated in float32 in the given order. Weights must be >= 0
    with a positive sum; a zero Δ_i counts in the norm average and has no direction. ``mean`` is the transport's
    ``weighted_mean``, the arithmetic of every all-reduce, so a mean merge is the all-reduce's result bit for bit."""
    total = float(sum(weights))
    if not deltas or total <= 0:
        raise ValueError("combine: needs at least one outer gradient with a positive weight")
    if average == "mean":
        return weighted_mean(list(deltas), list(weights))
    if average == "radial_directional":
        radius = 0.0
        u = torch.zeros_like(deltas[0], dtype=torch.float32)
        for d, w in zip(deltas, weights):
            n = float(d.float().norm())
            radius += w * n / total
            if n > 0:
                u.add_(d.float(), alpha=w / (total * n))
        un = float(u.norm())
        return u * (radius / un) if un > 0 else u
    raise ValueError(f"average: must be one of {'|'.join(AVERAGES)} (got {average!r})")
