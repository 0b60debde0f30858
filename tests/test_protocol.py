"""benchmarks/protocol.py's logic on fabricated run folders: the winner is chosen on the tuning split (never on the
validation bytes), ratios are paired per seed against the arm's own baseline, a finished run is never run again, and
run folders stay where earlier runs put them."""
from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def protocol():
    spec = importlib.util.spec_from_file_location("protocol", ROOT / "benchmarks" / "protocol.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["protocol"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def fake(protocol, out, arm, sets, seed, tune, val, sent=1.0):
    d = protocol.run_dir(out, arm, sets, seed)
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({"final_tune_bpb": tune, "final_val_bpb": val, "cross_site_bytes": sent,
                                               "ddp_equivalent_bytes": 100.0}))


def test_winner_is_chosen_on_the_tuning_split_and_ratios_are_paired(protocol, tmp_path):
    trials = protocol.ARMS["baseline"].trials()
    tunes = [2.9, 2.8, 2.7] + [2.75] * (len(trials) - 3)
    for k, t in enumerate(trials):  # the best validation bpb (trial 0) is not the best tuning bpb (trial 2)
        fake(protocol, tmp_path, "baseline", t, 0, tune=tunes[k], val=[2.4, 2.6, 2.5][k] if k < 3 else 2.55)
    best, rows = protocol.winner(tmp_path, "baseline")
    assert best == trials[2] and [b for _, b in rows] == tunes
    ts = protocol.ARMS["two_site"]
    for k, t in enumerate(ts.trials()):
        fake(protocol, tmp_path, "two_site", {**ts.fixed, **t}, 0, tune=3.0 - 0.01 * k, val=2.6, sent=4.0)
    ts_best, _ = protocol.winner(tmp_path, "two_site")
    for s, (b, v) in {1: (2.4, 2.52), 2: (2.6, 2.6)}.items():
        fake(protocol, tmp_path, "baseline", best, s, tune=0, val=b)
        fake(protocol, tmp_path, "two_site", ts_best, s, tune=0, val=v)
    text = protocol.report(tmp_path, "demo", [0, 1, 2], ["baseline", "two_site"], [0])
    ratios = [2.6 / 2.5, 2.52 / 2.4, 2.6 / 2.6]
    assert f"{statistics.mean(ratios):.4f} ({min(ratios):.4f}..{max(ratios):.4f})" in text
    assert "| baseline | lr=1.78e-3: 2.9000; lr=2.12e-3: 2.8000; lr=2.52e-3: 2.7000; lr=3e-3: 2.7500;" in text
    assert "2.7500 | lr=2.52e-3 |" in text  # the winner column
    assert "25x less" in text  # DDP-equivalent / bytes sent
    assert "Not run yet" in text  # the ablation rows without runs are listed, not drawn as empty rows


def test_a_finished_run_is_not_run_again(protocol, tmp_path):
    sets = {"optim.lr": "3e-3"}
    fake(protocol, tmp_path, "baseline", sets, 0, tune=1.0, val=2.0)

    class NoRun:
        def start(self, *a):
            raise AssertionError("a finished run was started again")

    assert protocol.run_one(tmp_path, "baseline", "baseline", sets, 0, "demo", NoRun())["final_val_bpb"] == 2.0


@pytest.mark.slow
def test_every_arm_has_its_baselines_budget_and_valid_settings(protocol):
    from islands_kit.config import apply_overrides
    from islands_kit.presets import get_preset

    budgets = protocol.check_budgets(protocol.ARMS)
    for name, arm in protocol.ARMS.items():
        trials = arm.trials()
        assert len(trials) == len(protocol.ARMS[arm.ref].trials()) == budgets[name], name
        assert len({json.dumps(t, sort_keys=True) for t in trials}) == len(trials), name  # no trial counted twice
        for t in trials:  # every trial is a valid config of its experiment
            apply_overrides(get_preset(arm.experiment, "demo"), {**arm.fixed, **t})
    for arm, rows in protocol.ABLATIONS.items():
        best = {**protocol.ARMS[arm].fixed, **protocol.ARMS[arm].trials()[0]}
        for change in rows.values():
            apply_overrides(get_preset(protocol.ARMS[arm].experiment, "demo"), {**best, **change})


