"""The public operations: each picks the Triton kernel or the torch reference per call (see ``dispatch``).

- ``grouped_mm``: the MoE expert matmul over expert-sorted tokens, optionally with MXFP8 emulation.
- ``mx_qdq``: MXFP8 quantise-dequantise with a straight-through gradient.
- ``codec_quantize_ef`` / ``codec_dequantize``: the Triton fast path of the wire codecs' quantise + rounding + error
  feedback (Triton only: the codecs' definition and torch path live in ``comm/codecs/``, which calls these).

The Triton modules are imported lazily, on the first call that uses them, so that this package imports (and the torch
path works) without Triton, and so that ``TRITON_INTERPRET`` is read when the kernels are first needed.
"""
from __future__ import annotations

import torch

from . import reference
from .dispatch import triton_module, use_triton


class _MXQDQ(torch.autograd.Function):
    """MXFP8 quantise-dequantise with the straight-through estimator: forward = qdq(x), backward = identity.

    The STE treats rounding as the identity for gradients (Bengio et al. 2013), as MX training recipes do for the
    quantised operands; the gradients themselves are not quantised here (this is emulation of the forward numerics only).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, block: int, dim: int, triton_path: bool) -> torch.Tensor:  # type: ignore[override]
        if triton_path:
            return triton_module("triton_mx").mx_qdq_triton(x, block, dim)
        return reference.mx_qdq_reference(x, block, dim)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:  # type: ignore[override]
        return grad, None, None, None


def mx_qdq(x: torch.Tensor, block: int = 32, dim: int = -1) -> torch.Tensor:
    """MXFP8 (OCP MX v1.0) quantise-dequantise of ``x`` in blocks of ``block`` along ``dim``.

    Each block of ``block`` values along ``dim`` shares the power-of-two scale 2^(floor(log2(amax)) - 8) (E8M0;
    emax_elem = 8 for E4M3); each value becomes the nearest FP8-E4M3 number (ties to even, saturating at 448) times that
    scale. Returns a tensor of the same shape and dtype (exactly representable in float32 and bfloat16; float16 may
    under/overflow at extreme scales). Gradient: straight-through (identity).
    See ``reference.mx_quantize_reference`` for the exact rule and its two documented edge cases.
    """
    if not isinstance(block, int) or block < 1:
        raise ValueError(f"mx_qdq: block must be an integer >= 1, got {block!r}")
    if not x.dtype.is_floating_point:
        raise ValueError(f"mx_qdq: x must be a floating-point tensor, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("mx_qdq: x must have at least one dimension")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"mx_qdq: dim must be in [{-x.dim()}, {x.dim() - 1}] for a {x.dim()}-D tensor, got {dim}")
    return _MXQDQ.apply(x, block, dim, use_triton(x, op="mx_qdq"))


def grouped_mm(x_sorted: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor, *, mxfp8: bool = False) -> torch.Tensor:
    """Grouped expert GEMM: ``out[rows of group e] = x_sorted[rows of group e] @ w[e]``.

    x_sorted: (T, K) token rows sorted by expert; w: (E, K, N); group_sizes: (E,) integers >= 0 summing to T (empty
    experts allowed). Returns (T, N), differentiable in x_sorted and w.

    mxfp8=True emulates MXFP8 operands: both x (blocks of 32 along K, its last dim) and w (blocks of 32 along K, dim 1)
    pass through ``mx_qdq`` first — quantised along the contraction dimension as the MX spec requires — and gradients
    flow straight through the quantisers. The matmul itself then runs in the input dtype; this measures accuracy, not
    speed (a real MXFP8 GEMM would feed FP8 values and scales to the tensor cores).
    """
    reference.check_grouped_args(x_sorted, w, group_sizes)
    if mxfp8:
        x_sorted = mx_qdq(x_sorted, 32, dim=-1)
        w = mx_qdq(w, 32, dim=1)
    if use_triton(x_sorted, w, group_sizes, op="grouped_mm"):
        return triton_module("triton_grouped").grouped_mm_triton(x_sorted, w, group_sizes)
    return reference.grouped_mm_reference(x_sorted, w, group_sizes)


def codec_quantize_ef(
    x: torch.Tensor, residual: torch.Tensor | None, noise: torch.Tensor | None,
    *, bits: int, qmax: float, minifloat: bool, emin: int, mbits: int, block_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused Triton wire-codec step (quantise x + residual per block, round, error feedback) — only the fast path:
    the definition and the torch path are ``comm/codecs/``, which decides (``use_triton``) to call this.

    x: (n,) floating; residual: None or (n,) float32; noise: None (nearest-even) or (n,) uniforms in [0, 1).
    Grid: ``bits`` per code, top level ``qmax``, ``minifloat`` (OCP float grid, ``emin``/``mbits``) or uniform.
    Returns (scales (nb,) float32, packed codes uint8, decoded (n,) float32, new residual (n,) float32).
    """
    return triton_module("triton_codec").quantize_ef_triton(
        x, residual, noise, bits=bits, qmax=qmax, minifloat=minifloat, emin=emin, mbits=mbits, block_size=block_size)


def codec_dequantize(scales: torch.Tensor, codes: torch.Tensor, numel: int, *, bits: int, qmax: float,
                     minifloat: bool, emin: int, mbits: int, block_size: int) -> torch.Tensor:
    """The fused Triton decode of ``codec_quantize_ef``'s scales and packed codes to (numel,) float32 (fast path only)."""
    return triton_module("triton_codec").dequantize_triton(
        scales, codes, numel, bits=bits, qmax=qmax, minifloat=minifloat, emin=emin, mbits=mbits,
        block_size=block_size)
