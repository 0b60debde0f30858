"""Drivers: one step of the global schedule for every island this process holds, whatever the strategy.

The training loop (``train/experiment.py``) calls ``driver.step(t)`` until the run ends and ``driver.finish(t)`` at
the end; it never asks which strategy it drives. Two drivers, one per kind of strategy (``sync/base.py``):

* ``LockstepDriver``: every island takes inner step t together — forward/backward on its own batch, simulated compute
  time on its hardware, routing statistics synced on their own channel, the strategy's gradient reduction, the inner
  optimizer step, then the strategy's sync;
* ``DecoupledDriver``: one tick of T_ref (the fastest island's step time); every island takes the inner steps that
  end by t · T_ref on its own clock, landing what has reached it before each, then the strategy posts and applies
  the merges due (``sync/decoupled.py``).

Preemption: an island is away during inner steps ``preempt_start + 1 .. preempt_start + preempt_steps``; a
``synchronous`` strategy (its traits, ``config/strategies.py``: data parallelism) cannot train without it, so the
whole job waits instead.
"""
from __future__ import annotations

import abc
from contextlib import AbstractContextManager, ExitStack
from typing import Any, Callable, Iterable, Mapping, Protocol

import torch

from islands_kit.comm.transport import SimClock, Transport
from islands_kit.config import ConfigError, ExperimentConfig
from islands_kit.sync.base import ClockedStrategy, LockstepStrategy, SyncStrategy
from islands_kit.sync.hooks import Hooks
from islands_kit.sync.routing import RoutingSync


class BalancedModel(Protocol):
    def update_expert_bias(self, loads: torch.Tensor) -> None: ...


class Replica(Protocol):
    """What a driver asks of an island: ``islands.Island`` in training, a stand-in that costs simulated time but
    trains nothing in the projection (``projection/standin.py``)."""

    compute_s: float  # simulated seconds per inner step
    tokens_per_step: int
    last_loss: float
    last_loads: torch.Tensor | None  # the expert loads of the last forward (set by forward_backward)

    @property
    def model(self) -> BalancedModel: ...

    def forward_backward(self) -> float: ...

    def optimizer_step(self) -> None: ...

    def strategy_writes(self) -> AbstractContextManager[None]:
        """Around a strategy call that may write the replica's weights (``islands.Island.strategy_writes``)."""
        ...


class Driver(abc.ABC):
    """Steps the islands of this process through the global schedule and counts every island's inner steps (every
    process counts every island from the config, so token totals need no communication)."""

    strategy: SyncStrategy

    def __init__(self, cfg: ExperimentConfig, islands: Mapping[int, Replica], transport: Transport,
                 step_s: dict[int, float], hooks: Hooks | None = None) -> None:
        self.cfg = cfg
        self.islands = islands
        self.transport = transport
        self.step_s = step_s  # every island's step time with its straggler factor
        self.hooks = hooks or Hooks()  # the run's hook points (sync/hooks.py): a step's length on the clock
        self.inner_steps = {j: 0 for j in range(len(cfg.islands))}
        self.settled_lost: set[int] = set()

    @staticmethod
    def lr_position(clock: SimClock, tick_s: float, island: int) -> Callable[[int], int] | None:
        """The global-schedule step an island's learning rate is read at, from its optimizer step count (None: the
        step count itself)."""
        return None

    @classmethod
    def create(cls, cfg: ExperimentConfig, islands: Mapping[int, Replica], transport: Transport, step_s: dict[int, float],
               strategy: Any, hooks: Hooks | None = None) -> Driver:
        """The driver over ``strategy`` (a strategy of this driver's kind: ``sync/registry.py``)."""
        return cls(cfg, islands, transport, step_s, strategy, hooks=hooks)  # type: ignore[call-arg,misc]

    def compute(self, island: int, seconds: float) -> None:
        """A local ``island`` computes one inner step of nominal length ``seconds``, as long as the ``step_seconds``
        hook point makes it from where its clock stands (an orbiting island in eclipse computes slower)."""
        self.transport.compute(island, self.hooks.step_seconds(island, self.transport.clock.now[island], seconds))

    @staticmethod
    def check_placement(cfg: ExperimentConfig, islands: Mapping[int, Replica], transport: Transport) -> None:
        """Refuse a placement of islands on processes this driver cannot run (before the strategy is built)."""

    def preempted(self, island: int, step: int) -> bool:
        """Is ``island`` away during inner step ``step``? Never where the strategy needs every island (it waits)."""
        f = self.cfg.faults
        if self.cfg.sync.traits.synchronous:
            return False
        return f.preempt_island == island and f.preempt_start < step <= f.preempt_start + f.preempt_steps

    def writes(self, islands: Iterable[Replica]) -> ExitStack:
        """Around a strategy call that may write these islands' weights (a merge landing, a rejoin): each island's
        SNOO (``optim.snoo``) moves its slow weights with them, so an outer step inside a site smooths the site's own
        progress and not the merge. A synchronous strategy (data parallelism) never writes weights: nothing to do."""
        stack = ExitStack()
        if not self.cfg.sync.traits.synchronous:
            for isl in islands:
                stack.enter_context(isl.strategy_writes())
        return stack

    @abc.abstractmethod
    def step(self, t: int) -> dict[int, float]:
        """Step ``t`` of the global schedule; returns the training loss of each local island that stepped."""

    def finish(self, t: int) -> None:
        """Complete everything in flight at the end of training (an island lost in the final merge is counted)."""
        self.strategy.finalize(t)
        self.settle_lost()

    def settle_lost(self) -> None:
        """An island whose process the strategy lost counts the inner steps (and their tokens) it last reported, not
        what the config would have had it do since; its clock counts only those steps as busy and the rest of the
        run as idle, so utilisation sees the loss."""
        for j, steps in sorted(self.strategy.lost().items()):
            if j in self.settled_lost:
                continue
            self.inner_steps[j] = steps
            busy = 0.0
            for _ in range(steps):  # summed step by step, as the island's own clock adds them
                busy += self.step_s[j]
            self.transport.clock.idle_beyond(j, busy)
            self.settled_lost.add(j)

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The driver's part of a checkpoint: the inner-step counts and what the strategy holds."""

    @abc.abstractmethod
    def load_state_dict(self, d: dict[str, Any]) -> None: ...


