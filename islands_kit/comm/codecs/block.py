"""Block codecs: per-block float32 absmax scales, then the packed codes of a uniform (int8/int4/int2) or minifloat
(fp8_e4m3, fp4_e2m1, fp4_e3m0) grid."""
from __future__ import annotations

import math
from typing import Any

import torch

from islands_kit import kernels
from islands_kit.comm.codecs.base import Codec
from islands_kit.comm.codecs.grids import (
    off_grid,
    pack,
    round_minifloat,
    round_uniform,
    scale_overflow,
    unpack,
)
from islands_kit.comm.codecs.payload import NonFiniteError, Payload
from islands_kit.config.codec_registry import CodecSpec


class BlockCodec(Codec):
    """Per-block absmax-scaled codes (see the module docstring for the exact format).

    ``nbytes = 4 * ceil(n / B) + ceil(n * bits / 8)`` — float32 scales plus tightly packed ``bits``-bit codes.
    """

    def __init__(self, spec: CodecSpec, block_size: int = 128) -> None:
        super().__init__(spec, block_size)
        self.bits, self.qmax = spec.bits, spec.qmax
        self._grid: dict[str, Any] = dict(  # what the fused kernel needs to know
            bits=spec.bits, qmax=spec.qmax, minifloat=spec.kind == "minifloat", emin=spec.emin, mbits=spec.mbits,
            block_size=block_size)

    def nbytes(self, numel: int) -> int:
        return 4 * (-(-numel // self.block_size)) + (-(-numel * self.bits // 8))

    def _fused(self, *tensors: torch.Tensor) -> bool:
        """Whether this call runs the Triton fast path (backend choice, device, byte-aligned blocks)."""
        return self.block_size % (8 // self.bits) == 0 and kernels.use_triton(*tensors, op=f"codec {self.name}",
                                                                              device_fallback=True)

    def encode_ef(self, x: torch.Tensor, residual: torch.Tensor | None, *, stochastic: bool = False,
                  generator: torch.Generator | None = None,
                  noise: torch.Tensor | None = None) -> tuple[Payload, torch.Tensor, torch.Tensor]:
        if not torch.is_floating_point(x):
            raise ValueError(f"{self.name}.encode: x must be a floating tensor, got {x.dtype}")
        xf = x.detach().reshape(-1)  # (n,)
        r = None if residual is None else residual.to(xf.device)
        if not self._fused(xf, *([] if r is None else [r])):
            return super().encode_ef(x, residual, stochastic=stochastic, generator=generator, noise=noise)
        u = self._noise(xf, stochastic, generator, noise)
        scales, codes, decoded, res_new = kernels.codec_quantize_ef(xf, r, u, **self._grid)
        if not bool(torch.isfinite(res_new).all()):  # NaN/inf in x_eff reach the residual (max() may drop a NaN)
            raise NonFiniteError(f"{self.name}.encode: payload contains non-finite values")
        return self._payload(xf.numel(), torch.cat([scales.view(torch.uint8), codes])), decoded, res_new

    def _encode(self, xf: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        if self._fused(xf):
            return self.encode_ef(xf, None, stochastic=u is not None, noise=u)[0].data
        n, B = xf.numel(), self.block_size
        nb = -(-n // B)
        xb = torch.zeros(nb * B, dtype=torch.float32, device=xf.device)  # zero padding leaves absmax unchanged
        xb[:n] = xf
        xb = xb.view(nb, B)  # (nb, B)
        absmax = xb.abs().amax(dim=1, keepdim=True) if n else xb.new_zeros(0, 1)  # (nb, 1)
        if not bool(torch.isfinite(absmax).all()):
            raise NonFiniteError(f"{self.name}.encode: payload contains non-finite values")
        scale = absmax / self.qmax  # (nb, 1)
        v = (xb / torch.where(scale > 0, scale, torch.ones_like(scale))).clamp(-self.qmax, self.qmax)  # (nb, B)
        v = v.reshape(-1)[:n]  # (n,)
        codes = self._quantise(v, u)  # (n,) uint8
        return torch.cat([scale.reshape(-1).view(torch.uint8), pack(codes, self.bits)])

    def _decode(self, data: torch.Tensor, n: int) -> torch.Tensor:
        B = self.block_size
        nb = -(-n // B)
        scale = data[: 4 * nb].view(torch.float32)  # (nb,)
        if self._fused(data):
            return kernels.codec_dequantize(scale, data[4 * nb:], n, **self._grid)
        q = self._levels(unpack(data[4 * nb:], self.bits, n))  # (n,) float32 grid values
        qb = torch.zeros(nb * B, dtype=torch.float32, device=data.device)
        qb[:n] = q
        return (qb.view(nb, B) * scale.view(nb, 1)).reshape(-1)[:n]  # (nb, B) -> (n,)

    def _quantise(self, v: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _levels(self, codes: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def check(self, p: Payload) -> str | None:
        nb = -(-p.numel // self.block_size)
        data = p.data if p.data.storage_offset() % 4 == 0 else p.data.clone()  # float32 views need alignment
        return (scale_overflow(data[: 4 * nb].view(torch.float32), self.qmax)
                or off_grid(self.spec, unpack(p.data[4 * nb:], self.bits, p.numel)))


class UniformCodec(BlockCodec):
    """Symmetric uniform grid with ``2 * qmax + 1`` levels ``q = k - qmax`` (int8: 255, int4: 15, int2: 4 levels)."""

    def _quantise(self, v: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        offset = self.qmax - math.floor(self.qmax)  # 0 for int8/int4, 0.5 for int2 (grid on half-integers)
        j = round_uniform(v, offset, u)
        k = (j + (offset + self.qmax)).clamp(0, 2 * self.qmax)  # code index; offset + qmax is an integer
        return k.to(torch.uint8)

    def _levels(self, codes: torch.Tensor) -> torch.Tensor:
        return codes.to(torch.float32) - self.qmax


class Fp8E4M3Codec(BlockCodec):
    """OCP FP8 E4M3FN values (emulated rounding; torch.float8_e4m3fn only provides the final bit pattern)."""

    def _quantise(self, v: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        q = round_minifloat(v, emin=-6, mbits=3, u=u)  # on the E4M3 grid, |q| <= 448: the cast is exact
        return q.to(torch.float8_e4m3fn).view(torch.uint8)

    def _levels(self, codes: torch.Tensor) -> torch.Tensor:
        return codes.contiguous().view(torch.float8_e4m3fn).to(torch.float32)


def minifloat_magnitudes(emin: int, mbits: int, bits: int) -> tuple[float, ...]:
    """Magnitude of each code ``0 .. 2^(bits-1) - 1`` of an OCP-style minifloat without inf/NaN: exponent field
    ``e = code >> mbits``, mantissa ``m``; ``e = 0`` is subnormal (``m · 2^(emin - mbits)``), else
    ``(2^mbits + m) · 2^(emin + e - 1 - mbits)``. E2M1 gives FP4_E2M1_GRID; E3M0 (emin -2) 0, 2^-2 .. 2^4."""
    out = []
    for code in range(1 << (bits - 1)):
        e, m = code >> mbits, code & ((1 << mbits) - 1)
        k = m if e == 0 else m + (1 << mbits)
        out.append(math.ldexp(k, max(e - 1, 0) + emin - mbits))
    return tuple(out)


class Fp4Codec(BlockCodec):
    """4-bit minifloats: code = sign << 3 | index of the magnitude in ``minifloat_magnitudes`` (the OCP bit pattern).
    ``fp4_e2m1`` is OCP MX FP4; ``fp4_e3m0`` is the E3M0 float of Streaming DiLoCo (powers of two only: every rounding
    is between neighbouring binades, and stochastic rounding stays unbiased because the grid contains both)."""

    def __init__(self, spec: CodecSpec, block_size: int = 128) -> None:
        super().__init__(spec, block_size)
        self._mags = torch.tensor(minifloat_magnitudes(spec.emin, spec.mbits, spec.bits), dtype=torch.float32)

    def _quantise(self, v: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        q = round_minifloat(v, emin=self.spec.emin, mbits=self.spec.mbits, u=u)  # on the grid, |q| <= qmax
        idx = torch.searchsorted(self._mags.to(v.device), q.abs()).to(torch.uint8)  # exact match: |q| is a grid value
        return idx + torch.signbit(q).to(torch.uint8) * 8

    def _levels(self, codes: torch.Tensor) -> torch.Tensor:
        grid = self._mags.to(codes.device)
        lut = torch.cat([grid, -grid])  # (16,) code -> value; code 8 is -0.0
        return lut[codes.long()]
