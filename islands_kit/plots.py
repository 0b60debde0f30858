"""Every figure of the kit: the notebooks call these and hold no plotting code of their own.

(Over 400 lines on purpose: a flat catalogue of independent figure functions sharing a few helpers; one file keeps
every figure's look consistent and easy to find.)

Each function takes plain data (the ``history.jsonl`` records or the ``result.json`` of a run, schedules, matrices,
durations) and returns a ``matplotlib.figure.Figure`` built without pyplot on the Agg canvas: nothing global is
touched, so the figures work the same in a headless test, a papermill kernel or a script. Every axis carries a label
with its unit, every figure a title, and every figure with more than one series a legend.

``save(fig, path)`` writes a PNG; ``show(fig, path)`` saves it and, inside IPython/Jupyter, displays the saved PNG.

History records (one per evaluation, see ``islands_kit.run``): ``step``, ``tokens``, ``val_bpb``, ``sim_time_s``,
``cross_site_bytes`` (cumulative), ``balance_loss`` and ``max_over_mean_load`` (one value per layer) and, with several
replicas, ``routing_js_bits`` and ``routing_topk_overlap``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, FuncFormatter, LogFormatter

from islands_kit.compare import ratio_words

History = Sequence[Mapping[str, Any]]

# One colour per experiment, so the three runs look the same in every figure.
COLORS = {"baseline": "#1f77b4", "two_site": "#d62728", "eight_cell": "#2ca02c"}
_CYCLE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"]
X_AXES = {
    "tokens": ("tokens", "training tokens (all islands)"),
    "sim_time": ("sim_time_s", "simulated wall-clock (s)"),
    "step": ("step", "inner step"),
}


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 6.4, height: float = 4.0) -> tuple[Figure, Any]:
    """A Figure on the Agg canvas with ``nrows x ncols`` axes (one Axes when both are 1)."""
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=True)
    return fig, axes


def color(label: str, i: int) -> str:
    return COLORS.get(label, _CYCLE[i % len(_CYCLE)])


def save(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` as a PNG (parent folders created); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=dpi, format="png")
    return p


def show(fig: Figure, path: str | Path | None = None) -> None:
    """Save ``fig`` to ``path`` (when given) and display it inline in IPython/Jupyter (nothing to display elsewhere).

    Returns None so that a notebook cell ending in ``plots.show(...)`` prints nothing but the figure."""
    out = save(fig, path) if path is not None else None
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        return
    if get_ipython() is None:
        return
    if out is not None:
        display(Image(filename=str(out)))
    else:
        import io

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        display(Image(data=buf.getvalue()))


def _xlabel(ax: Any, x: str) -> None:
    """Label the x axis for ``x``; token counts get engineering ticks (30k, 1.2M) so they never overlap."""
    ax.set_xlabel(X_AXES[x][1])
    if x == "tokens":
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))


def _series(history: History, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) arrays from the records that hold a finite ``y``."""
    if x not in X_AXES:
        raise ValueError(f"x: must be one of {'|'.join(X_AXES)} (got {x!r})")
    key = X_AXES[x][0]
    pts = [(float(r[key]), float(r[y])) for r in history if y in r and r[y] is not None and math.isfinite(float(r[y]))]
    if not pts:
        return np.zeros(0), np.zeros(0)
    a = np.asarray(pts, dtype=np.float64)
    return a[:, 0], a[:, 1]


def _check_runs(runs: Mapping[str, History], name: str = "runs") -> None:
    if not runs:
        raise ValueError(f"{name}: need at least one labelled history")
    for label, h in runs.items():
        if len(h) == 0:
            raise ValueError(f"{name}[{label!r}]: the history is empty (no evaluation recorded)")


# ---------------------------------------------------------------------------------------------------------------
# Runs: validation bpb, bytes on the link, routing load