class LockstepDriver(Driver):
    """Every island takes inner step t together (module doc)."""

    def __init__(self, cfg: ExperimentConfig, islands: Mapping[int, Replica], transport: Transport,
                 step_s: dict[int, float], strategy: LockstepStrategy, routing: RoutingSync,
                 hooks: Hooks | None = None) -> None:
        super().__init__(cfg, islands, transport, step_s, hooks)
        self.strategy: LockstepStrategy = strategy
        self.routing = routing

    @classmethod
    def create(cls, cfg: ExperimentConfig, islands: Mapping[int, Replica], transport: Transport, step_s: dict[int, float],
               strategy: Any, hooks: Hooks | None = None) -> Driver:
        """With the routing statistics on their own channel (pairwise with ``sync.routing_sync_mode=butterfly``)."""
        s = cfg.sync
        routing = RoutingSync(transport, s.routing_sync and cfg.model.n_experts > 1,
                              butterfly=s.routing_sync_mode == "butterfly")
        return cls(cfg, islands, transport, step_s, strategy, routing, hooks)

    def stall_for_preemption(self, t: int) -> None:
        """A strategy that needs every island under a preemption: when the preempted island leaves (before inner
        step preempt_start + 1) the whole job waits for it — every island idles for preempt_steps of the slowest
        island's step time — and training then goes on with nothing missed."""
        f = self.cfg.faults
        if not (self.cfg.sync.traits.synchronous and f.preempt_island >= 0 and f.preempt_steps > 0
                and t == f.preempt_start + 1):
            return
        clock = self.transport.clock
        outage = f.preempt_steps * max(self.step_s.values())
        until = max(clock.now[i] for i in self.islands) + outage
        for i in self.islands:
            clock.wait_until(i, until)

    def step(self, t: int) -> dict[int, float]:
        self.stall_for_preemption(t)
        tokens: dict[int, int] = {}
        losses: dict[int, float] = {}
        active = {}
        for i, isl in self.islands.items():
            away = self.preempted(i, t)
            with self.writes([isl] if not away and not self.strategy.present[i] else []):
                self.strategy.set_present(i, not away)  # away: syncs go on without it; back: it rejoins first
            if away:
                self.transport.clock.wait_until(i, self.transport.clock.now[i] + isl.compute_s)  # lost time
                continue
            active[i] = isl
            losses[i] = isl.forward_backward()
            self.compute(i, isl.compute_s)
            tokens[i] = isl.tokens_per_step
        for j in range(len(self.cfg.islands)):
            if not self.preempted(j, t):
                self.inner_steps[j] += 1
        if self.cfg.model.n_experts > 1 and self.cfg.model.bias_balancing:
            loads: dict[int, torch.Tensor] = {}
            for i, isl in active.items():
                assert isl.last_loads is not None  # set by forward_backward above
                loads[i] = isl.last_loads
            synced = self.routing.sync(loads, tokens)
            if synced is not None:
                for i, isl in active.items():
                    isl.model.update_expert_bias(synced[i])
        self.strategy.reduce_gradients(t, tokens)
        for isl in active.values():
            isl.optimizer_step()
        with self.writes(active.values()):
            self.strategy.after_inner_step(t, tokens)
        return losses

    def state_dict(self) -> dict[str, Any]:
        return {"inner_steps": dict(self.inner_steps), "strategy": self.strategy.state_dict(),
                "routing": self.routing.state_dict()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """``d`` is the whole checkpoint; one without per-island counts has them recounted from the schedule."""
        if d.get("inner_steps") is not None:
            self.inner_steps = {int(j): int(v) for j, v in d["inner_steps"].items()}
        else:
            self.inner_steps = {j: sum(1 for t in range(1, int(d["step"]) + 1) if not self.preempted(j, t))
                                for j in self.inner_steps}
        self.strategy.load_state_dict(d["strategy"])
        self.routing.load_state_dict(d["routing"])


class DecoupledDriver(Driver):
    """One tick of the global schedule (module doc). Decoupled islands balance their experts on their own loads: a
    per-step routing collective would lock-step them."""

    def __init__(self, cfg: ExperimentConfig, islands: Mapping[int, Replica], transport: Transport,
                 step_s: dict[int, float], strategy: ClockedStrategy, hooks: Hooks | None = None) -> None:
        super().__init__(cfg, islands, transport, step_s, hooks)
        self.strategy: ClockedStrategy = strategy
        self.tick_s = strategy.tick_s

    @staticmethod
    def check_placement(cfg: ExperimentConfig, islands: Mapping[int, Replica], transport: Transport) -> None:
        n = len(cfg.islands)
        if len(islands) != n and not (len(islands) == 1 and transport.world_size == n):
            raise ConfigError("sync.mode: decoupled runs every island in one process (the simulator) or one "
                              "island per process (torchrun with WORLD_SIZE = len(islands))")

    @staticmethod
    def lr_position(clock: SimClock, tick_s: float, island: int) -> Callable[[int], int] | None:
        """Ticks of T_ref that have passed on the island's clock: every island follows the same learning-rate
        schedule in simulated time (at equal speeds, lock-step's)."""
        return lambda _step: int(clock.now[island] / tick_s + 1e-6)

    def step(self, t: int) -> dict[int, float]:
        end_s = t * self.tick_s * (1 + 1e-9)
        strategy = self.strategy
        clock = self.transport.clock
        losses: dict[int, float] = {}
        lost = strategy.lost()
        for j in range(len(self.cfg.islands)):  # another process's island: its clock and counts follow the config
            if j in self.islands or j in lost:
                continue
            if self.preempted(j, t):
                clock.wait_until(j, t * self.tick_s)
                continue
            while clock.now[j] + self.step_s[j] <= end_s:  # (the clock's mirror, not this process's compute)
                clock.compute(j, self.hooks.step_seconds(j, clock.now[j], self.step_s[j]))
                self.inner_steps[j] += 1
        for i, isl in self.islands.items():
            if i in lost:  # dropped by the synchroniser in this process (the simulator): it stops, as a lost process
                continue
            away = self.preempted(i, t)
            with self.writes([isl] if not away and not strategy.present[i] else []):
                strategy.set_present(i, not away)
            if away:
                clock.wait_until(i, t * self.tick_s)  # lost time
                continue
            got = []
            while clock.now[i] + isl.compute_s <= end_s:
                with self.writes([isl]):
                    strategy.land(i, clock.now[i])
                got.append(isl.forward_backward())
                self.compute(i, isl.compute_s)
                if self.cfg.model.n_experts > 1 and self.cfg.model.bias_balancing:
                    assert isl.last_loads is not None
                    isl.model.update_expert_bias(isl.last_loads)
                isl.optimizer_step()
                strategy.island_step_done(i, isl.tokens_per_step)
                self.inner_steps[i] += 1
            if got:
                losses[i] = sum(got) / len(got)
                isl.last_loss = losses[i]
        with self.writes(isl for i, isl in self.islands.items() if i not in lost):
            strategy.after_tick(t)
        self.settle_lost()
        return losses

    def state_dict(self) -> dict[str, Any]:
        raise ConfigError("checkpoint_every: must be 0 with sync.mode=decoupled (its in-flight merges are not "
                          "checkpointed)")

    def load_state_dict(self, d: dict[str, Any]) -> None:
        raise ConfigError("--resume: a sync.mode=decoupled run has no checkpoint to resume from")
