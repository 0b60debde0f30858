"""islands_kit.plots: every figure has a title, labelled axes (with units), legends where several series share an
axis, draws the data it was given, and saves a real PNG. Synthetic histories only: no training here."""
from __future__ import annotations

import numpy as np
import pytest

from islands_kit import plots
from islands_kit.sync.butterfly import butterfly_schedule, mixing_matrix
from islands_kit.sync.schedule import streaming_schedule

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def history(n_evals: int = 4, n_layers: int = 2, steps_per_eval: int = 10, bytes_per_step: int = 1000,
            bpb0: float = 7.0, js: bool = True) -> list[dict]:
    """A history.jsonl-shaped list: bpb falling, bytes growing linearly, routing stats per layer."""
    out = []
    for k in range(1, n_evals + 1):
        step = k * steps_per_eval
        rec = {"step": step, "tokens": step * 1280, "val_bpb": bpb0 - 0.5 * k, "final": k == n_evals,
               "train_loss": 4.0 - 0.1 * k, "sim_time_s": 0.25 * step, "cross_site_bytes": step * bytes_per_step,
               "balance_loss": [1.0 + 0.01 * (k + l) for l in range(n_layers)],
               "max_over_mean_load": [1.5 + 0.1 * (k + l) for l in range(n_layers)]}
        if k == n_evals:  # the final model on the curve's subset; val_bpb is then on every held-out byte
            rec["val_bpb_subset"] = rec["val_bpb"] - 0.02
        if js:
            rec["routing_js_bits"] = 0.1 / k
            rec["routing_topk_overlap"] = 1.0 - 0.05 * k
        out.append(rec)
    return out


def all_axes(fig):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def assert_readable(fig, n_axes: int | None = None) -> None:
    """Title (figure or every axes), x and y labels on every data axes."""
    axes = all_axes(fig)
    if n_axes is not None:
        assert len(axes) == n_axes
    has_suptitle = fig._suptitle is not None and fig._suptitle.get_text()
    for ax in axes:
        assert ax.get_xlabel().strip(), f"axes {ax} has no x label"
        assert ax.get_ylabel().strip(), f"axes {ax} has no y label"
        assert ax.get_title().strip() or has_suptitle, "no title"


def legend_texts(ax) -> list[str]:
    leg = ax.get_legend()
    assert leg is not None, "no legend"
    return [t.get_text() for t in leg.get_texts()]


def test_bpb_curves_tokens_and_sim_time_plot_the_history(tmp_path):
    runs = {"baseline": history(), "two_site": history(bpb0=6.5)}
    floors = {"gzip": 3.1, "bz2": 2.4, "xz": 2.76}
    for x, key, unit in (("tokens", "tokens", "tokens"), ("sim_time", "sim_time_s", "(s)")):
        fig = plots.bpb_curves(runs, x=x, floors=floors)
        assert_readable(fig, 1)
        ax = fig.axes[0]
        assert unit in ax.get_xlabel() and "bits per byte" in ax.get_ylabel()
        lines = ax.get_lines()
        data = [l for l in lines if l.get_label() in legend_texts(ax) and l.get_linestyle() not in ("--", "None")]
        assert len(data) == 2
        np.testing.assert_allclose(data[0].get_xdata(), [r[key] for r in runs["baseline"]])
        # one quantity to its end: the subset's scores, the final model's on the subset last
        np.testing.assert_allclose(data[1].get_ydata(), [r.get("val_bpb_subset", r["val_bpb"]) for r in runs["two_site"]])
        texts = legend_texts(ax)
        assert any("final 5.000" in t for t in texts)  # baseline's final_val_bpb: 7 - 0.5 * 4
        assert sum("same bytes" in t for t in texts) == 3  # one dashed floor per compressor
        p = plots.save(fig, tmp_path / f"bpb_{x}.png")
        assert p.read_bytes()[:8] == PNG_MAGIC and p.stat().st_size > 5000


