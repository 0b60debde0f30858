"""Triton kernels: fused wire-codec quantise + stochastic rounding + error feedback, and the matching dequantise.

One pass over memory: each program reads R codec blocks of x, the old residual and (optionally) the noise, computes
the blocks' absmax scales, rounds onto the codec grid, and writes the scales, the *packed* codes, the decoded values and
the new residual ``x + residual_old - decoded``. Arithmetic is step for step that of ``reference.quantize_ef_reference``
(hence of ``comm.codecs``), so with the same uniforms the outputs are bit-identical:

- IEEE divisions use ``tl.math.div_rn`` (Triton's plain ``/`` may be approximate on GPUs);
- launches pass ``enable_fp_fusion=False`` so ``x_eff - level * scale`` is not contracted into an FMA;
- minifloat spacing comes from exponent bits and is applied as an exact power of two, as in the reference.

Tiles are 3-D ``(R blocks, C, PER)`` with ``C * PER`` = the block length padded to a power of two and ``PER`` codes per
byte, so packing is a shift and a sum over the last axis. When ``block_size`` is not a multiple of ``PER`` a byte would
straddle two blocks; then the kernel writes one code per byte and the host packs them (``reference.pack_codes``).

Noise: ``NOISE`` 0 = round to nearest even, 1 = read uniforms from memory (checkable bit for bit), 2 = draw them with
``tl.rand(seed, element index)`` (Philox; a different stream from torch's, so only its statistics can be tested).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .dispatch import interpreting
from .reference import CodecSpec, Quantized, pack_codes
from .triton_mx import exponent_of, pow2, round_half_even

INTERPRETED = interpreting()  # whether the kernels below are defined for Triton's CPU interpreter

_TILE_ELEMS = 2048  # elements per program (R blocks of the padded block length)


@triton.jit
def _quantize_ef_kernel(
    x_ptr, r_ptr, u_ptr, scale_ptr, code_ptr, dec_ptr, rout_ptr,
    n, nb, seed,
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
    elif NOISE == 2:
        u = tl.rand(seed, idx)
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


def _layout(spec: CodecSpec, block_size: int) -> tuple[int, int, int]:
    """(R, C, PER): blocks per program, columns, codes per byte in the kernel (PER = 1 when blocks straddle bytes)."""
    per = spec.per_byte if block_size % spec.per_byte == 0 else 1
    bp2 = max(triton.next_power_of_2(block_size), per)
    r = max(1, _TILE_ELEMS // bp2)
    return r, bp2 // per, per


def _consts(spec: CodecSpec) -> dict:
    return dict(FLOAT=spec.kind == "float", QMAX=spec.qmax, EMIN=spec.emin, MBITS=spec.mbits, BITS=spec.bits)


def quantize_ef_triton(
    x: torch.Tensor, residual: torch.Tensor | None, noise: torch.Tensor | None, seed: int | None,
    *, codec: str, spec: CodecSpec, block_size: int,
) -> Quantized:
    """Triton twin of ``reference.quantize_ef_reference``; ``seed`` (with noise None) draws the uniforms in-kernel."""
    xf = x.detach().reshape(-1).contiguous()  # (n,) any float dtype; converted to fp32 on load
    n = xf.numel()
    nb = -(-n // block_size)
    dev = xf.device
    r, c, per = _layout(spec, block_size)
    scales = torch.empty(nb, dtype=torch.float32, device=dev)
    n_bytes = -(-n // per) if per > 1 else n
    codes = torch.empty(n_bytes, dtype=torch.uint8, device=dev)
    decoded = torch.empty(n, dtype=torch.float32, device=dev)
    res_new = torch.empty(n, dtype=torch.float32, device=dev)
    res = residual.reshape(-1).to(torch.float32).contiguous() if residual is not None else decoded  # dummy pointer
    u = noise.reshape(-1).to(torch.float32).contiguous() if noise is not None else decoded  # dummy pointer
    mode = 1 if noise is not None else (2 if seed is not None else 0)
    if n > 0:
        _quantize_ef_kernel[(triton.cdiv(nb, r),)](
            xf, res, u, scales, codes, decoded, res_new, n, nb, int(seed or 0),
            B=block_size, R=r, C=c, PER=per, OFFSET=spec.offset, HAS_RES=residual is not None, NOISE=mode,
            enable_fp_fusion=False, **_consts(spec),
        )
    if per != spec.per_byte:  # blocks straddle bytes: the kernel wrote one code per byte
        codes = pack_codes(codes, spec.bits)
    return Quantized(codec, n, block_size, scales, codes, decoded, res_new)


def dequantize_triton(scales: torch.Tensor, codes: torch.Tensor, numel: int, *, spec: CodecSpec, block_size: int) -> torch.Tensor:
    """Triton twin of ``reference.dequantize_reference``."""
    nb = -(-numel // block_size)
    r, c, per = _layout(spec, block_size)
    if per != spec.per_byte:  # one code per byte in the kernel's layout
        from .reference import unpack_codes

        codes = unpack_codes(codes, spec.bits, numel)
    out = torch.empty(numel, dtype=torch.float32, device=codes.device)
    if numel > 0:
        _dequantize_kernel[(triton.cdiv(nb, r),)](
            scales.contiguous(), codes.contiguous(), out, numel, nb,
            B=block_size, R=r, C=c, PER=per, enable_fp_fusion=False, **_consts(spec),
        )
    return out
