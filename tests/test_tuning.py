"""The protocol's third pass (islands_kit/protocol/tuning.py, equal_time.py): successive halving over tuning seeds
apart from the scoring seeds, grid axes extended past a pick on their edge up to a declared bound, and equal simulated
time read from a reference trained to that time. Runs are faked in-process (a result.json as a function of the trial
and seed), so each test takes milliseconds of training."""
from __future__ import annotations

import json
import math
import re

import pytest

from islands_kit.io import atomic_write_bytes
from islands_kit.protocol.report import make_report
from islands_kit.protocol.runner import run_study
from islands_kit.protocol.runs import Run, machine_slug
from islands_kit.protocol.study import StudyError, parse_study
from islands_kit.protocol.tables import render
from islands_kit.protocol.tuning import number_text, tune

MACHINE = "torch x | AVX512 | tuning box"
BOX = machine_slug(MACHINE)


def doc(**over):
    d = {"name": "t3", "preset": "smoke", "protocol": 3, "seeds": [0, 1, 2], "tune_seeds": [5, 6],
         "set": {"data.tune_fraction": "0.05"},
         "arms": {"baseline": {"experiment": "baseline", "grid": {"optim.lr": ["1e-3", "2e-3"]},
                               "bounds": {"optim.lr": ["5e-4", "4e-3"]}},
                  "two_site": {"experiment": "two_site", "ref": "baseline", "grid": {"optim.lr": ["1e-3", "2e-3"]},
                               "bounds": {"optim.lr": ["5e-4", "4e-3"]}}}}
    d.update(over)
    return d


def fake(tune_of, calls=None, sim=None):
    """An in-process run writing the result.json a real run would; ``tune_of(arm, label, seed)`` its tuning-split bpb
    (validation: the same plus 0.1), ``sim(arm)`` its simulated seconds (baseline 100, others 50)."""
    def execute(run: Run):
        label = dict(run.trial.label)
        tune = tune_of(run.trial.arm, label, run.seed)
        if calls is not None:
            calls.append((run.phase, run.trial.arm, label, run.seed))
        t = (sim or (lambda a: 100.0 if a.startswith("baseline") else 50.0))(run.trial.arm)
        res = {"final_val_bpb": tune + 0.1, "final_tune_bpb": tune, "sim_wall_clock_s": t, "cross_site_bytes": 10,
               "ddp_equivalent_bytes": 1000, "tokens": 1000, "versions": {"machine": MACHINE},
               "compute_utilization": 0.5}
        run.dir.mkdir(parents=True, exist_ok=True)
        (run.dir / "history.jsonl").write_text(json.dumps({"sim_time_s": t, "val_bpb": tune + 0.1}) + "\n")
        atomic_write_bytes(run.dir / "result.json", json.dumps(res).encode())
        return res
    return execute


def bowl(best_lr: float, base: float = 2.0):
    """A tuning-split bpb with its minimum at ``best_lr`` (quadratic in log lr), the same at every seed."""
    return lambda arm, label, seed: base + math.log(float(label["optim.lr"]) / best_lr) ** 2


def test_protocol_3_files_tune_on_two_seeds_apart_from_the_scoring_seeds_with_bounds_on_every_axis():
    assert parse_study(doc()).halving == 2
    with pytest.raises(StudyError, match=r"^seeds: 0 is also a tuning seed"):
        parse_study(doc(seeds=[0, 1, 2], tune_seeds=[0, 5]))
    with pytest.raises(StudyError, match=r"^tune_seeds: protocol 3 tunes on two or more seeds"):
        parse_study(doc(tune_seeds=[5]))
    bare = doc()
    del bare["arms"]["two_site"]["bounds"]
    with pytest.raises(StudyError, match=r"^arms.two_site: optim.lr needs bounds = \[low, high\] or a ladder"):
        parse_study(bare)
    outside = doc()
    outside["arms"]["baseline"]["bounds"] = {"optim.lr": ["1.5e-3", "4e-3"]}
    with pytest.raises(StudyError, match=r"^arms.baseline.bounds.optim.lr: the grid's 1e-3 lies outside"):
        parse_study(outside)
    rung = doc()
    rung["arms"]["baseline"]["ladders"] = {"optim.lr": ["2e-3", "1e-3"]}
    with pytest.raises(StudyError, match=r"ladder lists distinct values in increasing order"):
        parse_study(rung)
    with pytest.raises(StudyError, match=r"rows 'r'.seeds: 5 is also a tuning seed"):
        parse_study(doc(rows=[{"name": "r", "arm": "two_site", "set": {"sync.H": "4"}, "seeds": [0, 5]}]))