def test_bpb_curves_rejects_bad_input():
    with pytest.raises(ValueError, match="x: must be one of"):
        plots.bpb_curves({"a": history()}, x="wall")
    with pytest.raises(ValueError, match="runs"):
        plots.bpb_curves({})
    with pytest.raises(ValueError, match="empty"):
        plots.bpb_curves({"a": []})


def test_link_bytes_cumulative_with_ddp_reference():
    h = history(bytes_per_step=500)
    fig = plots.link_bytes({"two_site": h}, ddp_bytes_per_step={"two_site": 40_000.0})
    assert_readable(fig, 1)
    ax = fig.axes[0]
    assert "MB" in ax.get_ylabel() and "(s)" in ax.get_xlabel() and ax.get_yscale() == "log"
    sent, ddp = ax.get_lines()
    np.testing.assert_allclose(sent.get_ydata(), [r["cross_site_bytes"] / 1e6 for r in h])
    np.testing.assert_allclose(ddp.get_ydata(), [r["step"] * 40_000.0 / 1e6 for r in h])
    assert legend_texts(ax) == ["two_site", "two_site: fp32 all-reduce every step"]


def test_link_bytes_timeline_is_the_exact_staircase():
    tl = [(0.5, 1.0, 100, 0, 1, "fragments"), (0.2, 0.4, 300, 1, 0, "fragments"), (2.0, 3.0, 600, 0, 1, "routing")]
    fig = plots.link_bytes({"a": history()}, timelines={"a": tl})
    line = fig.axes[0].get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), [0.4, 1.0, 3.0])  # sorted by arrival
    np.testing.assert_allclose(line.get_ydata(), np.array([300, 400, 1000]) / 1e6)


def test_routing_load_panels_per_layer_and_drift():
    h = history(n_layers=3)
    fig = plots.routing_load(h)
    assert_readable(fig, 4)
    load_ax, bal_ax, js_ax, overlap_ax = fig.axes  # the overlap shares the drift panel (right axis)
    assert "max / mean" in load_ax.get_ylabel() and "balance" in bal_ax.get_ylabel().lower()
    assert "bits" in js_ax.get_ylabel() and "overlap" in overlap_ax.get_ylabel()
    np.testing.assert_allclose(overlap_ax.get_lines()[0].get_ydata(), [r["routing_topk_overlap"] for r in h])
    assert len(legend_texts(js_ax)) == 2
    assert legend_texts(load_ax)[:3] == ["layer 0", "layer 1", "layer 2"]
    np.testing.assert_allclose(load_ax.get_lines()[2].get_ydata(), [r["max_over_mean_load"][2] for r in h])
    np.testing.assert_allclose(bal_ax.get_lines()[0].get_ydata(), [r["balance_loss"][0] for r in h])
    # a single replica records no drift: two panels
    assert len(all_axes(plots.routing_load(history(js=False)))) == 2
    with pytest.raises(ValueError, match="max_over_mean_load"):
        plots.routing_load([{"step": 1, "tokens": 1, "val_bpb": 8.0}])


def test_balance_vs_load_means_over_layers():
    runs = {"aux": history(n_layers=2), "none": history(n_layers=2)}
    fig = plots.balance_vs_load(runs)
    assert_readable(fig, 2)
    bal_ax, load_ax = fig.axes
    np.testing.assert_allclose(load_ax.get_lines()[0].get_ydata(),
                               [np.mean(r["max_over_mean_load"]) for r in runs["aux"]])
    assert legend_texts(bal_ax)[:2] == ["aux", "none"]


