"""Every optimizer an island steps, built in one place: the inner optimizer (AdamW, Shampoo, SGD) and SNOO's outer
step around it (``optim/outer.py``); DiLoCo's outer optimizer is built by ``optim.outer.outer_factory`` (the config's
``sync.diloco.outer_optimizer``) and handed to ``sync.diloco.DiLoCoCore``."""
from __future__ import annotations

import torch
from torch import nn

from islands_kit.config import ConfigError, OptimConfig
from islands_kit.device import use_fused_adamw
from islands_kit.optim.outer import Snoo, outer_factory
from islands_kit.optim.shampoo import Shampoo


def build_optimizer(model: nn.Module, cfg: OptimConfig, process_group=None) -> torch.optim.Optimizer:
    """Inner optimizer, its state on the model's device (float32, like the weights). Weight decay applies to matrices
    only (not norms, router bias or other 1-D tensors). AdamW is torch's fused kernel where torch has one for the
    device (``device.use_fused_adamw``), else torch's default."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.name == "adamw":
        fused = use_fused_adamw(next(model.parameters()).device) or None  # None: torch's default
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=fused)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr)
    if cfg.name == "shampoo":
        return Shampoo(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), epsilon=cfg.shampoo_epsilon,
                       shampoo_beta2=cfg.shampoo_beta2, grafting=cfg.grafting, grafting_epsilon=cfg.eps,
                       max_preconditioner_dim=cfg.max_preconditioner_dim,
                       precondition_frequency=cfg.precondition_frequency,
                       start_preconditioning_step=cfg.start_preconditioning_step, process_group=process_group)
    raise ConfigError(f"optim.name: must be one of adamw|shampoo|sgd (got {cfg.name!r})")


def _is_expert(name: str) -> bool:
    """A routed expert's matrix (``model/moe.py``: blocks.L.moe.w1 / w2 / w3, one slice per expert)."""
    return ".moe.w" in name


def snoo_params(model: nn.Module, which: str) -> list[nn.Parameter]:
    """The parameters that take SNOO's outer step (``optim.snoo.params``): all; matrices (ndim >= 2, not the norms'
    gains); hidden (the blocks' matrices except the routers); dense (all but the routed experts' matrices)."""
    named = list(model.named_parameters())
    if which == "matrices":
        return [p for _, p in named if p.ndim >= 2]
    if which == "hidden":
        return [p for n, p in named if p.ndim >= 2 and n.startswith("blocks.") and ".router." not in n]
    if which == "dense":
        return [p for n, p in named if not _is_expert(n)]
    return [p for _, p in named]


def build_snoo(model: nn.Module, cfg: OptimConfig, total_steps: int, fragments: list[list[str]] | None = None,
               offsets: list[int] | None = None) -> Snoo | None:
    """SNOO around the inner optimizer when ``optim.snoo.k`` > 0 (``optim/outer.py``), else None. ``fragments``
    (parameter names) and ``offsets``: one outer optimizer per fragment, stepping at its offset in the K-step window
    (``optim.snoo.fragments`` > 1; the caller splits the model as Streaming DiLoCo does); None = one group."""
    c = cfg.snoo
    if c.k == 0:
        return None
    chosen = {id(p) for p in snoo_params(model, c.params)}
    named = dict(model.named_parameters())
    groups = ([[p for p in model.parameters() if id(p) in chosen]] if fragments is None else
              [[named[n] for n in names if id(named[n]) in chosen] for names in fragments])
    return Snoo(groups, c.k, outer_factory(c.outer_optimizer, c.lr, c.momentum, c.nesterov), c.momentum_warmup,
                decay=c.lr * c.weight_decay, fast_at=total_steps if c.final == "fast" else None, offsets=offsets)
