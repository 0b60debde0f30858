"""The standard figures of one run — bpb against tokens and against simulated time, bytes on the link (with the
transfer staircase of ``link_timeline.jsonl``) and the routing load — drawn by the one function that the tracker
(the CLI's and wandb's PNGs) and the experiment notebooks share."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure

from islands_kit import plots

FILES = ("bpb_vs_tokens.png", "bpb_vs_sim_time.png", "link_bytes.png", "routing_load.png")


def standard_figures(result: Mapping[str, Any], history: Sequence[Mapping[str, Any]],
                     timeline: Sequence[Sequence[Any]] | None) -> dict[str, Figure]:
    """File name -> figure: ``result`` is the run's result.json, ``history`` its history.jsonl records and
    ``timeline`` its link transfers (``link_timeline.jsonl``, None where the run wrote none). The routing figure
    only where every record holds the routing balance (a mixture-of-experts model); the contact windows only for a
    run on the orbit (result.json's ``orbit`` section)."""
    name = result["experiment"]
    runs = {name: list(history)}
    floors = result["compressor_bpb"]
    figs = {"bpb_vs_tokens.png": plots.bpb_curves(runs, x="tokens", floors=floors),
            "bpb_vs_sim_time.png": plots.bpb_curves(runs, x="sim_time", floors=floors)}
    ddp_per_step = {name: float(result["ddp_equivalent_bytes"]) / max(int(result["steps"]), 1)}
    figs["link_bytes.png"] = plots.link_bytes(runs, ddp_bytes_per_step=ddp_per_step,
                                              timelines={name: list(timeline) if timeline is not None else []})
    if all("balance_loss" in h for h in history):
        figs["routing_load.png"] = plots.routing_load(list(history))
    if "orbit" in result:  # a run on the orbit (link.schedule=orbit): its contact windows and the syncs on them
        figs["contact_windows.png"] = plots.contact_windows(result, list(timeline) if timeline is not None else [])
    return figs


def has_finite_eval(history: Sequence[Mapping[str, Any]]) -> bool:
    """Is there a bpb to draw (a run that diverged at once has none)?"""
    return any(h.get("val_bpb") is not None and math.isfinite(h["val_bpb"]) for h in history)


def save_standard_figures(result: Mapping[str, Any], history: Sequence[Mapping[str, Any]],
                          timeline: Sequence[Sequence[Any]] | None, out_dir: str | Path,
                          show: bool = False) -> list[Path]:
    """Write the standard figures as PNGs into ``out_dir`` (and, with ``show``, display them in a notebook); nothing
    for a run without a finite evaluation."""
    if not has_finite_eval(history):
        return []
    out = []
    for file, fig in standard_figures(result, history, timeline).items():
        path = Path(out_dir) / file
        if show:
            plots.show(fig, path)
        else:
            plots.save(fig, path)
        out.append(path)
    return out