def test_comparison_bars_show_absolute_bytes_first_and_both_ratios_with_their_reference():
    common = {"seed": 0, "reference": "runs/demo/baseline", "reference_experiment": "baseline"}
    rows = [
        {"experiment": "baseline", "final_val_bpb": 3.0, "cross_site_bytes": 1e9, "ddp_equivalent_bytes": 1e9,
         "n_islands": 2, "x_fewer_bytes": 1.0, "x_fewer_than_ref": 1.0, "compute_utilization": 0.5, **common},
        {"experiment": "two_site", "final_val_bpb": 3.1, "cross_site_bytes": 1e6, "ddp_equivalent_bytes": 1e9,
         "n_islands": 2, "x_fewer_bytes": 1000.0, "x_fewer_than_ref": 1000.0, "compute_utilization": 0.99, **common},
        {"experiment": "eight_cell", "final_val_bpb": 3.2, "cross_site_bytes": 2e9, "ddp_equivalent_bytes": 7e9,
         "n_islands": 8, "x_fewer_bytes": 3.5, "x_fewer_than_ref": 0.5, "compute_utilization": 1.0, **common},
    ]
    fig = plots.comparison_bars(rows)
    assert_readable(fig, 3)
    bpb_ax, bytes_ax, util_ax = fig.axes
    assert [p.get_height() for p in bpb_ax.patches] == [3.0, 3.1, 3.2]
    assert bytes_ax.get_yscale() == "log"
    assert [round(p.get_height(), 6) for p in util_ax.patches] == [50.0, 99.0, 100.0]
    assert [t.get_text() for t in bpb_ax.get_xticklabels()] == ["baseline", "two_site", "eight_cell"]
    # absolute bytes first (total, per island), then each ratio after its reference in words: eight_cell sends
    # fewer than its own 8-island all-reduce yet twice the baseline's bytes, and the figure says both
    labels = [t.get_text().splitlines() for t in bytes_ax.texts]
    assert labels[2] == ["2.0 GB total", "250.0 MB per island", "vs baseline:", "2.0x more", "vs own all-reduce:",
                         "3.5x fewer"]
    assert labels[1][2:] == ["vs baseline:", "1,000x fewer", "vs own all-reduce:", "1,000x fewer"]
    assert "baseline" in bytes_ax.get_title() and "own all-reduce" in bytes_ax.get_title()
    # each bar's own-islands all-reduce is a dotted tick, and the legend covers none of them, nor any label
    (ticks,) = bytes_ax.collections
    assert [round(seg[0][1]) for seg in ticks.get_segments()] == [1000, 1000, 7000]
    assert legend_texts(bytes_ax) == ["fp32 all-reduce every step among the run's own islands"]
    fig.canvas.draw()
    legend = bytes_ax.get_legend().get_window_extent()
    to_px = bytes_ax.transData.transform
    for (x0, y), (x1, _) in ticks.get_segments():
        (px0, py), (px1, _) = to_px((x0, y)), to_px((x1, y))
        assert not (legend.x0 < px1 and px0 < legend.x1 and legend.y0 <= py <= legend.y1), "the legend covers a tick"
    for t in bytes_ax.texts:
        assert not legend.overlaps(t.get_window_extent()), f"the legend covers {t.get_text()!r}"
    boxes = [t.get_window_extent() for t in bytes_ax.texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), "bar labels overlap"


def test_bpb_band_draws_mean_and_one_std_over_seeds():
    seeds = [history(bpb0=7.0), history(bpb0=7.2), history(bpb0=7.7)]
    fig = plots.bpb_band({"two_site": seeds, "baseline": [history(bpb0=6.0)]}, floors={"xz": 2.7})
    assert_readable(fig, 1)
    ax = fig.axes[0]
    ys = np.array([[r.get("val_bpb_subset", r["val_bpb"]) for r in h] for h in seeds])  # the curve: the subset's
    line = ax.get_lines()[0]
    np.testing.assert_allclose(line.get_ydata(), ys.mean(0))
    (band,) = ax.collections  # the single-seed label has no band
    verts = band.get_paths()[0].vertices
    top = ys.mean(0) + ys.std(0, ddof=1)
    assert np.isclose(verts[:, 1].max(), top.max()) and np.isclose(verts[:, 1].min(), (ys.mean(0) - ys.std(0, ddof=1)).min())
    assert legend_texts(ax)[0].endswith("3 seeds)") and "±" in legend_texts(ax)[0]
    with pytest.raises(ValueError, match="groups"):
        plots.bpb_band({"x": [[]]})


