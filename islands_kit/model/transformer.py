"""Byte-level decoder-only MoE transformer (vocabulary 256).

Pre-norm blocks ``x + Attn(RMSNorm(x))`` then ``x + MoE(RMSNorm(x))`` (RMSNorm: Zhang & Sennrich 2019), rotary
position embeddings on queries and keys (RoPE, Su et al. 2021; rotate-half form, base ``rope_theta``), causal
attention through ``F.scaled_dot_product_attention(is_causal=True)``, no biases anywhere. Every block's
feed-forward is a :class:`~islands_kit.model.moe.MoE` (``n_experts == 1``: the dense SwiGLU control).

Parameter names (the sync layer assigns fragments by name): ``tok_emb.weight``, ``blocks.{i}.…``, ``norm_f.weight``,
``lm_head.weight``. The output head is *untied* from the embedding so that embedding and head can be separate
fragments and the active-parameter count is unambiguous.

Initialisation (GPT-2, Radford et al. 2019): every weight matrix normal(0, init_std); the output projections that
write into the residual stream (``attn.wo`` and the experts' ``w2``) normal(0, init_std / sqrt(2 * n_layers)), so the
residual variance does not grow with depth; RMSNorm gains 1. Deterministic given ``torch.manual_seed``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from islands_kit.config import ModelConfig
from islands_kit.model.moe import MoE, RoutingStats, init_moe_, moe_active_params


def active_params(cfg: ModelConfig) -> int:
    """Parameters used per token, from the config alone: embedding + attention + norms + router + top_k experts +
    shared experts + head."""
    d = cfg.d_model
    attn = 4 * d * d
    norms = 2 * d
    per_block = attn + norms + moe_active_params(cfg)
    return 2 * cfg.vocab_size * d + cfg.n_layers * per_block + d  # embedding + head, blocks, final norm


@dataclass
class ModelOutput:
    """logits (B, T, 256); loss: mean cross-entropy in nats (None without targets); aux_loss: the sum over layers
    of the balance and z losses, coefficients applied (scalar). Training backpropagates ``loss + aux_loss``."""

    logits: Tensor
    loss: Tensor | None
    aux_loss: Tensor


def rope_tables(seq_len: int, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and sin tables (seq_len, head_dim) for rotate-half RoPE: pair (i, i + head_dim/2) rotates by
    angle ``t * theta^(-2i/head_dim)`` at position t."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (hd/2,)
    angles_TH = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)  # (T, hd/2)
    angles_TD = torch.cat([angles_TH, angles_TH], dim=-1)  # (T, hd)
    return angles_TD.cos().float(), angles_TD.sin().float()


def apply_rope(x_BHTD: Tensor, cos_TD: Tensor, sin_TD: Tensor) -> Tensor:
    """Rotate queries or keys (B, H, T, hd) by their positions (rotate-half form)."""
    half = x_BHTD.shape[-1] // 2
    x1, x2 = x_BHTD[..., :half], x_BHTD[..., half:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return x_BHTD * cos_TD + rotated * sin_TD


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with RoPE; fused qkv projection ``wqkv`` (d -> 3d) and output ``wo``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.wqkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.wo = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x_BTD: Tensor, cos_TD: Tensor, sin_TD: Tensor) -> Tensor:
        B, T, D = x_BTD.shape
        H = self.n_heads
        qkv = self.wqkv(x_BTD).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)  # (3, B, H, T, hd)
        q, k, v = qkv.unbind(0)
        q, k = apply_rope(q, cos_TD, sin_TD), apply_rope(k, cos_TD, sin_TD)
        y_BHTD = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y_BHTD.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    """Pre-norm transformer block: attention then MoE feed-forward, each added to the residual stream."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.attn = CausalSelfAttention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.moe = MoE(cfg)

    def forward(self, x_BTD: Tensor, cos_TD: Tensor, sin_TD: Tensor) -> tuple[Tensor, Tensor]:
        B, T, D = x_BTD.shape
        x_BTD = x_BTD + self.attn(self.attn_norm(x_BTD), cos_TD, sin_TD)
        y_ND, aux = self.moe(self.ffn_norm(x_BTD).reshape(B * T, D))
        return x_BTD + y_ND.view(B, T, D), aux


