"""The attacks of a compromised island (Streaming DiLoCo only): what it sends instead of its honest update.

Threat model. One island (``faults.attack_island``) is compromised from inner step ``faults.attack_start`` on: it
controls what it sends (its outer gradient Δ_i = θ_global − θ_i and the encoded bytes), not the other islands nor the
link. Lost or corrupted chunks are the link model's business (``LinkConfig.loss_prob`` / ``corrupt_prob``: CRC-checked
and resent, they cost time only). The attacks, seeded and deterministic (:class:`Adversary`):

=============  ====================================================================================================
``sign_flip``  sends −Δ (undoes its own progress; the Byzantine "reversed gradient")
``scale``      sends ``attack_scale`` · Δ
``noise``      sends Δ + N(0, σ²), σ = ``attack_noise_std`` · RMS(Δ) (the honest Δ of that fragment and sync)
``nan``        writes NaN / +Inf / −Inf into the encoded payload: into 1 % of the values (fp32, bf16) or of the block
               scales (block codecs: the codes have no NaN, a compromised encoder writes the scale), at least one
``replay``     resends, bit for bit, its last honest payload of that fragment sent before ``attack_start`` (a stale
               message; if the fragment had not synced before ``attack_start`` there is nothing to replay: honest)
=============  ====================================================================================================


sign_flip / scale / noise act on Δ before the codec (``tamper``, on the hook point ``outgoing``); nan / replay act on
the encoded payload (``tamper_payload``, on ``outgoing_payload``) because a quantising codec refuses non-finite input
and re-encoding a stale Δ would not reproduce its bytes: a compromised island writes its wire bytes directly.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from islands_kit.comm.codecs import Payload
from islands_kit.config import ConfigError, FaultConfig

DELTA_ATTACKS = ("sign_flip", "scale", "noise")  # on Δ before the codec (Adversary.tamper)
WIRE_ATTACKS = ("nan", "replay")  # on the encoded payload (DiLoCo.tamper_payload)
INJECT_FRACTION = 0.01  # share of values (or block scales) the nan attack overwrites


def inject_non_finite(payload: Payload, fraction: float, generator: torch.Generator) -> Payload:
    """A copy of ``payload`` with NaN, +Inf, −Inf (in turn) written over ``max(1, round(fraction · m))`` of its m
    values (fp32, bf16) or block scales (block codecs: ``[nb float32 scales][codes]``, see comm/codecs/)."""
    data = payload.data.clone()  # fresh, so 4-byte aligned for the float views
    if payload.codec == "fp32":
        vals = data.view(torch.float32)  # (n,)
    elif payload.codec == "bf16":
        vals = data.view(torch.bfloat16)  # (n,)
    else:
        nb = math.ceil(payload.numel / payload.block_size)
        vals = data[: 4 * nb].view(torch.float32)  # (nb,) block scales
    m = vals.numel()
    if m == 0:
        return payload
    k = max(1, round(fraction * m))
    idx = torch.randperm(m, generator=generator)[:k]
    specials = torch.tensor([math.nan, math.inf, -math.inf], dtype=torch.float32)
    vals[idx] = specials[torch.arange(k) % 3].to(vals)
    return Payload(payload.codec, payload.numel, payload.block_size, data)


class Adversary:
    """The compromised island ``cfg.attack_island``, active for syncs posted at step ≥ ``cfg.attack_start``.

    ``tamper(step, island, fragment, delta)`` and ``tamper_payload(step, island, fragment, payload)`` return their
    input untouched for every other island, before the start, and for the attacks that act at the other level.
    Randomness (noise, which values to poison) comes from a generator seeded by (seed, step, fragment): the same
    config gives the same corruption whatever else the run does."""

    def __init__(self, cfg: FaultConfig, seed: int) -> None:
        if cfg.attack == "none":
            raise ConfigError("faults.attack: an Adversary needs an attack other than 'none' (got 'none')")
        self.cfg = cfg
        self.seed = seed
        self.honest: dict[int, Payload] = {}  # fragment -> last payload sent before attack_start (replay)

    def active(self, step: int, island: int) -> bool:
        return island == self.cfg.attack_island and step >= self.cfg.attack_start

    def _generator(self, step: int, fragment: int) -> torch.Generator:
        return torch.Generator().manual_seed((self.seed * 1_000_003 + step * 7919 + fragment * 104_729 + 1) % 2**62)

    def tamper(self, step: int, island: int, fragment: int, delta: torch.Tensor) -> torch.Tensor:
        """Δ-level attacks (sign_flip, scale, noise) on the outer gradient before it is encoded."""
        a = self.cfg.attack
        if a not in DELTA_ATTACKS or not self.active(step, island):
            return delta
        if a == "sign_flip":
            return -delta
        if a == "scale":
            return delta * self.cfg.attack_scale
        rms = delta.float().pow(2).mean().sqrt()
        noise = torch.randn(delta.shape, generator=self._generator(step, fragment), dtype=torch.float32)
        return delta + (noise.to(delta.device) * (self.cfg.attack_noise_std * rms)).to(delta.dtype)

    def tamper_payload(self, step: int, island: int, fragment: int, payload: Payload) -> Payload:
        """Wire-level attacks (nan, replay) on the encoded payload."""
        a = self.cfg.attack
        if a not in WIRE_ATTACKS or island != self.cfg.attack_island:
            return payload
        if step < self.cfg.attack_start:
            if a == "replay":
                self.honest[fragment] = payload
            return payload
        if a == "replay":
            stale = self.honest.get(fragment)
            if stale is None:  # nothing sent yet for this fragment: nothing to replay
                return payload
            if stale.data.device != payload.data.device:  # stored before a resume: loaded on the CPU
                stale = Payload(stale.codec, stale.numel, stale.block_size, stale.data.to(payload.data.device))
            return stale
        return inject_non_finite(payload, INJECT_FRACTION, self._generator(step, fragment))

    def state_dict(self) -> dict[str, Any]:
        return {"honest": dict(self.honest)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.honest = {int(k): v for k, v in d["honest"].items()}