def bpb_curves(runs: Mapping[str, History], x: str = "tokens", floors: Mapping[str, float] | None = None,
               title: str | None = None) -> Figure:
    """Validation bits-per-byte against training tokens (``x="tokens"``) or simulated wall-clock (``x="sim_time"``).

    runs: label -> history records. floors: compressor bpb on the same validation bytes (``result["compressor_bpb"]``),
    drawn as dashed horizontal lines — the figure a general-purpose compressor reaches on exactly those bytes."""
    _check_runs(runs)
    fig, ax = new_figure()
    for i, (label, h) in enumerate(runs.items()):
        xs, ys = _series(h, x, "val_bpb")
        ax.plot(xs, ys, marker="o", ms=4, color=color(label, i), label=f"{label} (final {ys[-1]:.3f})" if len(ys) else label)
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
    for i, (label, hists) in enumerate(groups.items()):
        _check_runs({f"{label}[{j}]": h for j, h in enumerate(hists)}, "groups")
        series = [_series(h, x, "val_bpb") for h in hists]
        n = min(len(ys) for _, ys in series)
        if n == 0:
            continue
        xs = np.mean([s[0][:n] for s in series], axis=0)
        ys = np.asarray([s[1][:n] for s in series])
        mean = ys.mean(axis=0)
        c = color(label, i)
        k = len(hists)
        ax.plot(xs, mean, marker="o", ms=4, color=c,
                label=f"{label} (final {mean[-1]:.3f}" + (f" ± {ys[:, -1].std(ddof=1):.3f}, {k} seeds)" if k > 1 else ")"))
        if k > 1:
            sd = ys.std(axis=0, ddof=1)
            ax.fill_between(xs, mean - sd, mean + sd, color=c, alpha=0.2, lw=0)
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


def comparison_bars(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> Figure:
    """Three panels from ``compare.compare_table`` rows: final bpb, bytes on the link (log scale) with each run's
    fp32 all-reduce every step among its own islands as a dotted tick and each bar's ratio to it in words, and
    compute utilisation."""
    if not rows:
        raise ValueError("rows: need at least one compare_table row")
    fig, axes = new_figure(ncols=3, width=4.2)
    several = len({r["seed"] for r in rows}) > 1
    labels = [f"{r['experiment']}\ns{r['seed']}" if several else str(r["experiment"]) for r in rows]
    cols = [color(str(r["experiment"]), i) for i, r in enumerate(rows)]
    pos = np.arange(len(rows))
    bpb = [r["final_val_bpb"] for r in rows]
    axes[0].bar(pos, bpb, color=cols)
    for p, v in zip(pos, bpb):
        axes[0].annotate(f"{v:.3f}", (p, v), ha="center", va="bottom", fontsize=8)
    axes[0].set_ylabel("final validation bpb (bits per byte)")
    axes[0].set_title("Quality at equal tokens")
    sent = [max(float(r["cross_site_bytes"]), 1.0) / 1e6 for r in rows]
    axes[1].bar(pos, sent, color=cols)
    allreduce = [float(r["ddp_equivalent_bytes"]) / 1e6 for r in rows]
    axes[1].hlines(allreduce, pos - 0.4, pos + 0.4, linestyles=":", color="0.3",
                   label="fp32 all-reduce every step (same islands)")
    axes[1].legend(fontsize=8)
    axes[1].set_yscale("log")
    for p, r in zip(pos, rows):
        axes[1].annotate(ratio_words(float(r["x_fewer_bytes"])), (p, max(float(r["cross_site_bytes"]), 1.0) / 1e6),
                         ha="center", va="bottom", fontsize=8)
    axes[1].set_ylabel("bytes on the link (MB, log scale)")
    axes[1].set_title("Communication")
    util = [100 * float(r["compute_utilization"]) for r in rows]
    axes[2].bar(pos, util, color=cols)
    axes[2].set_ylim(0, 105)
    axes[2].set_ylabel("compute utilisation (% of simulated time busy)")
    axes[2].set_title("Time spent computing")
    for ax in axes:
        ax.set_xticks(pos, labels, fontsize=8 if several else None)
        ax.set_xlabel("experiment")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title or "baseline vs two_site vs eight_cell")
    return fig


