"""The sync strategy and its driver for a configuration, and DiLoCo's sync schedule."""
from __future__ import annotations

from torch import nn

from islands_kit.comm.transport import Transport
from islands_kit.config import ExperimentConfig
from islands_kit.islands import Island
from islands_kit.model import ByteTransformer
from islands_kit.sync.base import LockstepStrategy, strided_fragments
from islands_kit.sync.butterfly import Butterfly
from islands_kit.sync.ddp import DDP
from islands_kit.sync.decoupled import DecoupledDiLoCo
from islands_kit.sync.diloco import DiLoCo, diloco_schedule
from islands_kit.sync.routing import RoutingSync
from islands_kit.train.drivers import DecoupledDriver, Driver, LockstepDriver


def driver_class(cfg: ExperimentConfig) -> type[Driver]:
    """The driver of ``sync.mode``."""
    return DecoupledDriver if cfg.sync.mode == "decoupled" else LockstepDriver


def _fragments(cfg: ExperimentConfig, model: ByteTransformer) -> list[list[str]]:
    return strided_fragments(model.block_param_names(), model.extra_param_names(), cfg.sync.n_fragments)


def lockstep_strategy(cfg: ExperimentConfig, models: dict[int, nn.Module], transport: Transport,
                      first: ByteTransformer) -> LockstepStrategy:
    """The lock-step strategy of ``sync.strategy``; ``first`` names the fragments' parameters."""
    s = cfg.sync
    if s.strategy == "ddp":
        return DDP(models, transport)
    frags = _fragments(cfg, first)
    if s.strategy == "diloco":
        return DiLoCo(models, transport, frags, s, cfg.seed, diloco_schedule(cfg) if s.diloco.h_schedule != "constant" else None)
    return Butterfly(models, transport, frags, s, cfg.seed)


def build_driver(cfg: ExperimentConfig, islands: dict[int, Island], transport: Transport,
                 step_s: dict[int, float], tick_s: float) -> Driver:
    """The driver of ``sync.mode`` with the strategy of ``sync.strategy`` over the local islands' replicas;
    ``tick_s`` is the decoupled schedule's step T_ref."""
    models: dict[int, nn.Module] = {i: isl.model for i, isl in islands.items()}  # the strategies see plain modules
    s = cfg.sync
    first = next(iter(islands.values())).model
    if s.mode == "decoupled":  # config.py allows it with diloco only
        DecoupledDriver.check_placement(cfg, islands, transport)
        schedule = diloco_schedule(cfg) if s.diloco.h_schedule != "constant" else None
        strategy = DecoupledDiLoCo(models, transport, _fragments(cfg, first), s, cfg.seed, tick_s, schedule)
        return DecoupledDriver(cfg, islands, transport, step_s, strategy)
    routing = RoutingSync(transport, s.routing_sync and cfg.model.n_experts > 1,
                          butterfly=s.routing_sync_mode == "butterfly")
    return LockstepDriver(cfg, islands, transport, step_s, lockstep_strategy(cfg, models, transport, first), routing)
