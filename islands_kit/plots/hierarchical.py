"""The hierarchical experiment's two-level schedule on the simulated clock: the transfers on each link kind (the
sites' fast links, channel ``site``; the WAN, channel ``fragments``) as bars over simulated time, and each H₁ site sync
as a mark."""
from __future__ import annotations

from typing import Any, Sequence

from matplotlib.figure import Figure

from islands_kit.plots.style import color, new_figure

LANES = (("site", "site link (H1 syncs, reduce-scatter, all-gather)"), ("fragments", "WAN (DiLoCo fragments)"))


def busy_spans(timeline: Sequence[Sequence[Any]], channel: str) -> list[tuple[float, float]]:
    """The simulated intervals during which some transfer of ``channel`` was on the wire, merged (link timeline rows:
    ``(start_s, end_s, bytes, src, dst, channel)``)."""
    spans = sorted((float(r[0]), float(r[1])) for r in timeline if r[5] == channel)
    out: list[tuple[float, float]] = []
    for a, b in spans:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def hierarchical_schedule(result: dict[str, Any], timeline: Sequence[Sequence[Any]], title: str | None = None) -> Figure:
    """One lane per link kind: a bar wherever a transfer of that kind was in flight (simulated seconds), ▼ above the
    site lane at each H₁ sync (``result["hierarchical"]["site_sync_times"]``: step, start, end)."""
    h = result["hierarchical"]
    fig, ax = new_figure(width=9.0, height=2.8)
    for y, (channel, label) in enumerate(LANES):
        spans = busy_spans(timeline, channel)
        total = sum(b - a for a, b in spans)
        c = color("hierarchical" if channel == "site" else "two_site", y)
        ax.broken_barh([(a, max(b - a, 1e-4)) for a, b in spans], (y - 0.3, 0.6), color=c, alpha=0.8,
                       label=f"{label}: {len(spans)} busy spans, {total:.3g} s in all")
    marks = [float(t[1]) for t in h["site_sync_times"]]
    ax.plot(marks, [0.45] * len(marks), linestyle="none", marker="v", color="black", ms=6,
            label=f"H1 = {h['site_every']} site sync ({h['site_mode']}), {h['site_syncs']} in all")
    ax.set_yticks(range(len(LANES)), ["site link", "WAN"])
    ax.set_ylim(-0.7, len(LANES) - 0.3)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("link kind")
    ax.set_title(title or f"Two-level schedule: {h['sites']} sites x {h['cells_per_site']} cells")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig
