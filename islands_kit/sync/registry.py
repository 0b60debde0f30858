"""The one registry of sync strategies, as ``codec_registry.py`` is the codecs': a spec per strategy.

A spec is the strategy's row of ``config/strategies.py`` (name, the ``sync.strategy`` and ``sync.mode`` it answers,
its driver, a one-line description, its capabilities), its sub-config type and how to build it. Each strategy module
registers its own spec when imported (``sync/ddp.py``, ``sync/diloco.py``, ``sync/butterfly.py``,
``sync/decoupled.py``; the ``islands_kit.sync`` package imports all four); ``train/strategies.py`` builds through
``strategy_spec``, and callers ask the spec's traits what a strategy can do instead of comparing its name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn

from islands_kit.comm.transport import Transport
from islands_kit.config import ConfigError, ExperimentConfig, SyncConfig
from islands_kit.config.strategies import STRATEGY_TRAITS, StrategyTraits
from islands_kit.sync.base import SyncStrategy


@dataclass(frozen=True)
class BuildArgs:
    """What a builder gets: the run's config, the local islands' replicas (plain modules), the transport, the
    fragments' parameter names (``sync.base.strided_fragments``) and the decoupled schedule's step T_ref."""

    cfg: ExperimentConfig
    models: dict[int, nn.Module]
    transport: Transport
    fragments: list[list[str]]
    tick_s: float


@dataclass(frozen=True)
class StrategySpec:
    """One strategy: its traits (``config/strategies.py``), its sub-config type (None: it has no knobs of its own)
    and its builder."""

    traits: StrategyTraits
    config: type | None
    build: Callable[[BuildArgs], SyncStrategy]

    @classmethod
    def of(cls, name: str, config: type | None, build: Callable[[BuildArgs], SyncStrategy]) -> StrategySpec:
        """The spec of a strategy whose traits are a row of ``config/strategies.py`` already (the built-ins)."""
        return cls(STRATEGY_TRAITS[name], config, build)

    @property
    def name(self) -> str:
        return self.traits.name

    @property
    def driver(self) -> str:
        """The driver that steps it (``train/drivers.py``): its ``sync.mode``."""
        return self.traits.mode

    @property
    def description(self) -> str:
        return self.traits.description


_SPECS: dict[str, StrategySpec] = {}


def register_strategy(spec: StrategySpec) -> None:
    """Add a strategy: its builder here, its traits to the torch-free table validation reads (a ValueError if the
    name is taken by another spec or by different traits)."""
    known = STRATEGY_TRAITS.get(spec.name)
    if spec.name in _SPECS or (known is not None and known != spec.traits):
        raise ValueError(f"strategy {spec.name!r} is already registered")
    STRATEGY_TRAITS[spec.name] = spec.traits
    _SPECS[spec.name] = spec


def unregister_strategy(name: str) -> None:
    """Take a strategy away again, builder and traits (a test's clean-up)."""
    _SPECS.pop(name, None)
    STRATEGY_TRAITS.pop(name, None)


def registered() -> dict[str, StrategySpec]:
    """Every registered strategy by name (a copy)."""
    return dict(_SPECS)


def strategy_spec(sync: SyncConfig) -> StrategySpec:
    """The spec answering ``sync.strategy`` and ``sync.mode``; a ConfigError naming the known strategies if none."""
    traits = sync.traits
    if traits.name not in _SPECS:
        raise ConfigError(f"sync.strategy: {traits.name} has no registered builder (registered: "
                          f"{'|'.join(_SPECS)}) (got {sync.strategy!r})")
    return _SPECS[traits.name]
