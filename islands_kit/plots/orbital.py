"""Orbital islands (the ``orbital`` experiment): each satellite's contact windows with the ground station over
simulated time, with the sync events (outer gradients up, merged fragments down) on them."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure

from islands_kit.plots.style import new_figure

_WINDOW = "#9467bd"
_UP = "#d62728"
_DOWN = "#2ca02c"


def contact_windows(result: Mapping[str, Any], timeline: Sequence[Sequence[Any]],
                    title: str | None = None) -> Figure:
    """One row per satellite: its ground-link windows (``result["orbit"]["ground_windows"]``, bars) over simulated
    time, and every transfer between it and the ground station (``link_timeline.jsonl`` rows ``[start_s, end_s,
    bytes, src, dst, channel]``) as a line from posting to arrival, ending in a triangle (▲ up to the station,
    ▼ down to the satellite). A line that spans a gap between bars is a transfer that waited for a window. The legend
    sits below the axes, off the data."""
    orbit = result["orbit"]
    windows: Mapping[str, Sequence[Sequence[float]]] = orbit["ground_windows"]
    sats = sorted(windows, key=int)
    fig, ax = new_figure(width=9.0, height=0.8 + 0.7 * max(len(sats), 1))
    row = {s: n for n, s in enumerate(sats)}
    for s in sats:
        bars = [(a, b - a) for a, b in windows[s]]
        ax.broken_barh(bars, (row[s] - 0.3, 0.6), facecolors=_WINDOW, alpha=0.35,
                       label="contact window" if row[s] == 0 else None)
    seen: set[str] = set()
    for start, end, _n, src, dst, _c in timeline:
        sat, up = (str(src), True) if str(src) in row and int(dst) == 0 else (str(dst), False)
        if sat not in row or (not up and int(src) != 0):
            continue
        y = row[sat] + (0.12 if up else -0.12)  # uploads just above the row's middle, downloads just below
        col, mark, lab = (_UP, "^", "outer gradient up (posted → arrived)") if up else \
            (_DOWN, "v", "merged fragment down (posted → arrived)")
        ax.plot([start, end], [y, y], color=col, lw=0.8, alpha=0.7)
        ax.plot([end], [y], marker=mark, color=col, ms=4, ls="none", label=None if lab in seen else lab)
        seen.add(lab)
    names = (result.get("config") or {}).get("islands") or []
    ax.set_yticks(range(len(sats)))
    ax.set_yticklabels([f"{names[int(s)]['name']} (island {s})" if int(s) < len(names) else f"island {s}"
                        for s in sats])
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("satellite")
    isl = " (relayed over inter-satellite links)" if orbit.get("isl") else ""
    ax.set_title(title or f"contact windows with the ground station{isl}: 1 s = "
                 f"{orbit['time_compression']:.3g} orbital s; waited {orbit['window_wait_s']:.3g} s in all")
    # below the axes, off the bars and the transfers (inside, any corner covers a satellite's windows)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.25 / max(len(sats), 1)), ncol=3, fontsize=7,
              frameon=False)
    return fig


def study_effects(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> Figure:
    """Each row of the orbital study (``orbital.report.effects``) as two points with their 95% intervals: its bpb
    ratio against its control (what the one effect it adds costs) and against the ground baseline (all effects up to
    it). A ratio without an interval is drawn hollow; the line at 1 is parity."""
    fig, ax = new_figure(width=9.0, height=1.0 + 0.55 * max(len(rows), 1))
    names = [str(r["row"]) for r in rows]
    for key, color, dy, name in (("vs_control", _UP, -0.12, "against its control"),
                                 ("vs_ref", _WINDOW, 0.12, "against the ground baseline")):
        label: str | None = name
        for i, r in enumerate(rows):
            s = r.get(key) or {}
            m, ci = s.get("ratio_mean"), s.get("ratio_ci95")
            if m is None:
                continue
            xerr = [[m - ci[0]], [ci[1] - m]] if ci else None
            ax.errorbar([m], [i + dy], xerr=xerr, fmt="o", color=color, capsize=3, mfc=color if ci else "none",
                        label=label)
            label = None  # one legend entry per kind
    ax.axvline(1.0, color="0.5", lw=0.8, ls="--")
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xlabel("validation bpb ratio (95% interval over seeds)")
    ax.set_title(title or "What each effect of the orbit costs, at equal processed tokens")
    if ax.get_legend_handles_labels()[1]:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2, frameon=False)
    return fig
