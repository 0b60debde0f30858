"""The inner learning-rate schedule, its one home: the islands' optimizers follow it and Streaming DiLoCo's quadratic
synchronisation rule reads it (``sync.schedule.diloco_schedule``)."""
from __future__ import annotations

import math

from islands_kit.config import OptimConfig

__all__ = ["lr_lambda"]


def lr_lambda(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``min_lr_ratio`` at ``total_steps``."""
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, total_steps - cfg.warmup_steps)
    prog = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * prog))
