"""The scaling trend: the knobs (width, tokens per active parameter, length) and the regime guard, the size axis's
design, studies with points, the laws (a known law recovered within its interval; an offset the data cannot pin and a
straight-line-only crossing reported "not identifiable"), the published grid against its authors' own fits, the
recorded prediction, the figure, and the trend document from a points study's runs."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.io import atomic_write_bytes
from islands_kit.protocol.knobs import KnobError, active_params, outer_steps, resolve, tokens_of
from islands_kit.protocol.points import point_root, run_points
from islands_kit.protocol.runs import Run
from islands_kit.protocol.study import StudyError, load_study, parse_study
from islands_kit.scaling import fit, laws, models, references, trend

ROOT = Path(__file__).resolve().parent.parent
SIZE = ROOT / "benchmarks" / "studies" / "scaling-size.toml"
LENGTH = ROOT / "benchmarks" / "studies" / "scaling-length.toml"


def cfg_of(study, point, trial):
    sub = study.at_point(point)
    return apply_overrides(sub.base_config(trial.experiment), trial.overrides)


@pytest.mark.slow
def test_the_size_axis_spans_the_decades_at_fixed_tokens_and_outer_steps_with_three_arms():
    """>= 6 widths over >= 1.3 decades of active parameters, tokens per active parameter within 2% and outer steps per
    fragment within 10% of their middle at every point, arm and trial (the batch grid included), whole per-island
    batches (the config refuses any other), three arms tuned on two seeds and scored on five others."""
    study = load_study(SIZE)
    assert list(study.arms) == ["baseline", "two_site", "eight_cell"]
    assert study.tune_seeds == [5, 6] and study.seeds == [0, 1, 2, 3, 4]
    actives, ratios, outer = set(), [], []
    for p in study.points:
        for arm in study.arms:
            for t in study.at_point(p).trials(arm):
                cfg = cfg_of(study, p, t)
                ratios.append(tokens_of(cfg) / active_params(cfg))
                n = outer_steps(cfg)
                assert (n is None) == (arm == "baseline") and (n is None or n >= 24), (p.name, t.describe(), n)
                outer += [n] if n is not None else []
                assert all(i.batch_size % i.micro_batch_size == 0 for i in cfg.islands)
                actives.add(active_params(cfg))
    assert len(actives) >= 6 and math.log10(max(actives) / min(actives)) >= 1.3
    assert max(ratios) / min(ratios) - 1 < 0.02 and all(abs(r / 30.5 - 1) < 0.02 for r in ratios)
    mid = (max(outer) + min(outer)) / 2
    assert max(outer) <= 1.1 * mid and min(outer) >= 0.9 * mid


def test_the_first_size_axis_is_kept_so_the_recorded_trend_remakes_from_its_ledgers():
    old = load_study(ROOT / "benchmarks" / "studies" / "scaling-size-w4.toml")
    assert old.name == "scaling-size" and [p.name for p in old.points] == ["w32", "w48", "w64", "w96"]
    assert all((ROOT / "benchmarks" / "scaling" / f"scaling-size-{p.name}.runs.jsonl").is_file() for p in old.points)


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
    doc = trend.build_trend([study], [tmp_path], grid=9, published=False)
    ec = [e for e in doc["entries"] if e["kind"] != "point" and e.get("arm") == "eight_cell"
          and e["x"] == "params_active"]
    assert [e["point"] for e in doc["entries"] if e["kind"] == "point" and e["arm"] == "eight_cell"] == ["w32"]
    assert ec and not any("chi2" in e for e in ec)  # one point: no law is fitted, each says why
    assert next(e for e in ec if e["kind"] == "verdict")["verdict"] == fit.NOT_IDENTIFIABLE


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
    doc = trend.build_trend([study], [tmp_path], grid=9, published=False)
    pts = [e for e in doc["entries"] if e["kind"] == "point"]
    assert [e["width"] for e in pts] == [16, 24, 32] and all(e["seeds"] == [0, 1] for e in pts)
    assert all(e["runs"] == 4 and e["cpu_hours"] == pytest.approx(4 * 90 / 3600, abs=1e-3) for e in pts)
    for e in pts:
        want = [1 + 3.0 * e["params_active"] ** -0.5 * (1 + 0.01 * s) for s in (0, 1)]
        assert e["ratio_mean"] == pytest.approx(math.exp(np.mean(np.log(want))))
        base = [2.0 + 0.001 * s for s in (0, 1)]
        assert e["val_bpb"] == {"baseline": base, "two_site": [b * (1 + 3.0 * e["params_active"] ** -0.5 * (1 + 0.01 * s))
                                                              for b, s in zip(base, (0, 1))]}
        assert e["params_total"] > e["params_active"] and e["tokens_per_active_param"] == e["tokens"] / e["params_active"]
        assert e["global_batch"]["two_site"] == e["global_batch"]["baseline"] and "two_site" in e["sync_H"]
    for x_key in ("params_active", "params_total"):  # both x-axes are fitted
        gp = next(e for e in doc["entries"] if e["kind"] == "gap_fit" and e["model"] == "gap power" and e["x"] == x_key)
        assert gp["params"]["b[two_site]"][0] == pytest.approx(0.5 if x_key == "params_active" else 0.5, abs=0.2)
    gp = next(e for e in doc["entries"] if e["kind"] == "gap_fit" and e["model"] == "gap power"
              and e["x"] == "params_active")
    assert gp["params"]["b[two_site]"][0] == pytest.approx(0.5, abs=0.02)  # the fake's gap: 3 N^-0.5
    assert "python -m islands_kit.scaling.trend" in doc["command"]
    pred = [e for e in doc["entries"] if e["kind"] == "prediction"]
    assert pred and {e["width"] for e in pred} == {48} and all(e["fitted_points"] == ["w16", "w24", "w32"] for e in pred)


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
    # protocol 3, halving 2: per arm its 6 trials at tuning seed 5, the best 3 at seed 6, then 5 scoring seeds
    assert out.count("42 runs (27 tuning, 15 scoring, 0 rows)") == 9
    assert "study scaling-size-3arm: 9 points, 378 runs, 378 to run: about 37.8 CPU-hours" in out
    # --arms: the dry run counts only what `study run --arms` would make, and a name the study lacks is refused
    args.arms, args.points = "baseline", "w32,w48"
    assert command.points_command(args, study, tmp_path) == 0
    out = capsys.readouterr().out
    assert out.count("14 runs of baseline (9 tuning, 5 scoring, 0 rows)") == 2
    assert "study scaling-size-3arm: 2 points, 28 runs, 28 to run: about 2.8 CPU-hours" in out
    args.arms = "baseline,eight_cel"
    assert command.points_command(args, study, tmp_path) == 2
    assert "--arms: eight_cel not an arm of" in capsys.readouterr().out


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
    # the points are what this test reads: the published grid's fits (published=True) are tested on their own
    pts = [e for e in trend.build_trend([study], [tmp_path], published=False)["entries"] if e["kind"] == "point"]
    assert len(pts) == 1 and pts[0]["machine"] == b and pts[0]["seeds"] == [0, 1]
    assert pts[0]["tuned_on"] == {"two_site": b, "baseline": a} and pts[0]["ref_label"] == {"lr_scale": "1"}
    assert pts[0]["runs"] == len(list(tmp_path.glob("w16/*/*/*/seed*/result.json"))) == 3 + 5 + 1
    assert f"| {b} |" in trend.render_trend(trend.build_trend([study], [tmp_path], published=False))


# -- the laws ---------------------------------------------------------------------------------------------------------
SIZES = np.array([2e4, 3e4, 4.5e4, 7e4, 1e5, 1.5e5, 2.5e5, 4e5])


def two_arms(seed: int, noise: float = 0.002):
    """Baseline L = 1 + 30 N^-0.3 and an arm L = 1 + 36 N^-0.32 (E shared): they cross at (36/30)^(1/0.02) ~ 9.1K."""
    rng = np.random.default_rng(seed)
    se = (noise,) * SIZES.size
    base = fit.Series("baseline", tuple(SIZES), tuple(1 + 30 * SIZES ** -0.3 + rng.normal(0, noise, SIZES.size)), se)
    arm = fit.Series("two_site", tuple(SIZES), tuple(1 + 36 * SIZES ** -0.32 + rng.normal(0, noise, SIZES.size)), se)
    return base, arm


def test_a_known_law_is_recovered_within_its_interval():
    base, arm = two_arms(0)
    f = fit.fit(models.loss_model("power+E shared", ["baseline", "two_site"], 0.5), [base, arm])
    p = f.params()
    for name, truth in (("E", 1.0), ("alpha[baseline]", 0.3), ("alpha[two_site]", 0.32)):
        assert p[name][1] < truth < p[name][2], (name, p[name])
    assert f.amplitudes()["baseline"] == pytest.approx(30, rel=0.1)
    c = fit.crossing(f, 1, points=21)
    truth = (36 / 30) ** (1 / 0.02)
    assert c.identifiable and c.lo < truth < c.hi and c.hi / c.lo < 3
    # the ends are where the profile's chi^2 rise meets the threshold
    for end in (c.lo, c.hi):
        rise = fit.profile(f, 1, math.log(end / f.n0), 0.0)[0] - f.chi2
        assert rise == pytest.approx(f.threshold, rel=0.05)
    pred = fit.predict(f, 1, 7.3e5)
    true_gap = (1 + 36 * 7.3e5 ** -0.32) / (1 + 30 * 7.3e5 ** -0.3) - 1
    assert pred.lo < true_gap < pred.hi and pred.lo < pred.gap < pred.hi
    # the pure power law cannot bend to the offset: the data reject it by chi^2 and AIC
    pure = fit.fit(models.loss_model("power", ["baseline", "two_site"]), [base, arm])
    assert pure.chi2 > 10 * f.chi2 and pure.aic > f.aic + 10


def test_an_offset_the_data_cannot_pin_returns_not_identifiable():
    """A gap shrinking as a power of size with no offset, measured over a decade with seed-sized errors: the offset
    law fits, but its crossing is allowed out to the search's end (or never): not identifiable, and the verdict says
    so; the same data with a pinned offset and a crossing inside the range are identified."""
    rng = np.random.default_rng(3)
    se = np.full(SIZES.size, 0.004)
    g = 3.0 * SIZES ** -0.35 + rng.normal(0, 0.004, SIZES.size)
    pts = [{"axis": "size", "arm": "two_site", "ref": "baseline", "point": f"p{i}", "params_active": n,
            "ratio_mean": 1 + v, "ratio_ci95": [1 + v - 1.96 * s, 1 + v + 1.96 * s]} for i, (n, v, s) in
           enumerate(zip(SIZES, g, se))]
    entries = laws.fit_axis("size", pts, "params_active", grid=15)
    off = next(e for e in entries if e["model"] == "gap power+offset")
    assert off["crossing"]["verdict"] == fit.NOT_IDENTIFIABLE and off["crossing"]["ci95"] is None or \
        None in off["crossing"]["ci95"]
    v = next(e for e in entries if e["kind"] == "verdict")
    assert v["verdict"] == fit.NOT_IDENTIFIABLE and not v["identifiable"] and v["size"] is None
    assert any("never crosses" in r or "unbounded" in r for r in v["reasons"])
    # a crossing well inside the measured range, tight errors: identified by the offset law
    g2 = -0.01 + 0.5 * SIZES ** -0.3 + rng.normal(0, 0.0005, SIZES.size)
    f2 = fit.fit(models.gap_model("gap power+offset", ["two_site"]), [fit.Series("two_site", tuple(SIZES), tuple(g2),
                                                                              (0.0005,) * SIZES.size)])
    c2 = fit.crossing(f2, 0, points=21)
    assert c2.identifiable and c2.lo < (50.0) ** (1 / 0.3) < c2.hi


def test_a_straight_line_only_crossing_is_not_claimed():
    """Gaps falling on a straight line in log N that would reach 0 past the data: the line is kept as a labelled
    local slope (resolved, negative) and carries no crossing; no law claims one."""
    rng = np.random.default_rng(5)
    g = 0.033 - 0.012 * np.log10(SIZES / 2e4) + rng.normal(0, 0.003, SIZES.size)
    pts = [{"axis": "size", "arm": "two_site", "ref": "baseline", "point": f"p{i}", "params_active": n,
            "ratio_mean": 1 + v, "ratio_ci95": [1 + v - 0.006, 1 + v + 0.006]} for i, (n, v) in enumerate(zip(SIZES, g))]
    entries = laws.fit_axis("size", pts, "params_active", grid=15)
    line = next(e for e in entries if e["model"] == "local slope")
    assert line["slope_ci95"][1] < 0 and "crossing" not in line and "never read as a crossing" in line["note"]
    v = next(e for e in entries if e["kind"] == "verdict")
    assert v["verdict"] == fit.NOT_IDENTIFIABLE and v["size"] is None
    text = trend.render_trend({"command": "", "entries": entries})
    assert "never a crossing model" in text and f"the crossing is **{fit.NOT_IDENTIFIABLE}**" in text


def test_the_published_grid_against_its_authors_fits_and_rounded_percentages():
    """The losses as data: this kit's pure power law to each column lands near the authors' printed A and alpha
    (their fit method is not ours: within 2.5% and 0.0015), and the gaps read from the losses round to the printed
    percentages within one last digit."""
    n = references.SIZES
    for col, (a, alpha) in references.THEIR_FITS.items():
        f = fit.fit(models.loss_model("power", [col]), [fit.Series(col, tuple(n), references.LOSSES[col])])
        assert f.amplitudes()[col] == pytest.approx(a, rel=0.025) and -f.theta[1] == pytest.approx(alpha, abs=0.0015)
    printed = {"M=2": (0.007, 0.005, 0.003, 0.001, 0.002, 0.002, -0.001), "M=8": (0.039, None, None, None, None, None,
                                                                              0.011)}
    for col, want in printed.items():
        for (size, g), w in zip(references.gaps(col), want):
            assert w is None or abs(g - w) <= 0.0011, (col, size, g, w)
    with pytest.raises(ValueError, match="column: 'DP' is not one of"):
        references.gaps("DP")


def test_total_params_counts_every_expert_and_the_next_width_is_the_knobs():
    from islands_kit.model.transformer import ByteTransformer

    base = get_preset("eight_cell", "demo")
    for width in (16, 64, 96, 128):
        cfg = apply_overrides(base, resolve(base, "demo", {}, {"width": str(width)}))
        assert trend.total_params(cfg) == ByteTransformer(cfg.model).num_params()
    assert trend.next_width(96)[0] == 128 and trend.next_width(64)[0] == 80
    w, active, total = trend.next_width(96)
    assert active == active_params(apply_overrides(base, resolve(base, "demo", {}, {"width": "128"})))
    assert total > 4 * active


def test_the_prediction_is_recorded_with_its_commit_and_kept_until_the_points_change():
    pts = [{"kind": "point", "axis": "size", "arm": "two_site", "ref": "baseline", "point": f"w{w}", "width": w,
            "params_active": n, "params_total": 4 * n, "ratio_mean": r, "ratio_ci95": [r - 0.012, r + 0.012],
            "val_bpb": {"baseline": [L + 0.01 * s for s in range(3)],
                        "two_site": [r * (L + 0.01 * s) for s in range(3)]}}
           for w, n, r in ((32, 59_680, 1.033), (48, 120_240, 1.028), (64, 201_280, 1.022), (96, 424_800, 1.012))
           for L in [1.0 + 8.0 * n ** -0.2]]  # a loss that falls with size (a flat one sends the fits to their bounds)
    fits = laws.fit_axis("size", pts, "params_active", grid=9)
    made = trend.predictions(pts, fits, "abc123")
    assert {e["model"] for e in made} == {"power", "power+E", "power+E shared", "gap power", "gap power+offset"}
    for e in made:
        assert e["width"] == 128 and e["commit"] == "abc123" and e["fitted_points"] == ["w32", "w48", "w64", "w96"]
        assert e["gap_ci95"] is None or e["gap_ci95"][0] <= e["gap"] <= e["gap_ci95"][1]
    old = {"schema": trend.SCHEMA, "entries": made}
    again = {"schema": trend.SCHEMA, "entries": pts + trend.predictions(pts, fits, "def456")}
    kept = trend.keep_recorded_predictions(again, old)
    assert {e["commit"] for e in kept["entries"] if e["kind"] == "prediction"} == {"abc123"}
    more = pts + [{**pts[-1], "point": "w128", "width": 128, "params_active": 730_240}]
    fresh = {"schema": trend.SCHEMA, "entries": more + trend.predictions(more, laws.fit_axis("size", more,
                                                                                               "params_active", grid=9),
                                                                         "def456")}
    assert {e["commit"] for e in trend.keep_recorded_predictions(fresh, old)["entries"]
            if e["kind"] == "prediction"} == {"def456"}


def test_the_figure_shows_both_x_axes_and_the_published_m2_and_m8():
    from islands_kit.scaling.figure import scaling_trend

    pts = [{"kind": "point", "axis": "size", "arm": arm, "params_active": n, "params_total": 4 * n, "ratio_mean": r,
            "ratio_ci95": [r - 0.01, r + 0.01]} for arm, k in (("two_site", 1), ("eight_cell", 3))
           for n, r0 in ((59_680, 0.033), (120_240, 0.028), (201_280, 0.022)) for r in [1 + k * r0]]
    fig = scaling_trend({"entries": pts})
    top, middle, bottom = fig.axes[:3]
    xs = {tuple(ln.get_xdata()) for ln in middle.lines}
    assert (59_680.0, 120_240.0, 201_280.0) in xs and (4 * 59_680.0, 4 * 120_240.0, 4 * 201_280.0) in xs
    pub = {ln.get_label(): ln.get_ydata() for ln in middle.lines if ln.get_label().startswith("Charles")}
    assert set(pub) == {"Charles et al. 2025, M=2 (dense: active = total)", "Charles et al. 2025, M=8 (dense: active = total)"}
    assert pub["Charles et al. 2025, M=8 (dense: active = total)"][0] == pytest.approx(100 * (3.621 / 3.485 - 1))
    assert [t.get_text() for t in top.texts] == ["too few points of ours for a law yet"]
    assert [t.get_text() for t in bottom.texts] == ["no point of ours measured yet"]
