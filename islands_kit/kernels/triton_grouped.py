"""Triton kernels: grouped expert GEMM (MoE feed-forward) forward and backward, equal to
``reference.grouped_mm_reference`` within floating-point summation-order tolerance.

Tokens are sorted by expert, so expert e owns the contiguous rows [offs[e], offs[e+1]) of x (T, K), and
``out[rows of e] = x[rows of e] @ w[e]`` with w (E, K, N). Gradients:

- dX[rows of e] = dY[rows of e] @ w[e]^T  — the same grouped kernel, reading w through transposed strides (no copy);
- dW[e] = X[rows of e]^T @ dY[rows of e]  — a second kernel whose contraction runs over the expert's rows.

Tile scheduling needs no host synchronisation: with T and E known on the host, ``cdiv(T, BLOCK_T) + E`` row tiles bound
``sum_e cdiv(n_e, BLOCK_T)``; a device-side ``searchsorted`` maps every tile id to (expert, first row), and surplus
tiles exit at once. Empty experts get no row tile in the forward pass and a zero dW block in the backward pass.

Import this module only after ``dispatch.use_triton`` said yes (``TRITON_INTERPRET`` is read when kernels are defined).
The tile sizes are fixed (no autotune: it does not run under the interpreter); they are a reasonable starting point for
bf16 on Hopper, not tuned.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .dispatch import interpreting

INTERPRETED = interpreting()  # whether the kernels below are defined for Triton's CPU interpreter


@triton.jit
def _grouped_fwd_kernel(
    x_ptr, w_ptr, out_ptr, tile_group_ptr, tile_row0_ptr, offs_ptr,
    N, K, E,
    stride_xt, stride_xk, stride_we, stride_wk, stride_wn, stride_ot, stride_on,
    BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    """One program: BLOCK_T rows of one expert x BLOCK_N output columns; contraction over K in BLOCK_K steps."""
    tile = tl.program_id(0)
    pid_n = tl.program_id(1)
    g = tl.load(tile_group_ptr + tile)
    if g < E:  # surplus tiles (beyond the experts' real row tiles) do nothing
        row0 = tl.load(tile_row0_ptr + tile)
        row_end = tl.load(offs_ptr + g + 1)
        rows = row0 + tl.arange(0, BLOCK_T)  # (BLOCK_T,)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        ks = tl.arange(0, BLOCK_K)
        row_ok = rows < row_end
        col_ok = cols < N
        x_base = x_ptr + rows[:, None].to(tl.int64) * stride_xt  # (BLOCK_T, 1)
        w_base = w_ptr + g.to(tl.int64) * stride_we + cols[None, :] * stride_wn  # (1, BLOCK_N)
        acc = tl.zeros((BLOCK_T, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_ok = (k0 + ks) < K
            a = tl.load(x_base + (k0 + ks)[None, :] * stride_xk, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(w_base + (k0 + ks)[:, None] * stride_wk, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            if UPCAST:  # the interpreter's tl.dot mishandles 16-bit inputs; fp32 products of bf16 values are exact
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        o = out_ptr + rows[:, None].to(tl.int64) * stride_ot + cols[None, :] * stride_on
        tl.store(o, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _grouped_dw_kernel(
    x_ptr, dy_ptr, dw_ptr, offs_ptr,
    K, N,
    stride_xt, stride_xk, stride_yt, stride_yn, stride_we, stride_wk, stride_wn,
    BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    """One program: dW[e][BLOCK_K rows, BLOCK_N cols] = sum over the expert's rows of x^T dy (zero for an empty expert)."""
    e = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_n = tl.program_id(2)
    start = tl.load(offs_ptr + e)
    end = tl.load(offs_ptr + e + 1)
    kk = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)  # (BLOCK_K,)
    nn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    ts = tl.arange(0, BLOCK_T)
    k_ok = kk < K
    n_ok = nn < N
    acc = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    for t0 in range(start, end, BLOCK_T):
        rows = t0 + ts
        r_ok = rows < end
        r64 = rows.to(tl.int64)
        xt = tl.load(x_ptr + kk[:, None] * stride_xk + r64[None, :] * stride_xt,  # x^T tile: (BLOCK_K, BLOCK_T)
                     mask=k_ok[:, None] & r_ok[None, :], other=0.0)
        dy = tl.load(dy_ptr + r64[:, None] * stride_yt + nn[None, :] * stride_yn,  # (BLOCK_T, BLOCK_N)
                     mask=r_ok[:, None] & n_ok[None, :], other=0.0)
        if UPCAST:
            xt = xt.to(tl.float32)
            dy = dy.to(tl.float32)
        acc = tl.dot(xt, dy, acc, input_precision=PRECISION)
    o = dw_ptr + e.to(tl.int64) * stride_we + kk[:, None] * stride_wk + nn[None, :] * stride_wn
    tl.store(o, acc.to(dw_ptr.dtype.element_ty), mask=k_ok[:, None] & n_ok[None, :])


def _tiles(x: torch.Tensor) -> tuple[int, int, int]:
    """(BLOCK_T, BLOCK_N, BLOCK_K): small tiles for the interpreter, tensor-core sized tiles on a GPU."""
    if INTERPRETED:
        return 16, 32, 32
    return 64, 128, 64


