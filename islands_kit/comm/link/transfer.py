"""One transfer's record (``Transfer``), what its receiver holds (``received``) and duration statistics."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch


@dataclass
class Transfer:
    """One payload's trip across the link. ``delivered`` lists chunk ids in the order they were delivered."""

    start_s: float
    end_s: float
    duration_s: float
    nbytes: int
    n_chunks: int
    chunks_lost: int
    chunks_corrupted: int
    chunks_resent: int
    bytes_on_wire: int
    delivered: list[int] = field(default_factory=list)
    src: int = 0
    dst: int = 0
    attempts: int = 1  # naive: whole-payload attempts; chunked: 1
    parity_chunks: int = 0  # FEC parity chunks sent in the first pass (counted in bytes_on_wire)
    holes: list[list[int]] = field(default_factory=list)  # [offset, length] of data chunks never delivered nor rebuilt


def received(data: "torch.Tensor", holes: list[list[int]]) -> "torch.Tensor":
    """What the receiver of a transfer with ``holes`` (``Transfer.holes``) holds of the 1-D uint8 ``data``: ``data``
    itself when nothing is missing, else a copy with the holes zeroed. Hole offsets beyond ``data`` wrap around it (a
    ring all-reduce transfer is priced at more bytes than one payload; see comm/transport.py)."""
    if not holes:
        return data
    out = data.clone()
    idx = torch.cat([torch.arange(off, off + length) for off, length in holes]) % out.numel()
    out[idx] = 0
    return out


def transfer_time_stats(durations: Sequence[float]) -> dict[str, float]:
    """p50, p99 (linear interpolation), mean and max of transfer durations."""
    d = np.asarray(list(durations), dtype=np.float64)
    if d.size == 0:
        raise ValueError("durations: need at least one transfer duration")
    return {"p50": float(np.percentile(d, 50)), "p99": float(np.percentile(d, 99)),
            "mean": float(d.mean()), "max": float(d.max())}
