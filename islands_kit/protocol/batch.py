"""The global batch as one knob at fixed training tokens.

The batch lives in several keys (each island's ``batch_size`` and ``micro_batch_size``); a trial at another global
batch must also train as many tokens (``steps`` moves inversely) and keep everything counted in steps where it was in
tokens — the warm-up, the evaluation and log cadence, the sync window H (so every trial takes as many outer steps per
fragment and sends as many bytes: the regime, DESIGN.md), DiLoCo's warm start, Shampoo's start and SNOO's K, and
the settings the run's strategy declares as counted in steps (``StrategySpec.step_keys``: the hierarchical sites'
H₁). The overlap delay τ stays in steps (it is a latency, counted in the steps that run while a payload travels).

With f = new / old global batch: per-island batches × f (whole numbers, the islands' shares kept), ``steps`` / f
(exactly: equal tokens), the step-counted keys / f rounded to the nearest whole step (at least 1).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any

from islands_kit.config import ConfigError, ExperimentConfig
from islands_kit.sync.registry import strategy_spec

BATCH_KEY = "batch"
# step-counted settings that move with the batch (dotted paths; a value of 0 means "off" and stays 0)
STEP_KEYS = ("optim.warmup_steps", "eval_every", "log_every", "checkpoint_every", "sync.H",
             "sync.diloco.warm_start_steps", "optim.start_preconditioning_step", "optim.snoo.k")


def global_batch(cfg: ExperimentConfig) -> int:
    return sum(i.batch_size for i in cfg.islands)


def _get(cfg: ExperimentConfig, key: str) -> Any:
    obj: Any = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def at_global_batch(cfg: ExperimentConfig, batch: int) -> dict[str, str]:
    """``--set`` overrides that move ``cfg`` to global batch ``batch`` at the same training tokens (see the module
    docstring); ConfigError naming ``batch`` when the islands' batches or the steps cannot scale to whole numbers."""
    old = global_batch(cfg)
    if batch <= 0:
        raise ConfigError(f"{BATCH_KEY}: the global batch must be a positive number of sequences (got {batch})")
    f = Fraction(batch, old)
    out: dict[str, str] = {}
    for i, isl in enumerate(cfg.islands):
        for name in ("batch_size", "micro_batch_size"):
            v = getattr(isl, name) * f
            if v.denominator != 1 or v < 1:
                raise ConfigError(
                    f"{BATCH_KEY}: {batch} does not split over the islands as the preset's {old} does "
                    f"(islands.{i}.{name} {getattr(isl, name)} x {batch}/{old} = {float(v):g}, not a whole number); "
                    f"pick a global batch whose share per island is whole")
            out[f"islands.{i}.{name}"] = str(int(v))
    steps = cfg.steps / f
    if steps.denominator != 1:
        raise ConfigError(f"{BATCH_KEY}: {batch} would train {float(steps):g} steps for the preset's tokens "
                          f"({cfg.steps} steps at {old}): pick a global batch that divides {cfg.steps * old}")
    out["steps"] = str(int(steps))
    for key in STEP_KEYS + strategy_spec(cfg.sync).step_keys:
        v = int(_get(cfg, key))
        if v > 0:
            out[key] = str(max(1, round(v / f)))
    return out
