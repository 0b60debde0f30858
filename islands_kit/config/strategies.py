"""What validation knows of the sync strategies, torch-free and without one name of its own: a row of traits per
registered strategy (``sync.strategy``, ``sync.mode``, capabilities), and validation asks the rows for capabilities.

The rows come from the strategies: each one registers its spec (``sync/registry.py``) with its traits and its own
settings sections (``config/sync.py``: ``Section``), and the built-ins declare theirs beside their code
(``sync/ddp_spec.py``, ``sync/diloco_spec.py``, ``sync/butterfly_spec.py``, ``sync/decoupled_spec.py``; importing
``islands_kit`` registers them). A row answers one pair (``sync.strategy``, ``sync.mode``): the decoupled
synchroniser is DiLoCo run on the islands' own clocks, so it answers (``diloco``, ``decoupled``) under its own name.
"""
from __future__ import annotations

from dataclasses import dataclass

from islands_kit.rules import ConfigError

MODES = ("lockstep", "decoupled")  # the valid values of sync.mode, one driver each (train/drivers.py)


@dataclass(frozen=True)
class StrategyTraits:
    """What one strategy is and can do. ``mode`` names its driver: ``lockstep`` (every island takes inner step t
    together) or ``decoupled`` (islands on their own clocks, a synchroniser merging what arrives)."""

    name: str  # the registry's key (tables, wandb)
    strategy: str  # the sync.strategy value it answers
    mode: str  # the sync.mode value it answers (its driver)
    description: str  # one line, for tables and wandb
    synchronous: bool = False  # one model on the global batch: a preempted island stalls the job; the baseline's kind
    takes_faults: bool = False  # an aggregation step where an attack and a defence act: it calls sync/hooks.py's merge points
    global_state: bool = False  # a global model a preempted island rejoins from
    own_replica: bool = False  # no global model: it deploys a replica (or, with a final average, the replicas' mean)
    pairwise: bool = False  # exchanges with partner i XOR 2^r: needs a power-of-two number of islands
    own_clocks: bool = False  # islands on their own clocks, one process each: no lock-step-only schedules
    quorum: bool = False  # merges what a quorum of islands sent (sync.quorum must not exceed the islands)
    checkpoints: bool = True  # its state can be checkpointed (checkpoint_every > 0)
    projection: str = ""  # how projection/ prices it: every_step (gradients) | fragments (lock-step) | quorum | ""
    summary: str = ""  # its settings in one line, a str.format template of ``s`` (the SyncConfig); "" = description

    def summarise(self, sync: object) -> str:
        """The one-line summary of ``sync`` (a SyncConfig this row answers) that the notebooks print."""
        return self.summary.format(s=sync) if self.summary else self.description


STRATEGY_TRAITS: dict[str, StrategyTraits] = {}  # by name, in registration order (sync/registry.py fills it)


def add_traits(traits: StrategyTraits) -> None:
    """A new row (a ValueError if its name, or its (sync.strategy, sync.mode) pair, is taken by another row)."""
    if traits.mode not in MODES:
        raise ValueError(f"strategy {traits.name!r}: mode must be one of {'|'.join(MODES)} (got {traits.mode!r})")
    for t in STRATEGY_TRAITS.values():
        if t.name == traits.name:
            raise ValueError(f"strategy {traits.name!r} is already registered")
        if (t.strategy, t.mode) == (traits.strategy, traits.mode):
            raise ValueError(f"strategy {traits.name!r}: {t.name!r} already answers sync.strategy={t.strategy}, "
                             f"sync.mode={t.mode}")
    STRATEGY_TRAITS[traits.name] = traits


def strategy_names() -> tuple[str, ...]:
    """The valid values of ``sync.strategy`` (registered ones included)."""
    return tuple(dict.fromkeys(t.strategy for t in STRATEGY_TRAITS.values()))


def default_strategy() -> str:
    """``sync.strategy`` when a config names none: the first synchronous strategy registered (data parallelism
    among the built-ins), else the first registered; "" when none is."""
    rows = list(STRATEGY_TRAITS.values())
    return next((t.strategy for t in rows if t.synchronous), rows[0].strategy if rows else "")


def traits_of(strategy: str, mode: str) -> StrategyTraits:
    """The row answering ``sync.strategy`` and ``sync.mode``; a ConfigError naming the known ones if none does."""
    for t in STRATEGY_TRAITS.values():
        if t.strategy == strategy and t.mode == mode:
            return t
    known = strategy_names()
    if strategy not in known:
        raise ConfigError(f"sync.strategy: must be one of {'|'.join(known)} (got {strategy!r})")
    runs = "|".join(t.strategy for t in STRATEGY_TRAITS.values() if t.mode == mode)
    raise ConfigError(f"sync.mode: {mode} needs sync.strategy={runs or '(none registered)'} (got {strategy!r})")


def strategies_that(capability: str) -> str:
    """The ``sync.strategy`` values of the rows with ``capability``, as ``a|b`` (for error messages)."""
    return "|".join(dict.fromkeys(t.strategy for t in STRATEGY_TRAITS.values() if getattr(t, capability)))


def modes_of(strategy: str) -> tuple[str, ...]:
    """The ``sync.mode`` values ``strategy`` runs under."""
    return tuple(t.mode for t in STRATEGY_TRAITS.values() if t.strategy == strategy)