def test_run_folders_keep_their_names(protocol, tmp_path):
    """Folders are named by the settings under the flat keys the first runs used: renaming config keys must not
    orphan finished runs (sync.tau was flat before and stays itself)."""
    assert protocol.run_dir(tmp_path, "a", {"sync.diloco.outer_lr": "1.0", "sync.tau": "0"}, 0) == \
        protocol.run_dir(tmp_path, "a", {"sync.outer_lr": "1.0", "sync.tau": "0"}, 0)
    assert protocol.run_dir(tmp_path, "a", {"sync.tau": "0"}, 0) != protocol.run_dir(tmp_path, "a", {"sync.tau": "1"}, 0)


def test_eight_cell_frontier_points_pair_each_row_with_the_baseline_at_the_seed(protocol, tmp_path):
    base = protocol.ARMS["baseline"].trials()[0]
    for t in protocol.ARMS["baseline"].trials():
        fake(protocol, tmp_path, "baseline", t, 0, tune=2.0 if t == base else 3.0, val=2.5)
    ec = protocol.ARMS["eight_cell"]
    best = {**ec.fixed, **ec.trials()[1]}
    for t in ec.trials():
        fake(protocol, tmp_path, "eight_cell", {**ec.fixed, **t}, 0, tune=2.0 if {**ec.fixed, **t} == best else 3.0,
             val=3.0, sent=8.0)
    floor = "floor: 8 replicas averaged every step (H=1, fp32)"
    fake(protocol, tmp_path, "eight_cell_ablation", {**best, **protocol.ABLATIONS["eight_cell"][floor]}, 0, tune=0,
         val=2.6, sent=100.0)
    pts = [{k: p[k] for k in ("label", "fewer", "ratio", "default")} for p in protocol.frontier_points(tmp_path, "eight_cell")]
    assert pts == [  # rows without a run are left out; without the demo's row the star is on no point
        {"label": protocol.DEFAULT_LABEL["eight_cell"], "fewer": 12.5, "ratio": 3.0 / 2.5, "default": False},
        {"label": "floor: every-step average", "fewer": 1.0, "ratio": 2.6 / 2.5, "default": False}]
    # the demo's eight_cell is the E = 16 row on top of the protocol's winner: that point carries the star
    e16 = protocol.DEMO_DEFAULT_ROW["eight_cell"]
    fake(protocol, tmp_path, "eight_cell_ablation", {**best, **protocol.ABLATIONS["eight_cell"][e16]}, 0, tune=0,
         val=2.7, sent=20.0)
    pts = protocol.frontier_points(tmp_path, "eight_cell")
    assert [(p["label"], p["default"]) for p in pts] == [
        (protocol.DEFAULT_LABEL["eight_cell"], False), ("E=16, every ~3 steps (the demo default, the best E measured)", True),
        ("floor: every-step average", False)]
    assert all(name in protocol.ABLATIONS[arm] for arm, rows in protocol.FRONTIER_ROWS.items() for name in rows)
    assert protocol.frontier_file("two_site", "demo").name == "frontier-demo.json"  # the name the notebook reads
    assert protocol.frontier_file("eight_cell", "demo").name == "frontier-eight_cell-demo.json"


def test_a_grid_bigger_than_its_baselines_is_refused(protocol):
    arms = dict(protocol.ARMS)
    arms["two_site"] = protocol.Arm("two_site", {**protocol.ARMS["two_site"].grid, "optim.lr": ["2e-3", "3e-3", "4e-3"]})
    with pytest.raises(ValueError, match="arm two_site: grid has 12 trials, its baseline baseline 8"):
        protocol.check_budgets(arms)


