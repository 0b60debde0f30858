"""Mixture-of-Experts feed-forward layer: router, sorted/grouped dispatch, expert bias, routing statistics.

One token ``x_n`` (row of ``x_ND``) is sent to ``k = top_k`` of ``E = n_experts`` SwiGLU experts
(Shazeer 2020, "GLU variants"): ``FFN_e(x) = (silu(x W1_e) * (x W3_e)) W2_e`` with ``W1_e, W3_e: d -> f`` and
``W2_e: f -> d`` (``f = d_expert``). The weights of all experts are stored as 3-D parameters ``w1 (E, d, f)``,
``w3 (E, d, f)``, ``w2 (E, f, d)`` so that the expert matmuls run as one *grouped* GEMM.

Routing (documented choices):

* scores ``s_NE = softmax(x W_r)`` over the E experts (router logits ``x W_r``, ``W_r = router.weight``);
* selection: ``top_k`` of ``s_NE + b_E`` where ``b_E`` is the aux-loss-free balancing bias of DeepSeek-V3
  (Liu et al. 2024, §2.1.2) -- a *buffer*, not a parameter; it influences **which** experts are chosen only. It is
  added to the softmax probabilities (scale ~1/E), so ``bias_update_rate`` u is in probability units. The update
  ``b_e += u * sign(mean_load - load_e)`` runs outside forward (``MoE.update_bias``), on loads the caller may
  all-reduce across replicas first. Bias balancing and the Switch loss are independent: set ``aux_loss_coef=0``
  for purely aux-loss-free balancing;
* gating weights ``g_NK``: the *unbiased* scores of the chosen experts, renormalised to sum to 1 when ``k > 1``
  (Mixtral / DeepSeek-V3 convention). For ``k = 1`` the raw probability is kept (Switch Transformer convention):
  renormalising a single weight would make it the constant 1 and cut the router off from the language-model loss.

Auxiliary losses (returned already multiplied by their coefficients):

* Switch load balancing (Fedus et al. 2021, eq. 4): ``E * sum_e f_e * P_e`` with ``f_e`` = fraction of the
  ``N * k`` token->expert assignments sent to expert e (1/E each when balanced, so the loss is 1 at balance)
  and ``P_e`` = mean router probability of expert e over the N tokens;
* router z-loss (Zoph et al. 2022, ST-MoE eq. 5): ``mean_n logsumexp(logits_n)^2``.

Dispatch: ``grouped`` sorts the (token, expert) assignments by expert, gathers the tokens into one contiguous
``(N*k, d)`` matrix, runs all experts in one grouped GEMM per weight (:func:`expert_ffn`) and scatters the
weighted outputs back with ``index_add``. ``loop`` is the plain reference: for each expert, mask the tokens
routed to it, run its MLP, weight and add. Both give the same outputs and gradients (tests/test_moe.py).
Measured on CPU (benchmarks/moe_dispatch.py, 64 experts): the native grouped GEMM beats zero-padded ``torch.bmm``
and a Python loop over the experts' contiguous slices by ~1.3x each, and the whole grouped layer beats the loop
reference by ~2.5x.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from islands_kit import kernels
from islands_kit.config import ModelConfig


@dataclass
class RoutingStats:
    """Per-step routing diagnostics of the whole model (all detached, on the model's device).

    loads: (n_layers, E) tokens per expert per layer (float counts of token->expert assignments).
    balance_loss: (n_layers,) the Switch balance-loss value per layer (1 = balanced), *before* its coefficient.
    max_over_mean: (n_layers,) the real max-load / mean-load per layer (1 = balanced). The balance loss weighs
        loads by router probabilities, so it can improve while the real load gets worse; this one cannot.
    """

    loads: Tensor
    balance_loss: Tensor
    max_over_mean: Tensor


# ----------------------------------------------------------------------------------------------------------------
# Routing and auxiliary losses (pure functions)


def route(logits_NE: Tensor, bias_E: Tensor, top_k: int) -> tuple[Tensor, Tensor, Tensor]:
    """Softmax router with top-k selection on biased scores and gates from the unbiased scores.

    Returns ``probs_NE`` (softmax of the logits, float32), ``idx_NK`` (chosen experts, int64) and ``gates_NK``
    (gating weights: unbiased probabilities of the chosen experts, renormalised to sum 1 when top_k > 1).
    """
    probs_NE = torch.softmax(logits_NE.float(), dim=-1)
    with torch.no_grad():  # selection is discrete: the bias never receives or passes gradient
        idx_NK = top_k_indices(probs_NE + bias_E.to(probs_NE.dtype), top_k)
    gates_NK = probs_NE.gather(1, idx_NK)
    if top_k > 1:
        gates_NK = gates_NK / gates_NK.sum(dim=-1, keepdim=True)
    return probs_NE, idx_NK, gates_NK


def top_k_indices(scores_NE: Tensor, k: int) -> Tensor:
    """Indices (N, k) of the k largest scores per row, in no particular order (same set as ``torch.topk``).

    For k <= 2 among many experts, k rounds of argmax-and-mask beat ``torch.topk`` on the CPU (benchmarks/
    moe_dispatch.py); otherwise ``torch.topk``.
    """
    n_experts = scores_NE.shape[1]
    if k > 2 or n_experts <= 16:
        return torch.topk(scores_NE, k, dim=-1, sorted=False).indices
    first_N1 = scores_NE.argmax(dim=-1, keepdim=True)
    if k == 1:
        return first_N1
    second_N1 = scores_NE.scatter(-1, first_N1, float("-inf")).argmax(dim=-1, keepdim=True)
    return torch.cat([first_N1, second_N1], dim=1)


def switch_balance_loss(probs_NE: Tensor, loads_E: Tensor) -> Tensor:
    """Switch Transformer load-balancing loss ``E * sum_e f_e * P_e`` (Fedus et al. 2021, eq. 4).

    probs_NE: router probabilities; loads_E: number of assignments per expert (no gradient flows through f_e).
    """
    n_experts = probs_NE.shape[1]
    f_E = loads_E.to(probs_NE.dtype) / loads_E.sum()
    P_E = probs_NE.mean(dim=0)
    return n_experts * (f_E * P_E).sum()


def router_z_loss(logits_NE: Tensor) -> Tensor:
    """Router z-loss ``mean_n (logsumexp_e logits_ne)^2`` (Zoph et al. 2022, ST-MoE eq. 5)."""
    return torch.logsumexp(logits_NE.float(), dim=-1).square().mean()


# ----------------------------------------------------------------------------------------------------------------
# Expert computation


def _swiglu(x: Tensor, w1: Tensor, w3: Tensor, w2: Tensor) -> Tensor:
    """One SwiGLU MLP ``(silu(x w1) * (x w3)) w2`` with x: (n, d), w1/w3: (d, f), w2: (f, d)."""
    return (F.silu(x @ w1) * (x @ w3)) @ w2


def _native_grouped_mm_ok(x: Tensor, w: Tensor) -> bool:
    """Whether to use ``torch.nn.functional.grouped_mm`` (recent torch): only on CPU in float32 with every row
    stride a multiple of 16 bytes, the case tested here. Elsewhere (CUDA, where the native op wants bf16 on recent
    GPUs, or the Triton kernels in ``islands_kit.kernels``) the caller routes :func:`expert_ffn` or falls back to
    the padded bmm."""
    if not hasattr(F, "grouped_mm") or x.device.type != "cpu":
        return False
    return x.dtype == torch.float32 and w.dtype == torch.float32 and x.shape[1] % 4 == 0 and w.shape[2] % 4 == 0


class _GroupedMatmul(torch.autograd.Function):
    """``y[rows of group e] = x[rows of group e] @ w[e]`` with groups delimited by ``offs`` (int32 cumulative ends).

    Forward and both backward products are single native grouped GEMMs: ``dx = dy @ w[e]^T`` per group and
    ``dw[e] = x_e^T dy_e`` (the 2-D x 2-D form of grouped_mm, jagged along the reduction dimension). Written out
    because the built-in backward rejects some gradient layouts (e.g. the stride-0 gradient of ``y.sum()``).
    """

    @staticmethod
    def forward(ctx, x_MD: Tensor, w_EDF: Tensor, offs_E: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x_MD, w_EDF, offs_E)
        return F.grouped_mm(x_MD, w_EDF, offs=offs_E)

    @staticmethod
    def backward(ctx, dy_MF: Tensor) -> tuple[Tensor | None, Tensor | None, None]:  # type: ignore[override]
        x_MD, w_EDF, offs_E = ctx.saved_tensors
        dy_MF = dy_MF.contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = F.grouped_mm(dy_MF, w_EDF.transpose(1, 2), offs=offs_E)  # (M, D)
        if ctx.needs_input_grad[1]:
            dw = F.grouped_mm(x_MD.t(), dy_MF, offs=offs_E)  # (E, D, F); empty groups give zeros
        return dx, dw, None


def _padded_bmm(x_MD: Tensor, w_EDF: Tensor, group_sizes_E: Tensor, offs_E: Tensor) -> Tensor:
    """Fallback grouped matmul for old torch / unaligned shapes: scatter the groups into a zero-padded
    ``(E, C, D)`` batch (C = largest group), one ``torch.bmm``, gather the real rows back."""
    n_groups = w_EDF.shape[0]
    M = x_MD.shape[0]
    expert_M = torch.repeat_interleave(torch.arange(n_groups, device=x_MD.device), group_sizes_E, output_size=M)
    starts_E = offs_E.long() - group_sizes_E
    C = int(group_sizes_E.max()) if M > 0 else 0
    slot_M = expert_M * C + (torch.arange(M, device=x_MD.device) - starts_E[expert_M])  # row in the (E*C) batch
    x_ECD = x_MD.new_zeros(n_groups * C, x_MD.shape[1]).index_copy(0, slot_M, x_MD).view(n_groups, C, -1)
    y_ECF = torch.bmm(x_ECD, w_EDF)
    return y_ECF.reshape(n_groups * C, -1).index_select(0, slot_M)


def grouped_matmul(x_MD: Tensor, w_EDF: Tensor, group_sizes_E: Tensor) -> Tensor:
    """Rows of ``x_MD`` sorted by group (``group_sizes_E[e]`` consecutive rows each) times ``w_EDF[e]``."""
    offs_E = torch.cumsum(group_sizes_E, 0).to(torch.int32)
    if _native_grouped_mm_ok(x_MD, w_EDF):
        return _GroupedMatmul.apply(x_MD.contiguous(), w_EDF, offs_E)
    return _padded_bmm(x_MD, w_EDF, group_sizes_E, offs_E)


def run_eagerly_under_compile() -> None:
    """``grouped_matmul`` left out of ``torch.compile``'s graphs (its native op's fake-tensor rule takes bf16 only, and
    its shapes vary with the routing): called before a model compiles (``model.compile``). Marking it needs
    torch._dynamo, about a second to import, which a run that never compiles should not pay at start-up."""
    global grouped_matmul
    if not getattr(grouped_matmul, "_torchdynamo_disable", False):
        grouped_matmul = torch.compiler.disable(grouped_matmul)


def expert_ffn(x_sorted: Tensor, w1: Tensor, w2: Tensor, w3: Tensor, group_sizes: Tensor, *, mxfp8: bool = False) -> Tensor:
    """All experts' SwiGLU on expert-sorted rows. THE single place where the expert matmuls happen.

    x_sorted: (M, d) token rows sorted by expert, ``group_sizes[e]`` rows for expert e (sum = M);
    w1, w3: (E, d, f); w2: (E, f, d). Returns (M, d).

    This is where a custom kernel (Triton grouped GEMM, MXFP8 quantise-dequantise emulation; see
    ``cfg.kernels`` / ``cfg.mxfp8``) plugs in: replace the three ``grouped_matmul`` calls.
    """
    if kernels.dispatch.use_triton(x_sorted, w1, op="grouped_mm"):  # the Triton grouped GEMM (GPU, or forced interpreter)
        mm = lambda x, w: kernels.grouped_mm(x, w, group_sizes, mxfp8=mxfp8)  # noqa: E731
    elif mxfp8:  # MXFP8 emulation on the torch path: quantise-dequantise both operands along the contraction dim
        mm = lambda x, w: grouped_matmul(kernels.mx_qdq(x, 32, -1), kernels.mx_qdq(w, 32, 1), group_sizes)  # noqa: E731
    else:
        mm = lambda x, w: grouped_matmul(x, w, group_sizes)  # noqa: E731
    h_MF = F.silu(mm(x_sorted, w1)) * mm(x_sorted, w3)
    return mm(h_MF, w2)


# ----------------------------------------------------------------------------------------------------------------
# Modules


class SwiGLU(nn.Module):
    """A plain (dense) SwiGLU MLP of width ``hidden``; used for the shared experts."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(d_model, hidden))
        self.w3 = nn.Parameter(torch.empty(d_model, hidden))
        self.w2 = nn.Parameter(torch.empty(hidden, d_model))

    def forward(self, x_ND: Tensor) -> Tensor:
        return _swiglu(x_ND, self.w1, self.w3, self.w2)