class ByteTransformer(nn.Module):
    """The byte-level MoE language model; see the module docstring for architecture, names and init."""

    rope_cos: Tensor  # (seq_len, head_dim / 2) buffers, registered in __init__
    rope_sin: Tensor

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm_f = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.seq_len, cfg.d_model // cfg.n_heads, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2 init: normal(0, init_std); residual output projections scaled by 1/sqrt(2 * n_layers)."""
        std = self.cfg.init_std
        out_std = std / math.sqrt(2 * self.cfg.n_layers)
        nn.init.normal_(self.tok_emb.weight, 0.0, std)
        nn.init.normal_(self.lm_head.weight, 0.0, std)
        for blk in self._blocks():
            nn.init.normal_(blk.attn.wqkv.weight, 0.0, std)
            nn.init.normal_(blk.attn.wo.weight, 0.0, out_std)
            init_moe_(blk.moe, std, out_std)
            blk.moe.expert_bias.zero_()
        for m in self.modules():
            if isinstance(m, nn.RMSNorm):
                nn.init.ones_(m.weight)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> ModelOutput:
        """idx: (B, T) int64 bytes; targets: (B, T) int64 next bytes or None."""
        if idx.dim() != 2 or idx.dtype != torch.long:
            raise ValueError(f"idx: must be a (B, T) int64 tensor (got shape {tuple(idx.shape)}, dtype {idx.dtype})")
        B, T = idx.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"idx: sequence length must be <= model.seq_len={self.cfg.seq_len} (got {T})")
        if targets is not None and targets.shape != idx.shape:
            raise ValueError(f"targets: must have the shape of idx {tuple(idx.shape)} (got {tuple(targets.shape)})")
        cos_TD, sin_TD = self.rope_cos[:T], self.rope_sin[:T]
        x_BTD = self.tok_emb(idx)
        aux = x_BTD.new_zeros(())
        for blk in self.blocks:
            x_BTD, aux_i = blk(x_BTD, cos_TD, sin_TD)
            aux = aux + aux_i
        logits = self.lm_head(self.norm_f(x_BTD))  # (B, T, 256)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1).float(), targets.reshape(B * T))
        return ModelOutput(logits=logits, loss=loss, aux_loss=aux)

    def _blocks(self) -> list[Block]:
        """The transformer blocks, typed (iterating the ModuleList gives plain Modules)."""
        return [cast(Block, blk) for blk in self.blocks]

    # -- routing -----------------------------------------------------------------------------------------------

    def routing_stats(self) -> RoutingStats:
        """Routing statistics of the last forward (per layer); raises if no forward has run yet."""
        moes = [blk.moe for blk in self._blocks()]
        loads = [m.last_loads for m in moes]
        balance = [m.last_balance for m in moes]
        max_over_mean = [m.last_max_over_mean for m in moes]
        if any(t is None for t in loads + balance + max_over_mean):
            raise RuntimeError("routing_stats: no forward pass has run yet")
        return RoutingStats(
            loads=torch.stack(loads),  # type: ignore[arg-type]  # None excluded above
            balance_loss=torch.stack(balance),  # type: ignore[arg-type]
            max_over_mean=torch.stack(max_over_mean),  # type: ignore[arg-type]
        )

    def routing_topk(self) -> list[Tensor]:
        """Per layer, the (N, k) experts each token of the last forward was routed to."""
        topk = [blk.moe.last_topk for blk in self._blocks()]
        if any(t is None for t in topk):
            raise RuntimeError("routing_topk: no forward pass has run yet")
        return topk  # type: ignore[return-value]

    def expert_bias(self) -> Tensor:
        """The balancing biases (n_layers, E) (a copy)."""
        return torch.stack([blk.moe.expert_bias for blk in self._blocks()]).clone()

    @torch.no_grad()
    def update_expert_bias(self, loads: Tensor) -> None:
        """Aux-loss-free balancing step (DeepSeek-V3): ``b_e += u * sign(mean_load - load_e)`` per layer.

        loads: (n_layers, E) tokens per expert, typically ``routing_stats().loads`` all-reduced across islands so
        that every replica applies the same update. A no-op when ``cfg.bias_balancing`` is False.
        """
        shape = (self.cfg.n_layers, self.cfg.n_experts)
        if tuple(loads.shape) != shape:
            raise ValueError(f"loads: must have shape (n_layers, n_experts) = {shape} (got {tuple(loads.shape)})")
        if not self.cfg.bias_balancing:
            return
        for blk, loads_E in zip(self._blocks(), loads):
            blk.moe.update_bias(loads_E)

    # -- parameter accounting and names ------------------------------------------------------------------------

    def num_params(self) -> int:
        """Every parameter of the module."""
        return sum(p.numel() for p in self.parameters())

    def num_active_params(self) -> int:
        """Parameters used per token (``active_params`` of its config)."""
        return active_params(self.cfg)

    def block_param_names(self) -> list[list[str]]:
        """Parameter names of each block, in block order."""
        return [[f"blocks.{i}.{n}" for n, _ in blk.named_parameters()] for i, blk in enumerate(self.blocks)]

    def extra_param_names(self) -> dict[str, list[str]]:
        """Parameter names outside the blocks: ``tok_emb``, ``norm_f``, ``lm_head``."""
        return {name: [f"{name}.{n}" for n, _ in getattr(self, name).named_parameters()]
                for name in ("tok_emb", "norm_f", "lm_head")}
