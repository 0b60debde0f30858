"""The scaling study on tiny points: the cross of lengths and widths, configs per point, resumable runs (a finished
run is not run again), the table's ratios paired per seed, and the figure."""
from __future__ import annotations

import json

import pytest

from islands_kit import plots, scaling
from islands_kit.config import ConfigError


def test_cross_has_each_point_once():
    pts = scaling.cross([10, 30, 100], [32, 64], width_at=32, length_at=30)
    assert [(p.steps, p.width, p.axis) for p in pts] == [(10, 32, "length"), (30, 32, "both"), (100, 32, "length"),
                                                          (30, 64, "width")]
    with pytest.raises(ConfigError, match="scaling.lengths"):
        scaling.cross([], [32], 32, 10)
    with pytest.raises(ConfigError, match="scaling.widths"):
        scaling.point_config("baseline", "smoke", scaling.Point(10, 34, "width"), 0)


def test_point_config_resizes_the_preset():
    cfg = scaling.point_config("two_site", "smoke", scaling.Point(40, 64, "width"), seed=3,
                               overrides={"optim.lr": 1e-3})
    assert (cfg.model.d_model, cfg.model.d_expert, cfg.model.n_heads, cfg.steps, cfg.seed) == (64, 64, 2, 40, 3)
    assert cfg.optim.lr == 1e-3 and cfg.optim.warmup_steps == 4 and cfg.eval_every == 5


@pytest.mark.slow
def test_study_runs_resumes_and_tables(tmp_path):
    lines: list[str] = []
    kw = dict(preset="smoke", lengths=[8, 16], widths=[16, 32], width_at=32, length_at=8, seeds=[0],
              overrides={"two_site": {"sync.diloco.merge": "keep_local", "sync.diloco.alpha": 0.0}}, log=lines.append)
    rows = scaling.run_study(tmp_path, **kw)
    assert len(rows) == 3 and all(k in r for r in rows for k in ("two_site_ratio", "eight_cell_ratio", "flops"))
    r = next(r for r in rows if r["steps"] == 16)
    base = json.loads((tmp_path / "baseline" / "w32-s16" / "seed0" / "result.json").read_text())
    two = json.loads((tmp_path / "two_site" / "w32-s16" / "seed0" / "result.json").read_text())
    assert r["two_site_ratio"] == two["final_val_bpb"] / base["final_val_bpb"]
    assert r["flops"] == 6.0 * base["params_active"] * base["tokens"]
    assert any("about" in line and "left" in line for line in lines)  # progress with an ETA
    lines.clear()
    again = scaling.run_study(tmp_path, **kw)  # everything finished: nothing runs, same table
    assert again == rows and lines == ["scaling study: 9 runs, 9 already finished, 0 to go -> " + str(tmp_path)]
    assert "| length | 32 | 16 |" in scaling.table_markdown(rows)
    fig = plots.scaling_ratios(rows)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and len(ax.get_legend().get_texts()) == 7  # 2 strategies x 2 arms + 3 published
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    longer = lines["two_site: longer runs (this kit)"]  # the length arm: steps 8 and 16 at width 32
    want = sorted(r["flops"] for r in rows if r["axis"] in ("length", "both"))
    assert list(longer.get_xdata()) == want
    assert lines["eight_cell: wider models (this kit)"].get_linestyle() == "--"


@pytest.mark.slow
def test_scaling_notebook_runs_the_smoke_cross_and_reuses_finished_runs(tmp_path):
    from islands_kit.notebooks import run_notebook

    params = dict(preset="smoke", lengths=[8, 16], widths=[16, 32], width_at=32, length_at=8, seeds=[0],
                  out_dir=str(tmp_path / "study"))
    nb = run_notebook("scaling", params, tmp_path / "nb")
    assert (tmp_path / "study" / "scaling_ratios.png").stat().st_size > 10_000
    table = scaling.study_table(tmp_path / "study", scaling.cross([8, 16], [16, 32], 32, 8), [0])
    assert len(table) == 3 and all("eight_cell_ratio" in r for r in table)
    text = nb.read_text() if hasattr(nb, "read_text") else ""
    assert "9 to go" in text and "eight_cell" in text


def test_scaling_notebook_refuses_a_bad_parameter_in_one_line(tmp_path):
    from islands_kit.notebooks import check_scaling_parameters

    with pytest.raises(ConfigError, match="^preset: must be one of"):
        check_scaling_parameters("nope", [8], [16], 16, 8, [0], {})
    with pytest.raises(ConfigError, match="^overrides:"):
        check_scaling_parameters("smoke", [8], [16], 16, 8, [0], {"two_sites": {}})
    with pytest.raises(ConfigError, match="sync.HH"):
        check_scaling_parameters("smoke", [8], [16], 16, 8, [0], {"two_site": {"sync.HH": 3}})
