"""Muon on the hidden matrices and AdamW on the rest, as one ``torch.optim.Optimizer`` (one state, one schedule).

Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks"; Liu et al. 2025, "Muon is
Scalable for LLM Training") steps a matrix W with gradient G as ``torch.optim.Muon`` does:

    B <- mu B + (1 - mu) G                          momentum (torch's lerp form)
    U  = G + mu (B - G) if nesterov else B
    O  = NS_k(U)                                    k quintic Newton-Schulz iterations in bfloat16: U's polar factor,
                                                    singular values squeezed to about 0.5-1.5
    W <- W (1 - lr lambda) - lr' O                  decoupled decay, then the shape-adjusted lr'

with lr' = lr sqrt(max(1, fan_out / fan_in)) (``original``) or lr 0.2 sqrt(max(fan_out, fan_in))
(``match_rms_adamw``). The coefficients, the normalisation (Frobenius, clamped at eps) and the bfloat16 iteration are
torch's, so a matrix stored as ``nn.Linear`` stores it, (fan_out, fan_in), steps bit for bit as under torch.optim.Muon
(tests/test_muon.py). Two things torch's class does not do, and this one does:

* a group's ``layout`` says how its matrices are stored: ``out_in`` (``nn.Linear``) or ``in_out`` (``x @ W``, the
  MoE's expert and shared weights); the lr adjustment reads fan-in and fan-out from it, so a matrix gets the same lr
  whichever way round the model keeps it (Newton-Schulz itself does not care: NS(U^T) = NS(U)^T);
* a tensor of more than two dimensions is a stack of matrices over its leading dimensions (the routed experts,
  (E, in, out)): each is orthogonalised on its own, in one batched iteration, and its lr adjusted by its own shape.

Groups of ``kind="adamw"`` take ``torch.optim.adamw``'s functional step with torch.optim.AdamW's state layout (``step``,
``exp_avg``, ``exp_avg_sq``), fused where the caller says so: the same update as ``torch.optim.AdamW``.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import torch
from torch import Tensor
from torch.optim.adamw import adamw

__all__ = ["Muon", "NS_COEFFICIENTS", "NS_EPS", "adjusted_lr", "zeropower_via_newtonschulz"]

# torch.optim.Muon's constants (from Keller Jordan's post): the quintic's coefficients and the normalisation's floor
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_EPS = 1e-7
LAYOUTS = ("out_in", "in_out")
ADJUST_LR = ("original", "match_rms_adamw")


def zeropower_via_newtonschulz(U: Tensor, steps: int, coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
                               eps: float = NS_EPS) -> Tensor:
    """The approximate polar factor of every matrix in ``U`` (..., rows, cols), in bfloat16: each matrix scaled to
    Frobenius norm 1, then ``steps`` iterations X <- a X + (b A + c A^2) X with A = X X^T, on the wide orientation
    (rows <= cols) as torch does. Leading dimensions are a batch (one matrix each)."""
    a, b, c = coefficients
    X = U.bfloat16()
    tall = U.size(-2) > U.size(-1)
    if tall:
        X = X.mT
    if X.ndim == 2:
        X = X.div(X.norm().clamp(min=eps))
        for _ in range(steps):
            A = X @ X.T
            B = torch.addmm(A, A, A, beta=b, alpha=c)
            X = torch.addmm(X, B, X, beta=a)
    else:
        shape = X.shape
        X = X.reshape(-1, *shape[-2:])  # (M, r, c): every matrix of the stack
        X = X.div(X.norm(dim=(-2, -1), keepdim=True).clamp(min=eps))
        for _ in range(steps):
            A = X @ X.mT
            B = torch.baddbmm(A, A, A, beta=b, alpha=c)
            X = torch.baddbmm(X, B, X, beta=a)
        X = X.reshape(shape)
    return X.mT if tall else X


def adjusted_lr(lr: float, adjust: str, fan_out: int, fan_in: int) -> float:
    """torch's ``adjust_lr_fn``: ``original`` lr sqrt(max(1, fan_out / fan_in)) (Keller Jordan: the same RMS step
    for tall and wide matrices), ``match_rms_adamw`` lr 0.2 sqrt(max(fan_out, fan_in)) (Moonshot: the RMS of an AdamW
    step, so AdamW's lr and weight decay carry over)."""
    if adjust == "original":
        return lr * math.sqrt(max(1, fan_out / fan_in))
    if adjust == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(fan_out, fan_in))
    raise ValueError(f"adjust_lr: must be one of {'|'.join(ADJUST_LR)} (got {adjust!r})")


