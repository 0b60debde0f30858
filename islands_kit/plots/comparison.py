"""Figures that set finished runs side by side: the comparison's curves (``islands-kit compare --plot`` and the
notebooks), the compare table's bars, the scaling study's gap to synchronous training against compute (beside the
published DiLoCo points) and the protocol's quality-vs-bytes frontier."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from islands_kit.compare import format_bytes, ratio_words
from islands_kit.plots.style import (
    _CYCLE,
    FINAL_LABEL,
    FINAL_MARKER,
    History,
    _check_runs,
    _curve,
    _final,
    _series,
    _xlabel,
    color,
    new_figure,
)
from islands_kit.stats import CONFIDENCE, t_quantile


def comparison_curves(groups: Mapping[str, Sequence[History]], title: str | None = None) -> Figure:
    """One figure for a comparison: validation bpb over training tokens (left) and cumulative bytes on the link over
    training tokens on a log axis (right). ``groups``: label -> the histories of its runs, one per seed
    (``compare.curve_groups``, ``notebooks.seed_groups``). A label with two seeds or more is drawn as its mean with
    the 95% t interval of that mean as a band (the interval every ratio of the comparison carries); one seed is a
    plain line. The legends sit below the axes, off the data."""
    if not groups:
        raise ValueError("groups: need at least one label with its runs' histories")
    fig, (left, right) = new_figure(ncols=2, width=5.6, height=4.6)
    banded = finals_drawn = False
    for i, (label, hists) in enumerate(groups.items()):
        _check_runs({f"{label}[{j}]": h for j, h in enumerate(hists)}, "groups")
        c = color(label, i)
        n_seeds = len(hists)
        finals = [f for f in (_final(h, "tokens") for h in hists) if f is not None]
        for ax, key, scale in ((left, "val_bpb", 1.0), (right, "cross_site_bytes", 1e-6)):
            series = [_curve(h, "tokens") if key == "val_bpb" else _series(h, "tokens", key) for h in hists]
            n = min(len(ys) for _, ys in series)
            if n == 0:
                continue
            xs = np.mean([s[0][:n] for s in series], axis=0)
            ys = np.asarray([s[1][:n] for s in series]) * scale
            mean = ys.mean(axis=0)
            if key == "cross_site_bytes":
                keep = mean > 0  # log axis: nothing sent yet cannot be drawn
                ax.plot(xs[keep], mean[keep], marker=".", color=c, label=f"{label} ({format_bytes(mean[-1] * 1e6)})")
                continue
            seeds = f", {n_seeds} seeds" if n_seeds > 1 else ""
            final = f"final {np.mean([f[1] for f in finals]):.3f}" if finals else f"last {mean[-1]:.3f}"
            ax.plot(xs, mean, marker="o", ms=3, color=c, label=f"{label} ({final}{seeds})")
            if finals:
                ax.plot(np.mean([f[0] for f in finals]), np.mean([f[1] for f in finals]), color=c, **FINAL_MARKER)
                finals_drawn = True
            if n_seeds > 1:
                half = t_quantile(n_seeds - 1) * ys.std(axis=0, ddof=1) / np.sqrt(n_seeds)
                ax.fill_between(xs, mean - half, mean + half, color=c, alpha=0.2, lw=0)
                banded = True
    if finals_drawn:
        left.plot([], [], color="0.3", label=FINAL_LABEL, **FINAL_MARKER)
    _xlabel(left, "tokens")
    left.set_ylabel("validation loss (bits per byte)")
    left.set_title("Validation bpb" + (f" (band: {CONFIDENCE:.0%} interval of the mean over seeds)" if banded else ""),
                   fontsize=9)
    _xlabel(right, "tokens")
    right.set_yscale("log")
    right.set_ylabel("cumulative bytes on the link (MB, log scale)")
    right.set_title("Bytes on the wide-area link", fontsize=9)
    for ax in (left, right):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.suptitle(title or "Comparison: " + " vs ".join(groups))
    return fig


def comparison_bars(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> Figure:
    """Three panels from ``compare.compare_table`` rows: final bpb, bytes on the link and compute utilisation.

    The bytes panel (log scale) shows absolute bytes first: each bar is the run's total, labelled with it and its
    bytes per island; each run's fp32 all-reduce every step among its own islands is a dotted tick. Under the
    numbers, both ratios with their reference in words: against the reference run (the baseline) and against the
    run's own all-reduce. Head-room above the tallest tick keeps the legend clear of every tick and label."""
    if not rows:
        raise ValueError("rows: need at least one compare_table row")
    fig, axes = new_figure(ncols=3, width=4.8)
    several = len({r["seed"] for r in rows}) > 1
    labels = [f"{r['experiment']}\ns{r['seed']}" if several else str(r["experiment"]) for r in rows]
    cols = [color(str(r["experiment"]), i) for i, r in enumerate(rows)]
    pos = np.arange(len(rows))
    bpb = [r["final_val_bpb"] for r in rows]
    axes[0].bar(pos, bpb, color=cols)
    for p, v in zip(pos, bpb):
        axes[0].annotate(f"{v:.3f}", (p, v), ha="center", va="bottom", fontsize=8)
    floor = quality_floor(bpb)
    axes[0].set_ylim(floor, max([v for v in bpb if math.isfinite(v)], default=floor + 1) * 1.04)
    axes[0].set_ylabel("final validation bpb (bits per byte)")
    axes[0].set_title(f"Quality at equal tokens (axis from {floor:g}, not 0)", fontsize=9)
    ref = str(rows[0].get("reference_experiment", "the reference run"))
    sent = [max(float(r["cross_site_bytes"]), 1.0) / 1e6 for r in rows]
    axes[1].bar(pos, sent, color=cols)
    allreduce = [float(r["ddp_equivalent_bytes"]) / 1e6 for r in rows]
    axes[1].hlines(allreduce, pos - 0.4, pos + 0.4, linestyles=":", color="0.3",
                   label="fp32 all-reduce every step among the run's own islands")
    for p, r, s, a in zip(pos, rows, sent, allreduce):
        n = int(r.get("n_islands") or 1)
        text = [f"{format_bytes(float(r['cross_site_bytes']))} total", f"{format_bytes(float(r['cross_site_bytes']) / n)} per island"]
        if "x_fewer_than_ref" in r:
            text += [f"vs {ref}:", ratio_words(float(r["x_fewer_than_ref"]))]
        text += ["vs own all-reduce:", ratio_words(float(r["x_fewer_bytes"]))]
        axes[1].annotate("\n".join(text), (p, max(s, a)), xytext=(0, 3), textcoords="offset points", ha="center",
                         va="bottom", fontsize=7)
    axes[1].set_yscale("log")
    top = max(sent + allreduce)
    axes[1].set_ylim(min(sent + allreduce) / 3, top * 10 ** 3)  # room for the labels, then the legend, above
    axes[1].legend(fontsize=7, loc="upper center")
    axes[1].set_ylabel("bytes on the link (MB, log scale)")
    axes[1].set_title(f"Communication (ratios: vs {ref}'s bytes, vs own all-reduce)", fontsize=9)
    util = [100 * float(r["compute_utilization"]) for r in rows]
    axes[2].bar(pos, util, color=cols)
    axes[2].set_ylim(0, 105)
    axes[2].set_ylabel("compute utilisation (% of simulated time busy)")
    axes[2].set_title("Time spent computing")
    for ax in axes:
        ax.set_xticks(pos, labels, fontsize=8 if several else None)
        ax.set_xlabel("experiment")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title or " vs ".join(dict.fromkeys(str(r["experiment"]) for r in rows)))
    return fig


