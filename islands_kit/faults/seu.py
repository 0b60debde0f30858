"""Single-event upsets (SEU): a bit that a charged particle flips in a satellite's memory, in a payload or in a
replica's weights. Two places, two guards:

* **A payload** (an outer gradient or a merged fragment, in a buffer or on the wire). Every chunk on the link is
  CRC-checked and a corrupted one is resent (``LinkConfig.corrupt_prob``, ``comm/link/model.py``: it costs time
  only), and a whole serialised payload carries a CRC-32 of its data (``comm/codecs/wire.py``: a flipped bit fails
  ``decode_bytes`` with "checksum mismatch"; a CRC-32 catches every 1-, 2- and 3-bit error and any burst up to 32
  bits). So an upset in flight is *caught and repaired*: ``chunk_corrupt_prob`` turns a per-bit upset rate into
  the ``link.corrupt_prob`` that models it.
* **A replica's weights** (between syncs, where no checksum guards them). The island's next outer gradient
  Δ = θ_global − θ_i carries the flip, and the compromised-island defence (``faults/defense.py``: integrity, norm,
  direction; Streaming DiLoCo) screens it like any other update. What it catches depends on the bit of the IEEE-754
  float32 (``flip_bit``): a flip of the exponent's top bit (bit 30) of a weight below 2 in magnitude multiplies it by
  2^128 (or makes it inf/NaN): the norm check (or the integrity check) flags the update and it is dropped. A sign
  flip (bit 31) or a low exponent / mantissa flip changes one weight by at most twice its size: the update's norm
  and direction barely move and it passes — as it should, since its harm is no larger than one weight's size.
  Under two sites the defence's rule is ``clip``: the first flagged update is clipped to the island's trusted norm
  (a step of bounded size, mostly along the flipped weight), then the island is quarantined for a few windows. The
  defence does not repair the replica; its next merge does (the keep-local merge rebuilds it from the global model
  plus its progress since sending, which excludes a flip made before sending). A large flip can also make the
  replica's next forward pass non-finite, and the run then stops as diverged unless the fragment syncs
  first. The fault option ``faults.upset_island`` / ``upset_step`` / ``upset_bit`` flips one such bit in a run
  (``Upset``; result.json's ``upsets`` says which weight, and its value before and after).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from islands_kit.sync.hooks import Hooks

FLOAT32_BITS = 32
SIGN_BIT = 31
EXPONENT_TOP_BIT = 30


def flip_bit(x: torch.Tensor, index: int, bit: int) -> None:
    """Flip bit ``bit`` (0 = the mantissa's lowest, 31 = the sign) of float32 element ``index`` of ``x`` (flattened),
    in place."""
    if x.dtype != torch.float32:
        raise ValueError(f"flip_bit: x must be float32 (got {x.dtype})")
    if not 0 <= bit < FLOAT32_BITS:
        raise ValueError(f"flip_bit: bit must be in [0, 31] (got {bit})")
    flat = x.view(-1).view(torch.int32)  # (n,) the same memory, read as integers
    mask = torch.tensor(1 << bit if bit < SIGN_BIT else -(1 << SIGN_BIT), dtype=torch.int32)
    flat[index] = flat[index] ^ mask


def flip_payload_bit(data: bytes, bit: int) -> bytes:
    """``data`` with bit ``bit`` (counted from the first byte's lowest bit) flipped: an upset in a payload."""
    if not 0 <= bit < 8 * len(data):
        raise ValueError(f"flip_payload_bit: bit must be in [0, {8 * len(data)}) (got {bit})")
    b = bytearray(data)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def chunk_corrupt_prob(bit_error_rate: float, chunk_bytes: int) -> float:
    """The probability that a chunk of ``chunk_bytes`` holds at least one upset bit, at ``bit_error_rate`` upsets
    per bit: ``1 − (1 − p)^(8·chunk_bytes)`` — the ``link.corrupt_prob`` that models those upsets."""
    if not 0 <= bit_error_rate < 1:
        raise ValueError(f"chunk_corrupt_prob: bit_error_rate must be in [0, 1) (got {bit_error_rate})")
    return -math.expm1(8.0 * chunk_bytes * math.log1p(-bit_error_rate))


class Upset:
    """The fault option ``faults.upset_island`` / ``upset_step`` / ``upset_bit``: after inner step ``upset_step`` of
    the schedule, bit ``upset_bit`` of one weight of that island's replica flips (the weight drawn with the run's
    seed among all its float32 parameters). ``after_step`` runs on the hook point of that name after every step
    (``attach``); ``result_fields`` records what flipped (result.json's ``upsets``)."""

    def __init__(self, island: int, step: int, bit: int, seed: int) -> None:
        self.island, self.step, self.bit, self.seed = island, step, bit, seed
        self.log: list[dict[str, Any]] = []

    def after_step(self, step: int, models: Mapping[int, nn.Module]) -> None:
        if step != self.step or self.island not in models:
            return
        params = [(n, p) for n, p in models[self.island].named_parameters() if p.dtype == torch.float32]
        sizes = torch.tensor([p.numel() for _, p in params])
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        flat = int(torch.randint(int(sizes.sum()), (1,), generator=g))
        k = int(torch.searchsorted(sizes.cumsum(0), torch.tensor(flat), right=True))
        name, p = params[k]
        index = flat - int(sizes[:k].sum())
        with torch.no_grad():
            before = float(p.view(-1)[index])
            flip_bit(p.data, index, self.bit)
            after = float(p.view(-1)[index])
        self.log.append({"step": step, "island": self.island, "parameter": name, "index": index, "bit": self.bit,
                         "before": before, "after": after})

    def result_fields(self) -> dict[str, Any]:
        return {"upsets": list(self.log)}


def attach(hooks: Hooks, cfg: Any, local_islands: Sequence[int] = ()) -> None:
    """The run's upset (``cfg.faults``: an ExperimentConfig's) on the hook points ``after_step`` (the flip) and
    ``result`` (result.json's ``upsets``); nothing when ``faults.upset_island`` is -1."""
    f = cfg.faults
    if f.upset_island < 0:
        return
    upset = Upset(f.upset_island, f.upset_step, f.upset_bit, cfg.seed)
    hooks.on("after_step", upset.after_step)
    hooks.on("result", lambda timeline, span_s: upset.result_fields())