@pytest.mark.slow
def test_teaching_figures(tmp_path):
    fig = plots.bpb_bars({"uniform": 8.0, "xz": 2.76})
    assert_readable(fig, 1)
    assert [p.get_width() for p in fig.axes[0].patches] == [8.0, 2.76]

    states = {"A": {"load_fraction": [0.4, 0.2, 0.2, 0.2], "mean_prob": [0.4, 0.2, 0.2, 0.2], "balance_loss": 1.12,
                    "max_over_mean": 1.6},
              "B": {"load_fraction": [0.8, 0.1, 0.05, 0.05], "mean_prob": [0.27, 0.25, 0.24, 0.24], "balance_loss": 1.05,
                    "max_over_mean": 3.2}}
    fig = plots.routing_states(states)
    assert_readable(fig, 2)
    assert "1.120" in fig.axes[0].get_title() and "3.20" in fig.axes[1].get_title()

    fig = plots.loss_curves({"Adam": [10.0, 5.0, 2.0], "Shampoo": [10.0, 1.0, 0.1]})
    assert_readable(fig, 1)
    assert fig.axes[0].get_yscale() == "log" and legend_texts(fig.axes[0]) == ["Adam", "Shampoo"]

    H, P, tau = 50, 4, 2
    fig = plots.fragment_timeline(streaming_schedule(H, P, 2 * H), P, H, tau, 2 * H)
    assert_readable(fig, 1)
    ax = fig.axes[0]
    sends = [l for l in ax.get_lines() if l.get_marker() == "v"]
    merges = [l for l in ax.get_lines() if l.get_marker() == "o"]
    assert len(sends) == len(merges) == len(streaming_schedule(H, P, 2 * H)) == 8
    for s, m in zip(sends, merges):
        assert m.get_xdata()[0] - s.get_xdata()[0] == tau  # merge τ steps after the send

    ex = butterfly_schedule(8, H, 6, 2, H)
    fig = plots.butterfly_timeline(ex, 2, H, 2, H)
    assert_readable(fig, 1)
    assert len([l for l in fig.axes[0].get_lines() if l.get_marker() == "v"]) == len(ex) == 12
    assert len(legend_texts(fig.axes[0])) == 3  # one entry per butterfly round

    fig = plots.mixing_matrices({"round 0": mixing_matrix(8, [0]), "all": mixing_matrix(8, [0, 1, 2])})
    assert_readable(fig, 2)
    np.testing.assert_allclose(all_axes(fig)[1].images[0].get_array(), np.full((8, 8), 1 / 8))

    rng = np.random.default_rng(0)
    fig = plots.transfer_times({"naive": 0.1 + rng.exponential(0.05, 200), "chunked": 0.1 + rng.exponential(0.02, 200)},
                               ideal_s=0.094)
    assert_readable(fig, 2)
    assert "ms" in fig.axes[0].get_xlabel()
    texts = legend_texts(fig.axes[1])
    assert texts[0].startswith("naive: p50") and "p99" in texts[0] and texts[-1].startswith("ideal")
    p = plots.save(fig, tmp_path / "sub" / "tails.png")
    assert p.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="positive"):
        plots.transfer_times({"x": [0.0, 1.0]})


def test_show_saves_outside_ipython(tmp_path):
    fig = plots.bpb_curves({"a": history()})
    assert plots.show(fig, tmp_path / "a.png") is None  # nothing echoed after a notebook cell
    assert (tmp_path / "a.png").read_bytes()[:8] == PNG_MAGIC