class Muon(torch.optim.Optimizer):
    """Param groups of ``kind`` ``"muon"`` (matrices, or stacks of them; ``layout`` out_in | in_out) and ``"adamw"``
    (anything; ``lr``, ``betas``, ``eps``, ``weight_decay``, ``fused`` as torch.optim.AdamW reads them). The
    constructor's keywords are the defaults of both kinds."""

    def __init__(self, params: Iterable[dict[str, Any]], lr: float = 0.02, momentum: float = 0.95, nesterov: bool = True,
                 ns_steps: int = 5, adjust_lr: str = "original", weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8, fused: bool | None = None) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Muon: lr must be >= 0 (got {lr})")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"Muon: momentum must be in [0, 1) (got {momentum})")
        if adjust_lr not in ADJUST_LR:
            raise ValueError(f"Muon: adjust_lr must be one of {'|'.join(ADJUST_LR)} (got {adjust_lr!r})")
        if not (isinstance(ns_steps, int) and 1 <= ns_steps < 100):
            raise ValueError(f"Muon: ns_steps must be an integer in [1, 99] (got {ns_steps!r})")
        defaults = {"kind": "muon", "layout": "out_in", "lr": lr, "momentum": momentum, "nesterov": nesterov,
                    "ns_steps": ns_steps, "adjust_lr": adjust_lr, "weight_decay": weight_decay, "betas": betas,
                    "eps": eps, "fused": fused}
        super().__init__(params, defaults)
        for i, group in enumerate(self.param_groups):
            if group["kind"] not in ("muon", "adamw"):
                raise ValueError(f"Muon: param group {i}: kind must be muon or adamw (got {group['kind']!r})")
            if group["kind"] == "muon":
                if group["layout"] not in LAYOUTS:
                    raise ValueError(f"Muon: param group {i}: layout must be one of {'|'.join(LAYOUTS)} "
                                     f"(got {group['layout']!r})")
                bad = [tuple(p.shape) for p in group["params"] if p.ndim < 2]
                if bad:
                    raise ValueError(f"Muon: param group {i} (kind muon) takes matrices or stacks of them, not the "
                                     f"{len(bad[0])}-D shape {bad[0]}")

    def fans(self, group: dict[str, Any], p: Tensor) -> tuple[int, int]:
        """(fan_out, fan_in) of one matrix of ``p`` under its group's layout."""
        rows, cols = p.shape[-2], p.shape[-1]
        return (rows, cols) if group["layout"] == "out_in" else (cols, rows)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["kind"] == "muon":
                self._muon_step(group)
            else:
                self._adamw_step(group)
        return loss

    def _muon_step(self, group: dict[str, Any]) -> None:
        lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
        for p in group["params"]:
            if p.grad is None:
                continue
            g = p.grad
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(g, memory_format=torch.preserve_format)
            buf = state["momentum_buffer"]
            buf.lerp_(g, 1 - mu)
            update = g.lerp(buf, mu) if group["nesterov"] else buf
            ortho = zeropower_via_newtonschulz(update, group["ns_steps"])
            p.mul_(1 - lr * wd)
            p.add_(ortho, alpha=-adjusted_lr(lr, group["adjust_lr"], *self.fans(group, p)))

    def _adamw_step(self, group: dict[str, Any]) -> None:
        params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
        fused = bool(group["fused"])
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if len(state) == 0:  # torch.optim.AdamW's lazy state, its 'step' where torch keeps it
                state["step"] = (torch.zeros((), dtype=torch.float32, device=p.device) if fused
                                 else torch.tensor(0.0, dtype=torch.float32))
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            params.append(p)
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if not params:
            return
        beta1, beta2 = group["betas"]
        adamw(params, grads, exp_avgs, exp_avg_sqs, [], steps, fused=group["fused"], amsgrad=False, beta1=beta1,
              beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"], maximize=False)
