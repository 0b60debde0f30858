"""MoE routing-statistics sync: every step the islands' expert loads go through an all-reduce on their own small
channel, so every replica nudges its aux-loss-free balancing bias with the *same* global loads and selects experts
with the same balancing state. Also: routing-drift diagnostics between replicas.
"""
from __future__ import annotations

import math

import torch

from islands_kit.comm.transport import Transport


class RoutingSync:
    """``sync(loads)`` returns, per local island, the loads that island should balance against: the token-weighted
    mean of every island's loads when enabled, its own loads otherwise (no bytes sent)."""

    channel = "routing"

    def __init__(self, transport: Transport, enabled: bool) -> None:
        self.transport = transport
        self.enabled = enabled and transport.n_islands > 1

    def sync(self, loads: dict[int, torch.Tensor], tokens: dict[int, int]) -> dict[int, torch.Tensor]:
        if not self.enabled:
            return loads
        shape = next(iter(loads.values())).shape
        # loads are token counts: turn them into per-island fractions so the mean is a proper routing distribution
        fracs = {i: l / l.sum(dim=-1, keepdim=True).clamp_min(1.0) for i, l in loads.items()}
        h = self.transport.all_reduce_tensor(self.channel, fracs, {i: float(tokens[i]) for i in loads})
        return {i: h.wait(i).view(shape) for i in loads}


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (bits) between routing distributions along the last dim; p, q: (..., E)."""
    p = p.clamp_min(1e-12)
    q = q.clamp_min(1e-12)
    m = 0.5 * (p + q)
    kl = lambda a, b: (a * (a.log() - b.log())).sum(-1)
    return (0.5 * kl(p, m) + 0.5 * kl(q, m)) / math.log(2)


def topk_overlap(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean fraction of shared experts between two top-k selections; a, b: (..., k) expert indices."""
    k = a.shape[-1]
    shared = (a.unsqueeze(-1) == b.unsqueeze(-2)).any(-1).sum(-1).float()
    return float((shared / k).mean())
