"""Plain torch references for every kernel in this package: each Triton kernel must equal one of these.

Three pieces:

- ``grouped_mm_reference``: the MoE expert feed-forward matmul over tokens sorted by expert — a loop over the experts'
  contiguous row slices (the obvious code; the Triton kernel must match it).
- ``mx_quantize_reference`` / ``mx_qdq_reference``: MXFP8 emulation after the OCP Microscaling (MX) spec v1.0: FP8-E4M3
  elements sharing one power-of-two (E8M0) scale per block of 32 along the contraction dimension.
- ``quantize_ef_reference`` / ``dequantize_reference``: the wire codecs' per-block quantisation with stochastic rounding
  and error feedback, implementing the same grid and scale rule as ``islands_kit.comm.codecs`` (which this package must
  not import; a test checks that the two agree bit for bit).

The references favour obvious torch over speed and take a different route from the kernels where they can: MX rounding
here is torch's own ``float8_e4m3fn`` cast and codec bit patterns come from that cast or a grid lookup, while the Triton
kernels compute both with integer exponent arithmetic — so the tests compare two independent implementations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

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


# ---------------------------------------------------------------------------------------------------------------------
# Wire codecs: per-block absmax quantisation + stochastic rounding + error feedback
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CodecSpec:
    """A block codec's grid. ``uniform``: levels j + offset for integers j, |level| <= qmax (offset 0.5 for int2's
    mid-rise grid). ``float``: a minifloat with ``mbits`` mantissa bits, minimum normal exponent ``emin``, subnormals
    below it, saturating at qmax; its code is the OCP bit pattern (sign in the top bit)."""

    bits: int
    qmax: float
    kind: str  # "uniform" | "float"
    emin: int = 0
    mbits: int = 0

    @property
    def offset(self) -> float:
        return self.qmax - math.floor(self.qmax)  # 0 for int8/int4, 0.5 for int2

    @property
    def per_byte(self) -> int:
        return 8 // self.bits


# Must equal islands_kit.comm.codecs (checked by tests/test_kernels.py).
CODEC_SPECS: dict[str, CodecSpec] = {
    "int8": CodecSpec(8, 127.0, "uniform"),
    "fp8_e4m3": CodecSpec(8, 448.0, "float", emin=-6, mbits=3),
    "int4": CodecSpec(4, 7.0, "uniform"),
    "fp4_e2m1": CodecSpec(4, 6.0, "float", emin=0, mbits=1),
    "int2": CodecSpec(2, 1.5, "uniform"),
}
FP4_E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitude of E2M1 codes 0..7 (OCP MX v1.0, table 5)


def codec_spec(codec: str) -> CodecSpec:
    """The grid of a block codec by name; other names raise a ValueError naming the valid ones."""
    if codec not in CODEC_SPECS:
        raise ValueError(f"codec: must be one of {'|'.join(CODEC_SPECS)} (block codecs; fp32/bf16 need no kernel), got {codec!r}")
    return CODEC_SPECS[codec]


@dataclass
class Quantized:
    """Result of one fused quantise + error-feedback step on n values in nb = ceil(n / block_size) blocks.

    scales: (nb,) float32, absmax / qmax per block; codes: (ceil(n * bits / 8),) uint8, packed across the flattened
    tensor with element i in byte i // per_byte at bit offset bits * (i % per_byte); decoded: (n,) float32 values the
    receiver will reconstruct; residual: (n,) float32 = x + residual_old - decoded (the error-feedback memory).
    """

    codec: str
    numel: int
    block_size: int
    scales: torch.Tensor
    codes: torch.Tensor
    decoded: torch.Tensor
    residual: torch.Tensor

    def wire(self) -> torch.Tensor:
        """The payload bytes ``[nb float32 scales][packed codes]`` — the layout of ``comm.codecs``' ``Payload.data``."""
        return torch.cat([self.scales.view(torch.uint8), self.codes])


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack (n,) uint8 codes < 2^bits: element i -> byte i // per, bit offset bits * (i % per); pad bits 0."""
    per = 8 // bits
    if per == 1:
        return codes
    n = codes.numel()
    padded = torch.zeros(-(-n // per) * per, dtype=torch.int32, device=codes.device)
    padded[:n] = codes.to(torch.int32)
    shifts = torch.arange(per, device=codes.device, dtype=torch.int32) * bits  # (per,)
    return (padded.view(-1, per) << shifts).sum(dim=1).to(torch.uint8)  # (n_bytes,)


def unpack_codes(data: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of ``pack_codes``: the first n codes as (n,) uint8."""
    per = 8 // bits
    if per == 1:
        return data[:n]
    shifts = torch.arange(per, device=data.device, dtype=torch.int32) * bits  # (per,)
    return ((data.to(torch.int32).view(-1, 1) >> shifts) & ((1 << bits) - 1)).reshape(-1)[:n].to(torch.uint8)


def pow2(k: torch.Tensor) -> torch.Tensor:
    """2^k as float32 for integer k in [-126, 127], from the exponent bits (exact)."""
    return ((k.to(torch.int32) + 127) << 23).view(torch.float32)


def _round(r: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
    """Integer rounding of r: nearest-even when u is None, else stochastic: floor(r) + [u < frac(r)], so E = r."""
    if u is None:
        return torch.round(r)
    lo = torch.floor(r)
    return lo + (u < (r - lo)).to(r.dtype)


def _levels(codes: torch.Tensor, spec: CodecSpec, codec: str) -> torch.Tensor:
    """Grid values (float32, before scaling) of (n,) uint8 codes."""
    if spec.kind == "uniform":
        return codes.to(torch.float32) - spec.qmax
    if codec == "fp8_e4m3":
        return codes.contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    grid = torch.tensor(FP4_E2M1_GRID, dtype=torch.float32, device=codes.device)
    return torch.cat([grid, -grid])[codes.long()]  # code 8 is -0.0


def quantize_ef_reference(
    x: torch.Tensor, residual: torch.Tensor | None, noise: torch.Tensor | None, *, codec: str, block_size: int,
) -> Quantized:
    """Quantise x_eff = x + residual (flattened, float32) in blocks of ``block_size``, as ``comm.codecs`` does.

    Per block: scale = absmax / qmax (IEEE float32; 0 for an all-zero block); v = clamp(x_eff / scale, -qmax, qmax);
    v rounded onto the grid (nearest-even if ``noise`` is None, else stochastically with the uniforms ``noise``:
    up iff u < frac); decoded = level * scale; residual_new = x_eff - decoded. residual=None means zero.
    """
    spec = codec_spec(codec)
    xf = x.detach().reshape(-1).to(torch.float32)  # (n,)
    if residual is not None:
        xf = xf + residual.reshape(-1).to(torch.float32)
    n, B = xf.numel(), block_size
    nb = -(-n // B)
    xb = F.pad(xf, (0, nb * B - n)).view(nb, B)  # (nb, B); zero padding leaves absmax unchanged
    absmax = xb.abs().amax(dim=1, keepdim=True) if n else xb.new_zeros(0, 1)  # (nb, 1)
    scale = absmax / spec.qmax  # (nb, 1)
    v = (xb / torch.where(scale > 0, scale, torch.ones_like(scale))).clamp(-spec.qmax, spec.qmax).reshape(-1)[:n]
    u = None if noise is None else noise.reshape(-1).to(torch.float32)
    if spec.kind == "uniform":
        w = v - spec.offset if spec.offset else v
        codes = (_round(w, u) + (spec.offset + spec.qmax)).clamp(0, 2 * spec.qmax).to(torch.uint8)
    else:
        a = v.abs()
        _, e = torch.frexp(a)  # floor(log2 a) = e - 1 (e = 0 for a = 0)
        step = pow2((e - 1).clamp_min(spec.emin) - spec.mbits)  # (n,) grid spacing at |v|
        q = torch.copysign(_round(a / step, u) * step, v)  # on the grid, |q| <= qmax; sign kept (even for -0.0)
        if codec == "fp8_e4m3":
            codes = q.to(torch.float8_e4m3fn).view(torch.uint8)  # exact: q is an E4M3 value
        else:
            grid = torch.tensor(FP4_E2M1_GRID, dtype=torch.float32, device=q.device)
            codes = (torch.searchsorted(grid, q.abs()) + 8 * torch.signbit(q).long()).to(torch.uint8)
    decoded = (F.pad(_levels(codes, spec, codec), (0, nb * B - n)).view(nb, B) * scale).reshape(-1)[:n]
    return Quantized(codec, n, B, scale.reshape(-1), pack_codes(codes, spec.bits), decoded, xf - decoded)


def dequantize_reference(scales: torch.Tensor, codes: torch.Tensor, numel: int, *, codec: str, block_size: int) -> torch.Tensor:
    """Decode packed codes and per-block scales to (numel,) float32: level * scale."""
    spec = codec_spec(codec)
    nb = -(-numel // block_size)
    q = _levels(unpack_codes(codes, spec.bits, numel), spec, codec)  # (n,)
    qb = F.pad(q, (0, nb * block_size - numel)).view(nb, block_size)  # (nb, B)
    return (qb * scales.view(nb, 1)).reshape(-1)[:numel]
