"""The scaling trend: the knobs (width, tokens per active parameter, length) and the regime guard, studies with
points, the fits against independent computations (scipy.stats.linregress, the closed-form WLS), Fieller's crossing
(bounded and unbounded), the published fit, and the trend document from a points study's runs."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.io import atomic_write_bytes
from islands_kit.protocol.knobs import KnobError, active_params, outer_steps, resolve, tokens_of
from islands_kit.protocol.points import point_root, run_points
from islands_kit.protocol.runs import Run
from islands_kit.protocol.study import StudyError, load_study, parse_study
from islands_kit.scaling import fit, references, trend

ROOT = Path(__file__).resolve().parent.parent
SIZE = ROOT / "benchmarks" / "studies" / "scaling-size.toml"
LENGTH = ROOT / "benchmarks" / "studies" / "scaling-length.toml"


def cfg_of(study, point, trial):
    sub = study.at_point(point)
    return apply_overrides(sub.base_config(trial.experiment), trial.overrides)


def test_the_size_axis_keeps_tokens_per_active_param_within_two_percent_and_the_regime():
    study = load_study(SIZE)
    actives, ratios = [], []
    for p in study.points:
        for arm in study.arms:
            for t in study.at_point(p).trials(arm):
                cfg = cfg_of(study, p, t)
                ratios.append(tokens_of(cfg) / active_params(cfg))
                n = outer_steps(cfg)
                assert n is None or n >= 24, (p.name, t.describe(), n)
                actives.append(active_params(cfg))
    assert max(ratios) / min(ratios) - 1 < 0.02 and all(abs(r / 30.5 - 1) < 0.02 for r in ratios)
    assert len({a for a in actives}) == 4 and max(actives) / min(actives) >= 6


def test_width_scales_heads_and_experts_and_active_params_match_the_model():
    from islands_kit.model.transformer import ByteTransformer

    base = get_preset("two_site", "demo")
    for width, heads, expert in ((32, 2, 32), (48, 2, 48), (64, 2, 64), (96, 3, 96)):
        cfg = apply_overrides(base, resolve(base, "demo", {}, {"width": str(width)}))
        assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.d_expert) == (width, heads, expert)
        assert active_params(cfg) == ByteTransformer(cfg.model).num_active_params()
    with pytest.raises(KnobError, match=r"^width: 50 does not split into 2 heads of an even size"):
        resolve(base, "demo", {}, {"width": "50"})


def test_small_points_shrink_the_batch_then_h_and_out_of_regime_trials_are_refused():
    base = get_preset("two_site", "demo")
    sets = resolve(base, "demo", {}, {"width": "32", "tokens_per_active_param": "30.5"})
    cfg = apply_overrides(base, sets)
    assert sum(i.batch_size for i in cfg.islands) == 10 and cfg.sync.H == 50 and outer_steps(cfg) == 28
    tiny = apply_overrides(base, resolve(base, "demo", {}, {"width": "32", "tokens_per_active_param": "10"}))
    assert sum(i.batch_size for i in tiny.islands) == 10 and tiny.sync.H < 50 and outer_steps(tiny) >= 24
    with pytest.raises(KnobError, match=r"outer steps per fragment, under the regime's 24"):
        resolve(base, "demo", {}, {"length": "600"})  # H = 50: 12 outer steps
    with pytest.raises(KnobError, match=r"^tokens_per_active_param: 0.01 tokens per active parameter"):
        resolve(base, "demo", {}, {"tokens_per_active_param": "0.01"})
    with pytest.raises(KnobError, match=r"^batch_scale: 0.5 x the point.s global batch 10 = 5, which breaks .*does not split"):
        resolve(base, "demo", {}, {"width": "32", "tokens_per_active_param": "30.5", "batch_scale": "0.5"})
    with pytest.raises(KnobError, match="set one of the two"):
        resolve(base, "demo", {}, {"length": "1200", "tokens_per_active_param": "30"})
    # the length knob scales the warm-up and the evaluations with the steps and keeps H
    long = apply_overrides(base, resolve(base, "demo", {}, {"length": "4800"}))
    assert (long.steps, long.optim.warmup_steps, long.eval_every, long.sync.H) == (4800, 480, 600, 50)


def test_points_studies_are_checked_before_any_run():
    doc = {"name": "p", "preset": "demo", "seeds": [0, 1, 2], "arms": {"baseline": {"experiment": "baseline"},
           "two_site": {"experiment": "two_site", "ref": "baseline"}},
           "points": [{"name": "a", "axis": "size", "set": {"width": "32", "tokens_per_active_param": "30.5"}}]}
    assert [p.name for p in parse_study(doc).points] == ["a"]
    with pytest.raises(StudyError, match=r"points\[0\]: needs a name and an axis \(size \| length\), got 'width'"):
        parse_study({**doc, "points": [{"name": "a", "axis": "width"}]})
    with pytest.raises(StudyError, match=r"points 'b', arms.two_site: .*under the regime's 24"):
        parse_study({**doc, "points": [{"name": "b", "axis": "length", "set": {"length": "600"}}]})
    with pytest.raises(StudyError, match="no rows and no report of its own"):
        parse_study({**doc, "report": "x.json"})
    length = load_study(LENGTH)
    assert [p.sets["length"] for p in length.points] == ["600", "1200", "2400", "4800"] and length.seeds == [0, 1, 2]


def test_a_point_may_run_only_some_arms_each_with_its_reference():
    """The length axis scores eight_cell only at its 2400-step point (the demo-long three-arm comparison): a point's
    ``arms`` names the arms run there; each needs its reference beside it, and every arm runs somewhere."""
    doc = {"name": "p", "preset": "smoke", "seeds": [0, 1], "set": {"data.tune_fraction": "0.05"},
           "arms": {"baseline": {"experiment": "baseline"}, "two_site": {"experiment": "two_site", "ref": "baseline"},
                    "eight_cell": {"experiment": "eight_cell", "ref": "baseline"}},
           "points": [{"name": "a", "axis": "length", "set": {"length": "8"}, "arms": ["two_site", "baseline"]},
                      {"name": "b", "axis": "length", "set": {"length": "12"}}]}
    study = parse_study(doc)
    assert [list(study.at_point(p).arms) for p in study.points] == [["baseline", "two_site"],
                                                                    ["baseline", "two_site", "eight_cell"]]
    one = [{**doc["points"][0]}, {**doc["points"][1], "arms": ["baseline", "two_site"]}]
    with pytest.raises(StudyError, match=r"points: arm\(s\) eight_cell run at no point"):
        parse_study({**doc, "points": one})
    with pytest.raises(StudyError, match=r"points\[0\].arms: 'two_site' is read against 'baseline', which must run"):
        parse_study({**doc, "points": [{**one[0], "arms": ["two_site", "eight_cell"]}, doc["points"][1]]})
    with pytest.raises(StudyError, match=r"points\[1\].arms: 'four_cell' is not an arm of this study"):
        parse_study({**doc, "points": [one[0], {**one[1], "arms": ["baseline", "four_cell"]}]})
    with pytest.raises(StudyError, match=r"points\[0\].arms: must be a non-empty list of distinct arm names"):
        parse_study({**doc, "points": [{**one[0], "arms": []}, doc["points"][1]]})
    length = load_study(LENGTH)
    assert {p.name: list(length.at_point(p).arms) for p in length.points}["s2400"] == ["baseline", "two_site",
                                                                                       "eight_cell"]
    assert all(list(length.at_point(p).arms) == ["baseline", "two_site"] for p in length.points if p.name != "s2400")


def test_an_arm_at_one_point_is_run_reported_and_left_unfitted_there(tmp_path):
    doc = {"name": "p", "preset": "smoke", "seeds": [0, 1], "tune_seeds": [0], "set": {"data.tune_fraction": "0.05"},
           "arms": {"baseline": {"experiment": "baseline"}, "two_site": {"experiment": "two_site", "ref": "baseline"},
                    "eight_cell": {"experiment": "eight_cell", "ref": "baseline"}},
           "points": [{"name": f"w{w}", "axis": "size", "set": {"width": str(w), "tokens_per_active_param": "1"},
                       **({"arms": ["baseline", "two_site"]} if w != 32 else {})} for w in (16, 24, 32)]}
    study = parse_study(doc)
    made = run_points(study, tmp_path, jobs=2, say=lambda s: None, execute_run=fake_execute)
    arms_run = {(r.dir.relative_to(tmp_path).parts[0], r.trial.arm) for r in made}
    assert ("w32", "eight_cell") in arms_run and not {("w16", "eight_cell"), ("w24", "eight_cell")} & arms_run
    assert len(made) == 3 * 4 + 2  # eight_cell: its tuning run (seed 0, doubling as a score) and seed 1
    with pytest.raises(StudyError, match="--arms: four_cell not an arm"):
        run_points(study, tmp_path, jobs=2, say=lambda s: None, execute_run=fake_execute, arms=["four_cell"])
    assert run_points(study, tmp_path, jobs=2, say=lambda s: None, execute_run=fake_execute, arms=["eight_cell"]) == []
    doc = trend.build_trend([study], [tmp_path])
    ec = [e for e in doc["entries"] if e["kind"] in ("point", "fit") and e["arm"] == "eight_cell"]
    assert [(e["kind"], e.get("point")) for e in ec] == [("point", "w32"), ("fit", None)]
    assert ec[1]["exponent"] is None


def test_power_fit_matches_linregress_unweighted_and_closed_form_wls_weighted():
    rng = np.random.default_rng(0)
    n = np.logspace(4, 7, 8)
    gap = 0.4 * n ** -0.3 * np.exp(rng.normal(0, 0.05, n.size))
    f = fit.power_fit(n, gap)
    ref = stats.linregress(np.log10(n), np.log10(gap))
    t = stats.t.ppf(0.975, n.size - 2)
    assert f.b == pytest.approx(ref.slope, rel=1e-7) and f.b_se == pytest.approx(ref.stderr, rel=1e-5)
    assert f.b_ci95() == pytest.approx((ref.slope - t * ref.stderr, ref.slope + t * ref.stderr), rel=1e-5)
    assert f.b_ci95()[0] < -0.3 < f.b_ci95()[1]
    se = gap * rng.uniform(0.02, 0.2, n.size)  # each point's own interval
    fw = fit.power_fit(n, gap, se)
    x, y, w = np.log10(n), np.log10(gap), 1 / (se / gap) ** 2
    xm, ym = np.average(x, weights=w), np.average(y, weights=w)
    b = np.sum(w * (x - xm) * (y - ym)) / np.sum(w * (x - xm) ** 2)
    resid = y - (ym + b * (x - xm))
    s2 = np.sum(w * resid ** 2) / (n.size - 2)
    assert fw.b == pytest.approx(b, rel=1e-6) and fw.b_se == pytest.approx(math.sqrt(s2 / np.sum(w * (x - xm) ** 2)), rel=1e-4)
    # a negative gap is left out of the power law
    assert fit.power_fit([1e4, 1e5, 1e6, 1e7], [0.02, 0.01, 0.005, -0.001]).n == 3
    with pytest.raises(ValueError, match="at least 3 points"):
        fit.power_fit([1e4, 1e5, 1e6], [0.02, 0.01, -0.001])


def test_fieller_crossing_bounded_and_unbounded():
    rng = np.random.default_rng(1)
    n = np.logspace(4, 8, 9)
    gap = 0.02 - 0.004 * np.log10(n) + rng.normal(0, 0.0005, n.size)  # crosses 0 at 10^5
    ll = fit.loglinear_fit(n, gap)
    c = fit.crossing(ll)
    assert c.size == pytest.approx(10 ** (-ll.a / ll.b)) and c.lo < c.size < c.hi and c.lo < 1e5 < c.hi
    t, (vaa, vab), (_, vbb) = ll.t, *ll.cov
    for end in (c.lo, c.hi):  # Fieller's ends solve (a + θ b)^2 = t^2 (Vaa + 2θ Vab + θ^2 Vbb)
        th = math.log10(end)
        assert (ll.a + th * ll.b) ** 2 == pytest.approx(t * t * (vaa + 2 * th * vab + th * th * vbb), rel=1e-6)
    flat = fit.loglinear_fit(n, 0.01 + rng.normal(0, 0.003, n.size))
    nc = fit.crossing(flat)
    assert nc.size is None and nc.lo is None and "unbounded" in nc.reason
    with pytest.raises(ValueError, match="power law never crosses 0"):
        fit.crossing(fit.power_fit(n, np.abs(gap) + 0.01))


def test_the_published_points_and_their_fit_against_an_independent_computation():
    pts = references.charles_m2()
    assert [p for p, _ in pts] == [35e6, 90e6, 180e6, 335e6, 550e6, 1.3e9, 2.4e9]
    assert [g for _, g in pts] == [0.007, 0.005, 0.003, 0.001, 0.002, 0.002, -0.001]
    assert references.charles_m2(with_table5=True)[-2:] == ((4e9, -0.0018), (10e9, -0.0019))
    e = trend.published_entry()
    pos = [(p, g) for p, g in pts if g > 0]
    slope, intercept = np.polyfit(np.log10([p for p, _ in pos]), np.log10([g for _, g in pos]), 1)
    ref = stats.linregress(np.log10([p for p, _ in pos]), np.log10([g for _, g in pos]))
    t = stats.t.ppf(0.975, len(pos) - 2)
    assert e["exponent"] == pytest.approx(slope, rel=1e-6) and e["power_a"] == pytest.approx(intercept, rel=1e-6)
    assert e["exponent_ci95"] == pytest.approx([ref.slope - t * ref.stderr, ref.slope + t * ref.stderr], rel=1e-5)
    b, a = np.polyfit(np.log10([p for p, _ in pts]), [g for _, g in pts], 1)
    assert e["crossing"] == pytest.approx(10 ** (-a / b), rel=1e-6) and e["crossing_ci95"] is not None


def fake_execute(run: Run):
    """A run in this process without training: two_site's gap falls as a power of the active parameters."""
    cfg = apply_overrides(get_preset(run.trial.experiment, run.preset), run.trial.overrides)
    act = active_params(cfg)
    base = 2.0 + 0.001 * run.seed
    val = base if run.trial.arm == "baseline" else base * (1 + 3.0 * act ** -0.5 * (1 + 0.01 * run.seed))
    lr = float(dict(run.trial.label).get("lr_scale", "1"))
    res = {"final_val_bpb": val, "final_tune_bpb": val + abs(lr - 1), "sim_wall_clock_s": 10.0, "cross_site_bytes": 1,
           "ddp_equivalent_bytes": 1, "params_active": act, "tokens": tokens_of(cfg), "steps": cfg.steps,
           "versions": {"machine": "test"}, "cpu_time_s": 90.0}
    # whole or absent, as a real run writes it: the runner's thread reads result.json while another job makes its run
    atomic_write_bytes(run.dir / "result.json", json.dumps(res).encode())
    return res


def test_the_trend_reads_each_point_and_fits_the_axis(tmp_path):
    study = load_study(ROOT / "benchmarks" / "studies" / "smoke" / "scaling-size.toml")
    made = run_points(study, tmp_path, jobs=2, say=lambda s: None, execute_run=fake_execute)
    assert len(made) == 3 * 4 and all((point_root(tmp_path, p)).is_dir() for p in study.points)
    assert run_points(study, tmp_path, jobs=2, say=lambda s: None, execute_run=fake_execute) == []  # resumable
    doc = trend.build_trend([study], [tmp_path])
    pts = [e for e in doc["entries"] if e["kind"] == "point"]
    assert [e["width"] for e in pts] == [16, 24, 32] and all(e["seeds"] == [0, 1] for e in pts)
    assert all(e["runs"] == 4 and e["cpu_hours"] == pytest.approx(4 * 90 / 3600, abs=1e-3) for e in pts)
    for e in pts:
        want = [1 + 3.0 * e["params_active"] ** -0.5 * (1 + 0.01 * s) for s in (0, 1)]
        assert e["ratio_mean"] == pytest.approx(math.exp(np.mean(np.log(want))))
    f = next(e for e in doc["entries"] if e["kind"] == "fit")
    assert f["axis"] == "size" and f["exponent"] == pytest.approx(-0.5, abs=1e-4)
    assert f["exponent_ci95"][0] <= f["exponent"] <= f["exponent_ci95"][1]
    assert "python -m islands_kit.scaling.trend" in f["command"]


def test_dry_run_says_each_points_cost(tmp_path, monkeypatch, capsys):
    import argparse

    from islands_kit.protocol import command

    class Est:
        total_s = 360.0

    monkeypatch.setattr(command, "estimate_within", lambda cfg: Est())
    # the study's own ledgers hold runs already made (benchmarks/scaling/): this counts the plan from nothing
    study = dataclasses.replace(load_study(SIZE), point_reports=str(tmp_path / "no-ledgers"))
    args = argparse.Namespace(action="run", dry_run=True, study=str(SIZE), arms=None, jobs=2, write=False,
                              points=None)
    assert command.points_command(args, study, tmp_path) == 0
    out = capsys.readouterr().out
    assert out.count("16 runs (12 tuning, 4 scoring, 0 rows)") == 4
    assert "study scaling-size: 4 points, 64 runs, 64 to run: about 6.4 CPU-hours" in out
    # --arms: the dry run counts only what `study run --arms` would make, and a name the study lacks is refused
    args.arms, args.points = "baseline", "w32,w48"
    assert command.points_command(args, study, tmp_path) == 0
    out = capsys.readouterr().out
    assert out.count("8 runs of baseline (6 tuning, 2 scoring, 0 rows)") == 2
    assert "study scaling-size: 2 points, 16 runs, 16 to run: about 1.6 CPU-hours" in out
    args.arms = "baseline,eight_cel"
    assert command.points_command(args, study, tmp_path) == 2
    assert "--arms: eight_cel not an arm of" in capsys.readouterr().out


def test_the_figure_says_when_an_axis_has_no_fit_of_ours_yet():
    """Points land one at a time over sessions: a panel with fewer than three says so instead of drawing nothing."""
    from islands_kit.scaling.figure import scaling_trend

    two = [{"kind": "point", "axis": "size", "arm": "two_site", "params_active": n, "tokens": 30 * n, "ratio_mean": r,
            "ratio_ci95": [r - 0.01, r + 0.01]} for n, r in ((59_680, 1.033), (120_240, 1.028))]
    fig = scaling_trend({"entries": two + [trend.fit_entry("size", "two_site", two, "cmd"), trend.published_entry()]})
    texts = [[t.get_text() for t in ax.texts] for ax in fig.axes]
    assert texts == [["2 point(s) of ours measured: no fit of ours yet (3 needed)"], ["no point of ours measured yet"]]


def test_the_figure_carries_our_fit_to_the_published_sizes_without_a_band():
    """Three points make a fit: its solid line spans our sizes, its dashed extrapolation reaches Charles et al.'s
    largest model and is the fitted power law there, not a redrawn curve."""
    from islands_kit.scaling.figure import scaling_trend

    pts = [{"kind": "point", "axis": "size", "arm": "two_site", "params_active": n, "tokens": 30 * n, "ratio_mean": r,
            "ratio_ci95": [r - 0.01, r + 0.01]} for n, r in ((59_680, 1.033), (120_240, 1.028), (201_280, 1.022))]
    fit = trend.fit_entry("size", "two_site", pts, "cmd")
    fig = scaling_trend({"entries": pts + [fit, trend.published_entry()]})
    dashed = [ln for ln in fig.axes[0].lines if ln.get_linestyle() == "--"]
    assert len(dashed) == 1
    x, y = dashed[0].get_data()
    top = max(n for n, _ in references.charles_m2())
    assert x[0] == pytest.approx(201_280) and x[-1] == pytest.approx(top)
    assert y[-1] == pytest.approx(100.0 * 10 ** (fit["power_a"] + fit["exponent"] * np.log10(top)), rel=1e-6)
    assert fig.axes[1].texts[0].get_text() == "no point of ours measured yet"


def test_one_queue_keeps_every_slot_busy_across_points_in_point_order(tmp_path):
    """``jobs`` runs at a time across the points, not one run per point: the first point's runs start first, and the
    last point left still gets both slots (a study's long last point would otherwise run on one core). Each of the
    last point's runs waits at a barrier for a second one in flight: run one at a time, the barrier breaks."""
    import threading

    study = load_study(ROOT / "benchmarks" / "studies" / "smoke" / "scaling-size.toml")
    names = [p.name for p in study.points]
    both = threading.Barrier(2, timeout=20)
    lock, starts = threading.Lock(), []

    def paired(run: Run):
        point = run.dir.relative_to(tmp_path).parts[0]
        with lock:
            starts.append(point)
        if point == names[-1]:
            both.wait()  # BrokenBarrierError unless another of this point's runs is in flight
        return fake_execute(run)

    made = run_points(study, tmp_path, jobs=2, say=lambda s: None, execute_run=paired)
    assert len(made) == 3 * 4 and starts[:2] == [names[0]] * 2
    firsts = [starts.index(n) for n in names]
    assert firsts == sorted(firsts)  # points start in their order


def test_results_holds_the_rendering_of_the_recorded_trend():
    """RESULTS.md's trend block is made from benchmarks/scaling-trend.json alone (never edited by hand)."""
    doc = json.loads((ROOT / "benchmarks" / "scaling-trend.json").read_text())
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    begin, end = f"<!-- {trend.TREND_BLOCK}:begin -->", f"<!-- {trend.TREND_BLOCK}:end -->"
    assert results[results.index(begin) + len(begin):results.index(end)].strip("\n") == trend.render_trend(doc)


def test_the_trend_block_says_whether_our_exponent_holds_the_published_one(tmp_path):
    """The plain-words verdict follows the intervals both ways, and a point's cost and grid-edge picks are shown."""
    pts = [{"kind": "point", "point": f"w{i}", "axis": "size", "arm": "two_site", "width": 16 * i, "params_active": n,
            "steps": 100, "tokens": 30 * n, "seeds": [0, 1, 2], "ratio_mean": r, "ratio_ci95": [r - 0.002, r + 0.002],
            "label": {"lr_scale": "1"}, "ref_label": {"lr_scale": "1.41"}, "machine": "box-0000000a",
            "grid_edge": {"two_site": [], "baseline": ["lr_scale=1.41 (largest of the grid)"]}, "runs": 16,
            "cpu_hours": 0.5} for i, (n, r) in enumerate(((100_000, 1.10), (1_000_000, 1.01), (10_000_000, 1.001)), 1)]
    doc = {"studies": ["scaling-size"], "entries": pts + [trend.fit_entry("size", "two_site", pts, "cmd"),
                                                           trend.published_entry()]}
    text = trend.render_trend(doc)
    f = doc["entries"][3]
    assert f["exponent"] == pytest.approx(-1.0, abs=0.01) and f["exponent_ci95"][1] < -0.9  # steep and tight
    assert "**Our exponent's interval does not contain the exponent of our fit to their table**, and that one's does not " \
           "contain ours" in text
    assert "Our fit to Charles et al.'s Table 4" in text and "Published" not in text  # their table, fitted by the kit
    assert "| w1 | 16 | 100,000 | 100 | 3,000,000 | 30.00 | two_site | lr_scale=1 | lr_scale=1.41 | 3 | 1.1000 [1.0980, 1.1020] " \
           "| baseline: lr_scale=1.41 (largest of the grid) | box-0000000a | 16 | 0.50 |" in text
    assert "**length axis** (training tokens):\n\nno point measured yet." in text
    assert trend.contains([-0.96, 0.33], -0.42) is True and trend.contains(None, 1.0) is None