def _dot_flags(dtype: torch.dtype) -> tuple[bool, str]:
    """(UPCAST, input_precision): fp32 uses IEEE products (TF32 would break agreement with the reference)."""
    upcast = INTERPRETED or dtype == torch.float32
    return upcast, "ieee" if upcast else "tf32"


def _offsets(group_sizes: torch.Tensor) -> torch.Tensor:
    """(E+1,) int64 row offsets: expert e owns rows [offs[e], offs[e+1])."""
    offs = torch.zeros(group_sizes.shape[0] + 1, dtype=torch.int64, device=group_sizes.device)
    offs[1:] = torch.cumsum(group_sizes.to(torch.int64), dim=0)
    return offs


def _check_rows(group_sizes: torch.Tensor, t: int) -> None:
    """group_sizes >= 0 and sum to T. On a GPU this is a device-side assert (no host sync); on CPU a clear error."""
    ok = (group_sizes >= 0).all() & (group_sizes.sum() == t)
    if group_sizes.device.type == "cuda":
        torch._assert_async(ok, f"grouped_mm: group_sizes must be >= 0 and sum to T={t}")
    elif not bool(ok):
        raise ValueError(f"grouped_mm: group_sizes must be >= 0 and sum to T={t}, got {group_sizes.tolist()}")


def _grouped_forward(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, n: int, stride_wk: int, stride_wn: int) -> torch.Tensor:
    """out (T, n) for x (T, K): expert e's (K, n) matrix is read from w[e] through strides (over K, over n)."""
    t, k = x.shape
    e = offs.shape[0] - 1
    out = torch.empty(t, n, dtype=x.dtype, device=x.device)
    if t == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    bt, bn, bk = _tiles(x)
    sizes = offs[1:] - offs[:-1]  # (E,)
    tiles_per = (sizes + bt - 1) // bt  # (E,)
    cum = torch.cumsum(tiles_per, 0)  # (E,)
    n_tiles = triton.cdiv(t, bt) + e  # host-known upper bound on sum(tiles_per)
    tile_ids = torch.arange(n_tiles, device=x.device)
    tile_group = torch.searchsorted(cum, tile_ids, right=True)  # (n_tiles,) expert of each tile; E = surplus
    gc = tile_group.clamp(max=e - 1)
    tile_row0 = offs[gc] + (tile_ids - (cum[gc] - tiles_per[gc])) * bt  # first row of each tile
    upcast, prec = _dot_flags(x.dtype)
    grid = (n_tiles, triton.cdiv(n, bn))
    _grouped_fwd_kernel[grid](
        x, w, out, tile_group.to(torch.int32), tile_row0, offs,
        n, k, e,
        x.stride(0), x.stride(1), w.stride(0), stride_wk, stride_wn, out.stride(0), out.stride(1),
        BLOCK_T=bt, BLOCK_N=bn, BLOCK_K=bk, UPCAST=upcast, PRECISION=prec,
    )
    return out


def _grouped_dw(x: torch.Tensor, dy: torch.Tensor, offs: torch.Tensor, w_shape: torch.Size) -> torch.Tensor:
    """dW (E, K, N): dW[e] = x[rows of e]^T @ dy[rows of e]."""
    e, k, n = w_shape
    dw = torch.empty(e, k, n, dtype=x.dtype, device=x.device)
    if dw.numel() == 0:
        return dw
    bt, bn, bk = _tiles(x)
    upcast, prec = _dot_flags(x.dtype)
    grid = (e, triton.cdiv(k, bk), triton.cdiv(n, bn))
    _grouped_dw_kernel[grid](
        x, dy, dw, offs,
        k, n,
        x.stride(0), x.stride(1), dy.stride(0), dy.stride(1), dw.stride(0), dw.stride(1), dw.stride(2),
        BLOCK_T=bt, BLOCK_K=bk, BLOCK_N=bn, UPCAST=upcast, PRECISION=prec,
    )
    return dw


class GroupedMM(torch.autograd.Function):
    """Differentiable grouped GEMM on the Triton kernels: forward out = x @ w[e] per group, backward dX and dW."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        _check_rows(group_sizes, x.shape[0])
        offs = _offsets(group_sizes)
        ctx.save_for_backward(x, w, offs)
        return _grouped_forward(x, w, offs, w.shape[2], w.stride(1), w.stride(2))

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:  # type: ignore[override]
        x, w, offs = ctx.saved_tensors
        dy = dy.contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:
            # dX = dY @ w[e]^T: read w (E, K, N) as (E, N, K) by swapping its K and N strides.
            dx = _grouped_forward(dy, w, offs, w.shape[1], w.stride(2), w.stride(1))
        if ctx.needs_input_grad[1]:
            dw = _grouped_dw(x, dy, offs, w.shape)
        return dx, dw, None


def grouped_mm_triton(x: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """Triton twin of ``reference.grouped_mm_reference`` (same arguments, same result up to summation order)."""
    return GroupedMM.apply(x, w, group_sizes)
