"""The public operations: each picks the Triton kernel or the torch reference per call (see ``dispatch``).

- ``grouped_mm``: the MoE expert matmul over expert-sorted tokens, optionally with MXFP8 emulation.
- ``mx_qdq``: MXFP8 quantise-dequantise with a straight-through gradient.
- ``quantize_ef`` / ``dequantize``: the wire codecs' fused quantise + stochastic rounding + error-feedback step.

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


def quantize_ef(
    x: torch.Tensor,
    residual: torch.Tensor | None = None,
    *,
    codec: str,
    block_size: int = 128,
    stochastic: bool = True,
    noise: torch.Tensor | None = None,
    seed: int | None = None,
) -> reference.Quantized:
    """Fused wire-codec step: quantise x_eff = x + residual in blocks, with stochastic rounding and error feedback.

    The arithmetic is that of ``islands_kit.comm.codecs`` (block codecs int8, fp8_e4m3, int4, fp4_e2m1, int2): scale =
    absmax / qmax per block of ``block_size`` (float32), v = clamp(x_eff / scale), rounded onto the codec grid, decoded =
    level * scale, new residual = x_eff - decoded (error feedback: Seide et al. 2014; Karimireddy et al. 2019).

    x: any shape, floating (flattened row-major); residual: None (zero) or numel(x) float32 values.
    Rounding: ``stochastic=False`` -> nearest-even. Otherwise uniforms in [0, 1) from ``noise`` (numel(x) values;
    bit-identical on both backends and to ``comm.codecs`` given the same noise), else generated from ``seed`` (torch
    path: a ``torch.Generator`` seeded with it; Triton path: ``tl.rand(seed, index)`` in-kernel — both unbiased but
    *different* streams), else from a seed drawn from torch's global RNG.
    Returns ``reference.Quantized`` (scales, packed codes, decoded, residual; ``.wire()`` gives the payload bytes).
    """
    spec = reference.codec_spec(codec)
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"quantize_ef: block_size must be an integer >= 1, got {block_size!r}")
    if not x.dtype.is_floating_point:
        raise ValueError(f"quantize_ef: x must be a floating-point tensor, got {x.dtype}")
    n = x.numel()
    if residual is not None and residual.numel() != n:
        raise ValueError(f"quantize_ef: residual must have numel {n} like x, got {residual.numel()}")
    if noise is not None and noise.numel() != n:
        raise ValueError(f"quantize_ef: noise must have numel {n} like x, got {noise.numel()}")
    if not stochastic:
        noise, seed = None, None
    elif noise is None and seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
    if use_triton(*(t for t in (x, residual, noise) if t is not None), op="quantize_ef"):
        out = triton_module("triton_codec").quantize_ef_triton(x, residual, noise, seed, codec=codec, spec=spec,
                                                              block_size=block_size)
    else:
        if noise is None and seed is not None:
            gen = torch.Generator(device=x.device).manual_seed(seed)
            noise = torch.rand(n, generator=gen, device=x.device, dtype=torch.float32)
        out = reference.quantize_ef_reference(x, residual, noise, codec=codec, block_size=block_size)
    if not bool(torch.isfinite(out.scales).all()):  # as comm.codecs: a NaN/inf would poison its block's scale
        from islands_kit.comm.codecs import NonFiniteError

        raise NonFiniteError(f"quantize_ef({codec}): payload contains non-finite values")
    return out


def dequantize(scales: torch.Tensor, codes: torch.Tensor, numel: int, *, codec: str, block_size: int = 128) -> torch.Tensor:
    """Decode ``quantize_ef``'s packed codes and per-block scales back to (numel,) float32 values (level * scale)."""
    spec = reference.codec_spec(codec)
    if not isinstance(block_size, int) or block_size < 1 or numel < 0:
        raise ValueError(f"dequantize: block_size must be an integer >= 1 and numel >= 0, got {block_size!r}, {numel}")
    nb = -(-numel // block_size)
    if scales.numel() != nb or scales.dtype != torch.float32:
        raise ValueError(f"dequantize: scales must be {nb} float32 values for numel={numel}, got {scales.numel()} {scales.dtype}")
    if codes.dtype != torch.uint8 or codes.numel() != -(-numel * spec.bits // 8):
        raise ValueError(f"dequantize: codes must be {-(-numel * spec.bits // 8)} uint8 bytes for {codec}, got {codes.numel()} {codes.dtype}")
    if use_triton(scales, codes, op="dequantize"):
        return triton_module("triton_codec").dequantize_triton(scales, codes, numel, spec=spec, block_size=block_size)
    return reference.dequantize_reference(scales, codes, numel, codec=codec, block_size=block_size)
