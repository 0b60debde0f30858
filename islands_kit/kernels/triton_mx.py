"""Triton kernel: MXFP8 quantise-dequantise (E4M3 elements, one E8M0 scale per block), equal to
``reference.mx_qdq_reference`` bit for bit.

Import this module only after deciding to use Triton (``dispatch.use_triton``): with ``TRITON_INTERPRET=1`` the kernels
are defined for the CPU interpreter, which is decided when ``@triton.jit`` runs.

The rounding avoids FP8 conversion instructions (absent before sm_89 and in the interpreter): the exponent of a float32
is read from its bits, the E4M3 spacing at that exponent is built as a power of two, and the value is rounded to a
multiple of it, nearest-even. Every step is exact in float32 arithmetic, so the result matches torch's ``float8_e4m3fn``
cast.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .dispatch import interpreting
from .reference import E4M3_EMAX, E4M3_MAX, E8M0_MAX, E8M0_MIN

INTERPRETED = interpreting()  # whether the kernels below are defined for Triton's CPU interpreter


@triton.jit
def exponent_of(a):
    """floor(log2(a)) of a float32 a > 0 from its exponent bits (-127 for zero and subnormals)."""
    return ((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def pow2(k):
    """2^k as float32 for an int32 k in [-126, 127], built from bits (exact, unlike exp2 on some hardware)."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def round_half_even(t):
    """Round to the nearest integer, ties to even (libdevice.rint is unavailable in the interpreter). Exact in fp32."""
    f = tl.floor(t)
    d = t - f  # exact
    odd = (f - 2.0 * tl.floor(f * 0.5)) == 1.0
    up = (d > 0.5) | ((d == 0.5) & odd)
    return tl.where(up, f + 1.0, f)


@triton.jit
def round_to_e4m3(y):
    """Round float32 y (already |y| <= 448) to the nearest FP8-E4M3 value, ties to even, returned as float32.

    E4M3 has 3 mantissa bits and minimum normal exponent -6, so the spacing at |y| is 2^(max(floor(log2|y|), -6) - 3)
    (subnormals share the spacing 2^-9 of the lowest binade).
    """
    a = tl.abs(y)
    e = tl.maximum(exponent_of(a), -6)
    ulp_exp = e - 3
    r = round_half_even(a * pow2(-ulp_exp)) * pow2(ulp_exp)
    return tl.where(y < 0, -r, r)


@triton.jit
def _mx_qdq_kernel(
    x_ptr, out_ptr, R, K,
    BLOCK: tl.constexpr, BLOCK_P2: tl.constexpr, ROWS: tl.constexpr,
    EMAX: tl.constexpr, QMAX: tl.constexpr, SMIN: tl.constexpr, SMAX: tl.constexpr,
):
    """One program: ROWS rows x one MX block (BLOCK columns, padded to the power of two BLOCK_P2) of a (R, K) matrix."""
    pid_r = tl.program_id(0)
    pid_b = tl.program_id(1)
    rows = pid_r * ROWS + tl.arange(0, ROWS)  # (ROWS,)
    j = tl.arange(0, BLOCK_P2)  # (BLOCK_P2,)
    cols = pid_b * BLOCK + j
    mask = (rows[:, None] < R) & (cols[None, :] < K) & (j[None, :] < BLOCK)  # (ROWS, BLOCK_P2)
    offs = rows[:, None].to(tl.int64) * K + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)  # (ROWS,)
    s = exponent_of(amax) - EMAX
    s = tl.minimum(tl.maximum(s, SMIN), SMAX)  # E8M0 scale exponent per row of this block
    y = x * pow2(-s)[:, None]
    y = tl.minimum(tl.maximum(y, -QMAX), QMAX)  # saturate, as the reference does
    q = round_to_e4m3(y) * pow2(s)[:, None]
    tl.store(out_ptr + offs, q.to(out_ptr.dtype.element_ty), mask=mask)


def mx_qdq_triton(x: torch.Tensor, block: int = 32, dim: int = -1) -> torch.Tensor:
    """Triton twin of ``reference.mx_qdq_reference`` (same arguments, same result)."""
    if block < 1:
        raise ValueError(f"mx_qdq: block must be >= 1, got {block}")
    xm = x.movedim(dim, -1).contiguous()  # (..., K)
    k = xm.shape[-1]
    x2 = xm.reshape(-1, k)  # (R, K)
    out = torch.empty_like(x2)
    r = x2.shape[0]
    if x2.numel() > 0:
        rows = 16
        grid = (triton.cdiv(r, rows), triton.cdiv(k, block))
        _mx_qdq_kernel[grid](
            x2, out, r, k,
            BLOCK=block, BLOCK_P2=triton.next_power_of_2(block), ROWS=rows,
            EMAX=E4M3_EMAX, QMAX=E4M3_MAX, SMIN=E8M0_MIN, SMAX=E8M0_MAX,
        )
    return out.reshape(xm.shape).movedim(-1, dim).contiguous()
