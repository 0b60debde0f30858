"""Compute utilisation against link bandwidth, one line per method, with published points on the same axes."""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure

from islands_kit.plots.style import _CYCLE, new_figure


def utilisation_vs_bandwidth(curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                             published: Mapping[str, Sequence[tuple[float, float]]], title: str) -> Figure:
    """``curves[label] = (gbps, utilisation)``: the kit's line per method; ``published[label] = [(gbps, target), ...]``:
    the papers' cells for the same method (the least bandwidth they found reaching each target), drawn as markers in
    the line's colour."""
    fig, ax = new_figure(width=8.0, height=4.6)
    for i, (label, (gbps, cu)) in enumerate(curves.items()):
        c = _CYCLE[i % len(_CYCLE)]
        ax.plot(gbps, [100 * u for u in cu], color=c, lw=1.8, label=f"{label} (kit)")
        pts = published.get(label, [])
        if pts:
            ax.plot([g for g, _ in pts], [100 * t for _, t in pts], ls="none", marker="o", mfc="none", mec=c, ms=7,
                    label=f"{label} (published)")
    ax.set_xscale("log")
    ax.set_xlabel("link bandwidth between the two sites (Gbit/s, each way)")
    ax.set_ylabel("compute utilisation (%)")
    ax.set_ylim(0, 101)
    ax.grid(True, which="both", color="0.9", lw=0.6)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig
