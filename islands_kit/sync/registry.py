"""The one registry of sync strategies (as ``config/codec_registry.py`` is the codecs'): a spec per strategy, once.

A spec is everything the kit needs to know of a strategy: its traits (``config/strategies.py``: the
``sync.strategy`` and ``sync.mode`` it answers, its driver, a one-line description, its capabilities), its own
settings sections (``config/sync.py``: ``sync.<key>.*``, their rules) and its builder. ``register_strategy`` hands
the traits and sections to config/ (validation then knows them) and keeps the builder for ``train/strategies.py``;
callers ask the traits what a strategy can do instead of comparing its name.

Torch-free, so that registering a strategy imports no wire: the built-ins register in their ``*_spec.py`` modules
when ``islands_kit`` is imported (``sync/__init__.py``), each naming its builder by import path
(``"islands_kit.sync.diloco:build"``), imported when a run builds that strategy. A strategy of one's own passes the
builder itself (``tests/test_extend.py``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from islands_kit.config import ConfigError, ExperimentConfig, SyncConfig
from islands_kit.config.strategies import STRATEGY_TRAITS, StrategyTraits, add_traits
from islands_kit.config.sync import Section, add_section, remove_section
from islands_kit.sync.hooks import Hooks

if TYPE_CHECKING:
    from torch import nn

    from islands_kit.comm.link import LinkModel
    from islands_kit.comm.transport import Transport
    from islands_kit.sync.base import SyncStrategy


@dataclass(frozen=True)
class BuildArgs:
    """What a builder gets: the run's config, the local islands' replicas (plain modules), the transport, the
    fragments' parameter names (``sync.base.strided_fragments``), the decoupled schedule's step T_ref and the run's
    hook points (``sync/hooks.py``: a strategy with an aggregation step calls those around a merge)."""

    cfg: ExperimentConfig
    models: dict[int, nn.Module]
    transport: Transport
    fragments: list[list[str]]
    tick_s: float
    hooks: Hooks = field(default_factory=Hooks)


Builder = Callable[[BuildArgs], "SyncStrategy"]
LinkBuilder = Callable[[ExperimentConfig], "LinkModel"]


@dataclass(frozen=True)
class StrategySpec:
    """One strategy: its traits, its builder (a callable, or ``"module:function"`` imported when first built) and
    the settings sections it owns (``sync.<key>.*``; none when it has no knobs of its own). ``link``: a strategy
    whose islands talk over more than one kind of link (the hierarchical sites' fast link beside the WAN) names how
    its link model is built from the config (a callable or ``"module:function"``): the transport is made with it.
    ``step_keys``: its own settings counted in inner steps (dotted ``--set`` keys), which move with the global batch
    at equal tokens like ``sync.H`` does (``protocol/batch.py``)."""

    traits: StrategyTraits
    builder: Builder | str
    sections: tuple[Section, ...] = ()
    link: LinkBuilder | str | None = None  # the run's link model from its config; None = one ``link.*`` for every pair
    step_keys: tuple[str, ...] = ()

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

    def build(self, args: BuildArgs) -> SyncStrategy:
        """The strategy over ``args``; a builder named by path is imported from its module first."""
        if not isinstance(self.builder, str):
            return self.builder(args)
        made: SyncStrategy = _resolve(self.builder)(args)
        return made

    def make_link(self, cfg: ExperimentConfig) -> LinkModel:
        """The run's link model: the spec's own (``link``), else ``link.*`` for every pair of islands."""
        if self.link is None:
            from islands_kit.comm.link import LinkModel

            return LinkModel(cfg.link, seed=cfg.seed)
        made: LinkModel = (self.link if not isinstance(self.link, str) else _resolve(self.link))(cfg)
        return made


def _resolve(path: str) -> Callable[..., Any]:
    """The function ``"module:function"`` names (imported now)."""
    module, _, attr = path.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return fn


def link_model(cfg: ExperimentConfig) -> LinkModel:
    """The link model a run of ``cfg`` prices its transfers with (``StrategySpec.make_link``)."""
    return strategy_spec(cfg.sync).make_link(cfg)


_SPECS: dict[str, StrategySpec] = {}


def register_strategy(spec: StrategySpec) -> None:
    """Add a strategy: its traits and sections to config/, its spec here (a ValueError if its name, its
    (sync.strategy, sync.mode) pair or one of its section keys is taken; nothing is registered then)."""
    if spec.name in _SPECS or spec.name in STRATEGY_TRAITS:
        raise ValueError(f"strategy {spec.name!r} is already registered")
    add_traits(spec.traits)
    added: list[str] = []
    try:
        for section in spec.sections:
            add_section(section)
            added.append(section.key)
    except ValueError:
        for key in added:
            remove_section(key)
        STRATEGY_TRAITS.pop(spec.name, None)
        raise
    _SPECS[spec.name] = spec


def unregister_strategy(name: str) -> None:
    """Take a strategy away again, builder, traits and sections (a test's clean-up)."""
    spec = _SPECS.pop(name, None)
    for section in spec.sections if spec is not None else ():
        remove_section(section.key)
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
