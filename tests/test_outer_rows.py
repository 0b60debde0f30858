"""benchmarks/outer_rows.py on fabricated run folders: each row is paired per seed with the same-code baseline's run
at that seed (a seed without its baseline is left out), the file holds the frontier schema plus replicas and both
splits' ratios, the movement medians come from the run's outer_log, and every row re-makes from its overrides."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def rows_mod(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("outer_rows", ROOT / "benchmarks" / "outer_rows.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "OUT", tmp_path)
    for name in ("FILE", "FRONTIER", "FRONTIER8"):  # no stored figures unless a test writes them
        monkeypatch.setattr(mod, name, tmp_path / f"{name}.json")
    return mod


def fake(mod, label, seed, val, tune, log=(), sent=0):
    _, experiment, _, sets, _ = mod.ROWS[label]
    d = mod._dir(experiment, sets, seed)
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({
        "final_val_bpb": val, "final_tune_bpb": tune, "cross_site_bytes": sent, "ddp_equivalent_bytes": 1000.0,
        "wall_time_s": 1.0, "outer_log": list(log)}))


def test_rows_pair_each_seed_with_the_same_seeds_baseline(rows_mod):
    m = rows_mod
    lab = "SNOO K=25, 0.5/0.5"
    for s, (b, r) in enumerate([(2.0, 1.98), (2.2, 2.2), (2.4, 2.3)]):
        fake(m, m.BASELINE, s, b, b + 0.1)
        fake(m, lab, s, r, r + 0.1, log=[{"fragment": "snoo", "rel_delta": 0.1 * (s + 1), "cos_prev": None,
                                         "weight_norm": 3.0, "applied_over_delta": 1.5}])
    fake(m, "SNOO K=10, 0.5/0.5", 1, 2.0, 2.1)  # its seed-1 run is paired with the baseline's seed 1 ...
    (m._dir("baseline", m.ROWS[m.BASELINE][3], 2) / "result.json").unlink()  # ... and seed 2 loses its baseline
    got = {r["label"]: r for r in m.rows()}
    row = got[lab]
    assert row["seeds"] == [0, 1] and row["ratios"] == pytest.approx([0.99, 1.0])
    assert row["ratio"] == pytest.approx(0.995) and row["tune_ratio"] == pytest.approx((2.08 / 2.1 + 1) / 2)
    assert row["replicas"] == 1 and row["fewer"] is None and row["baseline"]["bpb"] == [2.0, 2.2]
    assert row["weight_norm_end"] is None and row["rel_delta_median"] == 0.1 and row["cos_prev_median"] is None
    assert row["overrides"]["optim.snoo.k"] == "25" and row["overrides"]["threads"] == "1"
    assert "SNOO K=10, 0.5/0.5" not in got  # the row's seed is seed 0 only: the seed-1 folder is not its run
    assert "| SNOO K=25, 0.5/0.5 | 2 | 2.0900 | 0.9950 (0.9900 / 1.0000) |" in m.table(m.rows())


def test_every_row_builds_a_valid_config():
    """Every row's overrides are valid --set keys on its experiment's demo preset (no row fails at run time)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("outer_rows_cfg", ROOT / "benchmarks" / "outer_rows.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from islands_kit.config import apply_overrides
    from islands_kit.presets import get_preset

    for label, (_, experiment, replicas, sets, seeds) in mod.ROWS.items():
        cfg = apply_overrides(get_preset(experiment, "demo"), mod.overrides(sets))
        assert seeds and replicas in (1, 2, 8), label
        models = 1 if cfg.sync.strategy == "ddp" else len(cfg.islands)
        assert models == replicas, label


def test_an_m1_row_is_also_paired_with_its_own_stream(rows_mod):
    """M = 1 rows train on site A's stream: beside the baseline they are divided by site A alone at the same seed."""
    m = rows_mod
    lab = "M=1 DiLoCo H=25 fp32, 1 fragment, tau 0, 0.5/0.5, ramp 10"
    for s, (b, a, r) in enumerate([(2.0, 2.02, 1.98), (2.2, 2.1, 2.1)]):
        fake(m, m.BASELINE, s, b, b)
        fake(m, m.STREAM_A, s, a, a)
        fake(m, lab, s, r, r)
    got = {r["label"]: r for r in m.rows()}
    assert got[lab]["ratio_vs_control"] == pytest.approx((1.98 / 2.02 + 1.0) / 2) and got[lab]["control"] == m.STREAM_A
    assert got[lab]["ratio"] == pytest.approx((0.99 + 2.1 / 2.2) / 2)
    assert got[m.STREAM_A]["ratio_vs_control"] is None and got[m.BASELINE]["ratio_vs_control"] is None


def test_stored_figures_stand_in_for_run_folders_that_are_gone(rows_mod):
    """A row whose run folders were removed keeps the file's figures; a new run pairs with the file's baseline at
    its seed; a two_site row is also divided by two_site's defaults, read from the frontier file's default point;
    a run that disagrees with the file is named on stderr."""
    m = rows_mod
    old = "SNOO K=25, 0.5/0.5"
    m.FILE.write_text(json.dumps([
        {"label": m.BASELINE, "seeds": [0, 1, 2], "bpb": [2.0, 2.2, 2.4], "tune_bpb": [2.1, 2.3, 2.5]},
        {"label": old, "seeds": [0], "bpb": [1.98], "tune_bpb": [2.0], "fewer": 1.0, "weight_norm_end": 75.2,
         "rel_delta_median": 0.08}]))
    m.FRONTIER.write_text(json.dumps([{"label": "x", "default": False, "seeds": [0], "bpb": [9.0]},
                                      {"label": "two_site defaults", "default": True, "seeds": [0, 1, 2],
                                       "bpb": [2.05, 2.25, 2.45]}]))
    carry = "two_site + SNOO inside each site K=25, 0.5/0.5, ramp 10"
    fake(m, carry, 0, 2.02, 2.12, sent=10)
    fake(m, carry, 1, 2.2, 2.3, sent=10)
    got = {r["label"]: r for r in m.rows()}
    assert got[old]["bpb"] == [1.98] and got[old]["ratio"] == pytest.approx(0.99)
    assert got[old]["tune_ratio"] == pytest.approx(2.0 / 2.1) and got[old]["weight_norm_end"] == 75.2
    assert got[carry]["ratios"] == pytest.approx([1.01, 1.0]) and got[carry]["fewer"] == 100.0
    assert got[carry]["control"] == m.TWO_SITE
    assert got[carry]["ratio_vs_control"] == pytest.approx((2.02 / 2.05 + 2.2 / 2.25) / 2)
    assert got[m.TWO_SITE]["bpb"] == [2.05, 2.25, 2.45] and got[m.TWO_SITE]["tune_ratio"] is None
    assert got[carry]["ratio_vs_snoo_baseline"] is None  # no SNOO-baseline run or figure yet
    fake(m, m.SNOO_BASE, 1, 2.1, 2.2)
    assert {r["label"]: r for r in m.rows()}[carry]["ratio_vs_snoo_baseline"] == pytest.approx(2.2 / 2.1)
    assert "| two_site + SNOO inside each site K=25, 0.5/0.5, ramp 10 | 2 |" in m.table(list(got.values()))
    m.FILE.write_text(json.dumps([{"label": m.BASELINE, "seeds": [0], "bpb": [2.0], "tune_bpb": [2.1]},
                                  {"label": carry, "seeds": [0], "bpb": [2.03], "tune_bpb": [2.1]}]))



def test_a_run_that_disagrees_with_the_file_is_named(rows_mod, capsys):
    m = rows_mod
    m.FILE.write_text(json.dumps([{"label": m.BASELINE, "seeds": [0], "bpb": [2.0], "tune_bpb": [2.1]}]))
    fake(m, m.BASELINE, 0, 2.01, 2.1)
    assert {r["label"]: r for r in m.rows()}[m.BASELINE]["bpb"] == [2.01]  # the run folder wins ...
    assert "the run gives 2.01, the file had 2.0" in capsys.readouterr().err  # ... and the difference is named


def test_remake_point_runs_the_files_overrides_at_seed_0(rows_mod, tmp_path, monkeypatch, capsys):
    m = rows_mod
    point = {"label": "SNOO K=25, 0.5/0.5", "experiment": "baseline", "preset": "demo", "seeds": [0, 1],
             "overrides": {"optim.snoo.k": "25", "threads": "1"}, "bpb": [2.2455, 2.2]}
    f = tmp_path / "outer-demo.json"
    f.write_text(json.dumps([point]))
    monkeypatch.setattr(m, "FILE", f)
    calls = []
    monkeypatch.setattr(m, "islands_kit_run", lambda exp, preset, sets, seed, d: calls.append((exp, preset, sets, seed))
                        or {"final_val_bpb": 2.2455})
    m.main(["--remake-point", "SNOO K=25, 0.5/0.5"])
    assert calls == [("baseline", "demo", point["overrides"], 0)]
    assert json.loads(capsys.readouterr().out) == {"bpb": 2.2455, "stored_bpb": 2.2455}
