"""The one-GPU check behind ``benchmarks/gpu_check.sh``: measure, then print one summary table (and write it as JSON).

    bash benchmarks/gpu_check.sh                       # what a person with one GPU runs (it calls this script)
    python benchmarks/gpu_check.py --cpu-smoke --out runs/gpu_check-cpu   # tiny sizes on the CPU: checks the plumbing

Rows of the table:
  * kernel tests — ``tests/test_kernels.py`` run natively by gpu_check.sh (compiled Triton, not the interpreter):
    passed / failed / skipped, read from its JUnit XML;
  * SR codec kernel — fused quantise + stochastic rounding + error feedback (int4, block 128, ``kernels.quantize_ef``)
    on 2^26 fp32 values: achieved GB/s = (bytes read + bytes written) / median time, against the GPU's peak HBM
    bandwidth (``islands.HARDWARE``, spec sheets) and a measured device-to-device copy;
  * grouped expert GEMM — 64 experts, bf16, skewed routing (``gpu_kernels._skewed_group_sizes``), forward + backward
    of one (T x d) @ (E, d, f) product: the kernels' grouped GEMM vs the model's torch path (``model.moe.grouped_matmul``);
  * MXFP8 expert matmul — the same fwd+bwd with ``mxfp8=True`` (quantise-dequantise emulation, then bf16 GEMMs) vs bf16;
  * gpu-small baseline / two_site / eight_cell, ``--steps`` steps each, and the gpu preset, ``--gpu-steps`` steps
    each (all islands on this GPU, bf16, AdamW as the presets): tokens/s = training tokens / wall time (evaluation and
    sync included) and model FLOPs utilisation MFU = tokens/s x FLOPs per token / peak bf16 FLOP/s of this GPU (FLOPs
    per token as the simulated clock counts them: 6 N_active + 12 n_layers d_model seq_len); and the full preset's
    projected time (its steps x the measured seconds per step) against the preset's budget (``BUDGET_S``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable

import torch

from islands_kit.comm.codecs import get_codec

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_kernels.py beside this file
import gpu_kernels  # noqa: E402

import islands_kit.kernels as K  # noqa: E402
from islands_kit.config import EXPERIMENTS, apply_overrides  # noqa: E402
from islands_kit.config.presets import get_preset  # noqa: E402
from islands_kit.model.moe import grouped_matmul  # noqa: E402
from islands_kit.run import run_experiment  # noqa: E402
from islands_kit.train.islands import HARDWARE, profile_for_gpu, step_flops  # noqa: E402


def kernel_tests(xml_path: str | None) -> dict[str, Any]:
    if not xml_path or not Path(xml_path).exists():
        return {"status": "not run"}
    root = ET.parse(xml_path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    n, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    return {"passed": n - f - e - s, "failed": f + e, "skipped": s}


def codec_bandwidth(n: int, dev: str, cuda: bool, repeats: int, peak: float | None) -> dict[str, Any]:
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, device=dev, generator=g)
    r = torch.randn(n, device=dev, generator=g) * 1e-3
    B, bits = 128, 4
    nb = -(-n // B)
    nbytes = 8 * n + 4 * nb + -(-n * bits // 8) + 8 * n  # read x, r; write scales, codes, decoded, residual
    u = torch.rand(n, device=dev, generator=g)
    c = get_codec("int4", B)  # the codec definition; its fused Triton fast path runs where the backend allows
    t = gpu_kernels.timed(lambda: c.encode_ef(x, r, stochastic=True, noise=u), repeats, cuda)
    t_copy = gpu_kernels.timed(lambda: x.clone(), repeats, cuda)
    bw, copy_bw = nbytes / t, 8 * n / t_copy
    return {"gb_per_s": bw / 1e9, "copy_gb_per_s": copy_bw / 1e9, "peak_gb_per_s": peak / 1e9 if peak else None,
            "pct_peak": bw / peak if peak else None, "ms": t * 1e3, "numel": n}


def expert_gemm(tokens: int, d: int, f: int, experts: int, dev: str, cuda: bool, repeats: int) -> dict[str, Any]:
    dtype = torch.bfloat16 if cuda else torch.float32
    gs = gpu_kernels._skewed_group_sizes(tokens, experts, dev)
    g = torch.Generator(device=dev).manual_seed(1)
    x = (torch.randn(tokens, d, device=dev, generator=g) / d**0.5).to(dtype).requires_grad_()
    w = torch.randn(experts, d, f, device=dev, generator=g).to(dtype).requires_grad_()
    dy = torch.randn(tokens, f, device=dev, generator=g).to(dtype)

    def fwd_bwd(fn: Callable[[], torch.Tensor]) -> float:
        return gpu_kernels.timed(lambda: torch.autograd.grad(fn(), (x, w), dy), repeats, cuda)

    t_torch = fwd_bwd(lambda: grouped_matmul(x, w, gs))
    t_kern = fwd_bwd(lambda: K.grouped_mm(x, w, gs))
    t_mx = fwd_bwd(lambda: K.grouped_mm(x, w, gs, mxfp8=True))
    flops = 3 * 2 * tokens * d * f
    return {"torch_ms": t_torch * 1e3, "kernel_ms": t_kern * 1e3, "speedup": t_torch / t_kern,
            "kernel_tflops": flops / t_kern / 1e12, "mxfp8_ms": t_mx * 1e3, "mxfp8_over_bf16": t_mx / t_kern,
            "dtype": str(dtype).replace("torch.", "")}


# the time budget of one experiment of each GPU preset (islands_kit/config/presets.py; benchmarks/RESULTS.md "GPU presets")
BUDGET_S = {"gpu-small": 300.0, "gpu": 600.0}


def training_runs(preset: str, steps: int, out: Path, peak: float | None, overrides: dict[str, Any]) -> dict[str, Any]:
    rows = {}
    for experiment in (e for e in EXPERIMENTS if not get_preset(e, preset).sync.traits.own_clocks):  # lock-step ones
        cfg = apply_overrides(get_preset(experiment, preset), {"steps": steps, "eval_every": steps, "progress": False,
                                                               "wandb_mode": "disabled", **overrides})
        t0 = time.perf_counter()
        res = run_experiment(cfg, out / experiment)
        wall = time.perf_counter() - t0
        per_token = step_flops(cfg.model, res["params_active"], 1)
        tps = res["tokens"] / res["wall_time_s"]
        full_steps = get_preset(experiment, preset).steps
        rows[experiment] = {"tokens_per_s": tps, "mfu": tps * per_token / peak if peak else None, "wall_s": wall,
                            "steps": steps, "projected_full_s": wall / steps * full_steps, "full_steps": full_steps,
                            "budget_s": BUDGET_S.get(preset), "preset": preset,
                            "final_val_bpb": res["final_val_bpb"], "device": res["device"], "gpu": res["gpu_name"]}
    return rows


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(s: dict[str, Any]) -> str:
    kt, c, g = s["kernel_tests"], s["codec"], s["gemm"]
    lines = [f"islands_kit GPU check: {s['device_name']} (profile {s['profile']}); torch {s['torch']}, CUDA {s['cuda']}, "
             f"kernels backend {s['backend']}", "",
             f"{'check':<34} {'result':<58}", "-" * 92,
             f"{'kernel tests (native)':<34} " + ("not run" if "passed" not in kt else
                                                  f"{kt['passed']} passed, {kt['failed']} failed, {kt['skipped']} skipped"),
             f"{'SR codec kernel (int4+EF, n=' + format(c['numel'], ',') + ')':<34} {c['gb_per_s']:.1f} GB/s = "
             f"{_fmt(c['pct_peak'], '.0%')} of HBM peak {_fmt(c['peak_gb_per_s'], '.0f')} GB/s "
             f"(copy {c['copy_gb_per_s']:.1f} GB/s)",
             f"{'grouped expert GEMM, 64 experts':<34} kernels {g['kernel_ms']:.3f} ms vs torch {g['torch_ms']:.3f} ms "
             f"fwd+bwd ({g['speedup']:.2f}x, {g['kernel_tflops']:.1f} TFLOP/s, {g['dtype']})",
             f"{'MXFP8 vs bf16 expert matmul':<34} {g['mxfp8_ms']:.3f} ms vs {g['kernel_ms']:.3f} ms fwd+bwd "
             f"({g['mxfp8_over_bf16']:.2f}x; emulated qdq, not an MXFP8 speed-up)"]
    for runs in s["runs"].values():
        for name, r in runs.items():
            budget = "" if r["budget_s"] is None else f" (budget {r['budget_s']:.0f} s)"
            lines.append(f"{r['preset'] + ' ' + name:<34} {r['tokens_per_s']:,.0f} tokens/s, MFU {_fmt(r['mfu'], '.1%')}, "
                         f"{r['wall_s']:.0f} s for {r['steps']} steps, bpb {r['final_val_bpb']:.3f}; "
                         f"{r['full_steps']} steps projected {r['projected_full_s']:.0f} s{budget}")
    lines.append("-" * 92)
    lines.append(f"total {s['total_s']:.0f} s")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/gpu_check")
    ap.add_argument("--kernel-tests-xml", default=None, help="JUnit XML of the native kernel tests (gpu_check.sh)")
    ap.add_argument("--steps", type=int, default=150, help="training steps per gpu-small experiment")
    ap.add_argument("--gpu-steps", type=int, default=30, help="training steps per gpu-preset experiment (0: skip)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny sizes and the smoke preset on the CPU")
    args = ap.parse_args()
    cuda = torch.cuda.is_available() and not args.cpu_smoke
    if not cuda and not args.cpu_smoke:
        print("gpu_check: no CUDA GPU is visible to torch (torch.cuda.is_available() is False); this check needs one. "
              "Install the CUDA torch wheel (docs/install.md, GPUs) on a machine with an NVIDIA GPU.", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = "cuda" if cuda else "cpu"
    name = torch.cuda.get_device_name() if cuda else "cpu"
    profile = profile_for_gpu(name) if cuda else None
    hw = HARDWARE[profile] if profile else None
    backend = "triton" if K.available() and cuda else "torch"
    with K.set_backend(backend):
        codec = codec_bandwidth(1 << 26 if cuda else 4096, dev, cuda, 20 if cuda else 1,
                                hw.hbm_bytes_per_s if hw else None)
        gemm = expert_gemm(32768 if cuda else 256, 2048 if cuda else 32, 1024 if cuda else 16, 64, dev, cuda,
                           20 if cuda else 1)
    peak = hw.peak_flops if hw else None
    if cuda:
        runs = {"gpu-small": training_runs("gpu-small", args.steps, out / "gpu-small", peak, {})}
        if args.gpu_steps > 0:
            runs["gpu"] = training_runs("gpu", args.gpu_steps, out / "gpu", peak, {})
    else:
        runs = {"smoke": training_runs("smoke", 4, out, None, {"device": "cpu", "threads": 1})}
    preset = "gpu-small" if cuda else "smoke"
    summary = {"device_name": name, "profile": profile, "torch": torch.__version__, "cuda": torch.version.cuda,
               "backend": backend, "kernel_tests": kernel_tests(args.kernel_tests_xml), "codec": codec, "gemm": gemm,
               "preset": preset, "steps": args.steps if cuda else 4, "runs": runs,
               "total_s": time.perf_counter() - t0}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
