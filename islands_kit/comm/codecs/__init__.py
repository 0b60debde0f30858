"""Wire codecs: pure encode/decode of a float tensor to the exact bytes that cross the link, with error feedback.

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
``fp4_e3m0``   ``4 nb + ceil(n / 2)``                      E3M0 (Streaming DiLoCo): +-{0, 2^-2, 2^-1, .. 2^4}
``int2``       ``4 nb + ceil(n / 4)``                      levels {-1.5, -0.5, 0.5, 1.5} (code k = q + 1.5)
=============  ==========================================  ==============================================

Block codecs (all but fp32/bf16) lay out ``[nb float32 scales][packed codes]``: scales first so they sit 4-byte aligned.

* **Scale** of a block: ``scale = absmax / qmax`` in IEEE float32 (no rounding to a power of two), stored as float32;
  qmax = 127 (int8), 448 (fp8_e4m3), 7 (int4), 6 (fp4_e2m1), 16 (fp4_e3m0), 1.5 (int2). An all-zero block has scale 0 and decodes
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
  float grids: ``a = |v|``, ``step = 2^(max(floor(log2 a), emin) - mbits)`` (E4M3: emin -6, mbits 3; E2M1: 0, 1;
  E3M0: -2, 0 — with no mantissa bit a tie between two binades goes to the upper one, rint's even integer),
  ``r = a / step``, ``rint(r)`` or ``floor(r) + (u < r - floor(r))``, times step, sign of v;
  bf16: RTN = torch's cast; SR adds 1 to the bf16 magnitude iff ``floor(u * 2^16) < (fp32 bits & 0xFFFF)``.
* **Packing**: sub-byte codes are packed across the whole flattened tensor (not per block): element ``i`` goes into
  byte ``i // per_byte`` at bit offset ``bits * (i % per_byte)`` (first element in the low bits); pad bits are 0.

The codec names, wire ids and grids come from the one registry, ``islands_kit.config.codec_registry.CODEC_SPECS``.

**Fast path.** The torch code of this package *is* the definition. For the block codecs, when the kernel backend selects Triton
(``model.kernels`` / ``$ISLANDS_KIT_KERNELS`` / auto: a CUDA GPU, or ``TRITON_INTERPRET=1``) and the tensors are on a
device it can use, encode, decode and the error-feedback step run as one fused kernel
(``islands_kit.kernels.codec_quantize_ef``) that gives the same bytes, values and residuals bit for bit (tested).
Blocks must start on a byte boundary for it (``block_size`` a multiple of ``8 // bits``); other sizes take the torch
path. The uniforms for stochastic rounding are always drawn here, with torch, so both paths use the same numbers.

Level choices: int8/int4 drop the most negative two's-complement code (-128 / -8) so the grid is symmetric and the
block absmax maps to +-qmax; int2 uses the four *mid-rise* levels {-1.5, -0.5, 0.5, 1.5}·scale rather than the ternary
{-1, 0, 1}: two bits buy four codes and a uniform 4-level grid has a step of 2/3·absmax instead of absmax (lower SR
variance, same unbiasedness). It cannot represent 0 exactly, which error feedback (or SR in expectation) makes up for.
fp4_e2m1 codes: bit 3 = sign, bits 0..2 = index into (0, .5, 1, 1.5, 2, 3, 4, 6) (exponent bits 2..1, mantissa bit 0);
fp4_e3m0 codes: bit 3 = sign, bits 0..2 = the exponent field, index into (0, .25, .5, 1, 2, 4, 8, 16).

Non-finite input: ``fp32`` passes it through unchanged; every other codec raises ``ValueError("... payload contains
non-finite values")`` — a :class:`NonFiniteError`, a ``ValueError`` the training loop reads as divergence (a NaN
would otherwise poison a whole block's scale).
bf16 never turns finite input into inf: a result that would overflow saturates to +-BF16_MAX (3.3895e38).

:class:`ErrorFeedback` keeps per-key residuals (Seide et al. 2014 "1-bit SGD"; Karimireddy et al. 2019 "EF-SGD").
:func:`encode_bytes` / :func:`decode_bytes` give a self-describing, checksummed serialisation for checkpoints and the
torch.distributed wire.
"""
from __future__ import annotations

from islands_kit.comm.codecs.base import Bf16Codec, Codec, Fp32Codec
from islands_kit.comm.codecs.block import BlockCodec, Fp4Codec, Fp8E4M3Codec, UniformCodec, minifloat_magnitudes
from islands_kit.comm.codecs.factory import fp32_codec, get_codec
from islands_kit.comm.codecs.feedback import ErrorFeedback
from islands_kit.comm.codecs.grids import BF16_MAX, FP4_E2M1_GRID, FP4_E3M0_GRID
from islands_kit.comm.codecs.payload import NonFiniteError, Payload
from islands_kit.comm.codecs.topk import TopKCodec
from islands_kit.comm.codecs.wire import HEADER_BYTES, decode_bytes, encode_bytes, read_header

__all__ = [
    "BF16_MAX", "FP4_E2M1_GRID", "FP4_E3M0_GRID", "HEADER_BYTES", "Bf16Codec", "BlockCodec", "Codec", "ErrorFeedback",
    "Fp32Codec", "Fp4Codec", "Fp8E4M3Codec", "NonFiniteError", "Payload", "TopKCodec", "UniformCodec", "decode_bytes",
    "encode_bytes", "fp32_codec", "get_codec", "minifloat_magnitudes", "read_header",
]
