"""Every figure of the kit: the notebooks call these and hold no plotting code of their own.

Each function takes plain data (the ``history.jsonl`` records or the ``result.json`` of a run, schedules, matrices,
durations) and returns a ``matplotlib.figure.Figure`` built without pyplot on the Agg canvas: nothing global is
touched, so the figures work the same in a headless test, a papermill kernel or a script. Every axis carries a label
with its unit, every figure a title, and every figure with more than one series a legend.

``save(fig, path)`` writes a PNG; ``show(fig, path)`` saves it and, inside IPython/Jupyter, displays the saved PNG.

History records (one per evaluation, see ``islands_kit.run``): ``step``, ``tokens``, ``val_bpb``, ``sim_time_s``,
``cross_site_bytes`` (cumulative), ``balance_loss`` and ``max_over_mean_load`` (one value per layer) and, with several
replicas, ``routing_js_bits`` and ``routing_topk_overlap``.

Where each figure lives (call them all as ``plots.NAME``):

- ``style``: the shared canvas, colours and x axes; ``output``: ``save`` and ``show``
- ``runs``: bpb curves and seed bands, bytes on the link, routing load, balance score vs load
- ``decoupled``: each island's step clock in a decoupled run
- ``orbital``: the satellites' contact windows with the sync events on them
- ``comparison``: the comparison's curves (``compare --plot``), the compare table's bars, the quality-vs-bytes
  frontier
- ``scaling``: the scaling trend (the two-site gap vs active parameters and vs tokens, our fits, the published points)
- ``schedules``: Streaming DiLoCo and butterfly timelines, butterfly mixing matrices
- ``hierarchical``: the hierarchical experiment's two-level schedule (site link and WAN) on the simulated clock
- ``teaching``: the tour's bits-per-byte bars, routing states, loss curves, transfer times
- ``utilisation``: compute utilisation against link bandwidth per method, with the published tables' points
"""
from __future__ import annotations

from islands_kit.plots.comparison import comparison_bars, comparison_curves, frontier
from islands_kit.plots.decoupled import decoupled_clocks
from islands_kit.plots.hierarchical import hierarchical_schedule
from islands_kit.plots.orbital import contact_windows, study_effects
from islands_kit.plots.output import save, show
from islands_kit.plots.runs import balance_vs_load, bpb_band, bpb_curves, link_bytes, routing_load
from islands_kit.plots.schedules import butterfly_timeline, fragment_timeline, mixing_matrices
from islands_kit.plots.style import COLORS, X_AXES, History, color, new_figure
from islands_kit.plots.teaching import bpb_bars, loss_curves, routing_states, transfer_times
from islands_kit.plots.utilisation import utilisation_vs_bandwidth

__all__ = [
    "COLORS", "X_AXES", "History", "balance_vs_load", "bpb_band", "bpb_bars", "bpb_curves", "butterfly_timeline", "color",
    "comparison_bars", "comparison_curves",
    "contact_windows", "study_effects", "decoupled_clocks", "fragment_timeline", "frontier", "hierarchical_schedule",
    "link_bytes", "loss_curves", "mixing_matrices",
    "new_figure", "routing_load", "routing_states", "save", "show", "transfer_times", "utilisation_vs_bandwidth",
]
