"""The orbital study's rows in the design's own units, from their runs' result.json alone (``protocol/report.py``
adds these fields to every row whose runs carry ``orbit_budget``, ``train/orbit.py``).

Time compression makes an orbital run's simulated seconds incomparable with the ground's, so a row is read in
orbital time instead: per seed, the days of orbit its tokens took, the bytes over the ground link and over the
inter-satellite links, and the days the ground baseline's hardware needs for the same tokens; and how many days of
orbit the satellites need to reach the ground baseline's quality, with a t interval over the seeds, or "not reached
in N days".

Reaching the baseline's quality. A validation curve scores the same bytes at every point but its last, the final
score on the final bytes (``train/experiment.py``): the row's curve points are compared with the baseline's last
curve point before its final score (the same bytes), and the row's final score with the baseline's final score.
The first crossing, linear in tokens between two evaluations, is turned into days at the run's mean rate (days of
orbit per token over the run: the eclipses repeat every orbit, a few steps at the demo, so the rate is steady);
a row whose curve never crosses and whose final score stays above the baseline's has "not reached in N days" (N: its
run's days of orbit). The baseline is paired per seed, as every ratio is.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Mapping, Sequence

from islands_kit.stats import t_quantile

Result = Mapping[str, Any]


def crossing_tokens(curve: Sequence[Sequence[float]], final: float, target_curve: float,
                    target_final: float) -> float | None:
    """The tokens at which a run first reaches a quality: its curve (``[[tokens, bpb], ...]``, the last point the
    final score) against ``target_curve`` on the curve's bytes, linear between evaluations; else its last point when
    its ``final`` score is at or below ``target_final``; else None."""
    pts = [(float(t), float(b)) for t, b in curve[:-1] if math.isfinite(b)]
    for i, (t, b) in enumerate(pts):
        if b <= target_curve:
            if i == 0:
                return t
            t0, b0 = pts[i - 1]
            return t0 + (t - t0) * (b0 - target_curve) / (b0 - b)
    if curve and math.isfinite(final) and final <= target_final:
        return float(curve[-1][0])
    return None


def _target(ref: Result) -> tuple[float, float]:
    """The baseline's quality on the curve's bytes (its last point before the final score) and on the final bytes."""
    curve = ref["val_curve"]
    on_curve = float(curve[-2][1]) if len(curve) >= 2 else float(ref["final_val_bpb"])
    return on_curve, float(ref["final_val_bpb"])


def days_to_quality(run: Result, ref: Result) -> float | None:
    """Days of orbit ``run`` took to reach ``ref``'s quality (module doc); None when it did not."""
    budget = run["orbit_budget"]
    tokens = crossing_tokens(run["val_curve"], float(run["final_val_bpb"]), *_target(ref))
    if tokens is None:
        return None
    return float(budget["orbital_days"]) * tokens / max(1, int(budget["tokens"]))


def _interval(values: Sequence[float]) -> list[float] | None:
    if len(values) < 2:
        return None
    half = t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    m = statistics.fmean(values)
    return [m - half, m + half]


def verdict(days: Sequence[float | None], run_days: Sequence[float]) -> dict[str, Any]:
    """Days to the baseline's quality over seeds: mean and 95% t interval when every seed reached it, else the words
    "not reached in N days" (N: the shortest run of the seeds that did not) with how many seeds did."""
    reached = [d for d in days if d is not None]
    n = len(days)
    if n and len(reached) == n:
        m, ci = statistics.fmean(reached), _interval(reached)
        text = f"{m:.3g} days" + (f" [{ci[0]:.3g}, {ci[1]:.3g}], n={n}" if ci else f", n={n} (no interval)")
        return {"mean": m, "ci95": ci, "n": n, "reached": n, "text": text}
    short = min((r for d, r in zip(days, run_days) if d is None), default=0.0)
    text = f"not reached in {short:.3g} days" + (f" ({len(reached)} of {n} seeds reached it)" if reached else "")
    return {"mean": None, "ci95": None, "n": n, "reached": len(reached), "text": text if n else "no runs"}


