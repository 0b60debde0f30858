"""Scaling study: how the two_site and eight_cell gaps to the synchronous baseline move with training length and
model width (a cross, not a full grid), beside the published reference points.

``run_study`` trains baseline / two_site / eight_cell at every point of the cross — ``lengths`` (inner steps) at one
width, and ``widths`` (d_model; heads and expert width follow) at one length — from a base preset, each point at
every seed; a finished run (its result.json) is reused, so an interrupted study resumes where it stopped.
``study_table`` reads the results back: per point the parameters, training FLOPs (6 · active params · tokens), each
strategy's bpb and its ratio to the baseline at the same seed. ``plots.scaling_ratios`` draws ratio vs FLOPs.

Published points (final eval loss, DiLoCo vs data-parallel at the same compute): Charles et al. 2025, "Scaling Laws
for DiLoCo", Table 4; Douillard et al. 2025, Streaming DiLoCo (M = 2, FP4 outer gradients). Their training budgets
follow Chinchilla (about 20 tokens per parameter), so their FLOPs are taken as 6 · N · 20 N — an assumption stated
wherever the points are drawn.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from islands_kit.config import ConfigError, ExperimentConfig, apply_overrides
from islands_kit.config.experiment_table import SCALING_EXPERIMENTS as EXPERIMENTS
from islands_kit.config.experiment_table import is_reference
from islands_kit.config.presets import get_preset
from islands_kit.references import CHINCHILLA_TOKENS_PER_PARAM, REFERENCE_DILOCO_M2, REFERENCE_DILOCO_M8, REFERENCE_STREAMING_M2, reference_flops
from islands_kit.run import run_experiment

__all__ = ["CHINCHILLA_TOKENS_PER_PARAM", "EXPERIMENTS", "REFERENCE_DILOCO_M2", "REFERENCE_DILOCO_M8",
           "REFERENCE_STREAMING_M2", "reference_flops"]

@dataclass(frozen=True)
class Point:
    steps: int
    width: int
    axis: str  # "length", "width" or "both" (the point where the two arms of the cross meet)


def cross(lengths: Sequence[int], widths: Sequence[int], width_at: int, length_at: int) -> list[Point]:
    """The points of the cross: every length at ``width_at``, every width at ``length_at`` (the shared point once)."""
    for name, vals in (("lengths", lengths), ("widths", widths)):
        if not vals or any(not isinstance(v, int) or v < 1 for v in vals):
            raise ConfigError(f"scaling.{name}: must be a non-empty list of integers >= 1 (got {list(vals)!r})")
    pts: dict[tuple[int, int], str] = {}
    for s in lengths:
        pts[(s, width_at)] = "length"
    for w in widths:
        pts[(length_at, w)] = "both" if (length_at, w) in pts else "width"
    return [Point(s, w, a) for (s, w), a in sorted(pts.items(), key=lambda kv: (kv[0][1], kv[0][0]))]


def point_config(experiment: str, preset: str, point: Point, seed: int,
                 overrides: Mapping[str, Any] | None = None) -> ExperimentConfig:
    """The base preset of ``experiment`` resized to the point: d_model = d_expert = width, heads = width / 32 (at
    least 2), ``steps`` inner steps with 10% warm-up and eight evaluations; then ``overrides`` (per experiment
    settings such as tuned learning rates)."""
    w = point.width
    heads = max(2, w // 32)
    if w % heads or (w // heads) % 2:
        raise ConfigError(f"scaling.widths: width {w} must split into {heads} heads of even size")
    sets: dict[str, Any] = {
        "model.d_model": w, "model.d_expert": w, "model.n_heads": heads, "steps": point.steps,
        "eval_every": max(1, point.steps // 8), "optim.warmup_steps": max(1, point.steps // 10), "seed": seed,
        "progress": False,
    }
    sets.update(overrides or {})
    return apply_overrides(get_preset(experiment, preset), sets)


def run_dir(out: Path, experiment: str, point: Point, seed: int) -> Path:
    return Path(out) / experiment / f"w{point.width}-s{point.steps}" / f"seed{seed}"


def run_study(out: str | Path, preset: str, lengths: Sequence[int], widths: Sequence[int], width_at: int,
              length_at: int, seeds: Sequence[int] = (0,), overrides: Mapping[str, Mapping[str, Any]] | None = None,
              experiments: Sequence[str] = EXPERIMENTS, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Train every (point, experiment, seed) not yet finished under ``out`` and return ``study_table``.

    ``overrides``: per experiment ``--set``-style settings (e.g. the tuned ``optim.lr`` of each arm). Configs are
    built and validated for every run before the first one starts, so a bad setting stops the study at once."""
    out = Path(out)
    points = cross(lengths, widths, width_at, length_at)
    jobs = [(p, e, s, point_config(e, preset, p, s, (overrides or {}).get(e)))
            for p in points for s in seeds for e in experiments]
    todo = [j for j in jobs if not (run_dir(out, j[1], j[0], j[2]) / "result.json").exists()]
    log(f"scaling study: {len(jobs)} runs, {len(jobs) - len(todo)} already finished, {len(todo)} to go -> {out}")
    t0, done_steps = time.time(), 0
    total_steps = sum(j[0].steps * len(j[3].islands) for j in todo)  # rough cost: replica-steps
    for k, (p, e, s, cfg) in enumerate(todo, 1):
        log(f"[{k}/{len(todo)}] {e} width {p.width} steps {p.steps} seed {s} ...")
        t1 = time.time()
        res = run_experiment(cfg, run_dir(out, e, p, s))
        done_steps += p.steps * len(cfg.islands)
        rate = done_steps / max(1e-9, time.time() - t0)
        eta = (total_steps - done_steps) / rate if rate > 0 else float("nan")
        log(f"[{k}/{len(todo)}] {e} width {p.width} steps {p.steps} seed {s}: bpb {res['final_val_bpb']:.4f} "
            f"in {time.time() - t1:.0f} s, about {eta / 60:.0f} min left")
    return study_table(out, points, seeds, experiments)


