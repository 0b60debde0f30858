"""Triton kernels vs their torch paths on a GPU, side by side in one run (medians over repeats, CUDA events).

    python benchmarks/gpu_kernels.py               # on a CUDA GPU with triton installed; < 5 minutes on an H200
    python benchmarks/gpu_kernels.py --cpu-smoke   # tiny sizes through the same code on CPU (checks the script)

(a) Fused codec kernel (quantise + stochastic rounding + error feedback, then dequantise): achieved bandwidth =
    (bytes read + bytes written) / time, against the device's peak HBM bandwidth from ``PEAK_HBM_BYTES_PER_S`` (vendor
    spec sheets, keyed by a substring of ``torch.cuda.get_device_name()``) and against a measured device-to-device copy
    (``clone``), which is what a memory-bound kernel can hope for. Both paths are the codec of ``comm.codecs`` (its
    torch definition vs its fused Triton fast path, selected with ``kernels.set_backend``) for the speed-up.
(b) Grouped expert GEMM, 64 experts, bf16, skewed routing with some empty experts: Triton vs the torch loop reference and
    vs ``torch.nn.functional.grouped_mm`` (the model's native path) where available; forward and forward+backward, in
    TFLOP/s (2·T·K·N per product; fwd+bwd = 3 products). Plus the MXFP8-emulated grouped GEMM (qdq + GEMM).
(c) One fwd+bwd training step of the MoE transformer (``islands_kit.model``) in bf16 with ``mxfp8=False`` vs ``True``.
    The emulation quantises and dequantises the expert operands and then runs the same bf16 GEMMs, so it can only be
    slower: it measures the cost of *emulating* MXFP8 numerics (for accuracy studies), not MXFP8 speed.

Without a GPU it prints "no GPU: skipped" and exits 0 (unless --cpu-smoke).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

import islands_kit.kernels as K
from islands_kit.comm.codecs import get_codec

# Peak HBM/GDDR bandwidth in bytes/s from vendor spec sheets; first matching substring wins (specific names first).
PEAK_HBM_BYTES_PER_S: list[tuple[str, float]] = [
    ("GH200", 4.0e12), ("H200", 4.8e12), ("H100 NVL", 3.9e12), ("H100 PCIe", 2.0e12), ("H100", 3.35e12),
    ("H800", 3.35e12), ("B200", 8.0e12), ("A100-SXM4-80GB", 2.039e12), ("A100 80GB PCIe", 1.935e12),
    ("A100", 1.555e12), ("L40S", 0.864e12), ("L4", 0.3e12), ("A10G", 0.6e12), ("RTX 4090", 1.008e12),
]


@dataclass
class Sizes:
    codec_numel: int
    codec_block: int
    tokens: int  # rows of the grouped GEMM (tokens x top_k)
    d_model: int
    d_expert: int
    experts: int
    model: dict  # ModelConfig overrides for (c)
    batch: int
    repeats: int


GPU_SIZES = Sizes(codec_numel=1 << 26, codec_block=128, tokens=32768, d_model=2048, d_expert=1024, experts=64,
                  model=dict(seq_len=1024, d_model=1024, n_layers=4, n_heads=16, n_experts=64, top_k=2, d_expert=512),
                  batch=16, repeats=20)
SMOKE_SIZES = Sizes(codec_numel=3000, codec_block=128, tokens=200, d_model=48, d_expert=40, experts=16,
                    model=dict(seq_len=32, d_model=32, n_layers=2, n_heads=2, n_experts=8, top_k=2, d_expert=32),
                    batch=2, repeats=1)


def timed(fn: Callable[[], object], repeats: int, cuda: bool) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs after warm-up calls (compilation, caches)."""
    for _ in range(2 if cuda else 1):
        fn()
    times = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def peak_bandwidth(device_name: str) -> float | None:
    for key, bw in PEAK_HBM_BYTES_PER_S:
        if key in device_name:
            return bw
    return None


def _pct(bw: float, peak: float | None) -> str:
    return f"{bw / peak:6.0%}" if peak else f"{'-':>6}"


