"""Figures of training runs from their history records: validation bpb (one line per run, or a seed sweep's mean
and spread), bytes on the wide-area link (the transfer staircase when the ledger's timeline is given) and the MoE
routing load."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogFormatter

from islands_kit.plots.style import (
    _CYCLE,
    FINAL_LABEL,
    FINAL_MARKER,
    X_AXES,
    History,
    _check_runs,
    _curve,
    _final,
    _series,
    _xlabel,
    color,
    new_figure,
)


def bpb_curves(runs: Mapping[str, History], x: str = "tokens", floors: Mapping[str, float] | None = None,
               title: str | None = None) -> Figure:
    """Validation bits-per-byte against training tokens (``x="tokens"``) or simulated wall-clock (``x="sim_time"``).

    runs: label -> history records. floors: compressor bpb on the same validation bytes (``result["compressor_bpb"]``),
    drawn as dashed horizontal lines — the figure a general-purpose compressor reaches on exactly those bytes."""
    _check_runs(runs)
    fig, ax = new_figure()
    finals = False
    for i, (label, h) in enumerate(runs.items()):
        xs, ys = _curve(h, x)
        final = _final(h, x)
        c = color(label, i)
        ax.plot(xs, ys, marker="o", ms=4, color=c, label=f"{label} (final {final[1]:.3f})" if final else label)
        if final is not None:
            ax.plot(*final, color=c, **FINAL_MARKER)
            finals = True
    if finals:
        ax.plot([], [], color="0.3", label=FINAL_LABEL, **FINAL_MARKER)
    for j, (name, v) in enumerate(sorted((floors or {}).items(), key=lambda kv: kv[1])):
        ax.axhline(v, ls="--", lw=1, color=str(0.3 + 0.2 * j), label=f"{name} on the same bytes ({v:.2f})")
    _xlabel(ax, x)
    ax.set_ylabel("validation loss (bits per byte)")
    ax.set_title(title or f"Validation bpb vs {'training tokens' if x == 'tokens' else 'simulated wall-clock'}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def bpb_band(groups: Mapping[str, Sequence[History]], x: str = "tokens", floors: Mapping[str, float] | None = None,
             title: str | None = None) -> Figure:
    """Validation bpb of seed sweeps: per label, the mean over seeds as a line and the spread (mean ± one sample
    standard deviation) as a shaded band; a label with one seed is a plain line.

    groups: label -> the histories of its seeds (they share their evaluation points: same steps, same tokens; the
    simulated clock, which differs by seed, is averaged). floors as in :func:`bpb_curves`."""
    if not groups:
        raise ValueError("groups: need at least one label with its seeds' histories")
    fig, ax = new_figure()
    finals_drawn = False
    for i, (label, hists) in enumerate(groups.items()):
        _check_runs({f"{label}[{j}]": h for j, h in enumerate(hists)}, "groups")
        series = [_curve(h, x) for h in hists]
        n = min(len(ys) for _, ys in series)
        if n == 0:
            continue
        xs = np.mean([s[0][:n] for s in series], axis=0)
        ys = np.asarray([s[1][:n] for s in series])
        mean = ys.mean(axis=0)
        c = color(label, i)
        k = len(hists)
        finals = [f for f in (_final(h, x) for h in hists) if f is not None]
        fy = np.asarray([f[1] for f in finals])
        text = (f"final {fy.mean():.3f}" + (f" ± {fy.std(ddof=1):.3f}" if len(fy) > 1 else "")) if len(fy) else ""
        ax.plot(xs, mean, marker="o", ms=4, color=c,
                label=f"{label} ({', '.join(filter(None, [text, f'{k} seeds' if k > 1 else '']))})" if text or k > 1
                else label)
        if len(fy):
            ax.plot(np.mean([f[0] for f in finals]), fy.mean(), color=c, **FINAL_MARKER)
            finals_drawn = True
        if k > 1:
            sd = ys.std(axis=0, ddof=1)
            ax.fill_between(xs, mean - sd, mean + sd, color=c, alpha=0.2, lw=0)
    if finals_drawn:
        ax.plot([], [], color="0.3", label=FINAL_LABEL, **FINAL_MARKER)
    for j, (name, v) in enumerate(sorted((floors or {}).items(), key=lambda kv: kv[1])):
        ax.axhline(v, ls="--", lw=1, color=str(0.3 + 0.2 * j), label=f"{name} on the same bytes ({v:.2f})")
    _xlabel(ax, x)
    ax.set_ylabel("validation loss (bits per byte)")
    ax.set_title(title or f"Validation bpb vs {'training tokens' if x == 'tokens' else 'simulated wall-clock'}"
                 + (" (band: mean ± 1 std over seeds)" if any(len(h) > 1 for h in groups.values()) else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def link_bytes(runs: Mapping[str, History], x: str = "sim_time", ddp_bytes_per_step: Mapping[str, float] | None = None,
               timelines: Mapping[str, Sequence[Sequence[Any]]] | None = None, title: str | None = None) -> Figure:
    """Cumulative bytes sent across the wide-area link over simulated time (or tokens / steps).

    runs: label -> history (``cross_site_bytes`` is cumulative at each evaluation). ddp_bytes_per_step: label ->
    bytes a fp32 gradient all-reduce would send per step (``ddp_equivalent_bytes / steps``), drawn dotted as the
    data-parallel reference. timelines: label -> ledger transfers ``(start_s, end_s, bytes, src, dst, channel)``;
    when given (and ``x="sim_time"``) the curve is the exact staircase of transfer completions."""
    _check_runs(runs)
    fig, ax = new_figure()
    for i, (label, h) in enumerate(runs.items()):
        c = color(label, i)
        tl = (timelines or {}).get(label)
        if tl and x == "sim_time":
            ends = np.asarray(sorted((float(t[1]), float(t[2])) for t in tl), dtype=np.float64).reshape(-1, 2)
            ax.step(ends[:, 0], np.cumsum(ends[:, 1]) / 1e6, where="post", color=c, label=label)
        else:
            xs, ys = _series(h, x, "cross_site_bytes")
            keep = ys > 0  # log scale: the run's start (0 bytes) cannot be drawn
            ax.plot(xs[keep], ys[keep] / 1e6, marker="o", ms=4, color=c, label=label)
        per_step = (ddp_bytes_per_step or {}).get(label)
        if per_step:
            rx, steps = _series(h, x, "step")
            ax.plot(rx, steps * per_step / 1e6, ls=":", marker=".", color=c, label=f"{label}: fp32 all-reduce every step")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.1, 1, 10 rather than 1e-01, 10^0
    # minor ticks labelled (plainly: 6, 7, 8) only when the axis spans about a decade or less
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
    _xlabel(ax, x)
    ax.set_ylabel("cumulative bytes on the link (MB, log scale)")
    ax.set_title(title or "Bytes sent across the wide-area link")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def routing_load(history: History, x: str = "tokens", title: str | None = None) -> Figure:
    """Per-layer MoE routing over the evaluations: the real max/mean expert load, the Switch balance score (the aux
    loss before its coefficient; 1 = balanced) and, when recorded, the routing divergence between replicas.

    The two left panels are worth reading together: the balance score weighs each expert's load by its mean router
    probability, so it can look balanced while one expert takes far more tokens than the mean."""
    if len(history) == 0:
        raise ValueError("history: the history is empty (no evaluation recorded)")
    loads = [r for r in history if r.get("max_over_mean_load")]
    if not loads:
        raise ValueError("history: no record holds max_over_mean_load (a dense model has no routing)")
    has_js = any(r.get("routing_js_bits") is not None for r in history)
    fig, axes = new_figure(ncols=3 if has_js else 2, width=4.6)
    key = X_AXES[x][0]
    xs = np.asarray([float(r[key]) for r in loads])
    mom = np.asarray([r["max_over_mean_load"] for r in loads], dtype=np.float64)  # (evals, n_layers)
    bal = np.asarray([r["balance_loss"] for r in loads], dtype=np.float64)  # (evals, n_layers)
    for layer in range(mom.shape[1]):
        c = _CYCLE[layer % len(_CYCLE)]
        axes[0].plot(xs, mom[:, layer], marker="o", ms=3, color=c, label=f"layer {layer}")
        axes[1].plot(xs, bal[:, layer], marker="o", ms=3, color=c, label=f"layer {layer}")
    for ax in axes[:2]:
        ax.axhline(1.0, ls="--", lw=1, color="0.4", label="perfect balance")
        _xlabel(ax, x)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("max / mean tokens per expert (1 = balanced)")
    axes[0].set_title("Real load: busiest expert / mean")
    axes[1].set_ylabel("Switch balance score E·Σ f·P (1 = balanced)")
    axes[1].set_title("Balance score (aux loss / coef)")
    if has_js:
        xj, yj = _series(history, x, "routing_js_bits")
        axes[2].plot(xj, yj, marker="o", ms=3, color="#9467bd", label="JS divergence of expert loads (left)")
        _xlabel(axes[2], x)
        axes[2].set_ylabel("Jensen-Shannon divergence (bits)")
        axes[2].set_title("Routing drift between replicas (mean over layers)")
        axes[2].grid(alpha=0.3)
        handles = axes[2].get_lines()
        if any(r.get("routing_topk_overlap") is not None for r in history):
            right = axes[2].twinx()
            xo, yo = _series(history, x, "routing_topk_overlap")
            right.plot(xo, yo, marker="s", ms=3, color="#8c564b", label="top-k overlap per token (right)")
            right.set_ylim(0.0, 1.05)
            right.set_ylabel("top-k overlap (1 = same experts)")
            right.set_xlabel(axes[2].get_xlabel())  # shared x axis (drawn once, below)
            handles = handles + right.get_lines()
        axes[2].legend(handles, [h.get_label() for h in handles], fontsize=7)
    fig.suptitle(title or "MoE routing load per layer")
    return fig


def balance_vs_load(runs: Mapping[str, History], x: str = "step", title: str | None = None) -> Figure:
    """Side by side for several trainings: the Switch balance score (mean over layers) and the real max/mean expert
    load (mean over layers). runs: label -> records with ``balance_loss`` and ``max_over_mean_load`` per layer."""
    _check_runs(runs)
    fig, (ax_b, ax_m) = new_figure(ncols=2, width=5.0)
    key = X_AXES[x][0]
    for i, (label, h) in enumerate(runs.items()):
        rec = [r for r in h if r.get("max_over_mean_load")]
        xs = [float(r[key]) for r in rec]
        c = _CYCLE[i % len(_CYCLE)]
        ax_b.plot(xs, [float(np.mean(r["balance_loss"])) for r in rec], marker="o", ms=3, color=c, label=label)
        ax_m.plot(xs, [float(np.mean(r["max_over_mean_load"])) for r in rec], marker="o", ms=3, color=c, label=label)
    for ax in (ax_b, ax_m):
        ax.axhline(1.0, ls="--", lw=1, color="0.4", label="perfect balance")
        _xlabel(ax, x)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_b.set_ylabel("Switch balance score E·Σ f·P (mean over layers)")
    ax_b.set_title("What the aux loss sees")
    ax_m.set_ylabel("max / mean tokens per expert (mean over layers)")
    ax_m.set_title("What the busiest expert gets")
    fig.suptitle(title or "Balance score vs real load during training")
    return fig
