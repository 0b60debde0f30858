"""The tour's small figures: bits per byte of several predictors, routing states (load vs balance score), optimizer
loss curves and the distribution of transfer times on the simulated link."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from islands_kit.plots.style import _CYCLE, new_figure


def bpb_bars(values: Mapping[str, float], title: str | None = None) -> Figure:
    """Bits per byte of several predictors/compressors on the same validation bytes (8 = uniform over 256 bytes)."""
    if not values:
        raise ValueError("values: need at least one label -> bpb")
    fig, ax = new_figure(width=7.0)
    labels = list(values)
    v = [float(values[k]) for k in labels]
    ax.barh(np.arange(len(v)), v, color=[_CYCLE[i % len(_CYCLE)] for i in range(len(v))])
    for i, b in enumerate(v):
        ax.annotate(f"{b:.2f}", (b, i), va="center", ha="left", fontsize=8, xytext=(3, 0), textcoords="offset points")
    ax.set_yticks(np.arange(len(v)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("bits per byte on the validation bytes (lower is better)")
    ax.set_ylabel("predictor / compressor")
    ax.set_title(title or "How many bits per byte?")
    ax.grid(axis="x", alpha=0.3)
    return fig


def routing_states(states: Mapping[str, Mapping[str, Any]], title: str | None = None) -> Figure:
    """Per-expert load fraction f_e and mean router probability P_e for a few routing states, with each state's
    balance score E·Σ f_e·P_e and real max/mean load in its panel title.

    states: label -> {"load_fraction": (E,), "mean_prob": (E,), "balance_loss": float, "max_over_mean": float}."""
    if not states:
        raise ValueError("states: need at least one routing state")
    fig, axes = new_figure(ncols=len(states), width=4.4)
    axes = np.atleast_1d(axes)
    for ax, (label, s) in zip(axes, states.items()):
        f = np.asarray(s["load_fraction"], dtype=np.float64)
        P = np.asarray(s["mean_prob"], dtype=np.float64)
        e = np.arange(len(f))
        ax.bar(e - 0.2, f, width=0.4, color="#1f77b4", label="f_e: share of tokens routed")
        ax.bar(e + 0.2, P, width=0.4, color="#ff7f0e", label="P_e: mean router probability")
        ax.axhline(1.0 / len(f), ls="--", lw=1, color="0.4", label="1/E (balanced)")
        ax.set_xticks(e, [str(i) for i in e])
        ax.set_xlabel("expert")
        ax.set_ylabel("fraction (of tokens / of probability mass)")
        ax.set_title(f"{label}\nbalance score {s['balance_loss']:.3f}, max/mean load {s['max_over_mean']:.2f}", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title or "The balance score is not the load")
    return fig


def loss_curves(curves: Mapping[str, Sequence[float]], title: str | None = None, ylabel: str = "loss (log scale)") -> Figure:
    """Loss per step for several optimizers (log y)."""
    if not curves:
        raise ValueError("curves: need at least one label -> losses")
    fig, ax = new_figure()
    for i, (label, ys) in enumerate(curves.items()):
        ax.plot(np.arange(1, len(ys) + 1), ys, color=_CYCLE[i % len(_CYCLE)], label=label)
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(ylabel)
    ax.set_title(title or "Optimizer comparison")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def transfer_times(durations: Mapping[str, Sequence[float]], ideal_s: float | None = None,
                   title: str | None = None) -> Figure:
    """Distribution of transfer durations per method: histogram and empirical CDF, with p50/p99
    in the legend and the ideal closed-form time (no jitter, no loss) as a dashed line."""
    if not durations:
        raise ValueError("durations: need at least one label -> durations")
    fig, (ax_h, ax_c) = new_figure(ncols=2, width=5.2)
    all_ms = np.concatenate([np.asarray(d, dtype=np.float64) * 1e3 for d in durations.values()])
    if all_ms.size == 0 or not np.all(np.isfinite(all_ms)) or all_ms.min() <= 0:
        raise ValueError("durations: need positive, finite durations")
    bins = np.linspace(all_ms.min() * 0.95, all_ms.max() * 1.05, 50)
    for i, (label, d) in enumerate(durations.items()):
        ms = np.sort(np.asarray(d, dtype=np.float64) * 1e3)
        p50, p99 = np.percentile(ms, 50), np.percentile(ms, 99)
        lab = f"{label}: p50 {p50:.0f} ms, p99 {p99:.0f} ms"
        c = _CYCLE[i % len(_CYCLE)]
        ax_h.hist(ms, bins=bins, alpha=0.55, color=c, label=lab)
        ax_c.step(ms, np.arange(1, len(ms) + 1) / len(ms), where="post", color=c, label=lab)
    for ax in (ax_h, ax_c):
        ax.set_xlabel("transfer time (ms)")
        if ideal_s is not None:
            ax.axvline(ideal_s * 1e3, ls="--", color="0.3", label=f"ideal: rtt/2 + bytes/rate = {ideal_s * 1e3:.0f} ms")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax_h.set_ylabel("number of transfers")
    ax_h.set_title("Histogram")
    ax_c.set_ylabel("fraction of transfers done (CDF)")
    ax_c.set_title("Cumulative distribution")
    fig.suptitle(title or "Transfer times on the simulated link")
    return fig
