"""Decoupled islands (``sync.mode=decoupled``): each island's step clock, the merges and where they land."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from islands_kit.plots.style import new_figure

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
