"""A validation curve is one quantity: every point scores the curve's subset (``data.eval_bytes``), the final model
included (``val_bpb_subset``), while ``final_val_bpb`` (every held-out byte) is a marker of its own in every figure
that draws curves. The curve used to end on the full set, so every curve ticked at its end (a new user read it as
overfitting)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from islands_kit import plots
from islands_kit.compare import curve_groups
from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.records.tracking import load_result
from islands_kit.run import run_experiment


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("curve") / "baseline"
    # the subset a quarter of the held-out bytes scored at the end: the two finals differ
    cfg = apply_overrides(get_preset("baseline", "smoke"), {"steps": 6, "eval_every": 2, "threads": 1,
                                                            "data.eval_bytes": 1024, "data.final_eval_bytes": 4096})
    run_experiment(cfg, out)
    return out


def _bpb_lines(ax):
    """The drawn lines of an axes that join points (markers alone, the final's, have no line style)."""
    return [ln for ln in ax.get_lines() if ln.get_linestyle() not in ("None", "none") and len(ln.get_ydata()) > 1]


def _markers(ax):
    return [ln for ln in ax.get_lines() if ln.get_linestyle() in ("None", "none") and len(ln.get_ydata()) == 1]


def test_the_final_record_holds_both_scores_and_the_result_names_them(run_dir):
    res = load_result(run_dir)
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    (final,) = [h for h in history if h.get("final")]
    assert final["val_bpb"] == res["final_val_bpb"]  # final_val_bpb still scores every held-out byte
    assert res["val_bytes"] > res["eval_bytes"]
    assert res["final_val_bpb_subset"] == final["val_bpb_subset"] != final["val_bpb"]
    assert all("val_bpb_subset" not in h for h in history if not h.get("final"))


def test_no_figure_joins_subset_evaluations_to_the_full_set_final(run_dir):
    res = load_result(run_dir)
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    evals = [h for h in history if "val_bpb" in h]
    curve = [h.get("val_bpb_subset", h["val_bpb"]) for h in evals]
    full = res["final_val_bpb"]
    figures = {
        "bpb_curves": plots.bpb_curves({"baseline": history}).axes[0],
        "bpb_band": plots.bpb_band({"baseline": [history, history]}).axes[0],
        "comparison_curves": plots.comparison_curves({"baseline": [history]}).axes[0],
        # compare --plot from the run's folder, and from its result.json alone (no history.jsonl beside it)
        "compare --plot": plots.comparison_curves(curve_groups([dict(res, dir=str(run_dir))])).axes[0],
        "compare --plot (result.json)": plots.comparison_curves(curve_groups([{k: v for k, v in res.items()
                                                                               if k != "dir"}])).axes[0],
    }
    for name, ax in figures.items():
        (line,) = _bpb_lines(ax)
        np.testing.assert_allclose(line.get_ydata(), curve, err_msg=name)  # the subset to its end
        assert full not in list(line.get_ydata()), name
        finals = [m for m in _markers(ax) if m.get_ydata()[0] == pytest.approx(full)]
        assert len(finals) == 1, f"{name}: the full-set final is not drawn as its own marker"
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any("all held-out bytes" in t for t in labels), name
