"""Error feedback: the per-key residual carried into the next payload."""
from __future__ import annotations

from typing import Any, Hashable

import torch

from islands_kit.comm.codecs.base import Codec
from islands_kit.comm.codecs.payload import Payload
from islands_kit.config import ConfigError


class ErrorFeedback:
    """Per-key residual (e.g. key = (island, fragment)); the residual of a fragment is carried into that fragment's
    next sync (error feedback, Seide et al. 2014; Karimireddy et al. 2019).

    ``compress``: ``x_eff = x + residual[key]``; send ``encode(x_eff)``; ``residual[key] = x_eff - decoded``. So the
    long-run sum of what was sent equals the sum of the inputs minus the (bounded) current residual: compression error
    does not accumulate, even with round-to-nearest. Residuals are float32 on the input's device.

    ``decay`` β < 1 is SparseLoCo's decayed buffer (Sarfi et al. 2025, Algorithm 1: ``e ← β e + Δ``, send
    ``Δ̂ = Q(TopK(e))``, ``e ← e − Δ̂``): ``x_eff = x + β · residual``. With a sparse codec most of each outer gradient
    waits in ``e``, so the decayed sum of past outer gradients it holds is what the paper uses as the outer momentum.
    β = 1 (the default) is the plain rule above, bit for bit.

    Exactness: ``decoded + residual == x_eff`` bit for bit whenever ``x_eff - decoded`` is a float32 number — always
    when decoded is 0 or within a factor 2 of x_eff (Sterbenz), which covers round-to-nearest on every codec with 0 on
    its grid and every stochastic rounding except a value smaller than one grid step rounded away from zero. There the
    residual is rounded to float32, losing at most 2^-24 of it (a 2^-24 fraction of a grid step).
    """

    def __init__(self, enabled: bool = True, decay: float = 1.0) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ConfigError(f"sync.diloco.error_feedback_decay: must be in [0, 1] (got {decay})")
        self.enabled, self.decay = enabled, decay
        self._residual: dict[Hashable, torch.Tensor] = {}

    def residual(self, key: Hashable) -> torch.Tensor | None:
        """The flat float32 residual stored for ``key`` (None before its first compress)."""
        return self._residual.get(key)

    def compress(self, key: Hashable, x: torch.Tensor, codec: Codec, *, stochastic: bool,
                 generator: torch.Generator | None = None, noise: torch.Tensor | None = None) -> tuple[Payload, torch.Tensor]:
        """Encode ``x`` plus the key's residual; return (payload, decoded values shaped like ``x``, float32)."""
        r = self._residual.get(key) if self.enabled else None
        if r is not None and r.numel() != x.numel():
            raise ValueError(f"ErrorFeedback.compress: key {key!r} had numel {r.numel()}, now {x.numel()}")
        if r is not None and self.decay != 1.0:
            r = self.decay * r  # e ← β e (+ x in encode_ef)
        payload, decoded, residual = codec.encode_ef(x, r, stochastic=stochastic, generator=generator, noise=noise)
        if self.enabled:
            self._residual[key] = residual
        return payload, decoded.view(x.shape)

    def state_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "residuals": {k: v.clone() for k, v in self._residual.items()}}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if set(d) != {"enabled", "residuals"}:
            raise ValueError(f"ErrorFeedback.load_state_dict: expected keys enabled, residuals; got {sorted(d)}")
        for k, v in d["residuals"].items():
            if not isinstance(v, torch.Tensor) or v.dtype != torch.float32 or v.dim() != 1:
                raise ValueError(f"ErrorFeedback.load_state_dict: residual {k!r} must be a 1-D float32 tensor")
        self.enabled = bool(d["enabled"])
        self._residual = {k: v.clone() for k, v in d["residuals"].items()}