def test_outer_optimizer_grids_and_the_replica_scaled_inner_lr(protocol):
    """two_site and the eight-cell all-reduce arm tune outer lr {0.6, 1.0} x momentum {0, 0.9 Nesterov ramped over
    10 outer steps} beside the inner lr; both eight-cell arms try the inner lr scaled with M = 8 (x 8^0.29 and
    x sqrt 8)."""
    from islands_kit.config import apply_overrides
    from islands_kit.presets import EIGHT_CELL_ALLREDUCE_CONTROL, get_preset

    for name in ("two_site", "eight_cell_allreduce"):
        arm = protocol.ARMS[name]
        outer = {(t["sync.diloco.outer_lr"], t["sync.diloco.outer_momentum"]) for t in arm.trials()}
        assert outer == {(lr, mu) for lr in ("0.6", "1.0") for mu in ("0.0", "0.9")}, name
        assert len(arm.grid["optim.lr"]) >= 2, name  # the inner lr is tuned beside them
        for t in arm.trials():
            d = apply_overrides(get_preset(arm.experiment, "demo"), {**arm.fixed, **t}).sync.diloco
            assert (d.outer_lr, d.outer_momentum) == (float(t["sync.diloco.outer_lr"]), float(t["sync.diloco.outer_momentum"]))
            assert d.nesterov and d.outer_momentum_warmup == 10
    for name in ("eight_cell", "eight_cell_allreduce"):
        lrs = [float(v) for v in protocol.ARMS[name].grid["optim.lr"]]
        for scaled in (3e-3 * 8 ** 0.29, 3e-3 * 8 ** 0.5):
            assert min(abs(v / scaled - 1) for v in lrs) < 5e-3, (name, scaled)
    # the all-reduce arm is the eight-cell control with its outer optimizer tuned instead of plain averaging
    ar = protocol.ARMS["eight_cell_allreduce"]
    for k, v in EIGHT_CELL_ALLREDUCE_CONTROL.items():
        assert k in protocol.OUTER_GRID or ar.fixed[k] == v
    assert any("eight_cell_allreduce" in phase for phase in protocol.PHASES)  # the protocol runs it


def test_m1_control_rows_run_one_replica_with_the_tuned_sync(protocol):
    from islands_kit.config import apply_overrides
    from islands_kit.presets import get_preset

    rows = {n: c for n, c in protocol.ABLATIONS["two_site"].items() if "M = 1" in n}
    assert len(rows) == 2
    best = {**protocol.ARMS["two_site"].fixed, **protocol.ARMS["two_site"].trials()[-1]}
    tuned = apply_overrides(get_preset("two_site", "demo"), best)
    for change in rows.values():
        cfg = apply_overrides(get_preset("two_site", "demo"), {**best, **change})
        assert [i.batch_size for i in cfg.islands] == [40]
        same = ("H", "n_fragments", "tau", "codec")
        assert [getattr(cfg.sync, k) for k in same] == [getattr(tuned.sync, k) for k in same]


@pytest.mark.slow
def test_a_frontier_point_remade_from_its_overrides_reproduces_its_bpb(protocol, tmp_path):
    """A real smoke-preset run behind one frontier point: the point holds the overrides and seed of that run, and
    running it again from them alone (``--remake-point``) gives the same bpb bit for bit."""
    # the tuning split picks the grid's first lr; the frontier divides by the demo's baseline (lr 3e-3), not by it
    winner, base = protocol.ARMS["baseline"].trials()[0], protocol.FRONTIER_BASELINE["baseline"]
    assert base in protocol.ARMS["baseline"].trials() and base != winner
    for t in protocol.ARMS["baseline"].trials():
        fake(protocol, tmp_path, "baseline", t, 0, tune=2.0 if t == winner else 3.0, val=6.0 if t == base else 7.0)
    ts = protocol.ARMS["two_site"]
    best = {**ts.fixed, **ts.trials()[0]}
    for t in ts.trials():
        fake(protocol, tmp_path, "two_site", {**ts.fixed, **t}, 0, tune=2.0 if {**ts.fixed, **t} == best else 3.0,
             val=6.5, sent=8.0)
    row = {**best, **protocol.ABLATIONS["two_site"]["frontier: int2"]}

    class Quiet:
        def start(self, *a):
            pass

        def done(self, *a):
            pass

    ran = protocol.run_one(tmp_path, "two_site_ablation", "two_site", row, 0, "smoke", Quiet())
    pts = {p["label"]: p for p in protocol.frontier_points(tmp_path, "two_site", preset="smoke")}
    point = json.loads(json.dumps(pts["int2"]))  # as the frontier file holds it
    assert point["overrides"] == {**row, **protocol.RUN_SETS} and point["seeds"] == [0]
    assert point["bpb"] == [ran["final_val_bpb"]] and point["ratio"] == ran["final_val_bpb"] / 6.0
    assert point["baseline"] == {"experiment": "baseline", "overrides": {**base, **protocol.RUN_SETS}, "bpb": [6.0]}
    got = protocol.remake_point(point, tmp_path / "remake")
    assert got["bpb"] == got["stored_bpb"] == ran["final_val_bpb"]
    assert got["fewer"] == point["fewer"]


