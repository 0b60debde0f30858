"""Runs shared between studies (islands_kit/protocol/share.py): a study that names another in ``share`` takes that
study's finished runs whose resolved config, seed and machine equal one of its own arms' runs, and trains only the
rest; each shared run says where it was made. Runs are faked in-process (a result.json as a function of the trial and
seed), so nothing trains."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import tomllib

from islands_kit.io import atomic_write_bytes
from islands_kit.protocol.command import dry_run
from islands_kit.protocol.ledger import ledger_path, read_ledger, restore, write_ledger
from islands_kit.protocol.report import make_report
from islands_kit.protocol.runner import run_study
from islands_kit.protocol.runs import Run, default_root, machine_slug
from islands_kit.protocol.share import share
from islands_kit.protocol.study import StudyError, load_study
from islands_kit.protocol.tables import render

MACHINE = "torch x | AVX512 | share box"
BOX = machine_slug(MACHINE)
GRID = {"optim.lr": ["1e-3", "2e-3"]}
BOUNDS = {"optim.lr": ["5e-4", "4e-3"]}


def toml_of(d: dict) -> str:
    """A study file's text for ``d`` (flat tables and arms only: what these tests write)."""
    def val(v):
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {val(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)
    lines = [f"{k} = {val(v)}" for k, v in d.items() if k not in ("arms", "set")]
    lines += ["[set]", *(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in d.get("set", {}).items())]
    for name, a in d["arms"].items():
        lines += [f"[arms.{name}]", *(f"{k} = {val(v)}" for k, v in a.items())]
    text = "\n".join(lines) + "\n"
    assert tomllib.loads(text) == d  # the file says what the test means
    return text


def study_file(name: str, arms: dict, **over) -> Path:
    d = {"name": name, "preset": "smoke", "protocol": 3, "seeds": [0, 1, 2], "tune_seeds": [5, 6],
         "report": f"{name}.json", "set": {"data.tune_fraction": "0.05"}, "arms": arms, **over}
    p = Path(f"{name}.toml")
    p.write_text(toml_of(d))
    return p


def arm(experiment: str, ref: str, **over) -> dict:
    return {"experiment": experiment, "ref": ref, "grid": GRID, "bounds": BOUNDS, **over}


def fake(calls: list | None = None):
    """An in-process run: its tuning bpb a bowl in log lr with its floor at 2e-3 (shampoo arms 0.1 lower), seeds apart
    by 0.001; validation 0.1 above."""
    def execute(run: Run):
        label = dict(run.trial.label)
        if calls is not None:
            calls.append((run.trial.arm, label["optim.lr"], run.seed))
        lower = 0.1 if run.trial.overrides.get("optim.name") == "shampoo" else 0.0
        tune = 2.0 - lower + math.log(float(label["optim.lr"]) / 2e-3) ** 2 + 0.001 * run.seed
        res = {"experiment": run.trial.experiment, "preset": run.preset, "seed": run.seed, "final_val_bpb": tune + 0.1,
               "final_tune_bpb": tune, "sim_wall_clock_s": 10.0, "cross_site_bytes": 10, "ddp_equivalent_bytes": 1000,
               "tokens": 1000, "versions": {"machine": MACHINE}, "compute_utilization": 0.5}
        run.dir.mkdir(parents=True, exist_ok=True)
        (run.dir / "history.jsonl").write_text(json.dumps({"sim_time_s": 10.0, "val_bpb": tune + 0.1}) + "\n")
        atomic_write_bytes(run.dir / "result.json", json.dumps(res).encode())
        return res
    return execute


@pytest.fixture
def source(tmp_path, monkeypatch):
    """A finished source study (baseline and two_site) whose runs live only in its committed ledger."""
    monkeypatch.chdir(tmp_path)
    src = load_study(study_file("src", {"baseline": arm("baseline", "baseline"), "two_site": arm("two_site", "baseline")}))
    run_study(src, default_root(src), say=lambda s: None, machine=BOX, execute_run=fake())
    ledger = ledger_path(src)
    assert ledger is not None
    n = write_ledger(src, default_root(src), ledger)
    shutil.rmtree(default_root(src))  # a new checkout: the source's run folders are gone, its ledger is committed
    return src, n


def test_a_study_takes_the_runs_it_shares_and_trains_only_the_rest(source):
    src, n_src = source
    # each arm: 3 trials (2 declared, 1 past the upper edge) at both tuning seeds and 3 scores; 3 equal-time runs
    assert n_src == 2 * (3 * 2 + 3) + 3
    # adamw restates the smoke preset's default (the same config); shampoo changes it; a third seed is new
    dst = load_study(study_file(
        "dst", {"baseline_adamw": arm("baseline", "baseline_adamw", fixed={"optim.name": "adamw"}),
                "baseline_shampoo": arm("baseline", "baseline_shampoo", fixed={"optim.name": "shampoo"}),
                "two_site_adamw": arm("two_site", "baseline_adamw", fixed={"optim.name": "adamw"})},
        seeds=[0, 1, 3], share=["src.toml"]))
    assert share(dst, default_root(dst), say=lambda s: None) == {"src": 16}
    calls: list = []
    run_study(dst, default_root(dst), say=lambda s: None, machine=BOX, execute_run=fake(calls))
    # the AdamW arms' tuning and seeds 0-1 came from the source; only seed 3 of their picks was trained here, while
    # every Shampoo run was (its config differs by optim.name), and the study's own equal-time runs were
    assert sorted(c for c in calls if c[0] in ("baseline_adamw", "two_site_adamw")) == [("baseline_adamw", "2e-3", 3),
                                                                       ("two_site_adamw", "2e-3", 3)]
    assert len([c for c in calls if c[0] == "baseline_shampoo"]) == 6 + 3
    doc = make_report(dst, default_root(dst), "cmd")
    entry = {e["arm"]: e for e in doc["entries"] if e["kind"] == "arm"}
    assert entry["baseline_adamw"]["label"] == {"optim.lr": "2e-3"}
    assert entry["baseline_adamw"]["shared_with"] == ["src"] and entry["baseline_adamw"]["tuning_shared"] == 6
    assert entry["baseline_adamw"]["shared_seeds"] == [0, 1]
    assert entry["baseline_shampoo"]["shared_with"] == [] and entry["baseline_shampoo"]["tuning_shared"] == 0
    assert "8 of them shared with study src (the same config, seed and machine)" in render(doc)
    # a shared run holds the source's figures and says where it was made
    ledger = read_ledger(Path("src.runs.jsonl"))
    shared = [json.loads(p.read_text()) for p in default_root(dst).glob("*/baseline_adamw/*/seed0/result.json")]
    assert len(shared) == 1 and shared[0]["shared_from"].startswith(f"src:{BOX}/baseline/")
    origin = ledger[shared[0]["shared_from"].split(":", 1)[1]]
    assert shared[0]["final_val_bpb"] == origin["result"]["final_val_bpb"] and shared[0]["restored_from"] == "src.runs.jsonl"


def test_shared_runs_enter_the_studys_own_ledger_and_come_back_from_it(source):
    dst = load_study(study_file("dst", {"baseline": arm("baseline", "baseline")}, share=["src.toml"]))
    said: list[str] = []
    plan = dry_run(dst, default_root(dst), say=said.append, machine=BOX)
    assert plan["shared"] == {"src": 9} and plan["left"] == 0 and "9 finished (9 shared from study src)" in said[0]
    assert not default_root(dst).exists()  # the dry run wrote nothing
    assert share(dst, default_root(dst), say=lambda s: None) == {"src": 6 + 3}  # its whole baseline: tuning and scores
    assert write_ledger(dst, default_root(dst), Path("dst.runs.jsonl")) == 9
    kept = read_ledger(Path("dst.runs.jsonl"))
    assert all(r["result"]["shared_from"].startswith(f"src:{BOX}/baseline/") for r in kept.values())
    shutil.rmtree(default_root(dst))
    Path("src.runs.jsonl").unlink()  # the source gone too: the study's own ledger carries what it shared
    assert restore(dst, default_root(dst), Path("dst.runs.jsonl")) == 9
    back = [json.loads(p.read_text()) for p in default_root(dst).glob("*/*/*/*/result.json")]
    assert len(back) == 9 and all(r["shared_from"].startswith("src:") for r in back)


def test_a_run_is_shared_only_when_its_whole_config_and_seed_match(source):
    # another [set] (the tuning split's size) changes every config: nothing is shared
    other = load_study(study_file("other", {"baseline": arm("baseline", "baseline")}, share=["src.toml"],
                                  set={"data.tune_fraction": "0.1"}))
    assert share(other, default_root(other), say=lambda s: None) == {"src": 0}
    # other scoring seeds: the tuning runs (seeds 5, 6) are shared, no score
    seeds = load_study(study_file("seeds", {"baseline": arm("baseline", "baseline")}, share=["src.toml"], seeds=[7, 8, 9]))
    assert share(seeds, default_root(seeds), say=lambda s: None) == {"src": 6}


@pytest.mark.parametrize("value, rule", [
    ("src.toml", r"share: must be a list of at most 8 study files"),
    (["../src.toml"], r"share\[0\]: '../src.toml' must be a relative path"),
    (["src.json"], r"share\[0\]: 'src.json' must end in .toml"),
    (["src.toml", "src.toml"], r"share: names a study file twice"),
])
def test_share_is_checked_when_the_study_file_is_read(tmp_path, monkeypatch, value, rule):
    monkeypatch.chdir(tmp_path)
    study_file("src", {"baseline": arm("baseline", "baseline")})
    with pytest.raises(StudyError, match=rule):
        load_study(study_file("dst", {"baseline": arm("baseline", "baseline")}, share=value))


def test_a_share_that_cannot_be_read_is_refused_before_any_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study_file("noledger", {"baseline": arm("baseline", "baseline")}, report="x.json")
    Path("noreport.toml").write_text(Path("noledger.toml").read_text().replace('report = "x.json"\n', "")
                                     .replace('"noledger"', '"noreport"'))
    for target, rule in [("missing.toml", r"share: missing.toml: no such study file"),
                         ("dst.toml", r"share: dst.toml is this study \(dst\)"),
                         ("noreport.toml", r"share: noreport.toml names no report")]:
        dst = load_study(study_file("dst", {"baseline": arm("baseline", "baseline")}, share=[target]))
        with pytest.raises(StudyError, match=rule):
            share(dst, default_root(dst), say=lambda s: None)
        assert not default_root(dst).exists()


def test_a_forged_shared_from_in_a_ledger_line_is_named_and_the_line_skipped(source, capsys):
    lines = Path("src.runs.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["result"]["shared_from"] = "../../etc/passwd"
    Path("forged.runs.jsonl").write_text(json.dumps(rec) + "\n" + "\n".join(lines[1:]) + "\n")
    kept = read_ledger(Path("forged.runs.jsonl"))
    assert len(kept) == len(lines) - 1 and rec["key"] not in kept
    assert "forged.runs.jsonl:1: skipped (result.shared_from: '../../etc/passwd' is not <study name>:<ledger key>)" in capsys.readouterr().err


def test_a_shared_run_is_never_written_through_a_symbolic_link(source, capsys):
    dst = load_study(study_file("dst", {"baseline": arm("baseline", "baseline")}, share=["src.toml"]))
    elsewhere = Path("elsewhere")
    elsewhere.mkdir()
    default_root(dst).mkdir(parents=True)
    (default_root(dst) / BOX).symlink_to(elsewhere.resolve(), target_is_directory=True)
    assert share(dst, default_root(dst)) == {"src": 0}
    assert list(elsewhere.iterdir()) == []
    assert "is a symbolic link (the kit never reads or writes through one); skipped" in capsys.readouterr().err