def test_points_restrict_a_run_to_the_named_points_and_an_unknown_name_is_refused(tmp_path, capsys):
    """``study run --points`` spends a session's CPU on the points still open: only their runs are made, the others'
    folders are not touched; a name that is not a point stops the command before any run, naming the study's points."""
    from islands_kit.cli import main

    study = load_study(ROOT / "benchmarks" / "studies" / "smoke" / "scaling-size.toml")
    names = [p.name for p in study.points]
    made = run_points(study, tmp_path, jobs=2, say=lambda s: None, execute_run=fake_execute, points=[names[1]])
    assert {r.dir.relative_to(tmp_path).parts[0] for r in made} == {names[1]} and len(made) == 4
    assert not (tmp_path / names[0]).exists() and not (tmp_path / names[2]).exists()
    assert len(run_points(study, tmp_path, jobs=2, say=lambda s: None, execute_run=fake_execute)) == 2 * 4  # the rest
    out = tmp_path / "cli"
    assert main(["study", "run", str(LENGTH), "--out", str(out), "--points", "s2400,s9600"]) == 2
    assert ("--points: s9600 is not a point of" in capsys.readouterr().out and not out.exists())
    assert main(["study", "report", str(ROOT / "benchmarks" / "studies" / "headline-demo.toml"),
                 "--points", "s600"]) == 2
    assert "has no [[points]]" in capsys.readouterr().out


def test_a_point_scored_on_two_machines_gives_one_entry_per_arm_from_the_more_complete_one(tmp_path):
    """Sessions may land on another CPU: a point's runs then live in two machine folders, never paired across. The
    trend takes each arm once, from the machine that pairs the most seeds, with that machine's reference pick and
    where each pick was tuned, and what the point cost counts both machines' runs."""
    doc = {"name": "p", "preset": "smoke", "seeds": [0, 1], "tune_seeds": [0], "set": {"data.tune_fraction": "0.05"},
           "arms": {"baseline": {"experiment": "baseline", "grid": {"lr_scale": ["1", "1.41"]}},
                    "two_site": {"experiment": "two_site", "ref": "baseline", "grid": {"lr_scale": ["1", "1.41"]}}},
           "points": [{"name": "w16", "axis": "size", "set": {"width": "16", "tokens_per_active_param": "1"}}]}
    study = parse_study(doc)
    a, b = "box-a-0000000a", "box-b-0000000b"
    quiet = dict(jobs=2, say=lambda s: None, execute_run=fake_execute)
    assert len(run_points(study, tmp_path, machine=a, arms=["baseline"], **quiet)) == 3  # 2 trials + seed 1
    made = run_points(study, tmp_path, machine=b, **quiet)  # the baseline's pick from box-a, scored here; two_site tuned
    assert {r.trial.arm for r in made if r.phase == "tune"} == {"two_site"} and len(made) == 2 + 3
    assert len(run_points(study, tmp_path, machine=a, arms=["two_site"], **quiet)) == 2  # two_site's pick scored on a
    seed1 = [f for f in (tmp_path / "w16" / a / "two_site").glob("*/seed1/result.json")]
    assert len(seed1) == 1
    seed1[0].unlink()  # box-a now pairs one seed of two_site, box-b two
    pts = [e for e in trend.build_trend([study], [tmp_path])["entries"] if e["kind"] == "point"]
    assert len(pts) == 1 and pts[0]["machine"] == b and pts[0]["seeds"] == [0, 1]
    assert pts[0]["tuned_on"] == {"two_site": b, "baseline": a} and pts[0]["ref_label"] == {"lr_scale": "1"}
    assert pts[0]["runs"] == len(list(tmp_path.glob("w16/*/*/*/seed*/result.json"))) == 3 + 5 + 1
    assert f"| {b} |" in trend.render_trend(trend.build_trend([study], [tmp_path]))
