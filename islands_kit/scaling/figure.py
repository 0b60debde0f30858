"""The scaling trend's figure (``benchmarks/scaling-trend.json``, islands_kit/scaling/trend.py): the gap against
active parameters and against training tokens, our points with their intervals, our fits with their bands, and
Charles et al.'s published points with their own fit on the same axes."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from islands_kit.plots.style import color, new_figure
from islands_kit.scaling import references
from islands_kit.scaling.fit import LineFit


def _power(entry: Mapping[str, Any]) -> LineFit | None:
    if entry.get("exponent") is None or entry.get("power_cov") is None:
        return None
    cov = entry["power_cov"]
    return LineFit("power", float(entry["power_a"]), float(entry["exponent"]), ((cov[0][0], cov[0][1]), (cov[1][0], cov[1][1])),
                   int(entry["points_in_power_fit"]), True)


def _draw_fit(ax: Any, f: LineFit | None, xs: list[float], style: str, tint: Any, label: str) -> None:
    if f is None or not xs:
        return
    grid = np.logspace(np.log10(min(xs)), np.log10(max(xs)), 60)
    ax.plot(grid, 100.0 * f.gap(grid), linestyle=style, color=tint, label=label)
    lo, hi = f.band(grid)
    ax.fill_between(grid, 100.0 * lo, 100.0 * hi, color=tint, alpha=0.15, linewidth=0)


def _extrapolate(ax: Any, f: LineFit | None, x0: float, x1: float, tint: Any) -> None:
    """Our fitted line carried on, thin and dashed and without a band, from our largest size to the published
    study's: where the reader sets it against their points (the band out there spans decades: docs/methods.md)."""
    if f is None or x1 <= x0:
        return
    grid = np.logspace(np.log10(x0), np.log10(x1), 60)
    ax.plot(grid, 100.0 * f.gap(grid), linestyle="--", linewidth=0.8, color=tint,
            label="our fit extrapolated (no band: it spans the panel)")


def _exponent(e: Mapping[str, Any]) -> str:
    ci = e.get("exponent_ci95")
    if e.get("exponent") is None or ci is None:
        return "no fit"
    return f"b = {e['exponent']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def scaling_trend(doc: Mapping[str, Any], title: str | None = None) -> Figure:
    """Two panels: gap (%) vs active parameters (log x) and vs training tokens (log x)."""
    entries = doc["entries"]
    fig, axes = new_figure(2, 1, width=6.0, height=4.6)
    for ax, axis, xkey, xlabel in ((axes[0], "size", "params_active", "active parameters (log)"),
                                   (axes[1], "length", "tokens", "training tokens (log)")):
        for arm in sorted({e["arm"] for e in entries if e["kind"] == "point" and e["axis"] == axis}):
            pts = sorted((e for e in entries if e["kind"] == "point" and e["axis"] == axis and e["arm"] == arm),
                         key=lambda e: e[xkey])
            xs = [float(e[xkey]) for e in pts]
            ys = [100.0 * (e["ratio_mean"] - 1.0) for e in pts]
            err = np.array([[100.0 * (e["ratio_mean"] - e["ratio_ci95"][0]), 100.0 * (e["ratio_ci95"][1] - e["ratio_mean"])]
                            if e["ratio_ci95"] else [0.0, 0.0] for e in pts]).T
            ax.errorbar(xs, ys, yerr=err, fmt="o", color=color(arm, 0), capsize=3,
                        label=f"{arm} / baseline (this kit, 95% paired t)")
            fit_e = next((e for e in entries if e["kind"] == "fit" and e["axis"] == axis and e["arm"] == arm), None)
            if fit_e is not None:
                _draw_fit(ax, _power(fit_e), xs, "-", color(arm, 0), f"our power-law fit, {_exponent(fit_e)}")
                if axis == "size":
                    _extrapolate(ax, _power(fit_e), max(xs), max(n for n, _ in references.charles_m2()), color(arm, 0))
        if axis == "size":
            pub = references.charles_m2()
            ax.plot([n for n, _ in pub], [100.0 * g for _, g in pub], linestyle="none", marker="^", color="black",
                    markerfacecolor="none", label="Charles et al. 2025, Table 4, M = 2 (dense: active = total)")
            pub_e = next((e for e in entries if e["kind"] == "published_fit"), None)
            if pub_e is not None:
                _draw_fit(ax, _power(pub_e), [n for n, g in pub if g > 0], ":", "black",
                          f"their power-law fit, {_exponent(pub_e)}")
        ours = [e for e in entries if e["kind"] == "point" and e["axis"] == axis]
        fits = [e for e in entries if e["kind"] == "fit" and e["axis"] == axis and e.get("exponent") is not None]
        if not fits:  # say why there is no line of ours (points still being measured)
            ax.text(0.02, 0.02, f"{len(ours)} point(s) of ours measured: no fit of ours yet (3 needed)"
                    if ours else "no point of ours measured yet", transform=ax.transAxes, fontsize=8, color="0.3")
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("final loss gap to synchronous training (%)")
        ax.set_title({"size": "gap vs model size (fixed tokens per active parameter)",
                      "length": "gap vs training tokens (demo width)"}[axis])
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(title or "The two-site gap against scale: this kit beside the published curve")
    return fig