def study_table(out: str | Path, points: Sequence[Point], seeds: Sequence[int],
                experiments: Sequence[str] = EXPERIMENTS) -> list[dict[str, Any]]:
    """One row per (point, seed) with every finished strategy: bpb, ratio to the baseline at the same seed, FLOPs."""
    rows = []
    for p in points:
        for s in seeds:
            res = {}
            for e in experiments:
                f = run_dir(Path(out), e, p, s) / "result.json"
                if f.exists():
                    res[e] = json.loads(f.read_text())
            if not res:
                continue
            any_res = next(iter(res.values()))
            row: dict[str, Any] = {"steps": p.steps, "width": p.width, "axis": p.axis, "seed": s,
                                   "params_total": any_res["params_total"], "params_active": any_res["params_active"],
                                   "tokens": any_res["tokens"],
                                   "flops": 6.0 * any_res["params_active"] * any_res["tokens"]}
            for e, r in res.items():
                row[f"{e}_bpb"] = r["final_val_bpb"]
            base = next((row.get(f"{e}_bpb") for e in experiments if is_reference(e)), None)
            for e in experiments:
                if not is_reference(e) and base and row.get(f"{e}_bpb") is not None:
                    row[f"{e}_ratio"] = row[f"{e}_bpb"] / base
            rows.append(row)
    return rows


def table_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The study as a Markdown table (one row per point and seed)."""
    columns = [f"{e} bpb" if is_reference(e) else f"{e} bpb (ratio)" for e in EXPERIMENTS]
    head = "| axis | width | steps | seed | params (active) | FLOPs | " + " | ".join(columns) + " |\n|" + "---|" * (6 + len(columns))
    lines = [head]
    for r in rows:
        def cell(e: str) -> str:
            b = r.get(f"{e}_bpb")
            return "—" if b is None else f"{b:.4f} ({r[f'{e}_ratio']:.4f})" if f"{e}_ratio" in r else f"{b:.4f}"
        lines.append(f"| {r['axis']} | {r['width']} | {r['steps']} | {r['seed']} | {r['params_total']:,} "
                     f"({r['params_active']:,}) | {r['flops']:.2e} | " + " | ".join(cell(e) for e in EXPERIMENTS) + " |")
    return "\n".join(lines)