class MoE(nn.Module):
    """Routed SwiGLU experts (+ optional shared experts) with Switch/z auxiliary losses and an expert bias.

    ``n_experts == 1`` is the dense control: a plain SwiGLU MLP of width d_expert, no router, no aux loss.
    ``n_shared_experts = S`` always-on experts of width d_expert each are stored as one SwiGLU of width
    ``S * d_expert`` (a sum of SwiGLUs equals one SwiGLU with the hidden units concatenated).

    After each forward, ``last_loads`` (E,), ``last_balance`` () and ``last_max_over_mean`` () hold the detached
    routing statistics of this layer (see :class:`RoutingStats`).
    """

    expert_bias: Tensor  # (E,) buffer, registered in __init__

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, f, E = cfg.d_model, cfg.d_expert, cfg.n_experts
        self.n_experts, self.top_k = E, cfg.top_k
        self.aux_loss_coef, self.z_loss_coef = cfg.aux_loss_coef, cfg.z_loss_coef
        self.bias_update_rate = cfg.bias_update_rate
        self.dispatch = cfg.dispatch
        self.mxfp8 = cfg.mxfp8
        self.router = nn.Linear(d, E, bias=False) if E > 1 else None
        self.w1 = nn.Parameter(torch.empty(E, d, f))
        self.w3 = nn.Parameter(torch.empty(E, d, f))
        self.w2 = nn.Parameter(torch.empty(E, f, d))
        self.shared = SwiGLU(d, cfg.n_shared_experts * f) if cfg.n_shared_experts > 0 else None
        # aux-loss-free balancing bias b_E (DeepSeek-V3): a buffer, used for selection only, updated outside forward
        self.register_buffer("expert_bias", torch.zeros(E))
        self.last_loads: Tensor | None = None
        self.last_balance: Tensor | None = None
        self.last_max_over_mean: Tensor | None = None
        self.last_topk: Tensor | None = None  # (N, k) experts chosen for each token in the last forward

    def forward(self, x_ND: Tensor) -> tuple[Tensor, Tensor]:
        """x_ND: (N, d) tokens. Returns the layer output (N, d) and its auxiliary loss (scalar, coefficients applied)."""
        N = x_ND.shape[0]
        if self.router is None:  # dense control
            y_ND = _swiglu(x_ND, self.w1[0], self.w3[0], self.w2[0])
            aux = x_ND.new_zeros(())
            loads_E = torch.full((1,), float(N), device=x_ND.device)
            balance = torch.ones((), device=x_ND.device)
            idx_NK = torch.zeros(N, 1, dtype=torch.long, device=x_ND.device)
        else:
            logits_NE = self.router(x_ND)
            probs_NE, idx_NK, gates_NK = route(logits_NE, self.expert_bias, self.top_k)
            counts_E = torch.bincount(idx_NK.reshape(-1), minlength=self.n_experts)  # (E,) assignments per expert
            if self.dispatch == "grouped":
                y_ND = self._grouped(x_ND, idx_NK, gates_NK, counts_E)
            else:
                y_ND = self._loop(x_ND, idx_NK, gates_NK)
            balance_g = switch_balance_loss(probs_NE, counts_E)
            aux = self.aux_loss_coef * balance_g + self.z_loss_coef * router_z_loss(logits_NE)
            loads_E, balance = counts_E.float(), balance_g.detach()
        if self.shared is not None:
            y_ND = y_ND + self.shared(x_ND)
        self.last_loads = loads_E.detach()
        self.last_topk = idx_NK.detach()
        self.last_balance = balance
        self.last_max_over_mean = loads_E.max() / loads_E.mean()
        return y_ND, aux

    def _grouped(self, x_ND: Tensor, idx_NK: Tensor, gates_NK: Tensor, counts_E: Tensor) -> Tensor:
        """Sort assignments by expert, gather, one grouped GEMM per weight, weight, scatter back with index_add."""
        N, k = idx_NK.shape
        order_M = torch.argsort(idx_NK.reshape(-1), stable=True)  # (M = N*k,) assignment ids sorted by expert
        token_M = order_M // k  # token of each sorted assignment
        x_MD = x_ND.index_select(0, token_M)  # (M, d) gathered, grouped by expert
        y_MD = expert_ffn(x_MD, self.w1, self.w2, self.w3, counts_E, mxfp8=self.mxfp8)
        y_MD = y_MD * gates_NK.reshape(-1).index_select(0, order_M).unsqueeze(1).to(y_MD.dtype)
        return torch.zeros_like(x_ND).index_add(0, token_M, y_MD)  # (N, d)

    def _loop(self, x_ND: Tensor, idx_NK: Tensor, gates_NK: Tensor) -> Tensor:
        """Plain reference: for each expert, mask the tokens routed to it, run its MLP, weight and add."""
        out_ND = torch.zeros_like(x_ND)
        w1s, w3s, w2s = self.w1.unbind(0), self.w3.unbind(0), self.w2.unbind(0)  # one backward node, not E
        for e in range(self.n_experts):
            hit_NK = idx_NK == e
            tokens = hit_NK.any(dim=1).nonzero().squeeze(1)  # tokens routed to e
            if tokens.numel() == 0:
                continue
            weight = (gates_NK * hit_NK).sum(dim=1).index_select(0, tokens)  # its gate for those tokens
            y = _swiglu(x_ND[tokens], w1s[e], w3s[e], w2s[e]) * weight.unsqueeze(1).to(x_ND.dtype)
            out_ND = out_ND.index_add(0, tokens, y)
        return out_ND

    @torch.no_grad()
    def update_bias(self, loads_E: Tensor) -> None:
        """DeepSeek-V3 bias update ``b_e += u * sign(mean_load - load_e)`` (u = bias_update_rate)."""
        self.expert_bias += self.bias_update_rate * torch.sign(loads_E.mean() - loads_E).to(self.expert_bias)


