"""The kit's training step vs a plain PyTorch loop of the same model and batch, per experiment (one thread).

What is compared, side by side in one run:
  * kit   — ``Experiment.train_step()`` of the experiment's preset: every island's forward/backward, routing sync,
            the strategy (gradient all-reduce, DiLoCo fragments, butterfly exchanges), clipping, the inner optimizer
            of every replica and its schedule;
  * plain — the models the experiment trains, written as a plain loop: one model on the global batch for the
            baseline (data-parallel training is one model), one replica per island for two_site and eight_cell, each
            on the kit's micro-batches (so the matrix shapes are the kit's): loss + aux loss, backward,
            ``torch.optim.AdamW`` step, ``zero_grad``; nothing else (no clipping, schedule, routing or sync).
            ``plain`` uses torch's default AdamW (what a user writes; on the CPU the per-tensor loop), ``plain-fused``
            the fused kernel, so the kit's overhead beyond the choice of kernel shows too.
The three arms alternate block by block (the order rotating each repeat), so load drifts on a shared machine hit them
alike. A block is ``--steps`` consecutive steps, timed in CPU seconds of this process (one thread: the time the step
computes, not the time other jobs hold the core); we print the median per-step time over ``--repeats`` blocks, the
median of the paired ratios kit / plain, and the ratio of the totals (which spreads the kit's periodic syncs over
every step it timed). The kit first trains ``--skip`` steps untimed: past the opening, where the gradient norm is
still above the clipping bound, a step costs what most steps of a run cost. Then tokens per CPU-second of a short
real ``run_experiment`` of each experiment (setup, training, final evaluation and result included), ``--run-steps``
steps each.

Two optional questions about the step's cost rather than the kit's overhead (where a longer demo's time would come
from):
  * ``--compile`` adds the arm ``kit-compiled``: the same experiment with ``model.compile=true`` (``torch.compile`` of
    every replica, inductor's C++ backend on the CPU), alternated with the others; the wall time of its first ``--skip``
    steps (the compilation) is printed beside the eager kit's;
  * ``--profile N`` profiles N kit steps per experiment (``torch.profiler``, self CPU time) and prints the share of
    the matrix products, attention, the optimizer and everything else (elementwise ops, copies, indexing, autograd).

    OMP_NUM_THREADS=1 python benchmarks/step_overhead.py [--preset demo] [--repeats 15] [--steps 1] [--skip 30] [--run-steps 40]
                                                          [--compile] [--profile 5]
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Callable

import torch

from islands_kit.config import EXPERIMENTS, ExperimentConfig
from islands_kit.config.presets import get_preset
from islands_kit.data import BatchStream
from islands_kit.run import Experiment, run_experiment


def lockstep_experiments() -> list[str]:
    """Every experiment of the table whose islands step together: the plain loop is one step of each replica (a
    decoupled experiment's step is a tick of its islands' own clocks, which no plain loop mirrors)."""
    return [e for e in EXPERIMENTS if not get_preset(e, "smoke").sync.traits.own_clocks]


def _config(experiment: str, preset: str, steps: int | None = None, compile: bool = False) -> ExperimentConfig:
    cfg = get_preset(experiment, preset)
    cfg.wandb_mode, cfg.progress, cfg.device, cfg.threads = "disabled", False, "cpu", 1
    cfg.model.compile = compile
    if steps is not None:
        cfg.steps = steps
    cfg.validate()
    return cfg


def plain_step(exp: Experiment, fused: bool) -> Callable[[], None]:
    """A plain training step of the models the experiment trains: one model for the baseline (data-parallel training
    is one model on the global batch, all islands' micro-batches), one per island otherwise (each replica on its
    island's batch and micro-batches). Each: forward, backward (gradients accumulated as the batch mean), AdamW."""
    cfg = exp.cfg
    o = cfg.optim
    per_island = [[ic.micro_batch_size] * (ic.batch_size // ic.micro_batch_size) for ic in cfg.islands]
    groups = [sum(per_island, [])] if cfg.sync.strategy == "ddp" else per_island
    replicas = []
    for k, sizes in enumerate(groups):
        model = copy.deepcopy(exp.islands[0].model).train()
        opt = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                                weight_decay=o.weight_decay, fused=fused or None)
        stream = BatchStream(exp.train, sum(sizes), cfg.model.seq_len, seed=cfg.seed + 1, stream_id=k)
        replicas.append((model, opt, stream, sizes))

    def step() -> None:
        for model, opt, stream, sizes in replicas:
            x, y = stream.next()  # (B, T)
            for xc, yc in zip(x.split(sizes), y.split(sizes)):
                out = model(xc, yc)
                ((out.loss + out.aux_loss) * (xc.shape[0] / x.shape[0])).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


def _time_block(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """(wall, CPU) seconds per call over ``n`` calls."""
    w, c = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    return (time.perf_counter() - w) / n, (time.process_time() - c) / n


def _past_opening(exp: Experiment, skip: int) -> float:
    """Train ``skip`` steps untimed (past the opening, where gradient clipping is still active; a compiled model
    compiles in them); their wall seconds."""
    start = time.perf_counter()
    for _ in range(skip):
        exp.train_step()
    return time.perf_counter() - start


def measure_steps(preset: str, repeats: int, steps: int, warmup: int, skip: int,
                  compile: bool = False) -> list[dict[str, float | str]]:
    rows = []
    for name in lockstep_experiments():
        exp = Experiment(_config(name, preset))
        first_s = {"kit": _past_opening(exp, skip)}
        arms: dict[str, Callable[[], object]] = {"kit": exp.train_step, "plain": plain_step(exp, fused=False),
                                                  "plain-fused": plain_step(exp, fused=True)}
        if compile:  # the same experiment with torch.compile on every replica
            compiled = Experiment(_config(name, preset, compile=True))
            first_s["kit-compiled"] = _past_opening(compiled, skip)
            arms["kit-compiled"] = compiled.train_step
        for fn in arms.values():
            _time_block(fn, warmup)
        cpu: dict[str, list[float]] = {k: [] for k in arms}
        order = list(arms)
        for r in range(repeats):
            for k in order[r % len(order):] + order[:r % len(order)]:
                cpu[k].append(_time_block(arms[k], steps)[1])
        row: dict[str, float | str] = {"experiment": name}
        for k in arms:
            row[f"{k}_ms"] = 1e3 * statistics.median(cpu[k])
        for k in ("plain", "plain-fused"):
            row[f"kit/{k}"] = statistics.median(a / b for a, b in zip(cpu["kit"], cpu[k]))
            row[f"kit/{k} (totals)"] = sum(cpu["kit"]) / sum(cpu[k])
        row["kit_tokens_per_cpu_s"] = exp.tokens_per_step / statistics.median(cpu["kit"])
        if compile:
            row["compiled/kit"] = statistics.median(a / b for a, b in zip(cpu["kit-compiled"], cpu["kit"]))
            row["compiled/kit (totals)"] = sum(cpu["kit-compiled"]) / sum(cpu["kit"])
            row["first_s_kit"], row["first_s_compiled"] = first_s["kit"], first_s["kit-compiled"]
        rows.append(row)
        print(_row_line(row), flush=True)
    if compile:
        print(f"\ntorch.compile (model.compile=true) against the eager kit step; first {skip} steps' wall time (the "
              "compilation happens in them)")
        print("| experiment | eager CPU ms/step | compiled | compiled / eager, median (totals) | first steps, eager s | "
              "first steps, compiled s |")
        print("|---|---:|---:|---:|---:|---:|")
        for row in rows:
            print(f"| {row['experiment']} | {row['kit_ms']:.0f} | {row['kit-compiled_ms']:.0f} | "
                  f"{row['compiled/kit']:.3f} ({row['compiled/kit (totals)']:.3f}) | {row['first_s_kit']:.1f} | "
                  f"{row['first_s_compiled']:.1f} |", flush=True)
    return rows


# self-CPU time of profiler events, by what they are (the first matching prefix wins; the rest is "other")
PROFILE_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::_grouped_mm", "aten::matmul")),
    ("attention", ("aten::_scaled_dot_product", "aten::scaled_dot_product")),
    ("optimizer", ("aten::_fused_adamw", "aten::_foreach_")),
)


def profile_group(name: str) -> str:
    """The ``PROFILE_GROUPS`` group of a profiler event name ("other" when none matches)."""
    for group, prefixes in PROFILE_GROUPS:
        if name.startswith(prefixes):
            return group
    return "other"


def profile_steps(preset: str, n_steps: int, skip: int) -> None:
    """Share of each experiment's kit step by kind of work (self CPU time over ``n_steps`` profiled steps)."""
    from torch.profiler import ProfilerActivity, profile

    print(f"\nwhere the kit step's CPU time goes ({n_steps} profiled steps after {skip} untimed; self CPU time)")
    groups = [g for g, _ in PROFILE_GROUPS] + ["other"]
    print("| experiment | ms/step (profiled) | " + " | ".join(groups) + " |")
    print("|---|---:|" + "---:|" * len(groups))
    for name in lockstep_experiments():
        exp = Experiment(_config(name, preset))
        _past_opening(exp, skip)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(n_steps):
                exp.train_step()
        self_us = {g: 0.0 for g in groups}
        for ev in prof.key_averages():
            self_us[profile_group(ev.key)] += ev.self_cpu_time_total
        total = sum(self_us.values())
        shares = " | ".join(f"{100 * self_us[g] / total:.0f}%" for g in groups)
        print(f"| {name} | {total / 1e3 / n_steps:.0f} | {shares} |", flush=True)


def _row_line(row: dict[str, float | str]) -> str:
    return (f"| {row['experiment']} | {row['kit_ms']:.0f} | {row['plain_ms']:.0f} | {row['plain-fused_ms']:.0f} | "
            f"{row['kit/plain']:.3f} ({row['kit/plain (totals)']:.3f}) | "
            f"{row['kit/plain-fused']:.3f} ({row['kit/plain-fused (totals)']:.3f}) | "
            f"{row['kit_tokens_per_cpu_s']:,.0f} |")


def measure_runs(preset: str, run_steps: int) -> list[tuple[str, int, float, float]]:
    """(experiment, tokens, CPU seconds, wall seconds) of a short real run of each experiment."""
    out = []
    for name in lockstep_experiments():
        cfg = _config(name, preset, steps=run_steps)
        w, c = time.perf_counter(), time.process_time()
        res = run_experiment(cfg)
        cpu, wall = time.process_time() - c, time.perf_counter() - w
        out.append((name, int(res.tokens), cpu, wall))
        print(f"| {name} | {run_steps} | {res.tokens:,} | {cpu:.1f} | {res.tokens / cpu:,.0f} |", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--steps", type=int, default=1, help="steps per timed block")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--skip", type=int, default=30, help="kit steps trained untimed first, so the timed ones look like "
                    "most of a run's (gradient norm below the clipping bound)")
    ap.add_argument("--run-steps", type=int, default=40, help="steps of the short real runs (0: skip them)")
    ap.add_argument("--compile", action="store_true", help="add the arm kit-compiled (model.compile=true)")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="profile N kit steps per experiment (0: no)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, preset {args.preset}, {args.skip} kit steps "
          f"untimed, then {args.repeats} blocks of {args.steps} step(s) per arm")
    print("| experiment | kit CPU ms/step | plain | plain-fused | kit / plain, median (totals) | "
          "kit / plain-fused, median (totals) | kit tokens per CPU-s (step) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    measure_steps(args.preset, args.repeats, args.steps, args.warmup, args.skip, compile=args.compile)
    if args.profile > 0:
        profile_steps(args.preset, args.profile, args.skip)
    if args.run_steps > 0:
        print(f"\nshort real runs (run_experiment, --set steps={args.run_steps}; setup and final evaluation included)")
        print("| experiment | steps | tokens | CPU s | tokens per CPU-s |")
        print("|---|---:|---:|---:|---:|")
        measure_runs(args.preset, args.run_steps)


if __name__ == "__main__":
    main()