def quality_floor(bpb: Sequence[float]) -> float:
    """Where the quality panel's axis starts: 10% below the lowest bar, rounded down to a tenth. From 0, the 3-5% gaps
    between arms are a few pixels; from here the bars' tops differ visibly, and the title states the floor."""
    finite = [v for v in bpb if math.isfinite(v)]  # a diverged run's nan has no bar
    return math.floor(min(finite) * 0.9 * 10) / 10 if finite else 0.0


def frontier(points: Sequence[Mapping[str, Any]], title: str | None = None, experiment: str = "two_site",
             y_max: float = 1.25) -> Figure:
    """bpb ratio to the baseline vs bytes sent (as 'x fewer bytes than data-parallel', log scale): one point per
    setting (``label``, ``fewer``, ``ratio``; ``default`` marks the operating point the preset uses, drawn as a star
    in ``experiment``'s colour). Points are numbered on the plot and named in the key beside it (settings often sit
    close together, where labels printed next to them would overlap). The y axis stops at ``y_max``, so that a few
    far-off settings do not flatten the ones near the baseline: those are drawn as ▲ on the top edge, their ratio in
    the key."""
    if not points:
        raise ValueError("frontier: no points")
    # the key goes under the axes, one line a point: beside them its long lines pushed the axes off the left edge
    fig, ax = new_figure(width=10.0, height=4.2 + 0.19 * (len(points) + 1))
    for i, p in enumerate(points):
        is_default = bool(p.get("default"))
        name = p["label"] + (" (default)" if is_default and "default" not in p["label"] else "")
        off = p["ratio"] > y_max
        y = y_max if off else p["ratio"]
        ax.scatter([p["fewer"]], [y], s=90 if is_default else 30, marker="*" if is_default else "^" if off else "o",
                   color=color(experiment, 0) if is_default else _CYCLE[(i + 3) % len(_CYCLE)], zorder=3,
                   clip_on=False, label=f"{i + 1}. {name}: {p['ratio']:.3f}x the baseline's bpb at {p['fewer']:.0f}x "
                   "fewer bytes than data-parallel" + (" (off the top)" if off else ""))
        ax.annotate(str(i + 1), (p["fewer"], y), fontsize=7, xytext=(4, -9 if off else 3), textcoords="offset points")
    lo = min(1.0, min(p["ratio"] for p in points))
    ax.set_ylim(lo - 0.01, min(y_max, max(p["ratio"] for p in points)) + 0.01)
    ax.axhline(1.0, color="black", linewidth=0.8, label="baseline (synchronous, every step)")
    ax.set_xscale("log")
    ax.margins(x=0.08)  # room for the number beside the outermost points
    # ticks at 1, 2 and 5 of each decade, written as plain numbers as the key writes them; matplotlib's own minor
    # labels (2x10^2, 3x10^2, ...) crowd each other on a short decade
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("x fewer bytes than data-parallel (fp32 gradient all-reduce every step)")
    ax.set_ylabel("final bpb / baseline bpb (same seed)")
    ax.set_title(title or f"{experiment}: quality vs bytes on the link", fontsize=10, wrap=True)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), borderaxespad=0.0, frameon=False)
    return fig
