"""The sync section (``sync.*``): what every strategy shares, plus one sub-section per registered strategy setting.

config/ names no strategy. A strategy that has knobs of its own declares them as a ``Section`` (``sync.<key>.*``:
a dataclass, the rules that span it and the rest of the config, the keys that moved into it) and registers it with
its spec (``sync/registry.py``); ``add_section`` makes it a field of ``SyncConfig``, so ``sync.<key>.<field>``
works everywhere a field does (``--set``, config files, result.json, the listing of ``islands-kit config``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, Mapping

from islands_kit.config.codec_registry import CODECS
from islands_kit.config.keys import MOVED_KEYS
from islands_kit.config.strategies import MODES, StrategyTraits, default_strategy, strategy_names, traits_of
from islands_kit.rules import _check, _check_fields

MAX_CODEC_BLOCK = 1 << 20  # values per codec block: a million (SparseLoCo chunks are 4096); 10**12 would allocate 4 TB


@dataclass
class SyncConfig:
    """How islands synchronise. Symbols follow Streaming DiLoCo (Douillard et al. 2025) and butterfly mixing
    (Zhao & Canny 2013): H inner steps per window, P = n_fragments, τ = tau, the overlap delay of both strategies.
    The knobs of one strategy live in its own section, ``sync.<key>.*`` (``SECTIONS``: the registered ones)."""

    strategy: str = field(default_factory=default_strategy)  # a registered strategy (config/strategies.py; default: data parallelism)
    H: int = 50  # inner steps per window
    n_fragments: int = 1  # P; 1 = plain (non-streaming) DiLoCo
    tau: int = 0  # τ: what is sent after step t is merged after step t + tau (DiLoCo outer result, butterfly fragment)
    codec: str = "fp32"  # wire format of outer gradients / fragments (codec_registry.CODECS; top*: top-k sparsified)
    codec_block_size: int = 128  # elements sharing one quantisation scale
    stochastic_rounding: bool = True  # unbiased rounding to the codec grid
    error_feedback: bool = True  # carry each island's quantisation error into its next payload
    routing_sync: bool = True  # sync expert loads every step on their own channel
    routing_sync_mode: str = "all_reduce"  # all_reduce (every island) | butterfly (pairwise with the round's partner)
    # decoupled: each island steps on its own simulated clock and a synchroniser merges each fragment every H steps of
    # the global schedule from the islands that arrive in time (sync.tau is ignored: the clock decides when one lands)
    mode: str = "lockstep"  # lockstep (every island takes inner step t together) | decoupled (own clocks, quorum)
    quorum: int = 1  # decoupled: a merge waits for at least this many islands' outer gradients
    grace_s: float = 1.0  # decoupled: and then at most this many simulated seconds more for the others

    def __post_init__(self) -> None:
        p = "sync."
        _check_fields(self, p)
        known = strategy_names()
        _check(self.strategy in known, p + "strategy", "must be one of " + "|".join(known), self.strategy)
        _check(self.H >= 1, p + "H", "must be >= 1", self.H)
        _check(self.n_fragments >= 1, p + "n_fragments", "must be >= 1", self.n_fragments)
        _check(self.H >= self.n_fragments, p + "H", f"must be >= sync.n_fragments={self.n_fragments} so every fragment gets its own offset", self.H)
        _check(0 <= self.tau < self.H, p + "tau", f"must satisfy 0 <= tau < sync.H={self.H}", self.tau)
        _check(self.codec in CODECS, p + "codec", "must be one of " + "|".join(CODECS), self.codec)
        _check(1 <= self.codec_block_size <= MAX_CODEC_BLOCK, p + "codec_block_size",
               f"must be in [1, {MAX_CODEC_BLOCK}] (a block is padded and scaled as one tensor)", self.codec_block_size)
        _check(not self.codec.startswith("top") or self.codec_block_size <= 256, p + "codec_block_size",
               f"must be <= 256 with the top-k codec {self.codec} (one-byte in-block indices)", self.codec_block_size)
        _check(self.routing_sync_mode in ("all_reduce", "butterfly"), p + "routing_sync_mode",
               "must be one of all_reduce|butterfly", self.routing_sync_mode)
        _check(self.mode in MODES, p + "mode", "must be one of " + "|".join(MODES), self.mode)
        _check(isinstance(self.quorum, int) and self.quorum >= 1, p + "quorum", "must be an integer >= 1", self.quorum)
        _check(self.grace_s >= 0, p + "grace_s", "must be >= 0 (seconds)", self.grace_s)
        for s in SECTIONS.values():
            value = self.__dict__.get(s.key)
            _check(isinstance(value, s.config), p + s.key, f"must be a {s.config.__name__} (sync.{s.key}.*)", value)
            if s.check is not None:
                s.check(self)

    if TYPE_CHECKING:  # the sections are fields too (add_section), which a type checker cannot see on the class
        def __init__(self, **fields: Any) -> None: ...

    def __getattr__(self, name: str) -> Any:
        """Only reached for a name that is no field: a section nobody registered."""
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"sync.{name}: no such section (registered: {', '.join(SECTIONS) or 'none'})")

    @property
    def traits(self) -> StrategyTraits:
        """What the strategy of ``strategy`` and ``mode`` can do (a ConfigError naming the known ones if none)."""
        return traits_of(self.strategy, self.mode)


@dataclass(frozen=True)
class Section:
    """A strategy's own settings, ``sync.<key>.*``: ``config`` is a dataclass whose ``__post_init__`` checks its own
    fields (errors naming ``sync.<key>.<field>``). ``check`` (given the SyncConfig) and ``check_run`` (given the
    ExperimentConfig) are the rules that span it and the rest of the config; like every field's rule they hold
    whatever strategy a config names. ``moved``: keys that lived elsewhere -> their place in this section (an old
    key names its new one); ``upgrade``: an older file's ``sync`` mapping -> today's (``ExperimentConfig.from_dict``)."""

    key: str
    config: type
    help: str  # one line: what the section holds (the listing of islands-kit config)
    check: Callable[[Any], None] | None = None
    check_run: Callable[[Any], None] | None = None
    moved: Mapping[str, str] = field(default_factory=dict)
    upgrade: Callable[[dict[str, Any]], dict[str, Any]] | None = None


SECTIONS: dict[str, Section] = {}  # by key, in registration order: SyncConfig's fields after the shared ones
_SHARED = tuple(fields(SyncConfig))


def add_section(section: Section) -> None:
    """Make ``sync.<key>`` a field of SyncConfig, its default the section's defaults (a ValueError if the key is
    taken). Configs made before keep the fields they had."""
    if section.key in SECTIONS or section.key in {f.name for f in _SHARED}:
        raise ValueError(f"sync.{section.key}: the key is taken")
    if not dataclasses.is_dataclass(section.config):
        raise ValueError(f"sync.{section.key}: the section's config must be a dataclass (got {section.config!r})")
    SECTIONS[section.key] = section
    MOVED_KEYS.update(section.moved)
    _assemble()


def remove_section(key: str) -> None:
    """Take a section away again (a test's clean-up)."""
    section = SECTIONS.pop(key, None)
    if section is not None:
        for old in section.moved:
            MOVED_KEYS.pop(old, None)
        if key in SyncConfig.__dict__:
            delattr(SyncConfig, key)
        _assemble()


def _assemble() -> None:
    """SyncConfig's fields made again: the shared ones, then one per registered section. The dataclass machinery
    (``__init__``, ``__eq__``, ``__repr__``, ``fields``) is generated anew over them, so ``asdict``, ``fields`` and
    ``replace`` see every section, and the class keeps its identity for every module that imported it."""
    cls: Any = SyncConfig
    for name in ("__init__", "__repr__", "__eq__", "__match_args__", "__hash__"):
        if name in cls.__dict__:
            delattr(cls, name)
    annotations: dict[str, Any] = {f.name: f.type for f in _SHARED}
    for f in _SHARED:  # the dataclass removed the class attributes of defaults made by a factory
        setattr(cls, f.name, f.default if f.default is not MISSING else field(default_factory=f.default_factory))
    for key, s in SECTIONS.items():
        annotations[key] = s.config  # a class, not a string: typing.get_type_hints (coerce.py) reads it as it is
        setattr(cls, key, field(default_factory=s.config, metadata={"help": s.help}))
    cls.__annotations__ = annotations
    dataclass(cls)
