"""The look every figure shares: a figure on the Agg canvas, one colour per experiment, the x axes a history can be
drawn against, and the helpers that pull a series out of history records.

The underscore names are the package's own helpers, shared by its figure modules and not part of the public API.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from islands_kit.config.experiment_table import EXPERIMENT_TABLE

History = Sequence[Mapping[str, Any]]

# One colour per experiment (its row of the experiment table), so its runs look the same in every figure.
COLORS = {name: row.color for name, row in EXPERIMENT_TABLE.items()}
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
    row = EXPERIMENT_TABLE.get(label)
    return row.color if row is not None else _CYCLE[i % len(_CYCLE)]


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


def _curve(history: History, x: str) -> tuple[np.ndarray, np.ndarray]:
    """The validation curve as one quantity: every evaluation on the curve's subset (``data.eval_bytes``) to its end,
    where the final model's score on that subset (``val_bpb_subset``) stands in for the full-set final. A final
    record without it (a run from before it was recorded) is left off the line: it scores other bytes."""
    rows = [{**r, "val_bpb": r.get("val_bpb_subset")} if r.get("final") else r for r in history]
    return _series(rows, x, "val_bpb")


def _final(history: History, x: str) -> tuple[float, float] | None:
    """``(x, final_val_bpb)``: the final model on every held-out byte, drawn as a marker of its own, never joined to
    the curve (which scores a subset); None without a finite final record."""
    xs, ys = _series([r for r in history if r.get("final")], x, "val_bpb")
    return (float(xs[-1]), float(ys[-1])) if len(ys) else None


FINAL_MARKER = dict(marker="D", ms=6, ls="none", mfc="white", mew=1.5, zorder=4)  # the full-set final, every figure
FINAL_LABEL = "final model on all held-out bytes (final_val_bpb); lines: the data.eval_bytes subset"


def _check_runs(runs: Mapping[str, History], name: str = "runs") -> None:
    if not runs:
        raise ValueError(f"{name}: need at least one labelled history")
    for label, h in runs.items():
        if len(h) == 0:
            raise ValueError(f"{name}[{label!r}]: the history is empty (no evaluation recorded)")