def decoupled_result(int_keys: bool = False) -> dict:
    """A decoupled run's result.json by hand: site A steps every 0.01 s, site B (a 2x straggler) every 0.02 s; merges
    sent at 0.04, 0.08 (site B late) and 0.12 (a skipped round, then the end-of-run flush of fragment 1)."""
    k = (lambda i: i) if int_keys else str
    merges = [
        {"step": 4, "fragment": 0, "round": 0, "sent_s": 0.04, "merge_s": 0.045, "island_steps": {k(0): 4, k(1): 2},
         "quorum_met": True, "on_time": [0, 1], "late": [], "carried_in": [], "absent": [], "not_ready": [],
         "landing_s": {k(0): 0.046, k(1): 0.05}},
        {"step": 8, "fragment": 1, "round": 0, "sent_s": 0.08, "merge_s": 0.085, "island_steps": {k(0): 8, k(1): 4},
         "quorum_met": True, "on_time": [0], "late": [1], "carried_in": [], "absent": [], "not_ready": [],
         "landing_s": {k(0): 0.09}},
        {"step": 12, "fragment": 0, "round": 1, "sent_s": 0.12, "merge_s": 0.12, "island_steps": {k(0): 12, k(1): 6},
         "quorum_met": False, "on_time": [], "late": [], "carried_in": [], "absent": [], "not_ready": [0, 1],
         "landing_s": {}},
        {"step": 12, "fragment": 1, "round": 1, "sent_s": 0.12, "merge_s": 0.125, "island_steps": {k(0): 12, k(1): 6},
         "quorum_met": True, "on_time": [0, 1], "late": [], "carried_in": [1], "absent": [], "not_ready": [],
         "final": True, "landing_s": {k(0): 0.126, k(1): 0.13}},
    ]
    return {"sync_mode": "decoupled", "inner_steps": {k(0): 12, k(1): 6}, "sim_wall_clock_s": 0.125, "goodput": 0.8125,
            "config": {"islands": [{"name": "site-a"}, {"name": "site-b"}]},
            "decoupled": {"merges": merges, "late_contributions": 1, "dropped_contributions": 0, "not_ready_rounds": 2,
                          "skipped_merges": 1, "last_merge_s": 0.125}}


def gid_lines(ax, gid: str) -> list:
    return [l for l in ax.get_lines() if l.get_gid() == gid]


@pytest.mark.parametrize("int_keys", [False, True])
def test_decoupled_clocks_draws_each_islands_pace_the_merges_and_landings(tmp_path, int_keys):
    res = decoupled_result(int_keys)
    lock = {"sync_mode": "lockstep", "inner_steps": {"0": 6, "1": 6}, "sim_wall_clock_s": 0.121}
    fig = plots.decoupled_clocks(res, lockstep=lock)
    assert_readable(fig, 1)
    ax = fig.axes[0]
    (a,), (b,) = gid_lines(ax, "clock-0"), gid_lines(ax, "clock-1")
    # through (0, 0), the step counts at each send, and flat to the last landing (0.13 s) after training ended
    np.testing.assert_allclose(a.get_xdata(), [0, 0.04, 0.08, 0.12, 0.12, 0.13])
    np.testing.assert_allclose(a.get_ydata(), [0, 4, 8, 12, 12, 12])
    np.testing.assert_allclose(b.get_ydata(), [0, 2, 4, 6, 6, 6])
    assert b.get_ydata()[-1] == res["inner_steps"][1 if int_keys else "1"]  # the straggler's final count
    slope = lambda l: (l.get_ydata()[3] - l.get_ydata()[0]) / (l.get_xdata()[3] - l.get_xdata()[0])  # noqa: E731
    assert slope(a) == pytest.approx(100.0) and slope(b) == pytest.approx(50.0)  # steps per simulated second
    # one vertical line per merge that met its quorum (the skipped round draws none), at its merge time
    merges = gid_lines(ax, "merge")
    assert sorted(l.get_xdata()[0] for l in merges) == [0.045, 0.085, 0.125]
    assert [l.get_linestyle() for l in merges] == [":", ":", "--"]  # the end-of-run flush dashed
    # a landing dot per (merge, island), on the island's line: 0.046 s on site A is step 4.6, 0.05 s on site B step 2.5
    landings = sorted((l.get_xdata()[0], l.get_ydata()[0]) for l in gid_lines(ax, "landing"))
    np.testing.assert_allclose(landings, [(0.046, 4.6), (0.05, 2.5), (0.09, 9.0), (0.126, 12.0), (0.13, 6.0)])
    (late,) = gid_lines(ax, "late")
    assert (late.get_xdata()[0], late.get_ydata()[0]) == (0.08, 4.0) and late.get_markerfacecolor() == "none"
    (ls,) = gid_lines(ax, "clock-lockstep")
    assert list(ls.get_xdata()) == [0.0, 0.121] and list(ls.get_ydata()) == [0.0, 6.0]
    title = ax.get_title()
    assert "goodput 0.81" in title and "late 1" in title and "not ready 2" in title and "skipped merges 1" in title
    assert "site-b (island 1): 6 steps" in legend_texts(ax)
    assert plots.save(fig, tmp_path / "clocks.png").read_bytes()[:8] == PNG_MAGIC


def test_comparison_bars_title_names_the_rows_shown_and_the_quality_axis_shows_a_few_percent():
    """The title named all five experiments of the table over three bars; the quality bars started at 0, where a 3%
    gap is a few pixels: the axis starts at a stated floor instead."""
    rows = [{"experiment": e, "seed": 0, "final_val_bpb": v, "cross_site_bytes": 1e6, "ddp_equivalent_bytes": 1e9,
             "x_fewer_bytes": 1000.0, "compute_utilization": 1.0} for e, v in (("baseline", 2.25), ("two_site", 2.32))]
    fig = plots.comparison_bars(rows)
    assert fig.get_suptitle() == "baseline vs two_site"
    bpb_ax = fig.axes[0]
    lo, hi = bpb_ax.get_ylim()
    assert lo == 2.0 and "axis from 2, not 0" in bpb_ax.get_title()
    # the 3% gap is a tenth of the axis or more (from 0 it was 3%)
    assert (2.32 - 2.25) / (hi - lo) > 0.1


def _outside(fig) -> list[str]:
    """The texts of ``fig`` that reach past its edges once drawn (what savefig would cut without bbox_inches)."""
    fig.canvas.draw()
    box = fig.bbox
    texts = [t for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts,
                                             *(ax.get_legend().get_texts() if ax.get_legend() else []))]
    return [t.get_text() for t in texts if t.get_text() and t.get_visible()
            and not (box.x0 - 1 <= t.get_window_extent().x0 and t.get_window_extent().x1 <= box.x1 + 1)]


def test_frontier_keeps_its_title_labels_and_key_inside_the_figure_and_its_ticks_apart():
    """The frontier's key beside the axes pushed the title, the x label and a point's number off the left edge, and
    the log axis's minor labels overlapped: measured points of the demo, both files."""
    import json

    from islands_kit.resources import resource_file

    for name in ("frontier-demo.json", "frontier-eight_cell-demo.json"):
        pts = json.loads(resource_file(f"benchmarks/{name}").read_text())
        fig = plots.frontier(pts, title="two_site: quality vs bytes, the demo preset's measured points "
                             "(benchmarks/RESULTS.md), not this run")
        assert _outside(fig) == []
        ax = fig.axes[0]
        labels = [t for t in ax.get_xticklabels(which="both") if t.get_text() and t.get_visible()
                  and ax.get_xlim()[0] <= t.get_position()[0] <= ax.get_xlim()[1]]
        assert len(labels) >= 3, [t.get_text() for t in labels]
        boxes = [t.get_window_extent() for t in labels]
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), "tick labels overlap"