def test_a_pick_on_a_two_value_axis_edge_extends_it_by_half_octaves_until_the_declared_bound(tmp_path):
    study = parse_study(doc())
    calls: list = []
    # the tuning split is best at lr 3.5e-3: beyond the grid's 2e-3, inside the bound 4e-3
    run_study(study, tmp_path, jobs=1, say=lambda s: None, machine=BOX, execute_run=fake(bowl(3.5e-3), calls))
    t = tune(study, "baseline", tmp_path / BOX)
    labels = [dict(x.label)["optim.lr"] for x in t.trials]
    assert labels == ["1e-3", "2e-3", "2.83e-3", "4e-3"]  # x sqrt 2 each step, spelled as the study files spell them
    assert dict(t.pick.label) == {"optim.lr": "4e-3"}
    assert t.axes["optim.lr"] == "at the study's bound (optim.lr 4e-3)"  # the next step, 5.66e-3, is past it
    # every tuning run at a tuning seed, every scoring run at a scoring seed
    assert {s for phase, _, _, s in calls if phase == "tune"} == {5, 6}
    assert {s for phase, _, _, s in calls if phase != "tune"} == {0, 1, 2}
    rep = make_report(study, tmp_path, "cmd")
    base = next(e for e in rep["entries"] if e.get("arm") == "baseline" and e["kind"] == "arm")
    assert base["tuning"]["trials"] == 4 and base["tuning"]["grid_trials"] == 2
    assert base["pick_at_grid_edge"] == ["optim.lr=4e-3: at the study's bound (optim.lr 4e-3)"]
    assert [g["extension"] for g in base["grid"]] == [False, False, True, True]
    assert "at the study's bound (optim.lr 4e-3)" in render(rep)


def test_an_interior_optimum_stops_the_extension_and_the_pick_is_interior(tmp_path):
    study = parse_study(doc())
    run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX, execute_run=fake(bowl(2.7e-3)))
    t = tune(study, "two_site", tmp_path / BOX)
    assert [dict(x.label)["optim.lr"] for x in t.trials] == ["1e-3", "2e-3", "2.83e-3", "4e-3"]
    assert dict(t.pick.label)["optim.lr"] == "2.83e-3" and t.axes == {"optim.lr": "interior"}


def test_a_lower_edge_extends_downwards_and_a_batch_axis_moves_to_the_next_whole_split(tmp_path):
    d = doc(preset="demo")
    d["arms"] = {"baseline": {"experiment": "baseline", "grid": {"batch": ["20", "40"]}, "bounds": {"batch": [10, 80]}}}
    study = parse_study(d)
    best_small = lambda arm, label, seed: 2.0 + int(label["batch"]) / 100  # noqa: E731 - smaller is better
    run_study(study, tmp_path, jobs=1, say=lambda s: None, machine=BOX, execute_run=fake(best_small))
    t = tune(study, "baseline", tmp_path / BOX)
    # 14 to 11 do not split into the demo's 3:2 islands with whole micro-batches; 10 does (6 + 4, micro 3 + 2)
    assert [dict(x.label)["batch"] for x in t.trials] == ["20", "40", "10"]
    assert dict(t.pick.label) == {"batch": "10"} and t.axes["batch"].startswith("at the study's bound")


