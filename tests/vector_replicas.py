"""The small streaming-DiLoCo fixtures the reference tests share (tests/test_streaming.py, tests/test_sparseloco.py):
a flat SyncConfig builder, a 'model' of one parameter vector per fragment, and a deterministic inner update."""
from __future__ import annotations

import torch
from torch import nn

from islands_kit.config import SyncConfig
from islands_kit.sync.diloco_spec import DiLoCoConfig


def sync(**kw) -> SyncConfig:
    """A diloco SyncConfig from one flat set of keywords: DiLoCoConfig's fields go to ``sync.diloco``."""
    own = {f: kw.pop(f) for f in list(kw) if f in DiLoCoConfig.__dataclass_fields__}
    return SyncConfig(**kw, diloco=DiLoCoConfig(**own))


class Vec(nn.Module):
    """One parameter vector per fragment (``b0``, ``b1``, ...), from the rows of ``init`` (P, DIM)."""

    def __init__(self, init: torch.Tensor) -> None:
        super().__init__()
        for p in range(init.shape[0]):
            self.register_parameter(f"b{p}", nn.Parameter(init[p].clone()))


def inner_direction(i: int, t: int, P: int, DIM: int) -> torch.Tensor:
    """A fixed, island- and step-dependent inner update (P, DIM), so replicas drift apart deterministically."""
    return torch.randn(P, DIM, generator=torch.Generator().manual_seed(1000 * i + t))