# ---------------------------------------------------------------------------------------------------------------
# Teaching figures (the tour and the per-experiment notebooks)


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


def fragment_timeline(schedule: Sequence[tuple[int, int]], n_fragments: int, H: int, tau: int, steps: int,
                      title: str | None = None) -> Figure:
    """Streaming DiLoCo timeline: for each fragment p, when its outer gradient is sent (after step t) and when the
    outer result is merged (after step t + τ); the transfer overlaps the τ inner steps in between.

    schedule: ``sync.diloco.streaming_schedule(H, P, steps)`` pairs (step, fragment)."""
    fig, ax = new_figure(width=9.0, height=0.6 * n_fragments + 2.2)
    for w in range(0, steps + 1, H):
        ax.axvline(w + 0.5, color="0.8", lw=1, zorder=0)
    for p in range(n_fragments):
        ax.broken_barh([(0.5, steps)], (p - 0.35, 0.7), color="#e8eef7", zorder=1)
    first = True
    for t, p in schedule:
        ax.broken_barh([(t + 0.5, max(tau, 0.15))], (p - 0.25, 0.5), color="#ff7f0e", alpha=0.8, zorder=2,
                       label="outer gradient in flight (τ steps overlap)" if first else None)
        ax.plot([t + 0.5], [p], marker="v", color="#d62728", ms=8, zorder=3, label="send after step t" if first else None)
        ax.plot([t + 0.5 + tau], [p], marker="o", color="#2ca02c", ms=6, zorder=4,
                label="merge after step t+τ" if first else None)
        first = False
    ax.set_yticks(range(n_fragments), [f"fragment {p}" for p in range(n_fragments)])
    ax.set_ylim(-0.7, n_fragments - 0.3)
    ax.set_xlim(0.5, steps + tau + 1.5)
    ax.set_xlabel(f"inner step (grey lines: H={H}-step windows)")
    ax.set_ylabel("model fragment")
    ax.set_title(title or f"Streaming DiLoCo: P={n_fragments} fragments, H={H}, τ={tau}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def butterfly_timeline(exchanges: Sequence[Any], n_fragments: int, H: int, delay: int, steps: int,
                       title: str | None = None) -> Figure:
    """Butterfly mixing timeline: for each fragment, every exchange (coloured by its round r: partner = i XOR 2^r)
    and the merge ``delay`` steps later. exchanges: ``sync.butterfly.butterfly_schedule(...)`` items."""
    fig, ax = new_figure(width=9.0, height=0.6 * n_fragments + 2.2)
    for w in range(0, steps + 1, H):
        ax.axvline(w + 0.5, color="0.8", lw=1, zorder=0)
    seen: set[int] = set()
    for ex in exchanges:
        c = _CYCLE[ex.round % len(_CYCLE)]
        lab = f"round {ex.round} (partner = i XOR {1 << ex.round})" if ex.round not in seen else None
        seen.add(ex.round)
        ax.broken_barh([(ex.step + 0.5, max(delay, 0.15))], (ex.fragment - 0.25, 0.5), color=c, alpha=0.75, label=lab)
        ax.plot([ex.step + 0.5], [ex.fragment], marker="v", color=c, ms=7)
    ax.set_yticks(range(n_fragments), [f"fragment {p}" for p in range(n_fragments)])
    ax.set_ylim(-0.7, n_fragments - 0.3)
    ax.set_xlim(0.5, steps + delay + 1.5)
    ax.set_xlabel(f"inner step (▼ exchange, bar = {delay} steps until the merge; grey lines: H={H} windows)")
    ax.set_ylabel("model fragment")
    ax.set_title(title or "Butterfly exchanges per fragment")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def mixing_matrices(mats: Mapping[str, Any], title: str | None = None) -> Figure:
    """Heatmaps of mixing matrices W (x_after = W @ x_before): row i = how much of each cell's state cell i holds."""
    if not mats:
        raise ValueError("mats: need at least one label -> matrix")
    fig, axes = new_figure(ncols=len(mats), width=3.9, height=3.9)
    axes = np.atleast_1d(axes)
    im = None
    for ax, (label, W) in zip(axes, mats.items()):
        W = np.asarray(W, dtype=np.float64)
        im = ax.imshow(W, vmin=0.0, vmax=1.0, cmap="viridis")
        n = W.shape[0]
        if n <= 8:
            for i in range(n):
                for j in range(n):
                    if W[i, j] > 0:
                        ax.text(j, i, f"{W[i, j]:.3g}".lstrip("0"), ha="center", va="center", fontsize=6,
                                color="white" if W[i, j] < 0.5 else "black")
        ax.set_xlabel("source cell j")
        ax.set_ylabel("destination cell i")
        ax.set_title(label, fontsize=9)
    assert im is not None  # mats is not empty
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="weight of cell j in cell i")
    fig.suptitle(title or "Butterfly mixing matrices")
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


