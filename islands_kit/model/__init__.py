"""The byte-level MoE transformer (transformer.py) and its MoE layer (moe.py), plus named model presets.

``MODEL_PRESETS[name]`` holds ``ModelConfig`` keyword arguments:

* ``tiny``: tests (seconds).
* ``demo-moe``: the CPU demo, 16 experts top-2 (d_expert 128).
* ``sparse-64x2``: the 32x-sparse configuration, 64 experts top-2, same active parameters as ``demo-moe``
  (same d_expert; only the router is wider).
* ``dense``: the dense control (one SwiGLU MLP, no router) with d_expert 260, chosen so its active parameters match
  ``demo-moe``'s within 0.5% (3 * 128 * 260 = 99,840 vs router + 2 experts = 2,048 + 98,304 = 100,352 per layer).
"""
from __future__ import annotations

from typing import Any

from islands_kit.config import ModelConfig
from islands_kit.model.moe import MoE, RoutingStats, expert_ffn, route, router_z_loss, switch_balance_loss
from islands_kit.model.transformer import ByteTransformer, ModelOutput

MoETransformer = ByteTransformer  # alias used by some callers

_DEMO: dict[str, Any] = dict(seq_len=128, d_model=128, n_layers=4, n_heads=4, d_expert=128)

MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(seq_len=32, d_model=32, n_layers=2, n_heads=2, n_experts=4, top_k=2, d_expert=32),
    "demo-moe": dict(_DEMO, n_experts=16, top_k=2),
    "sparse-64x2": dict(_DEMO, n_experts=64, top_k=2),
    "dense": dict(_DEMO, n_experts=1, top_k=1, d_expert=260),
}


def model_config(preset: str, **overrides: Any) -> ModelConfig:
    """A validated ``ModelConfig`` from a preset name plus keyword overrides."""
    if preset not in MODEL_PRESETS:
        raise ValueError(f"preset: must be one of {'|'.join(MODEL_PRESETS)} (got {preset!r})")
    return ModelConfig(**{**MODEL_PRESETS[preset], **overrides})


def build_model(cfg: ModelConfig) -> ByteTransformer:
    """Build the model for a config (weights drawn from torch's current RNG state)."""
    return ByteTransformer(cfg)


__all__ = [
    "MODEL_PRESETS", "model_config", "build_model", "ByteTransformer", "MoETransformer", "ModelOutput", "MoE", "RoutingStats",
    "expert_ffn", "route", "router_z_loss", "switch_balance_loss",
]
