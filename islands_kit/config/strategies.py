"""The sync strategies' names and capabilities, torch-free: what validation reads (``sync.strategy``, ``sync.mode``).

Each strategy module (``sync/ddp.py``, ``sync/diloco.py``, ``sync/butterfly.py``, ``sync/decoupled.py``) registers
one ``StrategySpec`` (``sync/registry.py``) around one row of this table: the row says what the strategy *can do*,
and validation asks for those capabilities instead of comparing names. A row answers one pair (``sync.strategy``,
``sync.mode``): the decoupled synchroniser is DiLoCo run on the islands' own clocks, so it answers
(``diloco``, ``decoupled``) under its own name.
"""
from __future__ import annotations

from dataclasses import dataclass

from islands_kit.config.rules import ConfigError

MODES = ("lockstep", "decoupled")  # the valid values of sync.mode, one driver each (train/drivers.py)


@dataclass(frozen=True)
class StrategyTraits:
    """What one strategy is and can do. ``mode`` names its driver: ``lockstep`` (every island takes inner step t
    together) or ``decoupled`` (islands on their own clocks, a synchroniser merging what arrives)."""

    name: str  # the registry's key (tables, wandb): ddp | diloco | butterfly | decoupled
    strategy: str  # the sync.strategy value it answers
    mode: str  # the sync.mode value it answers (its driver)
    description: str  # one line, for tables and wandb
    synchronous: bool = False  # one model on the global batch: a preempted island stalls the job; the baseline's kind
    takes_faults: bool = False  # an aggregation step where an attack and a robust defence act (faults.attack/defense)
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


_DILOCO_SUMMARY = ("H={s.H}, P={s.n_fragments} fragments, tau={s.tau}, alpha={s.diloco.alpha}, outer lr {s.diloco.outer_lr} "
                   "(Nesterov {s.diloco.nesterov}, momentum {s.diloco.outer_momentum}), codec {s.codec}, routing sync {s.routing_sync}")
STRATEGY_TRAITS: dict[str, StrategyTraits] = {t.name: t for t in (
    StrategyTraits("ddp", "ddp", "lockstep", "ddp (gradients all-reduced every step, fp32)",
                   synchronous=True, global_state=True, projection="every_step"),
    StrategyTraits("diloco", "diloco", "lockstep", "streaming DiLoCo (fragments synced every H steps, outer step)",
                   takes_faults=True, global_state=True, projection="fragments",
                   summary="streaming DiLoCo " + _DILOCO_SUMMARY),
    StrategyTraits("butterfly", "butterfly", "lockstep", "butterfly mixing (pairwise fragment exchanges, no all-reduce)",
                   own_replica=True, pairwise=True,
                   summary="butterfly H={s.H}, P={s.n_fragments} fragments, {s.butterfly.exchanges_per_window} exchanges per "
                   "window, merge delay tau={s.tau}, codec {s.codec}, routing sync {s.routing_sync}"),
    StrategyTraits("decoupled", "diloco", "decoupled",
                   "decoupled DiLoCo (own clocks, a quorum merges what arrives in time)",
                   takes_faults=True, global_state=True, own_clocks=True, quorum=True, checkpoints=False,
                   projection="quorum", summary="decoupled streaming DiLoCo (quorum {s.quorum}, grace {s.grace_s} s) " + _DILOCO_SUMMARY),
)}


def strategy_names() -> tuple[str, ...]:
    """The valid values of ``sync.strategy`` (registered ones included)."""
    return tuple(dict.fromkeys(t.strategy for t in STRATEGY_TRAITS.values()))


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
