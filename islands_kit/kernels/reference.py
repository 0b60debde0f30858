"""Plain torch references for the model kernels in this package: each Triton kernel must equal one of these.

Two pieces (the wire-codec kernel's definition is the torch codec itself, ``comm/codecs/``):

- ``grouped_mm_reference``: the MoE expert feed-forward matmul over tokens sorted by expert — a loop over the experts'
  contiguous row slices (the obvious code; the Triton kernel must match it).
- ``mx_quantize_reference`` / ``mx_qdq_reference``: MXFP8 emulation after the OCP Microscaling (MX) spec v1.0: FP8-E4M3
  elements sharing one power-of-two (E8M0) scale per block of 32 along the contraction dimension.

The references favour obvious torch over speed and take a different route from the kernels where they can: MX rounding
here is torch's own ``float8_e4m3fn`` cast, while the Triton kernel computes it with integer exponent arithmetic — so
the tests compare two independent implementations.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------------------------------
# Grouped expert GEMM
# ---------------------------------------------------------------------------------------------------------------------


def check_grouped_args(x: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor) -> None:
    """Shape/dtype rules shared by both backends (the row-count rule needs the values and is checked where they are)."""
    if x.dim() != 2:
        raise ValueError(f"grouped_mm: x_sorted must be 2-D (T, K), got shape {tuple(x.shape)}")
    if w.dim() != 3:
        raise ValueError(f"grouped_mm: w must be 3-D (E, K, N), got shape {tuple(w.shape)}")
    if w.shape[1] != x.shape[1]:
        raise ValueError(f"grouped_mm: w.shape[1] (K={w.shape[1]}) must equal x_sorted.shape[1] (K={x.shape[1]})")
    if group_sizes.dim() != 1 or group_sizes.shape[0] != w.shape[0]:
        raise ValueError(f"grouped_mm: group_sizes must have shape (E,) = ({w.shape[0]},), got {tuple(group_sizes.shape)}")
    if group_sizes.dtype.is_floating_point or group_sizes.dtype == torch.bool:
        raise ValueError(f"grouped_mm: group_sizes must be an integer tensor, got {group_sizes.dtype}")
    if x.dtype != w.dtype:
        raise ValueError(f"grouped_mm: x_sorted and w must share a dtype, got {x.dtype} and {w.dtype}")


def grouped_mm_reference(x: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """out[rows of group e] = x[rows of group e] @ w[e], for tokens already sorted by expert.

    x: (T, K) rows sorted by expert; w: (E, K, N); group_sizes: (E,) ints >= 0 summing to T (empty groups allowed).
    Returns (T, N). Differentiable through plain torch autograd.
    """
    check_grouped_args(x, w, group_sizes)
    sizes = [int(s) for s in group_sizes.tolist()]
    if min(sizes, default=0) < 0 or sum(sizes) != x.shape[0]:
        raise ValueError(f"grouped_mm: group_sizes must be >= 0 and sum to T={x.shape[0]}, got {sizes}")
    outs = []  # one (n_e, N) block per expert
    start = 0
    for e, n_e in enumerate(sizes):
        outs.append(x[start : start + n_e] @ w[e])
        start += n_e
    if not outs:  # E == 0 can only pair with T == 0
        return x.new_zeros(0, w.shape[2])
    return torch.cat(outs, dim=0)


# ---------------------------------------------------------------------------------------------------------------------
# MXFP8 (OCP Microscaling: E4M3 elements, E8M0 shared scale per block)
# ---------------------------------------------------------------------------------------------------------------------

E4M3_MAX = 448.0  # largest finite FP8-E4M3 ("fn" variant: no infinities) value, 1.75 * 2^8
E4M3_EMAX = 8  # exponent of the largest normal E4M3 binade; the MX scale rule subtracts it
E8M0_MIN, E8M0_MAX = -126, 127  # scale exponents used here (spec: -127..127; 2^-127 is an fp32 subnormal, see below)


def mx_quantize_reference(x: torch.Tensor, block: int = 32, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``x`` into blocks of ``block`` along ``dim`` and quantise each to MXFP8.

    OCP MX v1.0, section 6.3: shared exponent ``s = floor(log2(amax)) - emax_elem`` with emax_elem = 8 for E4M3, scale
    ``X = 2^s``, elements ``P_i = fp8_e4m3(V_i / X)`` rounded to nearest-even, saturating at +-448 (the spec leaves
    overflow to the implementation; since amax / X lies in [256, 512) the largest values of a block can exceed 448 and are
    clamped — a known property of this scale rule). ``s`` is clamped to [-126, 127]: the spec allows -127, but 2^-127 is
    an fp32 subnormal; only blocks with amax < 2^-118 notice the difference. A partial last block is padded with zeros,
    which do not change its amax.

    Returns (q, s): q = the E4M3 values as float32 with ``dim`` moved last and padded, shape (..., n_blocks, block);
    s = int32 scale exponents, shape (..., n_blocks, 1). Finite inputs only.
    """
    if block < 1:
        raise ValueError(f"mx_qdq: block must be >= 1, got {block}")
    xf = x.float().movedim(dim, -1)  # (..., K)
    k = xf.shape[-1]
    xb = F.pad(xf, (0, (-k) % block)).reshape(*xf.shape[:-1], -1, block)  # (..., n_blocks, block)
    amax = xb.abs().amax(dim=-1, keepdim=True)  # (..., n_blocks, 1)
    _, e = torch.frexp(amax)  # amax = m * 2^e with m in [0.5, 1)  =>  floor(log2(amax)) = e - 1
    s = (e - 1 - E4M3_EMAX).clamp(E8M0_MIN, E8M0_MAX).to(torch.int32)
    scaled = torch.ldexp(xb, -s)  # exact: multiplying by a power of two
    q = scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()  # round to nearest even on the E4M3 grid
    return q, s


def mx_qdq_reference(x: torch.Tensor, block: int = 32, dim: int = -1) -> torch.Tensor:
    """MXFP8 quantise-then-dequantise: same shape and dtype as ``x``; each value replaced by its MX representation."""
    q, s = mx_quantize_reference(x, block, dim)
    xf = x.movedim(dim, -1)
    k = xf.shape[-1]
    out = torch.ldexp(q, s).reshape(*xf.shape[:-1], -1)[..., :k]  # (..., K)
    return out.movedim(-1, dim).to(x.dtype).contiguous()
