"""The sync strategy and its driver for a configuration, built through the strategy registry (``sync/registry.py``)."""
from __future__ import annotations

from torch import nn

from islands_kit.comm.transport import Transport
from islands_kit.config import ExperimentConfig
from islands_kit.sync.base import strided_fragments
from islands_kit.sync.hooks import Hooks
from islands_kit.sync.registry import BuildArgs, strategy_spec
from islands_kit.train.drivers import DecoupledDriver, Driver, LockstepDriver
from islands_kit.train.islands import Island

DRIVERS: dict[str, type[Driver]] = {"lockstep": LockstepDriver, "decoupled": DecoupledDriver}  # by sync.mode


def driver_class(cfg: ExperimentConfig) -> type[Driver]:
    """The driver of the configured strategy (its ``sync.mode``)."""
    return DRIVERS[strategy_spec(cfg.sync).driver]


def build_driver(cfg: ExperimentConfig, islands: dict[int, Island], transport: Transport,
                 step_s: dict[int, float], tick_s: float, hooks: Hooks | None = None) -> Driver:
    """The strategy of ``sync.strategy`` and ``sync.mode`` over the local islands' replicas, in its driver;
    ``tick_s`` is the decoupled schedule's step T_ref, ``hooks`` the run's hook points (``sync/hooks.py``)."""
    hooks = hooks or Hooks()
    spec = strategy_spec(cfg.sync)  # a ConfigError naming the registered strategies if none answers
    driver = DRIVERS[spec.driver]
    driver.check_placement(cfg, islands, transport)
    models: dict[int, nn.Module] = {i: isl.model for i, isl in islands.items()}  # the strategies see plain modules
    first = next(iter(islands.values())).model  # names the fragments' parameters
    frags = strided_fragments(first.block_param_names(), first.extra_param_names(), cfg.sync.n_fragments)
    strategy = spec.build(BuildArgs(cfg, models, transport, frags, tick_s, hooks))
    return driver.create(cfg, islands, transport, step_s, strategy, hooks)