def scaling_ratios(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> Figure:
    """bpb ratio to the synchronous baseline vs training FLOPs: our two_site and eight_cell points (mean over seeds,
    seeds as small dots) beside the published DiLoCo points (Charles et al. 2025, Table 4: M = 2 and M = 8) and
    Streaming DiLoCo (Douillard et al. 2025, M = 2), whose FLOPs assume ~20 tokens per parameter (Chinchilla)."""
    from islands_kit import scaling

    if not rows:
        raise ValueError("scaling_ratios: no finished points to draw (run the study first)")
    fig, ax = new_figure(width=7.2, height=4.4)
    # the two arms of the cross are two lines per strategy: longer runs at one width (solid), wider models at one
    # length (dashed); the point where they meet belongs to both
    arms = (("length", "longer runs", "-"), ("width", "wider models", "--"))
    for e, marker in (("two_site", "o"), ("eight_cell", "s")):
        for axis, what, style in arms:
            pts: dict[float, list[float]] = {}
            for r in rows:
                if f"{e}_ratio" in r and r.get("axis", axis) in (axis, "both"):
                    pts.setdefault(float(r["flops"]), []).append(100.0 * (r[f"{e}_ratio"] - 1.0))
            if not pts:
                continue
            xs = sorted(pts)
            for x in xs:
                if len(pts[x]) > 1:
                    ax.scatter([x] * len(pts[x]), pts[x], s=8, color=color(e, 0), alpha=0.4)
            ax.plot(xs, [float(np.mean(pts[x])) for x in xs], marker=marker, linestyle=style, color=color(e, 0),
                    markerfacecolor=color(e, 0) if style == "-" else "white", label=f"{e}: {what} (this kit)")
    refs = (("DiLoCo M=2 (Charles et al. 2025)", scaling.REFERENCE_DILOCO_M2, "two_site", "^"),
            ("DiLoCo M=8 (Charles et al. 2025)", scaling.REFERENCE_DILOCO_M8, "eight_cell", "^"),
            ("Streaming DiLoCo M=2 (Douillard et al. 2025)", scaling.REFERENCE_STREAMING_M2, "two_site", "x"))
    for label, pts_ref, like, marker in refs:
        ax.plot([scaling.reference_flops(n) for n, _ in pts_ref], [100.0 * d for _, d in pts_ref], linestyle=":",
                marker=marker, color=color(like, 0), markerfacecolor="none", label=label)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("training compute (FLOPs, 6 x active params x tokens; published: 20 tokens/param assumed)")
    ax.set_ylabel("bpb / loss vs synchronous baseline (%)")
    ax.set_title(title or "Gap to synchronous training vs compute")
    ax.legend(fontsize=7)
    return fig


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
    fig, ax = new_figure(width=10.0, height=4.6)
    for i, p in enumerate(points):
        is_default = bool(p.get("default"))
        name = p["label"] + (" (default)" if is_default else "")
        off = p["ratio"] > y_max
        y = y_max if off else p["ratio"]
        ax.scatter([p["fewer"]], [y], s=90 if is_default else 30, marker="*" if is_default else "^" if off else "o",
                   color=color(experiment, 0) if is_default else _CYCLE[(i + 3) % len(_CYCLE)], zorder=3,
                   clip_on=False, label=f"{i + 1}. {name}: {p['ratio']:.3f}x at {p['fewer']:.0f}x fewer bytes"
                   + (" (off the top)" if off else ""))
        ax.annotate(str(i + 1), (p["fewer"], y), fontsize=7, xytext=(4, -9 if off else 3), textcoords="offset points")
    lo = min(1.0, min(p["ratio"] for p in points))
    ax.set_ylim(lo - 0.01, min(y_max, max(p["ratio"] for p in points)) + 0.01)
    ax.axhline(1.0, color="black", linewidth=0.8, label="baseline (synchronous, every step)")
    ax.set_xscale("log")
    ax.set_xlabel("x fewer bytes than data-parallel (fp32 gradient all-reduce every step)")
    ax.set_ylabel("final bpb / baseline bpb (same seed)")
    ax.set_title(title or f"{experiment}: quality vs bytes on the link")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return fig


# ---------------------------------------------------------------------------------------------------------------
# Decoupled islands (sync.mode=decoupled): each island's step clock, the merges and where they land

_ISLAND_COLORS = ["#1f77b4", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"]
_FRAGMENT_COLORS = ["#2ca02c", "#9467bd", "#17becf", "#bcbd22"]
_LATE = "#d62728"


def _by_island(values: Mapping[Any, Any]) -> dict[str, Any]:
    """A per-island mapping with string keys: result.json spells island ids as strings, a result returned by
    ``run_experiment`` (not yet written and read back) as integers."""
    return {str(k): v for k, v in values.items()}


def _island_names(result: Mapping[str, Any], ids: Sequence[str]) -> dict[str, str]:
    """island id (as result.json spells it: a string) -> "site-a (island 0)", from the run's config when it has one."""
    cfg_islands = (result.get("config") or {}).get("islands") or []
    names = {}
    for i in ids:
        k = int(i)
        name = cfg_islands[k].get("name") if k < len(cfg_islands) else None
        names[i] = f"{name} (island {i})" if name else f"island {i}"
    return names


def decoupled_clocks(result: Mapping[str, Any], lockstep: Mapping[str, Any] | None = None,
                     title: str | None = None) -> Figure:
    """Each island's step clock in a decoupled run (``sync.mode=decoupled``, Decoupled DiLoCo): inner steps completed
    against simulated time, with the synchroniser's merges and where each merged fragment lands.

    result: a decoupled run's ``result.json`` (island ids as strings, or as the integers ``run_experiment`` returns).
    One line per island i through (0, 0), the points (``sent_s``, ``island_steps[i]``) of every merge record (the
    islands' step counts when the round's outer gradients left) and (end, ``inner_steps[i]``), end = the latest of
    ``sim_wall_clock_s``, the last landing and the lock-step run's end: its slope is the island's own pace (a
    straggler's line is flatter, a preempted island's flat while it is away, every line flat once training is over).
    A dotted vertical line at ``merge_s`` marks every merge that met its quorum (colour: the fragment; dashed: the
    end-of-run flush); a dot on island i's line at ``landing_s[i]`` (height interpolated along the line) marks where
    that merged fragment reaches i, to be applied at its next step boundary; a red open square at (``sent_s``,
    ``island_steps[i]``) marks a contribution that arrived after the grace window (``late``: carried to the next
    merge or dropped). ``lockstep``: a lock-step run's result.json, drawn dashed grey at its average pace (every
    island the same step count). The title states goodput and the counts of late, dropped and not-ready
    contributions and of skipped merges. A result without a ``decoupled`` record (a lock-step run) is refused."""
    d = result.get("decoupled")
    if d is None:
        raise ValueError(f"decoupled_clocks: result has no 'decoupled' record (sync_mode "
                         f"{result.get('sync_mode', 'lockstep')!r}); it needs a run with sync.mode=decoupled")
    for key in ("inner_steps", "sim_wall_clock_s"):
        if key not in result:
            raise ValueError(f"decoupled_clocks: result has no {key!r}")
    merges = [dict(m, island_steps=_by_island(m.get("island_steps", {})), landing_s=_by_island(m.get("landing_s", {})))
              for m in d["merges"]]
    inner = _by_island(result["inner_steps"])
    ids = sorted(inner, key=int)
    names = _island_names(result, ids)
    landings = [t for m in merges for t in m["landing_s"].values()]
    end = max([float(result["sim_wall_clock_s"]), float(d.get("last_merge_s", 0.0))] + landings
              + ([float(lockstep["sim_wall_clock_s"])] if lockstep is not None else []))
    fig, ax = new_figure(width=9.0, height=4.6)
    clocks: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for k, i in enumerate(ids):
        pts = [(0.0, 0.0)] + sorted((float(m["sent_s"]), float(m["island_steps"][i])) for m in merges
                                    if i in m["island_steps"])
        pts.append((end, float(inner[i])))
        xs, ys = np.asarray(pts).T
        clocks[i] = (xs, ys)
        ax.plot(xs, ys, color=_ISLAND_COLORS[k % len(_ISLAND_COLORS)], lw=2, label=f"{names[i]}: {int(inner[i])} steps",
                gid=f"clock-{i}")
    if lockstep is not None:
        steps = float(next(iter(lockstep["inner_steps"].values())))
        ax.plot([0.0, float(lockstep["sim_wall_clock_s"])], [0.0, steps], color="0.3", ls="--", lw=1.5, zorder=3,
                label=f"lock-step run (every island, average pace): {int(steps)} steps", gid="clock-lockstep")
    seen: set[str] = set()

    def once(label: str) -> str | None:  # one legend entry per kind
        if label in seen:
            return None
        seen.add(label)
        return label

    for m in merges:
        p = int(m["fragment"])
        c = _FRAGMENT_COLORS[p % len(_FRAGMENT_COLORS)]
        if m.get("quorum_met"):
            final = bool(m.get("final"))
            ax.axvline(float(m["merge_s"]), color=c, lw=1, ls="--" if final else ":", zorder=1, gid="merge",
                       label=once(f"merge of fragment {p}" + (" (end-of-run flush)" if final else "")))
            for i, t in m["landing_s"].items():
                xs, ys = clocks[i]
                ax.plot([float(t)], [float(np.interp(float(t), xs, ys))], marker="o", ms=6, color=c, mec="black",
                        mew=0.6, ls="none", zorder=4, gid="landing",
                        label=once("merged fragment lands (colour: fragment; applied at the next step)"))
        for i in m.get("late", []):
            i = str(i)
            ax.plot([float(m["sent_s"])], [float(m["island_steps"][i])], marker="s", ms=8, mfc="none", mec=_LATE,
                    mew=1.5, ls="none", zorder=5, gid="late", label=once("late contribution (carried or dropped)"))
    goodput = result.get("goodput")
    stats = (f"goodput {goodput:.2f}" if goodput is not None else "goodput n/a") + (
        f" | late {d.get('late_contributions', 0)}, dropped {d.get('dropped_contributions', 0)}, "
        f"not ready {d.get('not_ready_rounds', 0)}, skipped merges {d.get('skipped_merges', 0)}")
    ax.set_xlim(0.0, end * 1.02)
    ax.set_ylim(0.0, None)
    ax.set_xlabel("simulated wall-clock (s)")
    ax.set_ylabel("inner steps completed")
    ax.set_title((title or "Decoupled islands: each site's step clock") + "\n" + stats, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig
