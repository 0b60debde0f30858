"""The synchroniser of a two-island decoupled run alone in one process (tests only): island 1 is not held here, so
its messages are whatever bytes a test queues on the in-process wire (``LocalTransport.post_bytes``), read through
``Transport.receive`` and ``comm.peer`` exactly as under torchrun (a refused island is dropped)."""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from islands_kit.comm import control
from islands_kit.comm.codecs import encode_bytes
from islands_kit.comm.messages import CONTRIBUTION
from islands_kit.comm.transport import LocalTransport
from islands_kit.config.presets import get_preset
from islands_kit.sync.decoupled import DecoupledDiLoCo


def synchroniser(**sync: Any) -> tuple[DecoupledDiLoCo, LocalTransport, int]:
    """The synchroniser (island 0, one fragment: a small Linear) of a two-island decoupled run, quorum 1, its island
    trained up to the first due tick, which is returned; ``sync`` overrides SyncConfig fields."""
    cfg = dataclasses.replace(get_preset("two_site", "smoke").sync, mode="decoupled", n_fragments=1, quorum=1, **sync)
    model = nn.Linear(16, 8)
    wire = LocalTransport(2)
    s = DecoupledDiLoCo({0: model}, wire, [["weight", "bias"]], cfg, seed=0, tick_s=1.0)
    tick = next(t for t in range(1, 100) if s.fragments_due(t))
    for _ in range(tick):  # island 0 trains, so it has something to send
        with torch.no_grad():
            model.weight.add_(0.01)
        s.island_step_done(0, 64)
    return s, wire, tick


def from_island_1(wire: LocalTransport, message: tuple[bytes, bytes]) -> None:
    """Queue island 1's message to the synchroniser, as raw bytes (control, payload)."""
    wire.post_bytes(1, 0, CONTRIBUTION, *message)


def contribution(s: DecoupledDiLoCo, tick: int, **over: Any) -> tuple[bytes, bytes]:
    """Island 1's honest CONTRIBUTION to round 0 at ``tick`` (fields in ``over`` replaced) and its payload bytes."""
    body = {"tick": tick, "fragment": 0, "round": 0, "status": "fresh", "sent_s": float(tick), "tokens": 64 * tick,
            "steps": tick, "inner_steps": tick, **over}
    return control.encode(CONTRIBUTION, body), encode_bytes(s.codec.encode(torch.full((s.global_params[0].numel(),), 0.01)))