def row_fields(mine: Mapping[int, Result], baseline: Mapping[int, Result]) -> dict[str, Any]:
    """A row's ``orbit_units``: per seed (its finished seeds, in order) its days of orbit, tokens, ground-link and
    inter-satellite bytes and the ground baseline's days for those tokens; and, over the seeds the baseline shares,
    the days of orbit to the baseline's quality. Nothing for a row whose runs neither fly nor throttle."""
    seeds = sorted(s for s, r in mine.items() if "orbit_budget" in r)
    if not seeds:
        return {}
    b = {s: mine[s]["orbit_budget"] for s in seeds}
    paired = [s for s in seeds if s in baseline]
    days = [days_to_quality(mine[s], baseline[s]) for s in paired]
    return {"orbit_units": {
        "seeds": seeds,
        "orbital_days": [b[s]["orbital_days"] for s in seeds],
        "tokens": [b[s]["tokens"] for s in seeds],
        "ground_link_bytes": [b[s]["ground_link_bytes"] for s in seeds],
        "isl_bytes": [b[s]["isl_bytes"] for s in seeds],
        "ground_baseline_days": [b[s]["ground_baseline_days"] for s in seeds],
        "days_to_baseline_quality": {"seeds": paired, "days": days,
                                     **verdict(days, [b[s]["orbital_days"] for s in paired])},
    }}


def lines(entry: Mapping[str, Any]) -> list[str]:
    """A row's ``orbit_units`` in words (the notebook prints them; empty for a row without them)."""
    u = entry.get("orbit_units")
    if not u:
        return []
    mean = statistics.fmean
    return [f"{entry.get('row', '')}: {mean(u['orbital_days']):.3g} days of orbit for {mean(u['tokens']):,.0f} tokens "
            f"(the ground baseline's hardware: {86400 * mean(u['ground_baseline_days']):.3g} s); "
            f"{mean(u['ground_link_bytes']):,.0f} bytes over the ground link, {mean(u['isl_bytes']):,.0f} over "
            f"inter-satellite links; the baseline's quality: {u['days_to_baseline_quality']['text']}"]


def effects(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The study report's rows (``benchmarks/orbital-demo.json``; its first machine's, the most complete), each with
    its ratio against its control and against the baseline (mean, 95% interval, n) and its tokens: what each effect
    costs, in the file's order."""
    rows = [e for e in doc.get("entries", []) if e.get("kind") == "row"]
    first = rows[0].get("machine") if rows else None
    out = []
    for e in rows:
        if e.get("machine") != first:
            continue
        pick = {k: {f: (e.get(k) or {}).get(f) for f in ("ratio_mean", "ratio_ci95", "ratio_n")}
                for k in ("vs_control", "vs_ref")}
        out.append({"row": e["row"], "control": e.get("control"), "tokens": e.get("tokens", []), **pick,
                    "orbit_units": e.get("orbit_units")})
    return out


def effect_lines(doc: Mapping[str, Any]) -> list[str]:
    """Each effect in words: the row, its ratio against its control and against the baseline, each with its 95%
    interval ("not resolved" when the interval holds 1), then its units (``lines``)."""
    def ratio(r: Mapping[str, Any]) -> str:
        if r.get("ratio_mean") is None:
            return "no paired seeds yet"
        ci, n = r.get("ratio_ci95"), r.get("ratio_n")
        if not ci:
            return f"{r['ratio_mean']:.4f}x (n={n}, no interval)"
        word = "not resolved" if ci[0] <= 1.0 <= ci[1] else ("worse" if ci[0] > 1.0 else "better")
        return f"{r['ratio_mean']:.4f}x [{ci[0]:.4f}, {ci[1]:.4f}], n={n}: {word}"
    out = []
    for e in effects(doc):
        out.append(f"{e['row']}: vs {e['control']} {ratio(e['vs_control'])}; vs the baseline {ratio(e['vs_ref'])}")
        out += ["  " + line for line in lines(e)]
    return out