def init_moe_(moe: MoE, std: float, out_std: float) -> None:
    """normal(0, std) for router and input projections, normal(0, out_std) for the output projections (w2)."""
    if moe.router is not None:
        nn.init.normal_(moe.router.weight, 0.0, std)
    nn.init.normal_(moe.w1, 0.0, std)
    nn.init.normal_(moe.w3, 0.0, std)
    nn.init.normal_(moe.w2, 0.0, out_std)
    if moe.shared is not None:
        nn.init.normal_(moe.shared.w1, 0.0, std)
        nn.init.normal_(moe.shared.w3, 0.0, std)
        nn.init.normal_(moe.shared.w2, 0.0, out_std)


def moe_active_params(cfg: ModelConfig) -> int:
    """Parameters one token uses in one MoE layer: router + top_k experts + shared experts."""
    d, f = cfg.d_model, cfg.d_expert
    router = d * cfg.n_experts if cfg.n_experts > 1 else 0
    return router + (cfg.top_k + cfg.n_shared_experts) * 3 * d * f


__all__ = [
    "RoutingStats", "route", "top_k_indices", "switch_balance_loss", "router_z_loss", "expert_ffn", "grouped_matmul", "run_eagerly_under_compile",
    "SwiGLU", "MoE", "init_moe_", "moe_active_params",
]
