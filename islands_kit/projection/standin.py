"""Stand-ins that cost simulated time but train nothing, so the projection runs training's own drivers
(``train/drivers.py``) and strategies (built through ``sync/registry.py``): the step's schedule is written once.

A stand-in island steps for its step time on the simulated clock; its replica holds fragment p as p + 1 values
(``f{p}``), nudged at every step so outer gradients are not zero, with a gradient of ones (data parallelism
all-reduces it) and one expert load (the routing channel carries it). ``SizedWire`` is the in-process wire
(``LocalTransport``: training's clock, ledger and ``LinkModel``) pricing every payload at what the real tensor costs
through the same codec (``Transport.wire_nbytes``). Values do not steer the schedule, so the clock, the ledger and a
decoupled run's merge log are a training run's with the same plan, to the last bit (tests/test_projection.py).
Pricing only: the byte ranges a lossy link would leave out are not cut from a stand-in.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Callable

import torch
from torch import nn

from islands_kit.comm.codecs import Payload
from islands_kit.comm.link import LinkModel
from islands_kit.comm.transport import LocalTransport
from islands_kit.config import ExperimentConfig, IslandConfig, SyncConfig
from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.sync.base import SyncStrategy
from islands_kit.sync.registry import BuildArgs, strategy_spec

__all__ = ["SizedWire", "StandIn", "config_for", "stand_ins"]

Price = Callable[[str, Payload], int]  # (channel, stand-in payload) -> bytes the real one costs on the wire


class SizedWire(LocalTransport):
    """The in-process wire, pricing a stand-in's payload at ``price(channel, payload)`` bytes."""

    def __init__(self, n_islands: int, link: LinkModel | None, price: Price) -> None:
        super().__init__(n_islands, link)
        self.price = price

    def wire_nbytes(self, channel: str, payload: Payload) -> int:
        return self.price(channel, payload)

    def _link_transfer(self, nbytes: int, start: float, src: int, dst: int) -> tuple[float, list[list[int]]]:
        end, _ = super()._link_transfer(nbytes, start, src, dst)
        return end, []  # holes are byte ranges of the real payload: not cut from the stand-in


class StandInModel(nn.Module):
    """Fragment p as p + 1 values; no experts to balance."""

    def __init__(self, n_fragments: int) -> None:
        super().__init__()
        for p in range(n_fragments):
            self.register_parameter(f"f{p}", nn.Parameter(torch.zeros(p + 1)))

    def update_expert_bias(self, loads: torch.Tensor) -> None:
        pass


class StandIn:
    """An island for a driver (``train.drivers.Replica``) that costs ``compute_s`` per step and trains nothing."""

    def __init__(self, compute_s: float, tokens_per_step: int, n_fragments: int) -> None:
        self.compute_s = compute_s
        self.tokens_per_step = tokens_per_step
        self.model = StandInModel(n_fragments)
        self.last_loss = 0.0
        self.last_loads: torch.Tensor | None = None

    @torch.no_grad()
    def forward_backward(self) -> float:
        for q in self.model.parameters():
            q.add_(1e-3)
            q.grad = torch.ones_like(q)
        self.last_loads = torch.ones(1)
        return 0.0

    def optimizer_step(self) -> None:
        pass

    def strategy_writes(self) -> AbstractContextManager[None]:
        return nullcontext()  # no slow weights to move


def config_for(sync: SyncConfig, n_islands: int, steps: int, seed: int) -> ExperimentConfig:
    """The run config the drivers and the strategy's builder read: ``n_islands`` islands synced by ``sync``, filed
    under an experiment of the table that takes such a strategy (the synchronous reference for a synchronous one)."""
    experiment = next(name for name, row in EXPERIMENT_TABLE.items() if row.reference == sync.traits.synchronous)
    return ExperimentConfig(experiment=experiment, steps=steps, seed=seed, sync=sync, progress=False,
                            islands=[IslandConfig() for _ in range(n_islands)])


def stand_ins(cfg: ExperimentConfig, step_s: list[float], tokens_per_step: list[int],
              wire: SizedWire) -> tuple[dict[int, StandIn], SyncStrategy]:
    """One stand-in per island and the strategy of ``cfg.sync`` over their replicas, built by its registry spec
    (the decoupled schedule's T_ref: the fastest island's step)."""
    P = cfg.sync.n_fragments
    islands = {i: StandIn(c, k, P) for i, (c, k) in enumerate(zip(step_s, tokens_per_step))}
    models: dict[int, nn.Module] = {i: isl.model for i, isl in islands.items()}
    args = BuildArgs(cfg, models, wire, [[f"f{p}"] for p in range(P)], min(step_s))
    return islands, strategy_spec(cfg.sync).build(args)