def test_saved_figures_keep_what_reaches_past_the_edge(tmp_path):
    """save() writes the drawing's own extent: a title wider than the figure widens the PNG, nothing is cut."""
    from matplotlib.image import imread

    fig, ax = plots.new_figure(width=2.0, height=2.0)
    ax.set_title("a title far wider than this two-inch figure, which savefig would otherwise cut at both edges")
    png = imread(str(plots.save(fig, tmp_path / "wide.png", dpi=50)))
    assert png.shape[1] > 2.0 * 50 * 1.5


def test_comparison_curves_legend_writes_bytes_in_units():
    """The link panel's key said "8.54e+03 MB"; it writes 8.5 GB."""
    h = history(bytes_per_step=200_000_000)  # 40 steps -> 8 GB
    fig = plots.comparison_curves({"two_site": [h]})
    (text,) = legend_texts(fig.axes[1])
    assert text == "two_site (8.0 GB)" and "e+" not in text


def test_decoupled_clocks_refuses_a_lockstep_result():
    lock = {"sync_mode": "lockstep", "inner_steps": {"0": 6, "1": 6}, "sim_wall_clock_s": 0.121}
    with pytest.raises(ValueError, match=r"no 'decoupled' record \(sync_mode 'lockstep'\).*sync\.mode=decoupled"):
        plots.decoupled_clocks(lock)
    res = decoupled_result()
    del res["inner_steps"]
    with pytest.raises(ValueError, match="no 'inner_steps'"):
        plots.decoupled_clocks(res)


def test_frontier_draws_each_setting_at_its_bytes_and_ratio_with_the_default_starred():
    pts = [{"label": "tuned", "fewer": 13.0, "ratio": 1.17, "default": True},
           {"label": "floor", "fewer": 1.0, "ratio": 1.05, "default": False}]
    fig = plots.frontier(pts, experiment="eight_cell")
    assert_readable(fig, 1)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_title() == "eight_cell: quality vs bytes on the link"
    offsets = [tuple(c.get_offsets()[0]) for c in ax.collections]
    assert offsets == [(13.0, 1.17), (1.0, 1.05)]
    star = ax.collections[0]
    assert tuple(star.get_facecolor()[0][:3]) == pytest.approx(matplotlib_rgb(plots.color("eight_cell", 0)))
    assert [t.get_text() for t in ax.texts] == ["1", "2"]  # numbered on the plot, named in the key
    # every ratio in the key names its reference
    assert legend_texts(ax)[:2] == ["1. tuned (default): 1.170x the baseline's bpb at 13x fewer bytes than data-parallel",
                                    "2. floor: 1.050x the baseline's bpb at 1x fewer bytes than data-parallel"]
    with pytest.raises(ValueError, match="no points"):
        plots.frontier([])
    far = plots.frontier(pts + [{"label": "sparse", "fewer": 900.0, "ratio": 1.8}], y_max=1.25)
    ax = far.axes[0]
    assert tuple(ax.collections[2].get_offsets()[0]) == (900.0, 1.25)  # drawn on the top edge ...
    # ... its ratio in the key
    assert legend_texts(ax)[2] == "3. sparse: 1.800x the baseline's bpb at 900x fewer bytes than data-parallel (off the top)"
    assert ax.get_ylim()[1] == pytest.approx(1.26) and ax.get_ylim()[0] == pytest.approx(0.99)


def matplotlib_rgb(c: str) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    return to_rgb(c)


def _overlaps(fig, ax) -> bool:
    """Does ``ax``'s legend cover any part of its data area (both boxes in display pixels, after a draw)?"""
    fig.canvas.draw()
    leg, box = ax.get_legend().get_window_extent(), ax.get_window_extent()
    return leg.x0 < box.x1 and leg.x1 > box.x0 and leg.y0 < box.y1 and leg.y1 > box.y0


