"""Every optimizer an island steps, built in one place: the inner optimizer (AdamW, Shampoo, Muon, SGD) and SNOO's outer
step around it (``optim/outer.py``); DiLoCo's outer optimizer is built by ``optim.outer.outer_factory`` (the config's
``sync.diloco.outer_optimizer``) and handed to ``sync.diloco.DiLoCoCore``."""
from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from islands_kit.config import ConfigError, OptimConfig
from islands_kit.device import use_fused_adamw
from islands_kit.optim.muon import Muon
from islands_kit.optim.outer import Snoo, outer_factory
from islands_kit.optim.shampoo import Shampoo


def build_optimizer(model: nn.Module, cfg: OptimConfig, process_group=None) -> torch.optim.Optimizer:
    """Inner optimizer, its state on the model's device (float32, like the weights). Weight decay applies to matrices
    only (not norms, router bias or other 1-D tensors). AdamW is torch's fused kernel where torch has one for the
    device (``device.use_fused_adamw``), else torch's default."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = use_fused_adamw(next(model.parameters()).device) or None  # None: torch's default
    if cfg.name == "muon":
        return build_muon(model, cfg, fused)
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=fused)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr)
    if cfg.name == "shampoo":
        return Shampoo(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), epsilon=cfg.shampoo_epsilon,
                       shampoo_beta2=cfg.shampoo_beta2, grafting=cfg.grafting, grafting_epsilon=cfg.eps,
                       max_preconditioner_dim=cfg.max_preconditioner_dim,
                       precondition_frequency=cfg.precondition_frequency,
                       start_preconditioning_step=cfg.start_preconditioning_step, process_group=process_group)
    raise ConfigError(f"optim.name: must be one of adamw|shampoo|muon|sgd (got {cfg.name!r})")


def _is_linear(name: str) -> bool:
    """An ``nn.Linear`` weight, stored (fan_out, fan_in); the model's other matrices are ``x @ W``, (fan_in, fan_out)."""
    return name.endswith(".weight")


MUON_GROUPS = ("muon_out_in", "muon_in_out", "adamw_decay", "adamw_no_decay")


def muon_param_groups(model: nn.Module) -> dict[str, list[str]]:
    """Which parameter takes which part of ``optim.name=muon``, by name: Muon on the hidden matrices (the blocks'
    matrices except the routers: attention projections, expert and shared MLP weights), split by how they are stored
    (``nn.Linear`` out_in, ``x @ W`` in_out); AdamW on the rest, with weight decay on its matrices (embedding, output
    head, routers) and none on the norms' gains. Every parameter is in exactly one group."""
    hidden = {id(p) for p in snoo_params(model, "hidden")}
    out: dict[str, list[str]] = {g: [] for g in MUON_GROUPS}
    for name, p in model.named_parameters():
        if id(p) in hidden:
            out["muon_out_in" if _is_linear(name) else "muon_in_out"].append(name)
        else:
            out["adamw_decay" if p.ndim >= 2 else "adamw_no_decay"].append(name)
    return out


def build_muon(model: nn.Module, cfg: OptimConfig, fused: bool | None = None) -> Muon:
    """``optim.name=muon``: the groups of ``muon_param_groups`` with ``optim.muon``'s knobs on the Muon groups and
    AdamW's (``optim.beta1``, ``beta2``, ``eps``, ``weight_decay``, lr ``muon.adamw_lr`` or ``optim.lr``) on the
    others. ``fused``: the AdamW groups' fused kernel (None: torch's default)."""
    m = cfg.muon
    named = dict(model.named_parameters())
    names = muon_param_groups(model)
    adamw: dict[str, Any] = {"kind": "adamw", "lr": cfg.muon_adamw_lr}
    groups: list[dict[str, Any]] = [{"params": [named[n] for n in names["muon_out_in"]], "kind": "muon", "layout": "out_in"},
              {"params": [named[n] for n in names["muon_in_out"]], "kind": "muon", "layout": "in_out"},
              {"params": [named[n] for n in names["adamw_decay"]], **adamw, "weight_decay": cfg.weight_decay},
              {"params": [named[n] for n in names["adamw_no_decay"]], **adamw, "weight_decay": 0.0}]
    return Muon([g for g in groups if g["params"]], lr=m.lr, momentum=m.momentum, nesterov=m.nesterov,
                ns_steps=m.ns_steps, adjust_lr=m.adjust_lr, weight_decay=m.weight_decay, betas=(cfg.beta1, cfg.beta2),
                eps=cfg.eps, fused=fused)


def name_patterns(names: list[str]) -> list[str]:
    """Parameter names with the block index as ``*`` (``blocks.*.attn.wo.weight``), in first-seen order: one line
    per kind of tensor rather than one per layer."""
    return list(dict.fromkeys(re.sub(r"^blocks\.\d+\.", "blocks.*.", n) for n in names))


def optimizer_groups(model: nn.Module, cfg: OptimConfig) -> dict[str, dict[str, Any]] | None:
    """What result.json and ``islands-kit config`` record of ``optim.name=muon``'s split: per group its parameter
    name patterns, tensors and scalars. None for the other inner optimizers (one rule for every parameter)."""
    if cfg.name != "muon":
        return None
    named = dict(model.named_parameters())
    return {g: {"params": name_patterns(ns), "tensors": len(ns), "numel": sum(named[n].numel() for n in ns)}
            for g, ns in muon_param_groups(model).items() if ns}


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


def format_groups(groups: dict[str, dict[str, Any]] | None) -> str:
    """``optimizer_groups`` as YAML comment lines (under ``islands-kit config``'s listing, which stays a config file);
    '' when there is no split to show."""
    if not groups:
        return ""
    lines = ["# optim.name=muon: which parameters take Muon and which AdamW (optim/build.py: muon_param_groups)"]
    for g, d in groups.items():
        lines.append(f"#   {g}: {d['tensors']} tensors, {d['numel']:,} parameters: {', '.join(d['params'])}")
    return "\n".join(lines) + "\n"
