"""The ``Codec`` interface (encode, the error-feedback step, decode, format check) and the two element codecs,
fp32 and bf16."""
from __future__ import annotations

import torch

from islands_kit.comm.codecs.grids import BF16_MAX
from islands_kit.comm.codecs.payload import NonFiniteError, Payload
from islands_kit.config import ConfigError
from islands_kit.config.codec_registry import CodecSpec


class Codec:
    """Encode a float tensor to a :class:`Payload` and back; ``spec`` (a registry row) names the codec and its grid."""

    def __init__(self, spec: CodecSpec, block_size: int = 128) -> None:
        if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
            raise ConfigError(f"sync.codec_block_size: must be an integer >= 1 (got {block_size!r})")
        self.spec, self.name, self.block_size = spec, spec.name, block_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, block_size={self.block_size})"

    def nbytes(self, numel: int) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def encode(self, x: torch.Tensor, *, stochastic: bool = False, generator: torch.Generator | None = None,
               noise: torch.Tensor | None = None) -> Payload:
        """Encode ``x`` (any shape, floating; flattened row-major). ``stochastic`` rounds with uniforms from ``noise``
        (same numel, values in [0, 1)) or drawn from ``generator``; the same seed gives the same bytes."""
        if not torch.is_floating_point(x):
            raise ValueError(f"{self.name}.encode: x must be a floating tensor, got {x.dtype}")
        xf = x.detach().reshape(-1).to(torch.float32).contiguous()  # (n,)
        u = self._noise(xf, stochastic, generator, noise)
        return self._payload(xf.numel(), self._encode(xf, u))

    def encode_ef(self, x: torch.Tensor, residual: torch.Tensor | None, *, stochastic: bool = False,
                  generator: torch.Generator | None = None,
                  noise: torch.Tensor | None = None) -> tuple[Payload, torch.Tensor, torch.Tensor]:
        """One error-feedback step: encode ``x_eff = x + residual`` (residual None = zero; flat float32).

        Returns (payload, decoded (n,) float32 = what the receiver reconstructs, new residual (n,) = x_eff - decoded).
        The same as ``encode`` then ``decode``; block codecs may run it as one fused kernel (bit-identical)."""
        x_eff = x.detach().reshape(-1).to(torch.float32)  # (n,)
        if residual is not None:
            x_eff = x_eff + residual.to(x_eff.device)
        payload = self.encode(x_eff, stochastic=stochastic, generator=generator, noise=noise)
        decoded = self.decode(payload)
        return payload, decoded, x_eff - decoded

    def _payload(self, n: int, data: torch.Tensor) -> Payload:
        assert data.numel() == self.nbytes(n), "codec byte formula and layout disagree"
        return Payload(self.name, n, self.block_size, data)

    def decode(self, p: Payload) -> torch.Tensor:
        """Decode to a 1-D float32 tensor of ``p.numel`` values (deterministic)."""
        if p.codec != self.name or p.block_size != self.block_size:
            raise ValueError(f"{self!r}.decode: payload was encoded by codec {p.codec!r} with block_size {p.block_size}")
        if p.nbytes != self.nbytes(p.numel):
            raise ValueError(f"{self.name}.decode: payload has {p.nbytes} bytes, expected {self.nbytes(p.numel)} for numel={p.numel}")
        data = p.data if p.data.storage_offset() % 4 == 0 else p.data.clone()  # reinterpreting as fp32 needs alignment
        return self._decode(data, p.numel)

    def check(self, p: Payload) -> str | None:
        """The first way ``p``'s bytes, of the right length, break this codec's format (a code off the grid, a top-k
        index outside its block or out of order); None when every byte decodes to a value of the format. The wire
        (``comm.peer``) calls it on a peer's payload before anything indexes with it. Values themselves are not
        judged here: fp32/bf16 values and block scales may be non-finite (the ``nan`` attack), which the defences
        and the divergence check handle; but a *finite* block scale that overflows once decoded is a format error
        (``grids.scale_overflow``), refused by every scaled codec."""
        return None

    def read_values(self, p: Payload) -> torch.Tensor:
        """What ``decode`` returns, for a reader that only reads it (an average): a codec whose bytes are the values
        (fp32) hands them over without a copy, so the result must not be written to."""
        return self.decode(p)

    def _noise(self, xf: torch.Tensor, stochastic: bool, generator: torch.Generator | None,
               noise: torch.Tensor | None) -> torch.Tensor | None:
        if not stochastic or self.spec.kind == "fp32":
            return None
        if noise is not None:
            if generator is not None:
                raise ValueError(f"{self.name}.encode: pass either noise or generator, not both")
            if noise.numel() != xf.numel():
                raise ValueError(f"{self.name}.encode: noise must have numel {xf.numel()} like x, got {noise.numel()}")
            return noise.detach().reshape(-1).to(device=xf.device, dtype=torch.float32)
        dev = generator.device if generator is not None else xf.device
        return torch.rand(xf.numel(), generator=generator, device=dev, dtype=torch.float32).to(xf.device)

    def _encode(self, xf: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _decode(self, data: torch.Tensor, n: int) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


class Fp32Codec(Codec):
    """Raw float32: ``nbytes = 4 n``. Lossless (NaN/inf pass through); ``stochastic`` is ignored."""

    def nbytes(self, numel: int) -> int:
        return 4 * numel

    def _encode(self, xf: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        return xf.clone().view(torch.uint8)

    def _decode(self, data: torch.Tensor, n: int) -> torch.Tensor:
        return data.view(torch.float32).clone()

    def read_values(self, p: Payload) -> torch.Tensor:
        """The payload's float32 values read in place, without a copy (the bytes are checked as ``decode`` checks
        them; unaligned storage is copied)."""
        if p.codec != self.name or p.block_size != self.block_size or p.nbytes != self.nbytes(p.numel) \
                or p.data.storage_offset() % 4:
            return self.decode(p)
        return p.data.view(torch.float32)

    def wrap(self, x: torch.Tensor) -> Payload:
        """The payload of ``x`` (1-D contiguous float32) over x's own storage, without a copy: the bytes of
        ``encode(x)``, for a tensor the caller leaves unchanged while the payload is in use."""
        if x.dtype != torch.float32 or x.dim() != 1 or not x.is_contiguous():
            raise ValueError(f"fp32.wrap: x must be a 1-D contiguous float32 tensor, got {x.dtype} of shape {tuple(x.shape)}")
        return self._payload(x.numel(), x.detach().view(torch.uint8))


class Bf16Codec(Codec):
    """bfloat16: ``nbytes = 2 n``. Round-to-nearest equals torch's cast; stochastic rounding adds the uniform to the
    16 dropped bits of the float32 pattern: round the magnitude up iff ``floor(u * 2^16) < low16``."""

    def nbytes(self, numel: int) -> int:
        return 2 * numel

    def _encode(self, xf: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        if not bool(torch.isfinite(xf).all()):
            raise NonFiniteError("bf16.encode: payload contains non-finite values")
        if u is None:
            y = xf.to(torch.bfloat16)
        else:
            bits = xf.view(torch.int32)
            up = (u * 65536.0).floor().to(torch.int32) < (bits & 0xFFFF)  # P(up) = low16 / 2^16 = frac
            hi = (bits & -65536) + (up.to(torch.int32) << 16)  # carry into the exponent is the right next value
            y = (hi >> 16).to(torch.int16).view(torch.bfloat16)
        y = torch.where(torch.isinf(y), torch.copysign(torch.full_like(y, BF16_MAX), y), y)  # saturate
        return y.view(torch.uint8)

    def _decode(self, data: torch.Tensor, n: int) -> torch.Tensor:
        return data.view(torch.bfloat16).to(torch.float32)