def test_comparison_curves_draw_bpb_with_a_95_percent_band_and_bytes_on_a_log_axis(tmp_path):
    from scipy import stats

    seeds = [history(bpb0=7.0), history(bpb0=7.2), history(bpb0=7.7)]
    fig = plots.comparison_curves({"two_site": seeds, "baseline": [history(bpb0=6.0, bytes_per_step=40_000)]})
    assert_readable(fig, 2)
    left, right = fig.axes
    ys = np.array([[r.get("val_bpb_subset", r["val_bpb"]) for r in h] for h in seeds])
    np.testing.assert_allclose(left.get_lines()[0].get_ydata(), ys.mean(0))
    (band,) = left.collections  # the one-seed label has no band
    half = stats.t.ppf(0.975, 2) * ys.std(0, ddof=1) / np.sqrt(3)  # the 95% t interval of the mean, as stats.py
    verts = band.get_paths()[0].vertices
    assert np.isclose(verts[:, 1].max(), (ys.mean(0) + half).max()) and np.isclose(verts[:, 1].min(), (ys.mean(0) - half).min())
    assert "95% interval" in left.get_title() and legend_texts(left)[0].endswith("3 seeds)")
    assert right.get_yscale() == "log" and "bytes" in right.get_ylabel()
    np.testing.assert_allclose(right.get_lines()[1].get_ydata(), [r["cross_site_bytes"] / 1e6 for r in history(bytes_per_step=40_000)])
    for ax in (left, right):
        assert not _overlaps(fig, ax)
    plots.save(fig, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="groups"):
        plots.comparison_curves({})


def test_the_contact_windows_legend_sits_off_the_data():
    result = {"orbit": {"ground_windows": {str(s): [[10.0 * s, 10.0 * s + 4], [60.0 + s, 66.0 + s]] for s in range(1, 5)},
                        "isl": False, "time_compression": 300.0, "window_wait_s": 12.0},
              "config": {"islands": [{"name": "ground"}] + [{"name": f"sat-{s}"} for s in range(1, 5)]}}
    timeline = [[s * 10.0 + 1, s * 10.0 + 3, 1000, s, 0, "fragment"] for s in range(1, 5)]
    timeline += [[s * 10.0 + 3.5, 61.0 + s, 1000, 0, s, "fragment"] for s in range(1, 5)]
    fig = plots.contact_windows(result, timeline)
    ax = fig.axes[0]
    assert len(legend_texts(ax)) == 3 and not _overlaps(fig, ax)


def test_hierarchical_schedule_draws_each_link_kinds_busy_spans_and_the_site_syncs():
    from islands_kit.plots.hierarchical import busy_spans

    timeline = [[0.0, 0.1, 8, 0, 4, "fragments"], [0.05, 0.2, 8, 4, 0, "fragments"], [0.3, 0.3001, 4, 0, 1, "site"],
                [0.5, 0.6, 8, 1, 5, "fragments"], [0.3, 0.30005, 4, 1, 0, "routing"]]
    assert busy_spans(timeline, "fragments") == [(0.0, 0.2), (0.5, 0.6)]  # overlapping transfers merged
    assert busy_spans(timeline, "site") == [(0.3, 0.3001)]
    result = {"hierarchical": {"sites": 2, "cells_per_site": 4, "site_every": 10, "site_mode": "mean", "site_syncs": 1,
                               "site_sync_times": [[10, 0.3, 0.3001]]}}
    fig = plots.hierarchical_schedule(result, timeline)
    ax = fig.axes[0]
    bars = [c for c in ax.collections]
    assert len(bars) == 2 and [len(b.get_paths()) for b in bars] == [1, 2]  # site lane, then WAN lane
    assert ax.get_xlabel() == "simulated time (s)" and "2 sites x 4 cells" in ax.get_title()
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1].startswith("H1 = 10 site sync (mean), 1 in all")
