"""Step time of ``optim.name=muon`` against ``optim.name=adamw`` on the demo model, both built as a run builds them
(``optim.build.build_optimizer``: fused AdamW where torch has it; Muon on the hidden matrices with AdamW on the rest).

Two figures, measured side by side in one process (the two optimizers alternate window by window, the order flipping
each repeat, so load drifts hit both alike):
  * step only — ``optimizer.step()`` alone (forward/backward run untimed before it);
  * full      — forward + backward + step.
A sample is a window of ``--window`` consecutive steps; printed: the median per-step time over ``--repeats`` windows
and the ratios Muon / AdamW, median and range over the repeats' paired windows. Times are this process's CPU seconds
(``time.process_time``; one torch thread): on a shared box wall time would also count the other jobs' turns.

    OMP_NUM_THREADS=1 python benchmarks/muon_step.py [--repeats 7] [--window 5] [--batch 40]

``--only NAME`` trains that optimizer alone for ``--repeats x --window`` steps and prints nothing else: one side of a
paired whole-process timing (``farm-bench -- python benchmarks/muon_step.py --only muon --vs '... --only adamw'``).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from step_timing import window  # benchmarks/step_timing.py, beside this script
from torch import nn

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.model import ByteTransformer
from islands_kit.optim.build import build_optimizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--window", type=int, default=5, help="steps per sample")
    ap.add_argument("--batch", type=int, default=40, help="sequences per step (the demo baseline's global batch: 40)")
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--only", choices=("adamw", "muon"), default=None, help="train this one alone, untimed")
    args = ap.parse_args()

    base = get_preset("baseline", args.preset)
    cfgs = {name: apply_overrides(base, {"optim.name": name}) for name in ("adamw", "muon")}
    torch.manual_seed(0)
    model = ByteTransformer(base.model)
    models = {"adamw": model, "muon": copy.deepcopy(model)}
    opts = {k: build_optimizer(models[k], cfgs[k].optim) for k in models}
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(0, 256, (args.batch, base.model.seq_len + 1), generator=g)
    x, y = seq[:, :-1], seq[:, 1:]

    def loss_fn(m: nn.Module) -> torch.Tensor:
        out = m(x, y)
        return out.loss + out.aux_loss

    def timed(k: str, steps: int) -> tuple[float, float]:
        return window(models[k], opts[k], loss_fn, steps, clock=time.process_time)
    if args.only:
        timed(args.only, args.repeats * args.window)
        return
    for k in opts:  # warm-up: allocator, lazy state, first kernels
        timed(k, 2)
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in opts}
    for r in range(args.repeats):
        for k in (("adamw", "muon") if r % 2 == 0 else ("muon", "adamw")):
            samples[k].append(timed(k, args.window))
    med = {k: (statistics.median(s[0] for s in v), statistics.median(s[1] for s in v)) for k, v in samples.items()}
    ratios = [[m[i] / a[i] for a, m in zip(samples["adamw"], samples["muon"])] for i in (0, 1)]

    n_params = sum(p.numel() for p in model.parameters())
    m = base.model
    print(f"model: {args.preset} (d_model {m.d_model}, {m.n_layers} layers, {m.n_experts} experts of d_expert "
          f"{m.d_expert}), {n_params / 1e6:.3f} M params, batch {args.batch} x {m.seq_len}, threads "
          f"{torch.get_num_threads()}; medians over {args.repeats} windows of {args.window} steps")
    print(f"{'CPU time':8s} {'step only (ms)':>15s} {'fwd+bwd+step (ms)':>18s}")
    for k in opts:
        print(f"{k:8s} {med[k][0] * 1e3:15.1f} {med[k][1] * 1e3:18.1f}")
    for i, what in enumerate(("step only", "full step")):
        r = ratios[i]
        print(f"ratio muon/adamw, {what}: {statistics.median(r):.2f}x (paired windows: {min(r):.2f}..{max(r):.2f})")


if __name__ == "__main__":
    main()
