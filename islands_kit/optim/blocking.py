"""How Shampoo cuts matrix parameters into preconditioner blocks, and which rank owns each block.

A parameter of shape (*S, m, n) is a stack of prod(S) matrices (an MoE expert weight (E, d, f) gives E of them). Each
matrix dimension larger than ``max_preconditioner_dim`` is split into ``ceil(dim / max)`` nearly equal blocks of size
``ceil(dim / nb)`` <= max; the last one is zero-padded to that size (exact: zero rows of G give zero rows of L, which
do not couple to the real rows, and the padded outputs are cropped). Every block of a parameter thus has one shape
(bs_m, bs_n), so its factors can be stored and batched stacked.

Ownership (Distributed Shampoo, Shi et al. 2023, arXiv:2309.06497): the blocks of all parameters are assigned to the
ranks of a group greedily by cost, largest first, to the least-loaded rank; every rank computes the same map.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["BlockLayout", "split_dim", "build_layouts"]


@dataclass
class BlockLayout:
    """How one matrix parameter of shape (*S, m, n) is cut into k = prod(S) * nb_m * nb_n blocks of (bs_m, bs_n)."""

    stack: int  # prod(S)
    m: int
    n: int
    nb_m: int
    nb_n: int
    bs_m: int
    bs_n: int
    owners: Tensor  # (k,) rank that owns each block
    owned: Tensor  # (k_own,) indices of the blocks this rank owns, ascending

    @property
    def k(self) -> int:
        return self.stack * self.nb_m * self.nb_n

    def block(self, x: Tensor) -> Tensor:
        """(*S, m, n) -> (k, bs_m, bs_n), zero-padding the trailing edge."""
        x = x.reshape(self.stack, self.m, self.n)  # (S, m, n)
        pm, pn = self.nb_m * self.bs_m - self.m, self.nb_n * self.bs_n - self.n
        if pm or pn:
            x = torch.nn.functional.pad(x, (0, pn, 0, pm))  # (S, nb_m*bs_m, nb_n*bs_n)
        if self.nb_m == 1 and self.nb_n == 1:
            return x  # (k=S, bs_m, bs_n): a view when unpadded
        x = x.reshape(self.stack, self.nb_m, self.bs_m, self.nb_n, self.bs_n).permute(0, 1, 3, 2, 4)
        return x.reshape(self.k, self.bs_m, self.bs_n)  # (S*nb_m*nb_n, bs_m, bs_n)

    def unblock(self, xb: Tensor, shape: torch.Size) -> Tensor:
        """(k, bs_m, bs_n) -> parameter shape (*S, m, n), cropping the padding."""
        if self.nb_m > 1 or self.nb_n > 1:
            xb = xb.reshape(self.stack, self.nb_m, self.nb_n, self.bs_m, self.bs_n).permute(0, 1, 3, 2, 4)
        xb = xb.reshape(self.stack, self.nb_m * self.bs_m, self.nb_n * self.bs_n)[:, : self.m, : self.n]
        return xb.reshape(shape)


def split_dim(dim: int, max_dim: int) -> tuple[int, int]:
    """Number of blocks and block size for one dimension: nb = ceil(dim / max), bs = ceil(dim / nb) <= max."""
    nb = -(-dim // max_dim)
    return nb, -(-dim // nb)


def build_layouts(param_groups: list[dict[str, Any]], rank: int, world: int) -> dict[Tensor, BlockLayout]:
    """The block layout of every matrix parameter in a group with Shampoo on, with owners balanced over ``world`` ranks."""
    plans: list[tuple[Tensor, int, int, int, int, int, int, int]] = []
    for g in param_groups:
        if g["start_preconditioning_step"] == math.inf:
            continue  # Shampoo off for this group: grafting only, no blocks
        for p in g["params"]:
            if p.ndim < 2:
                continue
            m, n = p.shape[-2], p.shape[-1]
            nb_m, bs_m = split_dim(m, int(g["max_preconditioner_dim"]))
            nb_n, bs_n = split_dim(n, int(g["max_preconditioner_dim"]))
            plans.append((p, p.numel() // (m * n), m, n, nb_m, nb_n, bs_m, bs_n))
    # Greedy longest-processing-time assignment; cost ~ eigh (n^3) + per-step matmuls (m n (m + n)).
    blocks = []
    for i, (_, stack, _, _, nb_m, nb_n, bs_m, bs_n) in enumerate(plans):
        cost = bs_m**3 + bs_n**3 + 2 * bs_m * bs_n * (bs_m + bs_n)
        blocks += [(-cost, i, j) for j in range(stack * nb_m * nb_n)]
    load = [0] * world
    owners = [torch.zeros(pl[1] * pl[4] * pl[5], dtype=torch.long) for pl in plans]
    for neg_cost, i, j in sorted(blocks):
        r = min(range(world), key=lambda q: (load[q], q))
        load[r] -= neg_cost
        owners[i][j] = r
    return {
        p: BlockLayout(stack, m, n, nb_m, nb_n, bs_m, bs_n, owners[i].to(p.device),
                       (owners[i] == rank).nonzero().flatten().to(p.device))
        for i, (p, stack, m, n, nb_m, nb_n, bs_m, bs_n) in enumerate(plans)
    }
