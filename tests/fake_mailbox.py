"""The synchroniser's side of the decoupled wire in one process (tests only): island 1's messages are scripted raw
bytes, read through ``comm.peer`` with ``TorchDistTransport.receive``'s policy (a refused island is dropped)."""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from islands_kit.comm import control, peer
from islands_kit.comm.codecs import Payload, encode_bytes
from islands_kit.comm.transport import LocalTransport
from islands_kit.presets import get_preset
from islands_kit.sync.decoupled import CONTRIBUTION, DecoupledDiLoCo


class FakeMailbox(LocalTransport):
    """The synchroniser's side of the decoupled wire in one process: island 1's messages are scripted raw bytes,
    read through ``comm.peer`` with ``TorchDistTransport.receive``'s policy (refused: the island is dropped)."""

    timeout_s = 1.0

    def __init__(self) -> None:
        super().__init__(2)
        self.inbox: list[tuple[bytes, bytes]] = []
        self.lost: dict[int, str] = {}

    def post(self, dst: int, kind: str, body: Any, payload: Payload | None = None) -> None:
        pass

    def receive(self, src, kind, schema, expect=None, timeout_s=None, required=False):
        if src in self.lost:
            return None
        raw, data = self.inbox.pop(0)
        try:
            return peer.read_message(raw, data, kind, schema, expect, src, f"message {kind!r}")
        except peer.PeerError as e:
            assert not required
            self.drop(src, str(e))
            return None

    def lost_islands(self) -> set[int]:
        return set(self.lost)

    def drop(self, island: int, why: str) -> None:
        self.lost[island] = why

    def finish_messages(self) -> None:
        pass


def synchroniser(**sync: Any) -> tuple[DecoupledDiLoCo, FakeMailbox, int]:
    """The synchroniser (island 0, one fragment: a small Linear) of a two-island decoupled run, quorum 1, its island
    trained up to the first due tick, which is returned; ``sync`` overrides SyncConfig fields."""
    cfg = dataclasses.replace(get_preset("two_site", "smoke").sync, mode="decoupled", n_fragments=1, quorum=1, **sync)
    model = nn.Linear(16, 8)
    box = FakeMailbox()
    s = DecoupledDiLoCo({0: model}, box, [["weight", "bias"]], cfg, seed=0, tick_s=1.0)
    tick = next(t for t in range(1, 100) if s.fragments_due(t))
    for _ in range(tick):  # island 0 trains, so it has something to send
        with torch.no_grad():
            model.weight.add_(0.01)
        s.island_step_done(0, 64)
    return s, box, tick


def contribution(s: DecoupledDiLoCo, tick: int, **over: Any) -> tuple[bytes, bytes]:
    """Island 1's honest CONTRIBUTION to round 0 at ``tick`` (fields in ``over`` replaced) and its payload bytes."""
    body = {"tick": tick, "fragment": 0, "round": 0, "status": "fresh", "sent_s": float(tick), "tokens": 64 * tick,
            "steps": tick, "inner_steps": tick, **over}
    return control.encode(CONTRIBUTION, body), encode_bytes(s.codec.encode(torch.full((s.global_params[0].numel(),), 0.01)))
