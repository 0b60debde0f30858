"""Figures of the sync schedules themselves, drawn without training: Streaming DiLoCo's fragment timeline, the
butterfly exchanges per fragment and the butterfly mixing matrices."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from islands_kit.plots.style import _CYCLE, new_figure


def fragment_timeline(schedule: Sequence[tuple[int, int]], n_fragments: int, H: int, tau: int, steps: int,
                      title: str | None = None) -> Figure:
    """Streaming DiLoCo timeline: for each fragment p, when its outer gradient is sent (after step t) and when the
    outer result is merged (after step t + τ); the transfer overlaps the τ inner steps in between.

    schedule: ``sync.schedule.streaming_schedule(H, P, steps)`` pairs (step, fragment)."""
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
