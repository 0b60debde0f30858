"""Wire codecs: pure encode/decode of a float tensor to the exact bytes that cross the link, with error feedback.

(Over 400 lines on purpose: the wire-format specification below and the code that implements it are meant to be read
side by side; a quarter of the file is that specification.)

Quantisation happens here, at the transport boundary (as torchft's ``allreduce_quantized`` does under its collective):
a sync strategy hands a tensor to :meth:`Codec.encode`, the transport carries ``Payload.data`` (a 1-D ``uint8`` tensor
whose length *is* the byte count the ledger charges) and the receiver calls :meth:`Codec.decode`.

Wire format (every codec; all multi-byte words little-endian)
-------------------------------------------------------------
``n`` = numel, ``B`` = block_size, ``nb = ceil(n / B)`` blocks (the last may be partial).

=============  ==========================================  ==============================================
codec          bytes on the wire (``Codec.nbytes``)        values
=============  ==========================================  ==============================================
``fp32``       ``4 n``                                     raw float32, bit for bit
``bf16``       ``2 n``                                     bfloat16
``int8``       ``4 nb + n``                                int8 levels -127..127 (code k = q + 127)
``fp8_e4m3``   ``4 nb + n``                                OCP FP8 E4M3FN (max 448, no inf), 1 byte each
``int4``       ``4 nb + ceil(n / 2)``                      int4 levels -7..7 (code k = q + 7), 2 per byte
``fp4_e2m1``   ``4 nb + ceil(n / 2)``                      OCP MX FP4 E2M1: +-{0, .5, 1, 1.5, 2, 3, 4, 6}
``int2``       ``4 nb + ceil(n / 4)``                      levels {-1.5, -0.5, 0.5, 1.5} (code k = q + 1.5)
=============  ==========================================  ==============================================

Block codecs (all but fp32/bf16) lay out ``[nb float32 scales][packed codes]``: scales first so they sit 4-byte aligned.

* **Scale** of a block: ``scale = absmax / qmax`` in IEEE float32 (no rounding to a power of two), stored as float32;
  qmax = 127 (int8), 448 (fp8_e4m3), 7 (int4), 6 (fp4_e2m1), 1.5 (int2). An all-zero block has scale 0 and decodes
  to zeros. fp32 scales cost 32 bits per block (0.25 bit/value at B=128) but keep the block's absmax exactly on the
  top grid point; a power-of-two (E8M0) scale would cost 8 bits but waste up to 1 bit of resolution on uniform grids.
* **Quantise**: ``v = clamp(x / scale, -qmax, qmax)`` (IEEE division; scale 0 -> divide by 1), then round ``v`` onto
  the codec's grid, then ``decoded = q * scale`` (one IEEE multiply, deterministic).
* **Rounding** with a uniform ``u`` in [0, 1) per element (from ``noise``, or drawn from ``generator``): let ``lo`` be
  the grid point below (uniform grids: toward -inf; float grids and bf16: toward zero, on the magnitude) and
  ``frac = (v - lo) / step`` in [0, 1); stochastic rounding takes the upper neighbour iff ``u < frac`` — so
  ``E[q] = v`` exactly (unbiased) as long as ``v`` lies inside the grid, which the absmax scale guarantees.
  Round-to-nearest (``stochastic=False``) breaks ties to even: the even level q for int8/int4, the even j = q - 1/2
  for int2, the even significand (= even code) for fp8/fp4/bf16 (IEEE round-half-even).
  Exact recipe (what a fused kernel must reproduce bit for bit):
  uniform (int8/int4/int2): ``w = v - off`` (off = 0.5 for int2, none otherwise), ``j = rint(w)`` or
  ``floor(w) + (u < w - floor(w))``, code ``k = clamp(j + qmax + off, 0, 2 qmax)``;
  float grids: ``a = |v|``, ``step = 2^(max(floor(log2 a), emin) - mbits)`` (E4M3: emin -6, mbits 3; E2M1: 0, 1),
  ``r = a / step``, ``rint(r)`` or ``floor(r) + (u < r - floor(r))``, times step, sign of v;
  bf16: RTN = torch's cast; SR adds 1 to the bf16 magnitude iff ``floor(u * 2^16) < (fp32 bits & 0xFFFF)``.
* **Packing**: sub-byte codes are packed across the whole flattened tensor (not per block): element ``i`` goes into
  byte ``i // per_byte`` at bit offset ``bits * (i % per_byte)`` (first element in the low bits); pad bits are 0.

The codec names, wire ids and grids come from the one registry, ``islands_kit.codec_registry.CODEC_SPECS``.

**Fast path.** The torch code below *is* the definition. For the block codecs, when the kernel backend selects Triton
(``model.kernels`` / ``$ISLANDS_KIT_KERNELS`` / auto: a CUDA GPU, or ``TRITON_INTERPRET=1``) and the tensors are on a
device it can use, encode, decode and the error-feedback step run as one fused kernel
(``islands_kit.kernels.codec_quantize_ef``) that gives the same bytes, values and residuals bit for bit (tested).
Blocks must start on a byte boundary for it (``block_size`` a multiple of ``8 // bits``); other sizes take the torch
path. The uniforms for stochastic rounding are always drawn here, with torch, so both paths use the same numbers.

Level choices: int8/int4 drop the most negative two's-complement code (-128 / -8) so the grid is symmetric and the
block absmax maps to +-qmax; int2 uses the four *mid-rise* levels {-1.5, -0.5, 0.5, 1.5}·scale rather than the ternary
{-1, 0, 1}: two bits buy four codes and a uniform 4-level grid has a step of 2/3·absmax instead of absmax (lower SR
variance, same unbiasedness). It cannot represent 0 exactly, which error feedback (or SR in expectation) makes up for.
fp4_e2m1 codes: bit 3 = sign, bits 0..2 = index into (0, .5, 1, 1.5, 2, 3, 4, 6) (exponent bits 2..1, mantissa bit 0).

Non-finite input: ``fp32`` passes it through unchanged; every other codec raises ``ValueError("... payload contains
non-finite values")`` — a :class:`NonFiniteError`, a ``ValueError`` the training loop reads as divergence (a NaN
would otherwise poison a whole block's scale).
bf16 never turns finite input into inf: a result that would overflow saturates to +-BF16_MAX (3.3895e38).

:class:`ErrorFeedback` keeps per-key residuals (Seide et al. 2014 "1-bit SGD"; Karimireddy et al. 2019 "EF-SGD").
:func:`encode_bytes` / :func:`decode_bytes` give a self-describing, checksummed serialisation for checkpoints and the
torch.distributed wire.
"""
from __future__ import annotations

import math
import struct
import sys
import zlib
from dataclasses import dataclass
from typing import Any, Hashable

import torch

from islands_kit import kernels
from islands_kit.codec_registry import CODEC_SPECS, CODECS, CodecSpec
from islands_kit.config import ConfigError


class NonFiniteError(ValueError):
    """A payload holds NaN/inf that the codec cannot represent. Raised by every codec except fp32 (and the Triton
    codec); ``run.Experiment`` treats it as the model having diverged (``diverged_at_step`` in result.json)."""

if sys.byteorder != "little":  # the wire is little-endian and tensors are reinterpreted in host order
    raise ImportError("islands_kit.comm.codecs assumes a little-endian host")

# Largest finite bf16 (0x7F7F) and the E4M3FN / E2M1 grids.
BF16_MAX = float(torch.finfo(torch.bfloat16).max)
FP4_E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitude of code 0..7 (OCP MX v1.0, table 5)
_FP4_INDEX_OF_TWICE = torch.zeros(13, dtype=torch.uint8)  # code index of each grid magnitude, keyed by 2 * magnitude
_FP4_INDEX_OF_TWICE[[int(2 * g) for g in FP4_E2M1_GRID]] = torch.arange(8, dtype=torch.uint8)


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


# ---------------------------------------------------------------------------------------------------------------------
# Rounding onto grids (vectorised; u is the uniform noise or None for round-to-nearest-even)
# ---------------------------------------------------------------------------------------------------------------------


def _round_uniform(v: torch.Tensor, offset: float, u: torch.Tensor | None) -> torch.Tensor:
    """Round v onto the grid {j + offset : j integer} (offset 0 or 0.5). Returns the integer j as float32."""
    w = v - offset if offset else v  # exact when offset == 0
    if u is None:
        return torch.round(w)  # half to even
    lo = torch.floor(w)
    return lo + (u < (w - lo)).to(w.dtype)  # w - lo is exact (Sterbenz), so P(up) = frac


def _pow2(k: torch.Tensor) -> torch.Tensor:
    """2^k as float32 for int32 k in [-126, 127], built from the exponent bits (exact on every backend)."""
    return ((k.to(torch.int32) + 127) << 23).view(torch.float32)


def _round_minifloat(v: torch.Tensor, emin: int, mbits: int, u: torch.Tensor | None) -> torch.Tensor:
    """Round v onto a float grid with ``mbits`` mantissa bits and minimum normal exponent ``emin`` (subnormals below).

    The spacing at |v| is 2^(max(floor(log2|v|), emin) - mbits); dividing by it is exact (a power of two), so the
    integer part and fraction are exact. E4M3: emin=-6, mbits=3. E2M1: emin=0, mbits=1. Caller clamps |v| <= max.
    """
    a = v.abs()
    _, e = torch.frexp(a)  # a = m * 2^e, m in [0.5, 1)  =>  floor(log2 a) = e - 1  (e = 0 for a = 0)
    step = _pow2((e - 1).clamp_min(emin) - mbits)
    r = a / step  # exact
    if u is None:
        k = torch.round(r)  # half to even on the significand = IEEE round-to-nearest-even
    else:
        lo = torch.floor(r)
        k = lo + (u < (r - lo)).to(r.dtype)
    return torch.copysign(k * step, v)


# ---------------------------------------------------------------------------------------------------------------------
# Bit packing
# ---------------------------------------------------------------------------------------------------------------------


def _pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack uint8 codes (< 2^bits) tightly: element i -> byte i // per, bit offset bits * (i % per)."""
    if bits == 8:
        return codes
    per = 8 // bits
    n = codes.numel()
    padded = torch.zeros(-(-n // per) * per, dtype=torch.uint8, device=codes.device)
    padded[:n] = codes
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=codes.device)  # (per,)
    return (padded.view(-1, per) << shifts).sum(dim=1, dtype=torch.uint8)  # (n_bytes,); bit fields do not overlap


def _unpack(data: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`_pack`: the first n codes as uint8."""
    if bits == 8:
        return data[:n]
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=data.device)  # (per,)
    return ((data.view(-1, 1) >> shifts) & ((1 << bits) - 1)).reshape(-1)[:n]  # (n_bytes, per) -> (n,)


# ---------------------------------------------------------------------------------------------------------------------
# Codecs
# ---------------------------------------------------------------------------------------------------------------------


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
        return torch.cat([scale.reshape(-1).view(torch.uint8), _pack(codes, self.bits)])

    def _decode(self, data: torch.Tensor, n: int) -> torch.Tensor:
        B = self.block_size
        nb = -(-n // B)
        scale = data[: 4 * nb].view(torch.float32)  # (nb,)
        if self._fused(data):
            return kernels.codec_dequantize(scale, data[4 * nb:], n, **self._grid)
        q = self._levels(_unpack(data[4 * nb:], self.bits, n))  # (n,) float32 grid values
        qb = torch.zeros(nb * B, dtype=torch.float32, device=data.device)
        qb[:n] = q
        return (qb.view(nb, B) * scale.view(nb, 1)).reshape(-1)[:n]  # (nb, B) -> (n,)

    def _quantise(self, v: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _levels(self, codes: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


class UniformCodec(BlockCodec):
    """Symmetric uniform grid with ``2 * qmax + 1`` levels ``q = k - qmax`` (int8: 255, int4: 15, int2: 4 levels)."""

    def _quantise(self, v: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        offset = self.qmax - math.floor(self.qmax)  # 0 for int8/int4, 0.5 for int2 (grid on half-integers)
        j = _round_uniform(v, offset, u)
        k = (j + (offset + self.qmax)).clamp(0, 2 * self.qmax)  # code index; offset + qmax is an integer
        return k.to(torch.uint8)

    def _levels(self, codes: torch.Tensor) -> torch.Tensor:
        return codes.to(torch.float32) - self.qmax


class Fp8E4M3Codec(BlockCodec):
    """OCP FP8 E4M3FN values (emulated rounding; torch.float8_e4m3fn only provides the final bit pattern)."""

    def _quantise(self, v: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        q = _round_minifloat(v, emin=-6, mbits=3, u=u)  # on the E4M3 grid, |q| <= 448: the cast is exact
        return q.to(torch.float8_e4m3fn).view(torch.uint8)

    def _levels(self, codes: torch.Tensor) -> torch.Tensor:
        return codes.contiguous().view(torch.float8_e4m3fn).to(torch.float32)


class Fp4E2M1Codec(BlockCodec):
    """OCP MX FP4 E2M1 values: code = sign << 3 | index into FP4_E2M1_GRID."""

    def _quantise(self, v: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        q = _round_minifloat(v, emin=0, mbits=1, u=u)
        idx = _FP4_INDEX_OF_TWICE.to(v.device)[(2 * q.abs()).long()]  # 2|q| is an integer in {0,1,2,3,4,6,8,12}
        return idx + torch.signbit(q).to(torch.uint8) * 8

    def _levels(self, codes: torch.Tensor) -> torch.Tensor:
        grid = torch.tensor(FP4_E2M1_GRID, dtype=torch.float32, device=codes.device)
        lut = torch.cat([grid, -grid])  # (16,) code -> value; code 8 is -0.0
        return lut[codes.long()]


class TopKCodec(Codec):
    """Sparsified values (top-k per block, as in SparseLoCo, Templar 2025): in every block of B values only the
    ``k = ceil(len / every)`` largest magnitudes are sent, as (in-block index, quantised value) pairs; the rest decode
    to zero and — with error feedback — wait in the residual until they grow large enough to be picked.

    Layout: ``[nb float32 scales][K uint8 in-block indices, ascending per block][K packed codes]`` with
    ``K = Σ_blocks ceil(len_b / every)``; the kept values use the uniform grid of ``int4`` (qmax 7) or ``int2``
    (levels ±0.5, ±1.5) with the block's absmax scale and the same rounding recipe (stochastic or nearest-even).
    ``nbytes = 4 nb + K + ceil(K · bits / 8)``; block_size must be <= 256 (indices are one byte). Ties in magnitude
    are broken by the lower index (stable sort), so the same input always selects the same entries."""

    def __init__(self, spec: CodecSpec, block_size: int = 128) -> None:
        super().__init__(spec, block_size)
        if block_size > 256:
            raise ConfigError(f"sync.codec_block_size: must be <= 256 for the top-k codec {spec.name} "
                              f"(one-byte indices) (got {block_size})")
        self.every, self.bits, self.qmax = spec.every, spec.bits, spec.qmax
        # the kept values' grid and rounding: the dense uniform codec with the same bits
        self.values = UniformCodec(CODEC_SPECS[spec.values], block_size)

    def _kept(self, numel: int) -> tuple[int, int, int, int]:
        """(blocks, full blocks, k of a full block, K in all)."""
        B = self.block_size
        nb, full = -(-numel // B), numel // B
        k = -(-B // self.every)
        last = numel - full * B
        return nb, full, k, full * k + (-(-last // self.every) if last else 0)

    def nbytes(self, numel: int) -> int:
        nb, _, _, K = self._kept(numel)
        return 4 * nb + K + (-(-K * self.bits // 8))

    def _blocks(self, n: int) -> list[tuple[int, int, int]]:
        """(start, length, k) of each group of blocks with the same k: the full blocks, then a partial last one."""
        B = self.block_size
        nb, full, k, K = self._kept(n)
        out = [(0, full * B, k)] if full else []
        if nb > full:
            out.append((full * B, n - full * B, K - full * k))
        return out

    def _encode(self, xf: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        n = xf.numel()
        if not bool(torch.isfinite(xf).all()):
            raise NonFiniteError(f"{self.name}.encode: payload contains non-finite values")
        scales, idxs, vals = [], [], []
        for start, length, k in self._blocks(n):
            L = min(length, self.block_size)
            xb = xf[start:start + length].view(-1, L)  # (blocks, L)
            order = torch.sort(xb.abs(), dim=1, descending=True, stable=True).indices[:, :k]  # (blocks, k)
            idx = torch.sort(order, dim=1).values  # ascending in-block positions
            kept = torch.gather(xb, 1, idx)  # (blocks, k)
            scale = xb.abs().amax(dim=1, keepdim=True) / self.qmax  # (blocks, 1)
            scales.append(scale.reshape(-1))
            idxs.append(idx.reshape(-1).to(torch.uint8))
            vals.append((kept / torch.where(scale > 0, scale, torch.ones_like(scale))).clamp(-self.qmax, self.qmax)
                        .reshape(-1))
        if not scales:
            return torch.zeros(0, dtype=torch.uint8, device=xf.device)
        v = torch.cat(vals)  # (K,)
        codes = self.values._quantise(v, None if u is None else u[: v.numel()])
        return torch.cat([torch.cat(scales).view(torch.uint8), torch.cat(idxs), _pack(codes, self.bits)])

    def _decode(self, data: torch.Tensor, n: int) -> torch.Tensor:
        nb, _, _, K = self._kept(n)
        scale = data[: 4 * nb].view(torch.float32)  # (nb,)
        idx = data[4 * nb: 4 * nb + K].long()  # (K,)
        q = self.values._levels(_unpack(data[4 * nb + K:], self.bits, K))  # (K,)
        out = torch.zeros(n, dtype=torch.float32, device=data.device)
        off_k, b0 = 0, 0
        for start, length, k in self._blocks(n):
            L = min(length, self.block_size)
            nblk = length // L
            blk = torch.arange(nblk, device=data.device).repeat_interleave(k)  # (nblk * k,)
            pos = start + blk * L + idx[off_k: off_k + nblk * k]
            out[pos] = q[off_k: off_k + nblk * k] * scale[b0 + blk]
            off_k += nblk * k
            b0 += nblk
        return out


def _codec_class(spec: CodecSpec) -> type[Codec]:
    """The class implementing a registry row: by its value format (the two minifloats differ only in their codes)."""
    if spec.kind == "minifloat":
        return Fp8E4M3Codec if spec.bits == 8 else Fp4E2M1Codec
    return {"fp32": Fp32Codec, "bf16": Bf16Codec, "uniform": UniformCodec, "topk": TopKCodec}[spec.kind]


def fp32_codec(block_size: int = 128) -> Fp32Codec:
    """The ``fp32`` codec, typed as such (for ``Fp32Codec.wrap``)."""
    return Fp32Codec(CODEC_SPECS["fp32"], block_size)


def get_codec(name: str, block_size: int = 128) -> Codec:
    """The codec named ``name`` (one of ``codec_registry.CODECS``); unknown names raise a ConfigError naming
    ``sync.codec``."""
    if name not in CODEC_SPECS:
        raise ConfigError(f"sync.codec: unknown codec {name!r} (valid: {'|'.join(CODECS)})")
    spec = CODEC_SPECS[name]
    return _codec_class(spec)(spec, block_size)


# ---------------------------------------------------------------------------------------------------------------------
# Error feedback
# ---------------------------------------------------------------------------------------------------------------------


class ErrorFeedback:
    """Per-key residual (e.g. key = (island, fragment)); the residual of a fragment is carried into that fragment's
    next sync (error feedback, Seide et al. 2014; Karimireddy et al. 2019).

    ``compress``: ``x_eff = x + residual[key]``; send ``encode(x_eff)``; ``residual[key] = x_eff - decoded``. So the
    long-run sum of what was sent equals the sum of the inputs minus the (bounded) current residual: compression error
    does not accumulate, even with round-to-nearest. Residuals are float32 on the input's device.

    Exactness: ``decoded + residual == x_eff`` bit for bit whenever ``x_eff - decoded`` is a float32 number — always
    when decoded is 0 or within a factor 2 of x_eff (Sterbenz), which covers round-to-nearest on every codec with 0 on
    its grid and every stochastic rounding except a value smaller than one grid step rounded away from zero. There the
    residual is rounded to float32, losing at most 2^-24 of it (a 2^-24 fraction of a grid step).
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
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


# ---------------------------------------------------------------------------------------------------------------------
# Self-describing serialisation
# ---------------------------------------------------------------------------------------------------------------------

_MAGIC = b"IKCP"
_VERSION = 1
_HEADER = struct.Struct("<4sBBHQII")  # magic, version, codec id, reserved (0), numel, block_size, crc32(data)
HEADER_BYTES = _HEADER.size  # 24
_NAME_OF_ID = {s.wire_id: s.name for s in CODEC_SPECS.values()}


def encode_bytes(p: Payload) -> bytes:
    """``HEADER_BYTES`` header (magic, version, codec id, numel, block size, CRC-32 of the data) + ``p.data``."""
    body = p.data.detach().cpu().contiguous().numpy().tobytes()
    return _HEADER.pack(_MAGIC, _VERSION, CODEC_SPECS[p.codec].wire_id, 0, p.numel, p.block_size, zlib.crc32(body)) + body


def decode_bytes(b: bytes | bytearray | memoryview) -> Payload:
    """Inverse of :func:`encode_bytes`; raises ValueError on a truncated, garbled or unknown payload."""
    b = bytes(b)
    if len(b) < HEADER_BYTES:
        raise ValueError(f"decode_bytes: truncated payload: {len(b)} bytes is shorter than the {HEADER_BYTES}-byte header")
    magic, version, cid, reserved, numel, block_size, crc = _HEADER.unpack_from(b)
    if magic != _MAGIC:
        raise ValueError(f"decode_bytes: bad magic {magic!r} (expected {_MAGIC!r}): not an islands_kit payload")
    if version != _VERSION or reserved != 0:
        raise ValueError(f"decode_bytes: unsupported header version {version} / reserved field {reserved}")
    if cid not in _NAME_OF_ID:
        raise ValueError(f"decode_bytes: unknown codec id {cid} (valid: {sorted(_NAME_OF_ID)})")
    if block_size < 1:
        raise ValueError(f"decode_bytes: garbled header: block_size {block_size} must be >= 1")
    name = _NAME_OF_ID[cid]
    expected = get_codec(name, block_size).nbytes(numel)
    if len(b) - HEADER_BYTES != expected:
        raise ValueError(f"decode_bytes: {'truncated' if len(b) - HEADER_BYTES < expected else 'oversized'} payload: "
                         f"{name} numel={numel} block_size={block_size} needs {expected} data bytes, got {len(b) - HEADER_BYTES}")
    body = b[HEADER_BYTES:]
    if zlib.crc32(body) != crc:
        raise ValueError("decode_bytes: checksum mismatch: payload data is corrupted")
    data = torch.frombuffer(bytearray(body), dtype=torch.uint8) if body else torch.zeros(0, dtype=torch.uint8)
    return Payload(name, numel, block_size, data)
