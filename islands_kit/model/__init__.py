"""The byte-level MoE transformer (transformer.py) and its MoE layer (moe.py).

Model sizes by name (``smoke``, ``demo``, ...) are in ``islands_kit.config.presets.MODEL_SIZES`` (``presets.model_config``).
"""
from __future__ import annotations

from islands_kit.config import ModelConfig
from islands_kit.model.moe import MoE, RoutingStats, expert_ffn, route, router_z_loss, switch_balance_loss
from islands_kit.model.transformer import ByteTransformer, ModelOutput

MoETransformer = ByteTransformer  # alias used by some callers


def build_model(cfg: ModelConfig) -> ByteTransformer:
    """Build the model for a config (weights drawn from torch's current RNG state)."""
    return ByteTransformer(cfg)


__all__ = [
    "build_model", "ByteTransformer", "MoETransformer", "ModelOutput", "MoE", "RoutingStats",
    "expert_ffn", "route", "router_z_loss", "switch_balance_loss",
]
