"""What travels between ranks besides payloads: the frame header of a collective's message, one posted operation,
the schema of a rank's share of the world's ledger and clock."""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from islands_kit.comm.codecs import Payload
from islands_kit.comm.control import Int, MapOf, Num

META = struct.Struct("<qiiIIdd")  # seq, src island, dst island (-1: all), crc32(channel), reserved, sent_at, weight
META_BYTES = META.size  # 40


@dataclass
class Op:
    """One posted operation; ``results``/``arrival`` are the dicts its Handle reads, filled on completion."""

    seq: int
    kind: str  # "all_reduce" | "all_gather" | "send_recv"
    channel: str
    posted_at: float  # my simulated clock when posted
    mine: Payload
    peer: int  # send_recv: the island it receives from (-1 for the collectives)
    works: list[Any]
    recv: list[torch.Tensor]  # leader: received messages (all_reduce: one per island in id order; send_recv: one)
    msg_len: int
    results: dict[int, Any] = field(default_factory=dict)
    arrival: dict[int, float] = field(default_factory=dict)
    done: bool = False


# what each rank sends to ``gather_world``: its island, its inbound ledger records ((seq, src, dst), (start, end,
# bytes, src, dst, channel)), the payload bytes it handed over per channel, and its clock
RECORD = ((Int(0), Int(0), Int(0)), (Num(0), Num(0), Int(0), Int(0), Int(0), str))
WORLD_SCHEMA = {"island": Int(0), "leader": bool, "sent": MapOf(Int(0)), "records": [RECORD],
                 "clock": {"now": MapOf(Num(0)), "busy": MapOf(Num(0)), "idle": MapOf(Num(0))}}


def channel_id(channel: str) -> int:
    return zlib.crc32(channel.encode())


def irecv(t: torch.Tensor, src_rank: int, group: Any, tag: int) -> Any:
    work = dist.irecv(t, src_rank, group=group, tag=tag)
    assert work is not None  # None only for a rank outside ``group``
    return work
