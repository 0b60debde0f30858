"""The scaling trend's figure (``benchmarks/scaling-trend.json``, islands_kit/scaling/trend.py), three panels:

1. each island arm's gap against active parameters: our points with their paired intervals, the gap each law gives
   over the measured range (the preferred loss law's solid, the gap's own power law + offset dashed), the recorded
   prediction at the next width, and the verdict in words (which law the data prefer; whether a crossing or parity
   size is identifiable);
2. the same gaps beside the published grid: ours at active (filled) and at total parameters (open: the MoE counts
   every expert), Charles et al.'s M = 2 and M = 8 columns (dense: active = total) with this kit's fit to them;
3. the two-site gap against training tokens (the length axis, as measured).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from islands_kit.plots.style import color, new_figure
from islands_kit.scaling import laws, references

PUBLISHED_MARKERS = {"M=2": "^", "M=8": "v"}


def _points(entries: Sequence[Mapping[str, Any]], axis: str, arm: str, x_key: str) -> list[Mapping[str, Any]]:
    return sorted((e for e in entries if e["kind"] == "point" and e["axis"] == axis and e["arm"] == arm
                   and e.get(x_key)), key=lambda e: e[x_key])


def _errorbars(ax: Any, pts: Sequence[Mapping[str, Any]], x_key: str, tint: Any, label: str | None,
               hollow: bool = False) -> None:
    xs = [float(e[x_key]) for e in pts]
    ys = [100.0 * (e["ratio_mean"] - 1.0) for e in pts]
    err = np.array([[100.0 * (e["ratio_mean"] - e["ratio_ci95"][0]), 100.0 * (e["ratio_ci95"][1] - e["ratio_mean"])]
                    if e.get("ratio_ci95") else [0.0, 0.0] for e in pts]).T
    ax.errorbar(xs, ys, yerr=err, fmt="o", color=tint, capsize=3, label=label,
                markerfacecolor="none" if hollow else tint)


def _curve(ax: Any, e: Mapping[str, Any], lo: float, hi: float, style: str, tint: Any, label: str) -> None:
    f = laws.fit_of_entry(dict(e))
    grid = np.logspace(np.log10(lo), np.log10(hi), 80)
    ax.plot(grid, 100.0 * f.gap(int(e["k"]), grid), linestyle=style, color=tint, label=label, linewidth=1.2)


def _verdict_text(entries: Sequence[Mapping[str, Any]], axis: str, x_key: str) -> str:
    lines = []
    for v in (e for e in entries if e["kind"] == "verdict" and e["axis"] == axis and e["x"] == x_key):
        said = (f"{v['crossing_word']} identified" if v["identifiable"] else f"{v['crossing_word']}: {v['verdict']}")
        lines.append(f"{v['arm']}: prefers {v['preferred_loss_law'] or '-'} (loss), "
                     f"{v['preferred_gap_law'] or '-'} (gap); {said}")
    return "\n".join(lines)


def scaling_trend(doc: Mapping[str, Any], title: str | None = None) -> Figure:
    """The three panels (see the module docstring)."""
    entries = doc["entries"]
    fig, axes = new_figure(3, 1, width=6.4, height=4.6)
    island = sorted({e["arm"] for e in entries if e["kind"] == "point" and e["axis"] == "size"})
    # 1: our gaps against active parameters, the laws, the prediction
    ax = axes[0]
    for i, arm in enumerate(island):
        pts = _points(entries, "size", arm, "params_active")
        tint = color(arm, i)
        _errorbars(ax, pts, "params_active", tint, f"{arm} / baseline (this kit, 95% paired t)")
        lo, hi = min(float(e["params_active"]) for e in pts), max(float(e["params_active"]) for e in pts)
        pred = [e for e in entries if e["kind"] == "prediction" and e["arm"] == arm]
        top = max([hi] + [float(e["params_active"]) for e in pred])
        v = next((e for e in entries if e["kind"] == "verdict" and e["axis"] == "size" and e["arm"] == arm
                  and e["x"] == "params_active"), None)
        for e in entries:
            if e["kind"] != "gap_fit" or e["axis"] != "size" or e["arm"] != arm or e["x"] != "params_active" \
                    or "theta" not in e:
                continue
            if v is not None and e["source"] == "loss laws" and e["model"] == v["preferred_loss_law"]:
                _curve(ax, e, lo, top, "-", tint, f"{arm}: gap of the {e['model']} loss laws (preferred by AIC)")
            elif e["model"] == "gap power+offset":
                _curve(ax, e, lo, top, "--", tint, f"{arm}: the gap's own power law + offset")
        for e in pred:
            if e["model"] in ("gap power+offset", v and v["preferred_loss_law"]) and e.get("gap_ci95"):
                g, (a, b) = 100.0 * e["gap"], e["gap_ci95"]
                ax.errorbar([e["params_active"]], [g], yerr=[[g - 100.0 * a], [100.0 * b - g]], fmt="D",
                            markerfacecolor="none", color=tint, capsize=3,
                            label=f"{arm}: predicted at width {e['width']} ({e['model']}), not yet run")
    if not island:
        ax.text(0.02, 0.02, "no point of ours measured yet", transform=ax.transAxes, fontsize=8, color="0.3")
    elif not any(e["kind"] == "gap_fit" and e["axis"] == "size" and "theta" in e for e in entries):
        ax.text(0.02, 0.02, "too few points of ours for a law yet", transform=ax.transAxes, fontsize=8, color="0.3")
    text = _verdict_text(entries, "size", "params_active")
    if text:
        ax.text(0.02, 0.98, text, transform=ax.transAxes, fontsize=6.5, va="top", color="0.2")
    ax.set_xlabel("active parameters (log)")
    ax.set_title("each island arm's gap against model size: the laws and the prediction")
    # 2: beside the published grid, ours on both x-axes
    ax = axes[1]
    for i, arm in enumerate(island):
        tint = color(arm, i)
        _errorbars(ax, _points(entries, "size", arm, "params_active"), "params_active", tint,
                   f"{arm} at active parameters")
        _errorbars(ax, _points(entries, "size", arm, "params_total"), "params_total", tint,
                   f"{arm} at total parameters (every expert)", hollow=True)
    for col, marker in PUBLISHED_MARKERS.items():
        pub = references.gaps(col)
        ax.plot([n for n, _ in pub], [100.0 * g for _, g in pub], linestyle="none", marker=marker, color="black",
                markerfacecolor="none", label=f"Charles et al. 2025, {col} (dense: active = total)")
        fit_e = next((e for e in entries if e["kind"] == "published_gap_fit" and e["arm"] == col
                      and e["model"] == "gap power+offset" and "theta" in e), None)
        if fit_e is not None:
            _curve(ax, fit_e, references.SIZES[0], references.SIZES[-1], ":", "black",
                   f"{col}: {laws.LABEL_PUBLISHED} (gap power + offset)")
    ax.set_xlabel("parameters (log): ours active and total, theirs dense")
    ax.set_title("beside the published grid (M = 2 and M = 8)")
    # 3: the length axis
    ax = axes[2]
    length_arms = sorted({e["arm"] for e in entries if e["kind"] == "point" and e["axis"] == "length"})
    for i, arm in enumerate(length_arms):
        _errorbars(ax, _points(entries, "length", arm, "tokens"), "tokens", color(arm, i),
                   f"{arm} / baseline (this kit, 95% paired t)")
    if not length_arms:
        ax.text(0.02, 0.02, "no point of ours measured yet", transform=ax.transAxes, fontsize=8, color="0.3")
    text = _verdict_text(entries, "length", "tokens")
    if text:
        ax.text(0.02, 0.98, text, transform=ax.transAxes, fontsize=6.5, va="top", color="0.2")
    ax.set_xlabel("training tokens (log)")
    ax.set_title("the two-site gap against training tokens (demo width, as measured)")
    for ax in axes:
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_ylabel("final loss gap to synchronous training (%)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="lower left")
    fig.suptitle(title or "Each arm's gap against scale: the laws, whether a crossing is identifiable, the published grid")
    return fig
