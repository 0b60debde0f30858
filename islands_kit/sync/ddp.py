"""Fully synchronous data-parallel training: gradients all-reduced (fp32, token-weighted mean) every step.

Mathematically one model trained on the global batch (the sum of the islands' batches): every replica starts from the
same weights, sees the same averaged gradient and takes the same optimizer step. This is the baseline, and the
reference DiLoCo with H=1 must reproduce.
"""
from __future__ import annotations

import torch
from torch import nn

from islands_kit.comm.transport import Transport, ring_bytes
from islands_kit.sync.base import FragmentView, LockstepStrategy
from islands_kit.sync.registry import BuildArgs


def ddp_equivalent_bytes(n_params: int, n_islands: int, steps: int) -> int:
    """Bytes a ring all-reduce of the fp32 gradient (S = 4 n_params bytes) sends across all links in ``steps`` steps,
    priced by the transport's cost model (``comm.transport.ring_bytes``, the same function the ledger uses for every
    all_reduce): 2 (n - 1) / n * S per member (reduce-scatter + all-gather), 2 (n - 1) * S = 8 (n - 1) * n_params bytes
    per step for all members together. So the baseline's ``gradient_bytes`` equals this figure exactly."""
    return steps * sum(ring_bytes(4 * n_params, n_islands, k) for k in range(n_islands))


class DDP(LockstepStrategy):
    name = "ddp"

    def __init__(self, models: dict[int, nn.Module], transport: Transport) -> None:
        super().__init__(models, transport)
        names = [n for n, _ in next(iter(models.values())).named_parameters()]
        self.views = {i: FragmentView(m, names) for i, m in models.items()}
        # each island's flattened gradient, reused every step: the all-reduce reads it in place, so a step allocates
        # no model-sized vector beyond the mean itself
        self.flat = {i: torch.empty(v.numel, dtype=torch.float32, device=v.device) for i, v in self.views.items()}

    def reduce_gradients(self, step: int, tokens: dict[int, int]) -> None:
        if self.transport.n_islands == 1:  # a group of one: the collective is skipped
            return
        grads = {i: v.flat_grad(out=self.flat[i]) for i, v in self.views.items()}
        handle = self.transport.all_reduce_tensor("gradients", grads, {i: float(tokens[i]) for i in self.ids})
        for i in self.ids:
            self.views[i].assign_grad(handle.wait(i))

    def after_inner_step(self, step: int, tokens: dict[int, int]) -> None:
        pass

    def eval_state(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.models[self.ids[0]].state_dict().items()}


def build(a: BuildArgs) -> DDP:
    """The strategy of ``sync/ddp_spec.py``'s spec."""
    return DDP(a.models, a.transport)