@pytest.mark.parametrize("arm", ["two_site", "eight_cell"])
def test_every_checked_in_frontier_point_says_how_to_remake_it(protocol, arm):
    from islands_kit.config import apply_overrides
    from islands_kit.presets import get_preset

    points = json.loads(protocol.frontier_file(arm, "demo").read_text())
    assert points
    for p in points:
        assert p["experiment"] == protocol.ARMS[arm].experiment and p["preset"] == "demo" and p["seeds"][0] == 0, p
        for run in (p, p["baseline"]):  # each a valid config of its experiment
            apply_overrides(get_preset(run["experiment"], p["preset"]), run["overrides"])


@pytest.fixture(scope="module")
def from_runs():
    spec = importlib.util.spec_from_file_location("frontier_from_runs", ROOT / "benchmarks" / "frontier_from_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_point_read_back_from_a_run_holds_the_overrides_that_remake_its_config(from_runs, tmp_path):
    """benchmarks/frontier_from_runs.py: a run's ``--set`` overrides are read back from its result.json (config
    against preset) and give that config again; what is not a setting (seed, wandb, progress) is left out."""
    from islands_kit.config import apply_overrides
    from islands_kit.presets import TWO_SITE_M1_CONTROL, get_preset

    sets = {"sync.codec": "ctop64_int2", "sync.codec_block_size": "4096", "sync.diloco.error_feedback_decay": "0.95",
            "sync.diloco.final_codec": "", "sync.stochastic_rounding": "false", "threads": "2", **TWO_SITE_M1_CONTROL}
    cfg = apply_overrides(get_preset("two_site", "demo"), {**sets, "seed": 2, "wandb_mode": "disabled",
                                                           "progress": "false"})
    res = {"experiment": "two_site", "preset": "demo", "config": json.loads(json.dumps(cfg.to_dict()))}
    got = from_runs.overrides_of(res)
    assert got == sets
    again = apply_overrides(get_preset("two_site", "demo"), {**got, "seed": 2, "wandb_mode": "disabled",
                                                             "progress": "false"})
    assert again.to_dict() == cfg.to_dict()
    for d, seed, bpb in ((tmp_path / "run", 2, 2.2), (tmp_path / "base", 2, 2.0)):
        d.mkdir()
        r = dict(res, seed=seed, final_val_bpb=bpb, cross_site_bytes=10, ddp_equivalent_bytes=1000)
        if d.name == "base":
            r.update(experiment="baseline", config=get_preset("baseline", "demo").to_dict())
        (d / "result.json").write_text(json.dumps(r))
    p = from_runs.point("x", [tmp_path / "run"], {2: json.loads((tmp_path / "base" / "result.json").read_text())}, True)
    assert (p["fewer"], p["ratio"], p["seeds"], p["bpb"], p["baseline"]["bpb"]) == (100.0, 2.2 / 2.0, [2], [2.2], [2.0])
    assert p["overrides"] == sets and p["baseline"]["overrides"] == {}
