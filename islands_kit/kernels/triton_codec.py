"""Triton kernels: the fused fast path of the wire codecs' per-block quantise + rounding + error feedback, and the
matching dequantise.

The definition of the codecs is the torch code in ``comm/codecs/``; these kernels are an optional fast path
*behind* it (the codec calls them when the kernel backend selects Triton) and must equal it bit for bit. This module
takes tensors and a codec's grid numbers and returns tensors; it knows nothing of codecs, payloads or the wire.

One pass over memory: each program reads R codec blocks of x, the old residual and (optionally) the noise, computes
the blocks' absmax scales, rounds onto the codec grid, and writes the scales, the *packed* codes, the decoded values and
the new residual ``x + residual_old - decoded``. Arithmetic is step for step that of the torch codec, so with the same
uniforms the outputs are bit-identical:

- IEEE divisions use ``tl.math.div_rn`` (Triton's plain ``/`` may be approximate on GPUs);
- launches pass ``enable_fp_fusion=False`` so ``x_eff - level * scale`` is not contracted into an FMA;
- minifloat spacing comes from exponent bits and is applied as an exact power of two, as in the torch codec.

Tiles are 3-D ``(R blocks, C, PER)`` with ``C * PER`` = the block length padded to a power of two and ``PER`` codes per
byte, so packing is a shift and a sum over the last axis. Blocks must therefore start on a byte boundary
(``block_size % PER == 0``); the codec takes its torch path for other block sizes.

Noise: ``NOISE`` 0 = round to nearest even, 1 = read the uniforms from memory (the codec draws them with torch, so
both paths round with the very same numbers).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .dispatch import interpreting
from .triton_mx import exponent_of, pow2, round_half_even

INTERPRETED = interpreting()  # whether the kernels below are defined for Triton's CPU interpreter

_TILE_ELEMS = 2048  # elements per program (R blocks of the padded block length)


@triton.jit
def _quantize_ef_kernel(
    x_ptr, r_ptr, u_ptr, scale_ptr, code_ptr, dec_ptr, rout_ptr,
    n, nb,
    B: tl.constexpr, R: tl.constexpr, C: tl.constexpr, PER: tl.constexpr, BITS: tl.constexpr,
    FLOAT: tl.constexpr, QMAX: tl.constexpr, OFFSET: tl.constexpr, EMIN: tl.constexpr, MBITS: tl.constexpr,
    HAS_RES: tl.constexpr, NOISE: tl.constexpr,
):
    pid = tl.program_id(0)
    blk = pid * R + tl.arange(0, R)  # (R,) block ids
    c = tl.arange(0, C)
    p = tl.arange(0, PER)
    j = c[:, None] * PER + p[None, :]  # (C, PER) position inside a block
    idx = blk[:, None, None].to(tl.int64) * B + j[None, :, :]  # (R, C, PER) flat element index
    m = (blk[:, None, None] < nb) & (j[None, :, :] < B) & (idx < n)
    x = tl.load(x_ptr + idx, mask=m, other=0.0).to(tl.float32)
    if HAS_RES:
        x = x + tl.load(r_ptr + idx, mask=m, other=0.0)  # x_eff = x + residual_old
    amax = tl.max(tl.max(tl.abs(x), axis=2), axis=1)  # (R,)
    scale = tl.math.div_rn(amax, QMAX)
    tl.store(scale_ptr + blk, scale, mask=blk < nb)
    den = tl.where(scale > 0, scale, 1.0)[:, None, None]
    v = tl.math.div_rn(x, den)
    v = tl.minimum(tl.maximum(v, -QMAX), QMAX)
    if NOISE == 1:
        u = tl.load(u_ptr + idx, mask=m, other=0.0)
    else:
        u = tl.zeros_like(x)  # unused: round to nearest
    if FLOAT:
        a = tl.abs(v)
        eb = tl.maximum(exponent_of(a), EMIN)  # binade (subnormals share the lowest)
        step_exp = eb - MBITS
        t = a * pow2(-step_exp)  # exact
        if NOISE == 0:
            k = round_half_even(t)
        else:
            lo = tl.floor(t)
            k = lo + (u < (t - lo)).to(tl.float32)
        qa = k * pow2(step_exp)
        neg = v.to(tl.int32, bitcast=True) < 0  # sign bit, also of -0.0
        level = tl.where(neg, -qa, qa)
        # OCP bit pattern: ((binade - emin) << mbits) + k covers subnormals and normals alike; sign on top.
        code = ((eb - EMIN) << MBITS) + k.to(tl.int32) + tl.where(neg, 1 << (BITS - 1), 0)
    else:
        w = v - OFFSET
        if NOISE == 0:
            jj = round_half_even(w)
        else:
            lo = tl.floor(w)
            jj = lo + (u < (w - lo)).to(tl.float32)
        kf = tl.minimum(tl.maximum(jj + (OFFSET + QMAX), 0.0), 2 * QMAX)
        level = kf - QMAX
        code = kf.to(tl.int32)
    dec = level * scale[:, None, None]
    tl.store(dec_ptr + idx, dec, mask=m)
    tl.store(rout_ptr + idx, x - dec, mask=m)
    code = tl.where(m, code, 0)  # pad bits are zero
    packed = tl.sum(code << (p * BITS)[None, None, :], axis=2)  # (R, C) bytes
    byte = blk[:, None].to(tl.int64) * (B // PER) + c[None, :]
    bm = (blk[:, None] < nb) & (c[None, :] * PER < B) & (blk[:, None].to(tl.int64) * B + c[None, :] * PER < n)
    tl.store(code_ptr + byte, packed.to(tl.uint8), mask=bm)


@triton.jit
def _dequantize_kernel(
    scale_ptr, code_ptr, dec_ptr, n, nb,
    B: tl.constexpr, R: tl.constexpr, C: tl.constexpr, PER: tl.constexpr, BITS: tl.constexpr,
    FLOAT: tl.constexpr, QMAX: tl.constexpr, EMIN: tl.constexpr, MBITS: tl.constexpr,
):
    pid = tl.program_id(0)
    blk = pid * R + tl.arange(0, R)
    c = tl.arange(0, C)
    p = tl.arange(0, PER)
    byte = blk[:, None].to(tl.int64) * (B // PER) + c[None, :]  # (R, C)
    bm = (blk[:, None] < nb) & (c[None, :] * PER < B) & (blk[:, None].to(tl.int64) * B + c[None, :] * PER < n)
    packed = tl.load(code_ptr + byte, mask=bm, other=0).to(tl.int32)
    code = (packed[:, :, None] >> (p * BITS)[None, None, :]) & ((1 << BITS) - 1)  # (R, C, PER)
    j = c[:, None] * PER + p[None, :]
    idx = blk[:, None, None].to(tl.int64) * B + j[None, :, :]
    m = (blk[:, None, None] < nb) & (j[None, :, :] < B) & (idx < n)
    scale = tl.load(scale_ptr + blk, mask=blk < nb, other=0.0)
    if FLOAT:
        mag = code & ((1 << (BITS - 1)) - 1)
        e = mag >> MBITS
        mant = mag & ((1 << MBITS) - 1)
        k = tl.where(e == 0, mant, mant + (1 << MBITS)).to(tl.float32)
        eb = tl.maximum(e - 1, 0) + EMIN  # binade; e == 0 (subnormal) shares emin
        qa = k * pow2(eb - MBITS)
        level = tl.where((code >> (BITS - 1)) != 0, -qa, qa)
    else:
        level = code.to(tl.float32) - QMAX
    tl.store(dec_ptr + idx, level * scale[:, None, None], mask=m)


def _layout(bits: int, block_size: int) -> tuple[int, int, int]:
    """(R, C, PER): blocks per program, columns, codes per byte."""
    per = 8 // bits
    if block_size % per:
        raise ValueError(f"triton codec: block_size {block_size} must be a multiple of {per} ({bits}-bit codes, "
                         "blocks start on a byte boundary)")
    bp2 = max(triton.next_power_of_2(block_size), per)
    r = max(1, _TILE_ELEMS // bp2)
    return r, bp2 // per, per


def quantize_ef_triton(
    x: torch.Tensor, residual: torch.Tensor | None, noise: torch.Tensor | None,
    *, bits: int, qmax: float, minifloat: bool, emin: int, mbits: int, block_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantise x_eff = x + residual (flattened; residual None = zero) in blocks of ``block_size``.

    ``noise``: None = round to nearest even, else n uniforms in [0, 1) (stochastic rounding: up iff u < frac).
    Returns (scales (nb,) float32, packed codes (ceil(n * bits / 8),) uint8, decoded (n,) float32,
    new residual (n,) float32 = x_eff - decoded).
    """
    xf = x.detach().reshape(-1).contiguous()  # (n,) any float dtype; converted to fp32 on load
    n = xf.numel()
    nb = -(-n // block_size)
    dev = xf.device
    r, c, per = _layout(bits, block_size)
    scales = torch.empty(nb, dtype=torch.float32, device=dev)
    codes = torch.empty(-(-n // per), dtype=torch.uint8, device=dev)
    decoded = torch.empty(n, dtype=torch.float32, device=dev)
    res_new = torch.empty(n, dtype=torch.float32, device=dev)
    res = residual.reshape(-1).to(torch.float32).contiguous() if residual is not None else decoded  # dummy pointer
    u = noise.reshape(-1).to(torch.float32).contiguous() if noise is not None else decoded  # dummy pointer
    if n > 0:
        _quantize_ef_kernel[(triton.cdiv(nb, r),)](
            xf, res, u, scales, codes, decoded, res_new, n, nb,
            B=block_size, R=r, C=c, PER=per, OFFSET=qmax - int(qmax), HAS_RES=residual is not None,
            NOISE=int(noise is not None), enable_fp_fusion=False,
            FLOAT=minifloat, QMAX=qmax, EMIN=emin, MBITS=mbits, BITS=bits,
        )
    return scales, codes, decoded, res_new


def dequantize_triton(scales: torch.Tensor, codes: torch.Tensor, numel: int, *, bits: int, qmax: float,
                      minifloat: bool, emin: int, mbits: int, block_size: int) -> torch.Tensor:
    """Decode packed codes (ceil(numel * bits / 8),) and per-block scales (nb,) to (numel,) float32: level * scale."""
    nb = -(-numel // block_size)
    r, c, per = _layout(bits, block_size)
    out = torch.empty(numel, dtype=torch.float32, device=codes.device)
    if numel > 0:
        _dequantize_kernel[(triton.cdiv(nb, r),)](
            scales.contiguous(), codes.contiguous(), out, numel, nb,
            B=block_size, R=r, C=c, PER=per, enable_fp_fusion=False,
            FLOAT=minifloat, QMAX=qmax, EMIN=emin, MBITS=mbits, BITS=bits,
        )
    return out
