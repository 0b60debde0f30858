"""What crosses the wire (``Payload``) and the error a codec raises on values it cannot represent."""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch


class NonFiniteError(ValueError):
    """A payload holds NaN/inf that the codec cannot represent. Raised by every codec except fp32 (and the Triton
    codec); ``run.Experiment`` treats it as the model having diverged (``diverged_at_step`` in result.json)."""

if sys.byteorder != "little":  # the wire is little-endian and tensors are reinterpreted in host order
    raise ImportError("islands_kit.comm.codecs assumes a little-endian host")

@dataclass(frozen=True, eq=False)  # eq=False: comparing tensors field-wise has no single truth value
class Payload:
    """What crosses the wire: ``data`` is exactly the bytes sent (1-D uint8), so ``nbytes`` is the ledger's charge."""

    codec: str
    numel: int
    block_size: int
    data: torch.Tensor

    def __post_init__(self) -> None:
        if self.data.dtype != torch.uint8 or self.data.dim() != 1:
            raise ValueError(f"Payload.data must be a 1-D uint8 tensor, got {self.data.dtype} of shape {tuple(self.data.shape)}")
        if self.numel < 0 or self.block_size < 1:
            raise ValueError(f"Payload: numel must be >= 0 and block_size >= 1, got {self.numel}, {self.block_size}")

    @property
    def nbytes(self) -> int:
        return self.data.numel()
