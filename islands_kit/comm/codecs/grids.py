"""Rounding onto the codecs' grids (vectorised; ``u`` is the uniform noise, or None for round-to-nearest-even) and
the bit packing of sub-byte codes."""
from __future__ import annotations

import torch

from islands_kit.config.codec_registry import CodecSpec

# Largest finite bf16 (0x7F7F) and the E4M3FN / E2M1 grids.
BF16_MAX = float(torch.finfo(torch.bfloat16).max)
FP4_E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitude of code 0..7 (OCP MX v1.0, table 5)
FP4_E3M0_GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # magnitude of code 0..7: 3 exponent bits, bias 3


def round_uniform(v: torch.Tensor, offset: float, u: torch.Tensor | None) -> torch.Tensor:
    """Round v onto the grid {j + offset : j integer} (offset 0 or 0.5). Returns the integer j as float32."""
    w = v - offset if offset else v  # exact when offset == 0
    if u is None:
        return torch.round(w)  # half to even
    lo = torch.floor(w)
    return lo + (u < (w - lo)).to(w.dtype)  # w - lo is exact (Sterbenz), so P(up) = frac


def pow2(k: torch.Tensor) -> torch.Tensor:
    """2^k as float32 for int32 k in [-126, 127], built from the exponent bits (exact on every backend)."""
    return ((k.to(torch.int32) + 127) << 23).view(torch.float32)


def round_minifloat(v: torch.Tensor, emin: int, mbits: int, u: torch.Tensor | None) -> torch.Tensor:
    """Round v onto a float grid with ``mbits`` mantissa bits and minimum normal exponent ``emin`` (subnormals below).

    The spacing at |v| is 2^(max(floor(log2|v|), emin) - mbits); dividing by it is exact (a power of two), so the
    integer part and fraction are exact. E4M3: emin=-6, mbits=3. E2M1: emin=0, mbits=1. Caller clamps |v| <= max.
    """
    a = v.abs()
    _, e = torch.frexp(a)  # a = m * 2^e, m in [0.5, 1)  =>  floor(log2 a) = e - 1  (e = 0 for a = 0)
    step = pow2((e - 1).clamp_min(emin) - mbits)
    r = a / step  # exact
    if u is None:
        k = torch.round(r)  # half to even on the significand = IEEE round-to-nearest-even
    else:
        lo = torch.floor(r)
        k = lo + (u < (r - lo)).to(r.dtype)
    return torch.copysign(k * step, v)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack uint8 codes (< 2^bits) tightly: element i -> byte i // per, bit offset bits * (i % per)."""
    if bits == 8:
        return codes
    per = 8 // bits
    n = codes.numel()
    padded = torch.zeros(-(-n // per) * per, dtype=torch.uint8, device=codes.device)
    padded[:n] = codes
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=codes.device)  # (per,)
    return (padded.view(-1, per) << shifts).sum(dim=1, dtype=torch.uint8)  # (n_bytes,); bit fields do not overlap


def unpack(data: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`pack`: the first n codes as uint8."""
    if bits == 8:
        return data[:n]
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=data.device)  # (per,)
    return ((data.view(-1, 1) >> shifts) & ((1 << bits) - 1)).reshape(-1)[:n]  # (n_bytes, per) -> (n,)


def off_grid(spec: CodecSpec, codes: torch.Tensor) -> str | None:
    """The first code that is not a value of ``spec``'s grid: above ``2 qmax`` on a uniform grid (int8 255, int4 15),
    the NaN patterns of E4M3FN (S.1111.111); every int2 and fp4 code is a grid value."""
    if spec.kind == "uniform":
        bad = codes > int(2 * spec.qmax)
    elif spec.kind == "minifloat" and spec.bits == 8:
        bad = (codes & 0x7F) == 0x7F
    else:
        return None
    if not bool(bad.any()):
        return None
    i = int(bad.nonzero()[0])
    return f"codes: value {i} has code {int(codes[i])}, not on the {spec.name} grid"


def scale_overflow(scale: torch.Tensor, top: float) -> str | None:
    """The first finite block scale that overflows float32 once decoded (times ``top``, the grid's largest level);
    None when there is none. An honest scale is absmax / top of finite values, so its decode stays finite; a peer's
    3e38 would pass every other check and turn into inf only when decoded. Non-finite scales are left to the defences
    (the modelled ``nan`` attack) or refused by the codec's own rule."""
    bad = torch.isfinite(scale) & ~torch.isfinite(scale.abs() * top)
    if not bool(bad.any()):
        return None
    b = int(bad.nonzero()[0])
    return f"scales: block {b}'s scale {float(scale[b]):g} overflows float32 once decoded (x {top:g}, the grid's top)"


def pack_bits(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack integers in [0, 2^bits) of any width into a little-endian bit stream: element i at stream bits
    [i·bits, (i+1)·bits), stream bit j in byte j // 8 at bit j % 8 (for widths 1/2/4/8 the layout of :func:`pack`)."""
    n = values.numel()
    stream = ((values.to(torch.int64).view(-1, 1) >> torch.arange(bits, device=values.device)) & 1).reshape(-1)
    padded = torch.zeros(-(-n * bits // 8) * 8, dtype=torch.int64, device=values.device)  # pad bits 0
    padded[: n * bits] = stream
    return (padded.view(-1, 8) << torch.arange(8, device=values.device)).sum(dim=1).to(torch.uint8)  # (bytes,)


def stream_bits(data: torch.Tensor) -> torch.Tensor:
    """The bit stream of :func:`pack_bits` as int64 0/1, 8 per byte, low bit first."""
    return ((data.to(torch.int64).view(-1, 1) >> torch.arange(8, device=data.device)) & 1).reshape(-1)
