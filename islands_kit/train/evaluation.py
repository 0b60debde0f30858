"""Scoring a run: the deployed model (the strategy's evaluation parameters over the first local island's replica) on
fixed held-out windows, the first local island's own replica, and how far the local islands' routers drift apart."""
from __future__ import annotations

import copy

import torch

from islands_kit.device import autocast
from islands_kit.model import ByteTransformer
from islands_kit.sync.base import SyncStrategy
from islands_kit.sync.routing import js_divergence, topk_overlap
from islands_kit.train.metrics import NonFiniteLoss, evaluate_bpb
from islands_kit.train.result import Diverged

Windows = tuple[torch.Tensor, torch.Tensor]  # (inputs, targets), each (N, T), on the device


class Evaluator:
    """The held-out windows (``eval`` every ``eval_every`` steps, ``final`` at the end, ``tune`` the tuning split)
    and a spare copy of the model that the deployed parameters are loaded into."""

    def __init__(self, base: ByteTransformer, precision: str, eval_windows: Windows, final_windows: Windows,
                 tune_windows: Windows | None) -> None:
        self.model = copy.deepcopy(base)
        self.precision = precision
        self.device = next(base.parameters()).device
        self.eval_windows, self.final_windows, self.tune_windows = eval_windows, final_windows, tune_windows
        self.probe_x = eval_windows[0][: min(8, len(eval_windows[0]))]

    @staticmethod
    def check(strategy: SyncStrategy) -> None:
        """Raise :class:`Diverged` when the parameters to evaluate hold NaN/inf. Cheap, and called on every process
        at every evaluation step: for DiLoCo they are the global parameters, identical on every rank, so all ranks
        stop at the same step (only the writer scores them)."""
        bad = [n for n, t in strategy.eval_state().items() if not bool(torch.isfinite(t).all())]
        if bad:
            raise Diverged(f"evaluation parameters hold NaN/inf ({len(bad)} tensors, first {bad[0]})")

    @torch.no_grad()
    def deployed(self, strategy: SyncStrategy, first: torch.nn.Module) -> ByteTransformer:
        """The model a site would deploy: buffers (expert bias) from the first local island, parameters from the
        strategy's evaluation state."""
        self.model.load_state_dict(first.state_dict())
        self.model.load_state_dict(strategy.eval_state(), strict=False)
        self.model.eval()
        return self.model

    def bpb(self, model: torch.nn.Module, windows: Windows) -> float:
        """bpb on ``windows``; :class:`Diverged` when the loss is not finite although the weights are (weights so
        large that the forward pass overflows: an update of 1e15 x the honest one does that)."""
        with autocast(self.device, self.precision):
            try:
                return evaluate_bpb(lambda xb: model(xb).logits, *windows, batch_size=64)
            except NonFiniteLoss as e:
                top = max(((float(p.detach().abs().max()), n) for n, p in model.named_parameters()), default=(0.0, ""))
                raise Diverged(f"the evaluated model's loss is not finite ({e}); largest |weight| {top[0]:.3g} in "
                               f"{top[1]}") from None

    @torch.no_grad()
    def replica(self, model: torch.nn.Module) -> float:
        """bpb of an island's own replica on the evaluation windows: what that site holds between syncs."""
        was_training = model.training
        model.eval()
        try:
            return self.bpb(model, self.eval_windows)
        finally:
            model.train(was_training)

    @torch.no_grad()
    def routing_drift(self, models: dict[int, ByteTransformer]) -> dict[str, float] | None:
        """How far the local islands' routers have drifted apart, on a fixed probe batch, averaged over layers and
        over the pairs (island 0, island i): ``routing_js_bits``, the Jensen-Shannon divergence (bits) between their
        routing distributions (expert loads / tokens), and ``routing_topk_overlap``, the mean fraction of each token's
        top-k experts that both choose (1 = identical routing). Only where this process holds several islands."""
        ids = sorted(models)
        if len(ids) < 2 or models[ids[0]].cfg.n_experts == 1:
            return None
        dists, topk = [], []
        for i in ids:
            m = models[i]
            m.eval()
            m(self.probe_x)
            loads = m.routing_stats().loads
            dists.append(loads / loads.sum(-1, keepdim=True))
            topk.append(m.routing_topk())
        js = torch.stack([js_divergence(dists[0], d).mean() for d in dists[1:]]).mean()
        overlap = [topk_overlap(a, b) for other in topk[1:] for a, b in zip(topk[0], other)]
        return {"routing_js_bits": float(js), "routing_topk_overlap": sum(overlap) / len(overlap)}