def test_a_laddered_axis_steps_along_its_ladder_and_stops_at_its_end(tmp_path):
    d = doc()
    d["arms"]["two_site"]["grid"] = {"sync.diloco.outer_momentum": ["0.0", "0.5"]}
    d["arms"]["two_site"]["ladders"] = {"sync.diloco.outer_momentum": ["0.0", "0.5", "0.7", "0.9"]}
    del d["arms"]["two_site"]["bounds"]
    study = parse_study(d)
    mom = lambda arm, label, seed: 2.0 + (bowl(2e-3)(arm, label, seed) - 2.0 if arm.startswith("baseline") else  # noqa: E731
                                          -float(label["sync.diloco.outer_momentum"]))
    run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX, execute_run=fake(mom))
    t = tune(study, "two_site", tmp_path / BOX)
    assert [dict(x.label)["sync.diloco.outer_momentum"] for x in t.trials] == ["0.0", "0.5", "0.7", "0.9"]
    assert t.axes["sync.diloco.outer_momentum"] == "at the study's bound (largest of its ladder, 0.9)"


def test_the_pick_follows_the_mean_over_the_tuning_seeds_not_the_first_seed(tmp_path):
    d = doc()
    for a in d["arms"].values():
        a["grid"] = {"optim.lr": ["1e-3", "1.41e-3", "2e-3", "2.83e-3"]}
        a["bounds"] = {"optim.lr": ["1e-3", "2.83e-3"]}
    study = parse_study(d)
    # seed 5 prefers 2e-3 by 0.01; seed 6 prefers 1.41e-3 by 0.05: the mean over both prefers 1.41e-3
    table = {("1e-3", 5): 2.10, ("1.41e-3", 5): 2.01, ("2e-3", 5): 2.00, ("2.83e-3", 5): 2.08,
             ("1e-3", 6): 2.10, ("1.41e-3", 6): 2.00, ("2e-3", 6): 2.05, ("2.83e-3", 6): 2.08}
    calls: list = []
    run_study(study, tmp_path, jobs=1, say=lambda s: None, machine=BOX,
              execute_run=fake(lambda arm, label, seed: table.get((label["optim.lr"], seed), 2.0), calls))
    t = tune(study, "baseline", tmp_path / BOX)
    assert dict(t.pick.label) == {"optim.lr": "1.41e-3"}
    # successive halving: all four at seed 5, only the best two (2e-3 and 1.41e-3) at seed 6
    at6 = sorted(lab["optim.lr"] for phase, arm, lab, s in calls if arm == "baseline" and s == 6)
    assert at6 == ["1.41e-3", "2e-3"] and t.rungs == [4, 2]
    rep = make_report(study, tmp_path, "cmd")
    base = next(e for e in rep["entries"] if e.get("arm") == "baseline" and e["kind"] == "arm")
    assert base["tuning"]["margin"] == pytest.approx(2.025 / 2.005 - 1)
    assert base["tuning"]["runner_up"] == {"optim.lr": "2e-3"} and base["tuning"]["tuning_runs"] == 6
    assert base["transfer"]["regret"] == 0.0  # the validation bytes agree with the tuning split here


def test_equal_time_is_a_reference_trained_to_the_island_arms_finishing_time(tmp_path):
    study = parse_study(doc())
    calls: list = []
    run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX, execute_run=fake(bowl(1.6e-3), calls))
    eq = [(arm, lab, s) for phase, arm, lab, s in calls if phase == "equal_time"]
    # the baseline (100 simulated s) retrained to finish with two_site (50 s): half its 24 smoke steps, at every
    # scoring seed, its pick otherwise
    assert sorted(s for _, _, s in eq) == [0, 1, 2] and {a for a, _, _ in eq} == {"baseline@time-of-two_site"}
    rep = make_report(study, tmp_path, "cmd")
    ts = next(e for e in rep["entries"] if e.get("arm") == "two_site" and e["kind"] == "arm")
    et = ts["equal_time"]
    assert et["retrained"] == "baseline" and et["steps"] == 12 and et["target_s"] == 50.0
    assert et["overrides"]["steps"] == "12" and int(et["overrides"]["optim.warmup_steps"]) <= 12
    assert et["seeds"] == [0, 1, 2] and et["ratio_n"] == 3 and et["ratio_mean"] == pytest.approx(1.0)
    assert "Equal simulated time, trained" in render(rep) and "(trained)" in render(rep)


