"""Decoupled vs lock-step islands (sync.mode), side by side: two_site with a slow site B, and a chaos run.

    python benchmarks/decoupled.py --preset demo --seeds 0 1 2 --out runs/decoupled-demo [--jobs 2] [--write-results]

Slow site: site B is a ``--factor``x straggler (faults.straggler_island=1). Lock-step trains ``steps`` inner steps, each
waiting for site B. Decoupled runs two lengths of the global schedule (ticks of site A's step):
  * equal simulated time: ``steps * factor`` ticks — site A takes that many steps, site B ``steps``;
  * equal tokens: the ticks N with N·b_A + (N / factor)·b_B = steps·(b_A + b_B).
Each is paired per seed with lock-step (same initial weights and data order) and reported as a bpb ratio.

Chaos: site A a 1.5x straggler, site B preempted for a fifth of the run from a third in, 5% of link chunks lost;
data-parallel (the baseline experiment: the job stalls while B is away), lock-step two_site (goes on without B)
and decoupled two_site, ``steps`` steps / ticks each; goodput = useful tokens per simulated second against every island
at full speed (result.json ``goodput``). Finished runs (their result.json) are reused, so the command resumes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.io import replace_marked_block
from islands_kit.stats import paired_ratio


def arms(preset: str, factor: float) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (experiment, --set overrides) for every run of the comparison."""
    cfg = get_preset("two_site", preset)
    S = cfg.steps
    b_a, b_b = cfg.islands[0].batch_size, cfg.islands[1].batch_size
    slow = {"faults.straggler_island": 1, "faults.straggler_factor": factor}
    t_time = round(S * factor)
    t_tokens = round(S * (b_a + b_b) / (b_a + b_b / factor))
    chaos = {"faults.straggler_island": 0, "faults.straggler_factor": 1.5, "faults.preempt_island": 1,
             "faults.preempt_start": S // 3, "faults.preempt_steps": S // 5, "link.loss_prob": 0.05}
    ev = max(1, S // 6)
    return {
        "lockstep": ("two_site", {**slow}),
        "decoupled_equal_time": ("two_site", {**slow, "sync.mode": "decoupled", "steps": t_time,
                                              "eval_every": max(1, t_time // 6)}),
        "decoupled_equal_tokens": ("two_site", {**slow, "sync.mode": "decoupled", "steps": t_tokens,
                                                "eval_every": max(1, t_tokens // 6)}),
        "chaos_data_parallel": ("baseline", {**chaos, "eval_every": ev}),
        "chaos_lockstep": ("two_site", {**chaos, "eval_every": ev}),
        "chaos_decoupled": ("two_site", {**chaos, "sync.mode": "decoupled", "eval_every": ev}),
    }


def _run(job: tuple[str, str, dict[str, Any], str]) -> str:
    from islands_kit.run import run_experiment

    experiment, preset, sets, out = job
    if (Path(out) / "result.json").exists():  # another invocation finished it meanwhile
        return f"{out}: already finished"
    cfg = apply_overrides(get_preset(experiment, preset), {**sets, "threads": 1, "progress": False,
                                                            "wandb_mode": "disabled"})
    t0 = time.time()
    res = run_experiment(cfg, out)
    return f"{out}: bpb {res['final_val_bpb']:.4f} goodput {res['goodput']:.3f} in {time.time() - t0:.0f} s"


def run_all(out: Path, preset: str, seeds: list[int], factor: float, chaos_seeds: list[int], jobs: int,
            only: list[str] | None = None) -> None:
    todo = []
    for name, (exp, sets) in arms(preset, factor).items():
        if only and name not in only:
            continue
        for s in (chaos_seeds if name.startswith("chaos") else seeds):
            d = out / name / f"seed{s}"
            if not (d / "result.json").exists():
                todo.append((exp, preset, {**sets, "seed": s}, str(d)))
    print(f"decoupled comparison: {len(todo)} runs to go -> {out}", flush=True)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for k, msg in enumerate(pool.map(_run, todo), 1):
            print(f"[{k}/{len(todo)}] {msg}", flush=True)


def load(out: Path, name: str, seed: int) -> dict[str, Any] | None:
    f = out / name / f"seed{seed}" / "result.json"
    return json.loads(f.read_text()) if f.exists() else None


def report(out: Path, preset: str, seeds: list[int], factor: float, chaos_seeds: list[int]) -> str:
    A = arms(preset, factor)
    lines = [f"## Decoupled vs lock-step islands ({preset} preset; benchmarks/decoupled.py)", "",
             f"Site B a {factor:g}x straggler. Lock-step: {get_preset('two_site', preset).steps} inner steps, each "
             "waiting for B. Decoupled: every island steps on its own clock; merges from quorum 1 + grace "
             f"{get_preset('two_site', preset).sync.grace_s:g} s (the defaults). Ratios paired per seed "
             f"(seeds {seeds}): geometric mean [95% paired t interval] n, then the seeds' range (min..max); \"not "
             "resolved\" when the interval holds 1 (`islands_kit.stats`).", "",
             "| arm | schedule steps | inner steps A / B | tokens | simulated s | goodput | val bpb | / lock-step |",
             "|---|---|---|---|---|---|---|---|"]
    for name in ("lockstep", "decoupled_equal_time", "decoupled_equal_tokens"):
        rs = [load(out, name, s) for s in seeds]
        base = [load(out, "lockstep", s) for s in seeds]
        if not all(rs):
            lines.append(f"| {name} | not run yet |  |  |  |  |  |  |")
            continue
        pairs = [(r["final_val_bpb"], b["final_val_bpb"]) for r, b in zip(rs, base) if b]
        stat = paired_ratio([a for a, _ in pairs], [b for _, b in pairs]) if pairs else None
        r0 = rs[0]
        lines.append(
            f"| {name} | {r0['steps']} | {r0['inner_steps']['0']} / {r0['inner_steps']['1']} | {r0['tokens']:,} | "
            f"{statistics.mean(r['sim_wall_clock_s'] for r in rs):.1f} | {statistics.mean(r['goodput'] for r in rs):.3f} | "
            f"{statistics.mean(r['final_val_bpb'] for r in rs):.4f} | "
            + (f"{stat.text()} ({min(stat.ratios):.4f}..{max(stat.ratios):.4f}) |" if stat else "— |"))
    lines += ["", "Chaos (site A a 1.5x straggler, site B preempted for a fifth of the run from a third in, 5% chunk "
              f"loss; seeds {chaos_seeds}):", "",
              "| arm | inner steps A / B | tokens | simulated s | goodput | val bpb | late / dropped merges |",
              "|---|---|---|---|---|---|---|"]
    for name in ("chaos_data_parallel", "chaos_lockstep", "chaos_decoupled"):
        rs = [load(out, name, s) for s in chaos_seeds]
        if not all(rs):
            lines.append(f"| {name} | not run yet |  |  |  |  |  |")
            continue
        r0 = rs[0]
        d = r0.get("decoupled") or {}
        lines.append(
            f"| {name} ({A[name][0]}) | {r0['inner_steps']['0']} / {r0['inner_steps']['1']} | {r0['tokens']:,} | "
            f"{statistics.mean(r['sim_wall_clock_s'] for r in rs):.1f} | {statistics.mean(r['goodput'] for r in rs):.3f} | "
            f"{statistics.mean(r['final_val_bpb'] for r in rs):.4f} | "
            f"{d.get('late_contributions', '—')} / {d.get('dropped_contributions', '—')} |")
    lines += ["", f"Command: `python benchmarks/decoupled.py --preset {preset} --seeds {' '.join(map(str, seeds))} "
              f"--chaos-seeds {' '.join(map(str, chaos_seeds))} --out {out}` (resumable; `--report` re-prints this)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--chaos-seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--factor", type=float, default=2.0, help="site B's straggler factor (>= 1)")
    ap.add_argument("--out", default=None, help="run folder (default runs/decoupled-PRESET)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--arms", nargs="+", default=None, metavar="ARM",
                    help="train only these arms (default: all; two invocations with disjoint arms run side by side)")
    ap.add_argument("--report", action="store_true", help="print the table from finished runs, train nothing")
    ap.add_argument("--write-results", action="store_true", help="write the table into benchmarks/RESULTS.md")
    a = ap.parse_args(argv)
    if a.factor < 1 or a.jobs < 1:
        ap.error("--factor: must be >= 1; --jobs: must be >= 1")
    out = Path(a.out or f"runs/decoupled-{a.preset}")
    known = list(arms(a.preset, a.factor))
    if a.arms and any(x not in known for x in a.arms):
        ap.error(f"--arms: must name arms among {', '.join(known)} (got {' '.join(a.arms)})")
    if not a.report:
        run_all(out, a.preset, a.seeds, a.factor, a.chaos_seeds, a.jobs, a.arms)
    text = report(out, a.preset, a.seeds, a.factor, a.chaos_seeds)
    print(text)
    if a.write_results:
        replace_marked_block(Path(__file__).with_name("RESULTS.md"), "decoupled", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
