"""Codec accuracy ablation on synthetic outer gradients: one-shot error (RTN vs SR) and long-run drift with and
without error feedback, side by side with the bytes each codec sends.

The vector is heavy-tailed (Student-t, 3 degrees of freedom) like real outer gradients. "drift" is the relative
error of the mean of ``syncs`` decoded copies of the same vector, i.e. how far the accumulated update strays from the
true one: without EF, RTN error repeats every sync; SR averages out as 1/sqrt(n); EF bounds the sum's error by one
residual (1/n).

    python benchmarks/codecs_ablation_unit.py [--numel 65536] [--block 128] [--syncs 50]
"""
from __future__ import annotations

import argparse

import torch

from islands_kit.comm.codecs import ErrorFeedback, get_codec
from islands_kit.config.codec_registry import CODECS


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def drift(x: torch.Tensor, name: str, block: int, syncs: int, stochastic: bool, ef: bool) -> float:
    c, fb, g = get_codec(name, block), ErrorFeedback(enabled=ef), torch.Generator().manual_seed(0)
    acc = torch.zeros_like(x, dtype=torch.float64)
    for _ in range(syncs):
        acc += fb.compress("k", x, c, stochastic=stochastic, generator=g)[1].double()
    return rel(acc / syncs, x.double())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=1 << 16)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--syncs", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    x = torch.distributions.StudentT(3.0).sample((args.numel,)) * 1e-3
    print(f"numel={args.numel} block={args.block} syncs={args.syncs}; relative L2 errors")
    print(f"{'codec':<10} {'bits/val':>8} {'x fp32':>7} {'RTN 1x':>8} {'SR 1x':>8} "
          f"{'RTN drift':>10} {'SR drift':>9} {'RTN+EF':>9} {'SR+EF':>9}")
    for name in CODECS:
        c = get_codec(name, args.block)
        nb = c.nbytes(args.numel)
        one_rtn = rel(c.decode(c.encode(x)), x)
        one_sr = rel(c.decode(c.encode(x, stochastic=True, generator=torch.Generator().manual_seed(1))), x)
        d = [drift(x, name, args.block, args.syncs, s, e) for e in (False, True) for s in (False, True)]
        print(f"{name:<10} {8 * nb / args.numel:>8.3f} {4 * args.numel / nb:>7.2f} {one_rtn:>8.2e} {one_sr:>8.2e} "
              f"{d[0]:>10.2e} {d[1]:>9.2e} {d[2]:>9.2e} {d[3]:>9.2e}")


if __name__ == "__main__":
    main()