def test_number_text_spells_values_as_the_study_files_do():
    assert [number_text(v) for v in (0.006, 0.0084853, 3e-3 * math.sqrt(2), 0.5, 1.41, 40)] == \
        ["6e-3", "8.49e-3", "4.24e-3", "0.5", "1.41", "40"]


def test_an_extension_the_config_cannot_make_stops_at_the_configs_limit(tmp_path):
    d = doc()
    # batch_scale 0.55 of the smoke's 40 sequences is 22: 13.2 + 8.8 per island, not whole
    d["arms"] = {"baseline": {"experiment": "baseline", "grid": {"batch_scale": ["1", "2"]},
                              "ladders": {"batch_scale": ["0.55", "1", "2"]}}}
    study = parse_study(d)
    smaller = lambda arm, label, seed: 2.0 + float(label["batch_scale"]) / 10  # noqa: E731
    run_study(study, tmp_path, jobs=1, say=lambda s: None, machine=BOX, execute_run=fake(smaller))
    t = tune(study, "baseline", tmp_path / BOX)
    assert [dict(x.label)["batch_scale"] for x in t.trials] == ["1", "2"]
    assert t.axes["batch_scale"].startswith("at the config's limit (smallest valid value; batch_scale=0.55: ")


def test_the_readme_headline_table_reads_a_protocol_3_report(tmp_path):
    """The README's headline block (protocol/readme.py) from a protocol-3 report: the trained equal-time ratio with
    its interval, the tuning seeds and the halving named, and a pick held at a declared bound said as such."""
    from islands_kit.protocol.readme import headline_table

    study = parse_study(doc())  # the baseline's optimum (8e-3) lies past its lr bound (4e-3): the pick stops there
    run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX,
              execute_run=fake(lambda arm, label, seed: bowl(8e-3 if arm == "baseline" else 1.6e-3)(arm, label, seed)))
    table = headline_table(make_report(study, tmp_path, "cmd"))
    assert "tuned on the tuning split at seeds 5, 6 by successive halving" in table
    assert "the baseline trained with its whole schedule fitted into the arm's finishing time" in table
    rows = {r.split(" | ")[0][2:]: r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| arm")}
    assert "lr at the study's bound" in rows["baseline"] and "bound" not in rows["two_site"]
    assert len(re.findall(r"\d\.\d{4} \[\d\.\d{4}, \d\.\d{4}\]", rows["two_site"])) == 2  # equal tokens and equal time


def test_the_regret_push_says_which_way_the_picks_regrets_move_each_ratio(tmp_path):
    """(1 + the arm's validation regret) / (1 + its reference's) - 1: + when selection noise fell on the arm (its ratio
    reads worse than at both arms' validation-best finalists), - when it fell on the reference."""
    from islands_kit.protocol.report import regret_push

    def arm(name, ref, regret):
        return {"arm": name, "ref": ref, "tuning": {"transfer": {"regret": regret}}}

    arms = [arm("baseline", "baseline", 0.0131), arm("two_site", "baseline", 0.0007), arm("eight_cell", "baseline", 0.0131)]
    regret_push(arms)
    assert "regret_push" not in arms[0]["tuning"]
    assert arms[1]["tuning"]["regret_push"] == pytest.approx(1.0007 / 1.0131 - 1)  # about -1.2%: toward two_site
    assert arms[2]["tuning"]["regret_push"] == 0.0
    # in a report: validation bpb = tuning-split bpb + 0.1 for every trial, so no pick has regret and nothing is pushed
    study = parse_study(doc())
    run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX, execute_run=fake(bowl(1.6e-3)))
    rep = make_report(study, tmp_path, "cmd")
    ts = next(e for e in rep["entries"] if e.get("arm") == "two_site" and e["kind"] == "arm")
    assert ts["tuning"]["regret_push"] == 0.0
    row = next(r for r in render(rep).splitlines() if r.startswith("| two_site | ") and "+0.00%" in r)
    assert row.split(" | ")[7] == "+0.00%"  # the push column, after the regret