def bench_codec(sz: Sizes, dev: str, cuda: bool, backend: str, peak: float | None) -> None:
    print(f"\n(a) fused codec kernels: n={sz.codec_numel:,} fp32 values, block {sz.codec_block}; backend {backend}")
    n, B = sz.codec_numel, sz.codec_block
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, device=dev, generator=g)
    r = torch.randn(n, device=dev, generator=g) * 1e-3
    u = torch.rand(n, device=dev, generator=g)
    copy_s = timed(lambda: x.clone(), sz.repeats, cuda)
    copy_bw = 8 * n / copy_s
    head = f"  device-to-device copy: {copy_bw / 1e9:8.1f} GB/s"
    print(head + (f" = {copy_bw / peak:.0%} of peak {peak / 1e12:.2f} TB/s" if peak else " (peak unknown for this device)"))
    print(f"  {'codec':<9} {'op':<16} {'bytes/val':>9} {backend + ' ms':>12} {'GB/s':>8} {'%peak':>6} {'%copy':>6} {'torch ms':>9} {'speed-up':>8}")
    for codec in ("int8", "fp8_e4m3", "int4", "fp4_e2m1"):
        c = get_codec(codec, B)
        nb = -(-n // B)
        code_bytes = -(-n * c.spec.bits // 8)
        p = c.encode(x)
        writes = 4 * nb + code_bytes + 4 * n + 4 * n  # scales, codes, decoded, residual
        ops = [
            ("quant+EF SR", lambda: c.encode_ef(x, r, stochastic=True, noise=u), 12 * n + writes),
            ("quant+EF RTN", lambda: c.encode_ef(x, r), 8 * n + writes),
            ("dequantize", lambda: c.decode(p), 4 * nb + code_bytes + 4 * n),
        ]
        for name, fn, nbytes in ops:
            t = timed(fn, sz.repeats, cuda)
            with K.set_backend("torch"):
                t_ref = timed(fn, max(3, sz.repeats // 4), cuda)
            bw = nbytes / t
            print(f"  {codec:<9} {name:<16} {nbytes / n:9.2f} {t * 1e3:12.3f} {bw / 1e9:8.1f} {_pct(bw, peak)} {bw / copy_bw:6.0%} "
                  f"{t_ref * 1e3:9.3f} {t_ref / t:7.1f}x")
    xb = x[: n - n % 1024].view(-1, 1024).bfloat16()  # (rows, 1024), MX blocks of 32 along the rows
    t = timed(lambda: K.mx_qdq(xb), sz.repeats, cuda)
    with K.set_backend("torch"):
        t_ref = timed(lambda: K.mx_qdq(xb), max(3, sz.repeats // 4), cuda)
    bw = 4 * xb.numel() / t  # bf16 in, bf16 out
    print(f"  {'mxfp8':<9} {'mx_qdq bf16':<16} {4.0:9.2f} {t * 1e3:12.3f} {bw / 1e9:8.1f} "
          f"{_pct(bw, peak)} {bw / copy_bw:6.0%} {t_ref * 1e3:9.3f} {t_ref / t:7.1f}x")


def _skewed_group_sizes(tokens: int, experts: int, dev: str) -> torch.Tensor:
    """Group sizes from softmax-of-Gaussian routing probabilities (a few hot experts), with two experts forced empty."""
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(experts, generator=g), 0)
    p[:2] = 0  # empty groups
    idx = torch.multinomial(p, tokens, replacement=True, generator=g)
    return torch.bincount(idx, minlength=experts).to(dev)


def bench_grouped(sz: Sizes, dev: str, cuda: bool, backend: str) -> None:
    dtype = torch.bfloat16 if cuda else torch.float32
    T, E = sz.tokens, sz.experts
    gs = _skewed_group_sizes(T, E, dev)
    print(f"\n(b) grouped expert GEMM: T={T} rows, {E} experts (largest group {int(gs.max())}, {int((gs == 0).sum())} empty), "
          f"{dtype}; backend {backend}")
    print(f"  {'shape (K->N)':<14} {'path':<22} {'fwd ms':>8} {'TFLOP/s':>8} {'fwd+bwd ms':>11} {'TFLOP/s':>8}")
    g = torch.Generator(device=dev).manual_seed(1)
    offs = torch.cumsum(gs, 0).to(torch.int32)
    native = getattr(torch.nn.functional, "grouped_mm", None)
    for k, n in ((sz.d_model, sz.d_expert), (sz.d_expert, sz.d_model)):
        x = (torch.randn(T, k, device=dev, generator=g) / k**0.5).to(dtype).requires_grad_()
        w = torch.randn(E, k, n, device=dev, generator=g).to(dtype).requires_grad_()
        flops = 2 * T * k * n
        paths: list[tuple[str, Callable[[], torch.Tensor]]] = []
        with K.set_backend("torch"):
            y_ref = K.grouped_mm(x, w, gs).float()
        paths.append(("torch loop (reference)", lambda: _with_backend("torch", lambda: K.grouped_mm(x, w, gs))))
        if native is not None:
            try:
                native(x, w, offs=offs)
                paths.append(("F.grouped_mm (native)", lambda: native(x, w, offs=offs)))
            except (RuntimeError, TypeError) as e:
                print(f"  F.grouped_mm unavailable here: {str(e).splitlines()[0][:80]}")
        paths.append((f"kernels ({backend})", lambda: K.grouped_mm(x, w, gs)))
        paths.append((f"kernels mxfp8 ({backend})", lambda: K.grouped_mm(x, w, gs, mxfp8=True)))
        err = (K.grouped_mm(x, w, gs).float() - y_ref).abs().max().item() / y_ref.abs().max().item()
        for name, fn in paths:
            dy = torch.randn(T, n, device=dev, generator=g).to(dtype)
            t_f = timed(lambda: fn(), sz.repeats, cuda)
            t_fb = timed(lambda: torch.autograd.grad(fn(), (x, w), dy), sz.repeats, cuda)
            print(f"  {f'{k}->{n}':<14} {name:<22} {t_f * 1e3:8.3f} {flops / t_f / 1e12:8.1f} {t_fb * 1e3:11.3f} "
                  f"{3 * flops / t_fb / 1e12:8.1f}")
        print(f"  {'':<14} max |kernels - reference| / max |reference| = {err:.2e}")


def _with_backend(name: str, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    with K.set_backend(name):
        return fn()


def bench_model(sz: Sizes, dev: str, cuda: bool) -> None:
    if importlib.util.find_spec("islands_kit.model") is None:
        print("\n(c) islands_kit.model not importable: skipped")
        return
    from islands_kit.config import ModelConfig
    from islands_kit.model import build_model
    from islands_kit.model import moe as moe_mod

    dtype = torch.bfloat16 if cuda else torch.float32
    print(f"\n(c) MoE transformer fwd+bwd step, {dtype}, batch {sz.batch}: {sz.model}")
    models = {}
    for mx in (False, True):
        torch.manual_seed(0)
        models[mx] = build_model(ModelConfig(**sz.model, mxfp8=mx)).to(device=dev, dtype=dtype)
    idx = torch.randint(0, 256, (sz.batch, sz.model["seq_len"] + 1), device=dev)
    inp, tgt = idx[:, :-1], idx[:, 1:]
    with torch.no_grad():
        same = torch.equal(models[False](inp).logits, models[True](inp).logits)
    patch = None
    if same:  # cfg.mxfp8 is not wired into the model yet: route its expert matmuls through kernels.grouped_mm here
        print("  note: cfg.mxfp8 left the logits unchanged (not wired into the model); this run patches "
              "islands_kit.model.moe.grouped_matmul -> kernels.grouped_mm(mxfp8=True) for the mxfp8 model")
        orig = moe_mod.grouped_matmul
        patch = (orig, lambda x, w, gs: K.grouped_mm(x, w, gs, mxfp8=True))

    def step(model: torch.nn.Module) -> None:
        out = model(inp, tgt)
        (out.loss + out.aux_loss).backward()
        model.zero_grad(set_to_none=True)

    t_bf = timed(lambda: step(models[False]), sz.repeats, cuda)
    if patch is not None:
        moe_mod.grouped_matmul = patch[1]
    try:
        t_mx = timed(lambda: step(models[True]), sz.repeats, cuda)
        with torch.no_grad():
            l_bf, l_mx = models[False](inp, tgt).loss.item(), models[True](inp, tgt).loss.item()
    finally:
        if patch is not None:
            moe_mod.grouped_matmul = patch[0]
    tokens = sz.batch * sz.model["seq_len"]
    print(f"  {str(dtype).replace('torch.', ''):<22} {t_bf * 1e3:9.2f} ms/step {tokens / t_bf:12,.0f} tok/s   loss {l_bf:.4f}")
    print(f"  {'mxfp8 emulated':<22} {t_mx * 1e3:9.2f} ms/step {tokens / t_mx:12,.0f} tok/s   loss {l_mx:.4f}"
          f"   ({t_mx / t_bf:.2f}x the plain step: qdq overhead, not an MXFP8 speed-up)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on CPU through the same code (torch paths, "
                    "or the Triton interpreter when TRITON_INTERPRET=1)")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: codec,grouped,model")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    cuda = torch.cuda.is_available() and not args.cpu_smoke
    if not cuda and not args.cpu_smoke:
        print("no GPU: skipped (run with --cpu-smoke to check the script on CPU)")
        return 0
    if cuda and not K.available():
        print("no triton: skipped (pip install 'islands_kit[kernels]')")
        return 0
    sz = SMOKE_SIZES if args.cpu_smoke else GPU_SIZES
    dev = "cuda" if cuda else "cpu"
    backend = "triton" if K.available() else "torch"
    name = torch.cuda.get_device_name() if cuda else "cpu"
    peak = peak_bandwidth(name) if cuda else None
    print(f"device {name}; torch {torch.__version__}; triton "
          f"{__import__('triton').__version__ if importlib.util.find_spec('triton') else 'absent'}; kernels backend {backend}")
    t0 = time.perf_counter()
    with K.set_backend(backend):
        if "codec" not in skip:
            bench_codec(sz, dev, cuda, backend, peak)
        if "grouped" not in skip:
            bench_grouped(sz, dev, cuda, backend)
        if "model" not in skip:
            bench_model(sz, dev, cuda)
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
