"""The protocol's runner and report (islands_kit/protocol): studies as data, equal budgets, the pick on the tuning
split only, resume, locks, the dry run, and intervals in the report. Fast tests use an in-process fake run that writes
a result.json; the slow one runs a real smoke study and re-makes a run from its recorded overrides alone."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from islands_kit.config import ConfigError, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.io import atomic_write_bytes
from islands_kit.protocol.batch import at_global_batch
from islands_kit.protocol.report import bpb_at_time, make_report
from islands_kit.protocol.runner import release_lock, run_study, take_lock
from islands_kit.protocol.runs import Run, machine_folder, machine_slug, machines
from islands_kit.protocol.study import StudyError, load_study, parse_study
from islands_kit.protocol.tables import render
from islands_kit.protocol.tuning import pick

TINY = Path(__file__).parent / "studies" / "tiny.toml"
MACHINE = "torch x | AVX512 | test box"
BOX = machine_slug(MACHINE)  # the runs' folder under the study's folder
BOX_A, BOX_B = machine_slug(MACHINE + " a"), machine_slug(MACHINE + " b")  # two machines


def study_doc(**over):
    doc = {"name": "t", "preset": "smoke", "seeds": [0, 1, 2], "tune_seeds": [0], "set": {"data.tune_fraction": "0.05"},
           "arms": {"baseline": {"experiment": "baseline", "grid": {"optim.lr": ["1e-3", "2e-3", "3e-3"]}},
                    "two_site": {"experiment": "two_site", "ref": "baseline",
                                 "grid": {"optim.lr": ["1e-3", "2e-3", "3e-3"]}}}}
    doc.update(over)
    return doc


def fake_executor(val_of, tune_of=None, machine=MACHINE, calls=None):
    """An in-process run: writes the result.json a real run would (the figures a function of the trial and seed)."""
    def execute(run: Run):
        if calls is not None:
            calls.append((run.trial.arm, run.trial.describe(), run.seed))
        label = dict(run.trial.label)
        val = val_of(run.trial.arm, label, run.seed)
        tune = (tune_of or val_of)(run.trial.arm, label, run.seed)
        res = {"seed": run.seed, "final_val_bpb": val, "final_tune_bpb": tune, "sim_wall_clock_s": 100.0 if run.trial.arm == "baseline" else 50.0,
               "cross_site_bytes": 1000 if run.trial.arm == "baseline" else 10, "ddp_equivalent_bytes": 1000,
               "versions": {"machine": machine}, "compute_utilization": 0.5 if run.trial.arm == "baseline" else 0.8,
               "ledger": {"channels": {"gradients" if run.trial.arm == "baseline" else "fragments":
                                       {"bytes": 1000 if run.trial.arm == "baseline" else 10, "messages": 4}}}}
        run.dir.mkdir(parents=True, exist_ok=True)
        (run.dir / "history.jsonl").write_text("\n".join(json.dumps(h) for h in (
            {"sim_time_s": 25.0, "val_bpb": val + 1.0}, {"sim_time_s": res["sim_wall_clock_s"], "val_bpb": val})))
        # result.json last and whole, like a real run's: the runner's other thread may look for it
        atomic_write_bytes(run.dir / "result.json", json.dumps(res).encode())
        return res
    return execute


def test_the_global_batch_moves_every_step_counted_key_at_equal_tokens():
    cfg = get_preset("two_site", "demo")
    sets = at_global_batch(cfg, 20)
    assert sets["islands.0.batch_size"] == "12" and sets["islands.1.batch_size"] == "8"
    assert sets["islands.0.micro_batch_size"] == "6" and sets["islands.1.micro_batch_size"] == "4"
    assert sets["steps"] == "2400" and sets["optim.warmup_steps"] == "240" and sets["eval_every"] == "300"
    assert sets["sync.H"] == "100"  # as many outer steps per fragment (and bytes) as at batch 40
    assert int(sets["steps"]) * 20 == cfg.steps * 40  # equal tokens, exactly
    # a strategy's own step-counted settings move too (the hierarchical sites' H1), and only for that strategy
    hier = at_global_batch(get_preset("hierarchical", "demo"), 24)
    assert hier["sync.hierarchical.site_every"] == "17" and hier["steps"] == "2000"
    assert "sync.hierarchical.site_every" not in sets
    with pytest.raises(ConfigError, match=r"^batch: 20 does not split .*islands.0.batch_size 5"):
        at_global_batch(get_preset("eight_cell", "demo"), 20)
    with pytest.raises(ConfigError, match=r"^batch: 80 would train 12.5 steps .* divides 1000"):
        at_global_batch(apply_overrides(get_preset("baseline", "smoke"), {"steps": 25}), 80)


def test_study_files_are_checked_before_any_run(tmp_path):
    assert load_study(TINY).check_budgets() == {"baseline": 2, "two_site": 2}
    bad = study_doc()
    bad["arms"]["two_site"]["grid"]["optim.lr"] = ["1e-3", "2e-3"]
    with pytest.raises(StudyError, match=r"arms.two_site.grid: 2 trials against 3 for its reference baseline"):
        parse_study(bad)
    with pytest.raises(StudyError, match=r"arms.x.experiment: 'nope' is not an experiment"):
        parse_study(study_doc(arms={"x": {"experiment": "nope"}}))
    with pytest.raises(StudyError, match=r"preset: '../../escape' is not a preset"):
        parse_study(study_doc(preset="../../escape"))
    with pytest.raises(StudyError, match=r"seeds: a seed is listed twice"):
        parse_study(study_doc(seeds=[0, 0]))
    with pytest.raises(StudyError, match=r"unknown field\(s\) gird"):
        parse_study(study_doc(arms={"baseline": {"experiment": "baseline", "gird": {}}}))
    with pytest.raises(StudyError, match=r"arms.baseline: .*optim.lr"):
        parse_study(study_doc(arms={"baseline": {"experiment": "baseline", "grid": {"optim.lr": ["-1"]}}}))
    (tmp_path / "s.toml").write_text("name = [")
    with pytest.raises(StudyError, match="not valid TOML"):
        load_study(tmp_path / "s.toml")


def test_the_pick_follows_the_tuning_split_when_validation_disagrees(tmp_path):
    study = parse_study(study_doc())
    # validation prefers lr 1e-3, the tuning split prefers 3e-3: the pick must be 3e-3
    val = lambda arm, label, seed: {"1e-3": 2.0, "2e-3": 2.1, "3e-3": 2.2}[label["optim.lr"]]  # noqa: E731
    tune = lambda arm, label, seed: {"1e-3": 2.3, "2e-3": 2.2, "3e-3": 2.1}[label["optim.lr"]]  # noqa: E731
    run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX, execute_run=fake_executor(val, tune))
    assert dict(pick(study, "baseline", tmp_path / BOX).label) == {"optim.lr": "3e-3"}
    doc = make_report(study, tmp_path, "cmd")
    base = next(e for e in doc["entries"] if e["arm"] == "baseline")
    assert base["picked_on"] == "tune" and base["label"] == {"optim.lr": "3e-3"}
    assert base["pick_at_grid_edge"] == ["optim.lr=3e-3 (largest of the grid)"]  # its best may lie above the grid
    assert "pick at the grid's edge: optim.lr=3e-3 (largest of the grid)" in render(doc)
    assert base["transfer"]["spearman"] == pytest.approx(-1.0) and base["transfer"]["pick_wins_on_val"] is False
    assert base["transfer"]["regret"] == pytest.approx(2.2 / 2.0 - 1)


def test_equal_budgets_resume_and_intervals(tmp_path):
    study = parse_study(study_doc())
    val = lambda arm, label, seed: (2.0 if arm == "baseline" else 2.06 + 0.01 * seed) + float(label["optim.lr"])  # noqa: E731
    calls: list = []
    made = run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX, execute_run=fake_executor(val, calls=calls))
    # 3 trials per arm at seed 0, then the pick at seeds 1 and 2: 3 + 2 per arm
    assert len(made) == 10 and len(calls) == 10
    assert sum(1 for a, _, _ in calls if a == "baseline") == sum(1 for a, _, _ in calls if a == "two_site")
    again: list = []
    assert run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX, execute_run=fake_executor(val, calls=again)) == []
    assert again == []  # a finished run is never run again
    doc = make_report(study, tmp_path, "cmd")
    ts = next(e for e in doc["entries"] if e["arm"] == "two_site")
    ratios = [(2.061 + 0.01 * s) / 2.001 for s in range(3)]
    assert ts["ratios"] == pytest.approx(ratios) and ts["ratio_n"] == 3 and ts["seeds"] == [0, 1, 2]
    lo, hi = ts["ratio_ci95"]
    assert lo < ts["ratio_mean"] < hi and ts["resolved"] is True
    assert ts["bytes_vs_ref"] == 100.0 and ts["bytes_vs_ddp"] == 100.0
    # equal simulated time: two_site finishes at 50 s, where the baseline's curve is 2/3 of the way from 25 s to 100 s
    assert ts["time_ratio_n"] == 3
    table = render(doc)
    assert "n=3" in table and "±" not in table and "comparisons" in table


def test_runs_from_other_machines_are_never_paired(tmp_path):
    study = parse_study(study_doc(seeds=[0]))
    val = lambda arm, label, seed: 2.0  # noqa: E731
    run_study(study, tmp_path, jobs=1, say=lambda s: None, machine=BOX, execute_run=fake_executor(val))
    ts_pick = pick(study, "two_site", tmp_path / BOX)
    d = Run(ts_pick, 0, "smoke", tmp_path / BOX, "score").dir
    res = json.loads((d / "result.json").read_text())
    res["versions"]["machine"] = "torch x | AVX2 | another box"
    (d / "result.json").write_text(json.dumps(res))
    ts = next(e for e in make_report(study, tmp_path, "cmd")["entries"] if e["arm"] == "two_site")
    assert ts["ratio_n"] == 0 and ts["ratio_mean"] is None  # never paired
    assert ts["unpaired"] == ["seed 0: made on different machines or kernel sets "
                              "(torch x | AVX2 | another box vs torch x | AVX512 | test box)"]


def test_a_run_held_by_a_live_process_is_skipped_and_a_dead_ones_lock_taken(tmp_path):
    d = tmp_path / "run"
    assert take_lock(d)
    assert not take_lock(d)  # held by this (live) process
    release_lock(d)
    (d / "run.lock").write_text(json.dumps({"pid": 2 ** 22 + 12345, "host": os.uname().nodename}))
    assert take_lock(d)  # a lock file its dead holder left behind is taken over


def test_bpb_at_time_interpolates_between_evaluations():
    res = {"final_val_bpb": 2.0, "history": [{"sim_time_s": 10.0, "val_bpb": 4.0}, {"sim_time_s": 30.0, "val_bpb": 2.0}]}
    assert bpb_at_time(res, 20.0) == pytest.approx(3.0)
    assert bpb_at_time(res, 99.0) == 2.0 and bpb_at_time(res, 5.0) is None


@pytest.mark.slow
def test_a_real_study_runs_resumably_and_a_run_is_remade_from_its_overrides(tmp_path):
    import subprocess
    import sys

    study = load_study(TINY)
    made = run_study(study, tmp_path / "runs", jobs=2, say=lambda s: None)
    assert len(made) == 7
    doc = make_report(study, tmp_path / "runs", "cmd")
    ts = next(e for e in doc["entries"] if e["arm"] == "two_site")
    assert ts["status"] == "done" and ts["ratio_n"] == 2 and len(ts["ratio_ci95"]) == 2
    # the recorded overrides alone re-make seed 0's validation bpb exactly (same machine)
    cmd = [sys.executable, "-m", "islands_kit", "run", "two_site", "--preset", "smoke", "--out", str(tmp_path / "again")]
    for k, v in {**ts["overrides"], "seed": "0"}.items():
        cmd += ["--set", f"{k}={v}"]
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"})
    again = json.loads((tmp_path / "again" / "result.json").read_text())
    assert again["final_val_bpb"] == ts["val_bpb"][0]
    assert run_study(study, tmp_path / "runs", jobs=2, say=lambda s: None) == []


def test_arms_restrict_a_run_to_their_own_runs(tmp_path):
    study = parse_study(study_doc())
    calls: list = []
    run_study(study, tmp_path, jobs=1, say=lambda s: None, machine=BOX, execute_run=fake_executor(lambda a, l, s: 2.0, calls=calls),
              arms=["baseline"])
    assert {a for a, _, _ in calls} == {"baseline"} and len(calls) == 5
    with pytest.raises(StudyError, match=r"--arms: nope not an arm"):
        run_study(study, tmp_path, arms=["nope"], machine=BOX)


def test_every_arms_tuning_runs_before_any_scoring(tmp_path):
    # a finished tuning carries over to another machine and a score does not: a session that ends early should leave
    # tunings whole, so the baseline's seeds 1-2 wait until two_site's trials are made too
    study = parse_study(study_doc())
    made = run_study(study, tmp_path, jobs=1, say=lambda s: None, machine=BOX,
                     execute_run=fake_executor(lambda a, l, s: 2.0 + float(l["optim.lr"])))
    phases = [r.phase for r in made]
    assert phases == ["tune"] * 6 + ["score"] * 4
    assert [r.trial.arm for r in made[:6]] == ["baseline"] * 3 + ["two_site"] * 3


STUDIES = sorted((Path(__file__).resolve().parent.parent / "benchmarks" / "studies").glob("*.toml"))


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_every_study_file_loads_with_equal_budgets_and_valid_configs(path):
    study = load_study(path)  # every trial and row expanded against its preset: a bad key or value fails here
    budgets = study.check_budgets()
    assert all(budgets[a] == budgets[arm.ref] for a, arm in study.arms.items())


def test_every_results_table_is_the_rendering_of_its_json():
    """benchmarks/RESULTS.md's study tables are made from the studies' JSON reports, never edited by hand."""
    from islands_kit.protocol.tables import render

    root = Path(__file__).resolve().parent.parent
    results = (root / "benchmarks" / "RESULTS.md").read_text()
    checked = 0
    for path in STUDIES:
        study = load_study(path)
        if not study.report or not (root / study.report).is_file():
            continue
        doc = json.loads((root / study.report).read_text())
        begin, end = f"<!-- study:{study.name}:begin -->", f"<!-- study:{study.name}:end -->"
        assert begin in results and end in results, f"{study.report} has no table in RESULTS.md"
        block = results[results.index(begin) + len(begin):results.index(end)].strip("\n")
        assert block == render(doc), f"RESULTS.md's {study.name} table is not the rendering of {study.report}"
        checked += 1
    assert checked == sum(1 for p in STUDIES if (lambda s: s.report and (root / s.report).is_file())(load_study(p)))


def _without_provenance(doc):
    """A report with the fields that say which runs were restored from a ledger taken out."""
    drop = {"restored_seeds", "tuning_restored", "ratio_restored_n", "restored"}
    if isinstance(doc, dict):
        return {k: _without_provenance(v) for k, v in doc.items() if k not in drop}
    return [_without_provenance(v) for v in doc] if isinstance(doc, list) else doc


def test_the_ledger_carries_finished_runs_to_a_checkout_without_run_folders(tmp_path, monkeypatch):
    import shutil

    from islands_kit.protocol.command import dry_run
    from islands_kit.protocol.ledger import ledger_path, restore, write_ledger

    monkeypatch.chdir(tmp_path)  # a study's report is a path under the folder the kit runs in
    study = parse_study(study_doc(report="t.json"))
    val = lambda arm, label, seed: (2.0 if arm == "baseline" else 2.05 + 0.01 * seed) + float(label["optim.lr"])  # noqa: E731
    run_study(study, tmp_path / "runs", jobs=2, say=lambda s: None, machine=BOX, execute_run=fake_executor(val))
    before = make_report(study, tmp_path / "runs", "cmd")
    ledger = ledger_path(study)
    assert ledger == Path("t.runs.jsonl") and write_ledger(study, tmp_path / "runs", ledger) == 10
    shutil.rmtree(tmp_path / "runs")  # a new checkout: the run folders are gone, the ledger is committed
    assert dry_run(study, tmp_path / "runs", say=lambda s: None, machine=BOX)["left"] == 0
    assert not (tmp_path / "runs").exists()  # the dry run wrote nothing
    assert restore(study, tmp_path / "runs", ledger) == 10
    calls: list = []
    assert run_study(study, tmp_path / "runs", say=lambda s: None, machine=BOX, execute_run=fake_executor(val, calls=calls)) == []
    assert calls == []
    after = make_report(study, tmp_path / "runs", "cmd")
    assert _without_provenance(after) == _without_provenance(before)
    # and every figure says where it came from: each scored seed restored, each ratio's pairs counted as such
    arm = next(e for e in after["entries"] if e["kind"] == "arm" and e["arm"] == "two_site")
    assert arm["restored_seeds"] == [0, 1, 2] and arm["ratio_restored_n"] == 3 and arm["tuning_restored"] == 3
    assert "(3 of 3 from the ledger)" in render(after) and "from the ledger" not in render(before)


def test_an_arm_tuned_on_one_machine_is_scored_at_every_seed_on_another_and_never_paired_across(tmp_path):
    study = parse_study(study_doc())
    val = lambda arm, label, seed: (2.0 if arm == "baseline" else 2.06 + 0.01 * seed) + float(label["optim.lr"])  # noqa: E731
    run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX_A, execute_run=fake_executor(val))
    calls: list = []
    other = "torch x | AVX2 | box b"
    shifted = lambda arm, label, seed: val(arm, label, seed) * (1.01 if arm == "two_site" else 1.0)  # noqa: E731
    run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX_B,
              execute_run=fake_executor(shifted, machine=other, calls=calls))
    # no tuning again on box b: each arm's pick (tuned on box a) at all three seeds, seed 0 included
    assert sorted(calls) == sorted((a, "optim.lr=1e-3", s) for a in ("baseline", "two_site") for s in range(3))
    doc = make_report(study, tmp_path, "cmd")
    assert [m["machine"] for m in doc["machines"]] == [BOX_A, BOX_B]
    assert [m["fingerprint"] for m in doc["machines"]] == [MACHINE, other]
    ts = {e["machine"]: e for e in doc["entries"] if e["arm"] == "two_site"}
    assert ts[BOX_B]["tuned_on"] == BOX_A and ts[BOX_B]["seeds"] == [0, 1, 2]
    assert ts[BOX_B]["unpaired"] == [] and ts[BOX_B]["ratio_n"] == 3  # paired with box b's own baseline
    assert ts[BOX_B]["ratio_mean"] == pytest.approx(1.01 * ts[BOX_A]["ratio_mean"])
    moved = {a["arm"]: a for a in doc["across_machines"]}
    assert moved["two_site"]["machines"] == [BOX_A, BOX_B] and moved["two_site"]["moves"] == pytest.approx([0.01] * 3)
    assert moved["baseline"]["max_abs_move"] == pytest.approx(0.0)
    table = render(doc)
    assert table.count("| arm | pick (tuning split)") == 2 and f"tuned on {BOX_A}" in table and "+1.00%" in table
    # where each machine's scored runs spent their simulated time and bytes, from the JSON alone
    assert table.count("| two_site | 3 | 50.0 s | 80.0% | fragments 10 |") == 2
    assert table.count("| baseline | 3 | 100.0 s | 50.0% | gradients 1,000 |") == 2


def test_machine_folders_name_the_cpu_and_never_collide():
    amd = "torch 2.13.0+cpu | AVX512 | x86_64 AMD EPYC | flags fb86c92f4654"
    assert machine_slug(amd).startswith("amd-epyc-avx512-")
    assert machine_slug(amd) != machine_slug(amd.replace("AVX512", "AVX2"))
    assert machine_slug(amd) != machine_slug(amd.replace("2.13.0", "2.14.0"))


def test_only_machine_folders_are_machines(tmp_path):
    """A study folder may hold other folders (an arm's from before runs were kept per machine, a scratch copy): only
    machine_slug-shaped names are machines, and a run is never filed under any other name."""
    for name in (BOX_A, "baseline", "two_site", "notes-2026"):
        (tmp_path / name).mkdir()
    assert machines(tmp_path) == [BOX_A]
    assert machine_folder(BOX_A) == BOX_A
    with pytest.raises(StudyError, match="machine: 'box-a' is not a machine folder name"):
        machine_folder("box-a")


def test_arms_run_at_fixed_settings_say_so_and_make_no_tuning_tables(tmp_path):
    """An arm with no grid (its settings fixed, e.g. another study's pick) is one trial: the table shows its settings
    as fixed, and the tuning-transfer tables (a choice among trials) leave it out."""
    study = parse_study(study_doc(arms={
        "baseline": {"experiment": "baseline", "fixed": {"optim.lr": "3e-3"}},
        "two_site": {"experiment": "two_site", "ref": "baseline", "fixed": {"optim.lr": "4.24e-3"}}}))
    val = lambda arm, label, seed: 2.0 if arm == "baseline" else 2.1  # noqa: E731
    run_study(study, tmp_path, jobs=1, say=lambda s: None, machine=BOX, execute_run=fake_executor(val))
    table = render(make_report(study, tmp_path, "cmd"))
    assert "| baseline | fixed optim.lr=3e-3 | 2.0000 / 2.0000 / 2.0000 | 1 (reference) |" in table
    assert "| two_site | fixed optim.lr=4.24e-3 | 2.1000 / 2.1000 / 2.1000 | 1.0500" in table
    assert "Spearman" not in table and "Every finished tuning trial" not in table


def test_two_arms_beside_the_reference_are_read_against_each_other(tmp_path):
    """Whether one arm beats another is its own paired comparison (per seed, on one machine), not the difference of
    their ratios to the reference; the report holds it at equal tokens and at equal simulated time."""
    doc = study_doc()
    doc["arms"]["close"] = {"experiment": "two_site", "ref": "baseline", "grid": {"optim.lr": ["1e-3", "2e-3", "3e-3"]},
                            "fixed": {"sync.H": "4"}}
    study = parse_study(doc)
    val = lambda arm, label, seed: {"baseline": 2.0, "two_site": 2.06 + 0.01 * seed, "close": 2.03}[arm]  # noqa: E731
    run_study(study, tmp_path, jobs=2, say=lambda s: None, machine=BOX, execute_run=fake_executor(val))
    rep = make_report(study, tmp_path, "cmd")
    pairs = [e for e in rep["entries"] if e["kind"] == "pair"]
    assert len(pairs) == 1 and pairs[0]["arms"] == ["close", "two_site"] and pairs[0]["seeds"] == [0, 1, 2]
    want = [2.03 / (2.06 + 0.01 * s) for s in range(3)]
    assert pairs[0]["ratios"] == pytest.approx(want) and pairs[0]["ratio_n"] == 3
    assert pairs[0]["ratio_ci95"][1] < 1.0 and pairs[0]["time_ratio_n"] == 3  # resolved: close ends lower
    table = render(rep)
    assert "| close | two_site | 0.9807 [" in table
    assert "These tables make 6 comparisons" in table  # 2 per arm beside the reference, 2 for the pair
