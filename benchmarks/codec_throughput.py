"""Encode + decode throughput of every wire codec (torch implementation), side by side in one run.

MB/s counts the float32 input (4 bytes per value), so codecs compare on the same work. Medians over repeats.
Useful as the baseline for a fused Triton kernel.

    python benchmarks/codec_throughput.py [--numel 4194304] [--block 128] [--repeats 7] [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from islands_kit.comm.codecs import get_codec
from islands_kit.config.codec_registry import CODECS


def _timed(fn, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=1 << 22)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    x = torch.randn(args.numel, generator=torch.Generator().manual_seed(0)).to(args.device)
    mb = 4 * args.numel / 1e6
    print(f"numel={args.numel} ({mb:.1f} MB fp32)  block={args.block}  device={args.device}  threads={torch.get_num_threads()}")
    print(f"{'codec':<10} {'bytes/fp32':>10} {'enc RTN':>9} {'enc SR':>9} {'decode':>9} {'enc+dec SR':>11}   (MB/s)")
    for name in CODECS:
        c = get_codec(name, args.block)
        gen = torch.Generator(device=args.device).manual_seed(1)
        p = c.encode(x, stochastic=True, generator=gen)  # warm-up
        c.decode(p)
        enc_rtn, enc_sr, dec = [], [], []
        for _ in range(args.repeats):
            enc_rtn.append(_timed(lambda: c.encode(x), args.device))
            enc_sr.append(_timed(lambda: c.encode(x, stochastic=True, generator=gen), args.device))
            dec.append(_timed(lambda: c.decode(p), args.device))
        m_rtn, m_sr, m_dec = (statistics.median(t) for t in (enc_rtn, enc_sr, dec))
        print(f"{name:<10} {p.nbytes / (4 * args.numel):>10.4f} {mb / m_rtn:>9.0f} {mb / m_sr:>9.0f} {mb / m_dec:>9.0f} "
              f"{mb / (m_sr + m_dec):>11.0f}")


if __name__ == "__main__":
    main()
