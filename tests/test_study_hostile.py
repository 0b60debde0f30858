"""Study files and ledgers are inputs from strangers (a ledger line arrives in a pull request): every path they name
stays under its root, every line is checked before it is believed, and every refusal is one line naming the file,
the line or the field. Each test here failed on the code before these checks (b5f22a5)."""
from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from islands_kit.cli import main
from islands_kit.io import OutputError
from islands_kit.protocol import command
from islands_kit.protocol.ledger import MAX_FILE, MAX_LINE, read_ledger, restore, write_ledger
from islands_kit.protocol.runs import Run, machine_slug
from islands_kit.protocol.study import StudyError, load_study, parse_study

ROOT = Path(__file__).resolve().parents[1]
BOX = machine_slug("torch x | AVX512 | test box")

STUDY = """name = "t"
preset = "smoke"
seeds = [0, 1, 2]
tune_seeds = [0]
report = "bench/t.json"

[set]
"data.tune_fraction" = "0.05"

[arms.baseline]
experiment = "baseline"

[arms.two_site]
experiment = "two_site"
ref = "baseline"
"""


class _Est:
    total_s = 60.0


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A checkout in ``tmp_path``: the study file, its report folder, no runs; the dry run's timing faked."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(command, "estimate_within", lambda cfg: _Est())
    (tmp_path / "bench").mkdir()
    (tmp_path / "t.toml").write_text(STUDY)
    return tmp_path


def record(key: str, seed: int = 0, bpb: float = 2.5, **res) -> dict:
    """A ledger line as write_ledger makes it."""
    return {"key": key, "arm": key.split("/")[1], "overrides": {},
            "result": {"experiment": "baseline", "preset": "smoke", "seed": seed, "final_val_bpb": bpb,
                       "final_tune_bpb": bpb, "sim_wall_clock_s": 10.0, "cross_site_bytes": 100,
                       "ddp_equivalent_bytes": 1000, "tokens": 1000, "steps": 10, "params_active": 5,
                       "wall_time_s": 1.0, "cpu_time_s": 1.0, "versions": {"machine": "torch x | AVX512 | test box"},
                       **res},
            "history": [{"step": 5, "tokens": 500, "sim_time_s": 5.0, "val_bpb": bpb + 1, "final": False}]}


def write_lines(path: Path, lines: list) -> None:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))


def key_of(study, arm: str, seed: int, machine: str = BOX) -> str:
    """The ledger key the runner gives ``arm``'s (only) trial at ``seed``."""
    return f"{machine}/{Run(study.trials(arm)[0], seed, study.preset, Path('x'), 'score').key}"


def files_under(p: Path) -> set[str]:
    return {str(f.relative_to(p)) for f in p.rglob("*")}


def test_a_planted_ledger_key_and_symlink_write_nothing_outside_the_runs_root(here, capsys):
    """Keys of ``../..`` and absolute paths wrote history.jsonl and result.json there, and a symlink planted at a
    key's history.jsonl overwrote its target with the line's text. Now such keys are named and skipped, and nothing
    is written outside the study's runs folder, through a link, by the dry run, the report or a run's restore."""
    study = load_study("t.toml")
    outside = here / "outside"
    outside.mkdir()
    victim = outside / "victim.sh"
    victim.write_text("echo safe\n")
    root = here / "runs" / "studies" / "t"
    linked = machine_slug("linked box")
    (root / linked).parent.mkdir(parents=True)
    (root / linked).symlink_to(outside, target_is_directory=True)  # a machine folder that leads outside
    planted = root / key_of(study, "baseline", 1)
    planted.mkdir(parents=True)
    (planted / "history.jsonl").symlink_to(victim)  # the line's history would land in the victim
    write_lines(here / "bench" / "t.runs.jsonl", [
        record("../../../outside/pwn/x/seed0"),
        record(str(outside / "abs" / "x" / "seed0")),
        record(key_of(study, "baseline", 0, linked)),
        record(key_of(study, "baseline", 1), seed=1),
    ])
    before = files_under(outside)
    assert main(["study", "run", "t.toml", "--dry-run"]) == 0
    assert main(["study", "report", "t.toml"]) == 0
    assert restore(study, root, here / "bench" / "t.runs.jsonl") == 1  # what `study run` does first
    assert files_under(outside) == before and victim.read_text() == "echo safe\n"
    assert not (here / "outside" / "pwn").exists() and not (here.parent / "outside").exists()
    assert not (planted / "history.jsonl").is_symlink()  # the link itself was replaced, its target untouched
    err = capsys.readouterr().err
    assert "bench/t.runs.jsonl:1: skipped (key: '../../../outside/pwn/x/seed0' is not a run's folder" in err
    assert "bench/t.runs.jsonl:2: skipped (key:" in err
    assert f"{root / linked} is a symbolic link (the kit never reads or writes through one); skipped" in err


def test_forged_rows_are_refused_or_marked_restored_and_counted(here, capsys):
    """Six plausible forged rows and no runs made a report row ``0.5000 [0.5000, 0.5000] n=3``, resolved, from
    nothing run here. Every ratio now says how many of its pairs come from the ledger, and each arm which seeds;
    implausible rows (bpb 1e308, 0 or negative, bytes 10**4000, a seed other than the key's) are named and
    skipped (they printed 309-digit values, or raised ZeroDivisionError)."""
    study = load_study("t.toml")
    forged = [record(key_of(study, "baseline", s), seed=s, bpb=2.0) for s in range(3)]
    forged += [record(key_of(study, "two_site", s), seed=s, bpb=1.0) for s in range(3)]
    bad = [json.dumps(record(key_of(study, "baseline", 0, machine_slug("b")), bpb=1e308)),
           json.dumps(record(key_of(study, "baseline", 0, machine_slug("c")), bpb=0)),
           json.dumps(record(key_of(study, "baseline", 0, machine_slug("d")), bpb=-2.0)),
           json.dumps(record(key_of(study, "baseline", 0, machine_slug("e")))).replace(
               '"cross_site_bytes": 100', '"cross_site_bytes": 1' + "0" * 4000),
           json.dumps(record(key_of(study, "baseline", 0, machine_slug("f")), seed=7))]
    write_lines(here / "bench" / "t.runs.jsonl", forged + bad)
    assert main(["study", "report", "t.toml"]) == 0
    out, err = capsys.readouterr()
    assert "0.5000 [0.5000, 0.5000] n=3 (3 of 3 from the ledger)" in out
    assert "seeds 0, 1, 2 restored from the ledger" in out
    for n, rule in ((7, "result.final_val_bpb: 1e+308 is not a bpb in (0, 8]"),
                    (8, "result.final_val_bpb: 0 is not a bpb in (0, 8]"),
                    (9, "result.final_val_bpb: -2.0 is not a bpb in (0, 8]"),
                    (10, "result.cross_site_bytes: 1000000000000000000000000000000000000000 is not a whole count"),
                    (11, "result.seed: 7 is not the key's seed 0")):
        assert f"bench/t.runs.jsonl:{n}: skipped ({rule}" in err, err
    assert "e+307" not in out and len(max(out.split(), key=len)) < 200


def test_a_torn_ledger_line_is_named_and_skipped_and_an_oversized_one_read_past(here, capsys):
    """A ledger cut mid-record (a full disk under the old non-atomic write) made every study command fail with
    ``Unterminated string...``, naming no file. The torn line is named and skipped; a 50 MB line (1.78 GB and 16.7 s
    to parse) is read past in bounded memory; a ledger over the file limit is refused unread."""
    study = load_study("t.toml")
    ledger = here / "bench" / "t.runs.jsonl"
    good = [record(key_of(study, "baseline", s), seed=s) for s in range(2)]
    write_lines(ledger, [good[0], json.dumps(good[1])[:150]])  # cut mid-record
    with open(ledger, "ab") as f:  # a line of 50 MB, then a good one
        f.write(b'{"key": "' + b"x" * (50 << 20) + b'"}\n' + json.dumps(good[1]).encode() + b"\n")
    t0 = time.perf_counter()
    got = read_ledger(ledger)
    spent = time.perf_counter() - t0
    assert sorted(got) == sorted(r["key"] for r in good) and spent < 5.0
    err = capsys.readouterr().err
    assert f"{ledger}:2: skipped (not a JSON record (Unterminated string" in err, err
    assert f"{ledger}:3: skipped (a line over the limit of {MAX_LINE:,} bytes)" in err
    assert main(["study", "report", "t.toml"]) == 0
    with open(ledger, "ab") as f:
        f.truncate(MAX_FILE + 1)  # sparse: nothing is written
    assert main(["study", "report", "t.toml"]) == 2
    assert f"bench/t.runs.jsonl: a ledger of {MAX_FILE + 1:,} bytes, over the limit of {MAX_FILE:,}; refused " \
           "unread" in capsys.readouterr().out


def test_the_ledger_and_report_are_written_whole_or_not_at_all(here, monkeypatch):
    """``study report --write`` on a full disk left the committed ledger cut mid-record. The report and the ledger go
    through a temporary file and a rename: a failed write names the file and leaves the old one byte for byte."""
    study = load_study("t.toml")
    ledger = here / "bench" / "t.runs.jsonl"
    write_lines(ledger, [record(key_of(study, "baseline", 0))])
    before = ledger.read_bytes()
    run = here / "runs" / "studies" / "t" / key_of(study, "baseline", 1)
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(record("x/y/z/seed1", seed=1)["result"]))

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError, match=r"^cannot write .*bench/t\.runs\.jsonl \(\d+ bytes\): No space left"):
        write_ledger(study, here / "runs" / "studies" / "t", ledger)
    assert ledger.read_bytes() == before and [p.name for p in ledger.parent.iterdir()] == ["t.runs.jsonl"]


def _doc(**over):
    doc = parse_study.__globals__["tomllib"].loads(STUDY)
    doc.update(over)
    return doc


@pytest.mark.parametrize("over, message", [
    ({"name": "../../../x"}, "name: '../../../x' must be a name of letters, digits"),
    ({"name": "/abs"}, "name: '/abs' must be a name"),
    ({"report": "/tmp/victim.json"}, "report: '/tmp/victim.json' must be a relative path under . (no '..', not absolute)"),
    ({"report": "../victim.json"}, "report: '../victim.json' must be a relative path"),
    ({"report": "bench/victim.txt"}, "report: 'bench/victim.txt' must end in .json"),
    ({"report": 5}, "report: must be a string (got int)"),
    ({"report": None, "trend": "/x.json"}, "trend: '/x.json' must be a relative path"),
    ({"report": None, "point_reports": "../out", "points": [{"name": "p", "axis": "size"}]},
     "point_reports: '../out' must be a relative path"),
    ({"report": None, "points": [{"name": "../p", "axis": "size"}]}, "points[0].name: '../p' must be a name"),
    ({"rows": [{"name": "r", "arm": ["two_site"]}]}, "rows[0].arm: must be a string (got list)"),
    ({"preset": ["smoke"]}, "preset: ['smoke'] is not a preset"),
    ({"seeds": [2 ** 63]}, "seeds: must be a non-empty list of at most 1000 seeds (whole numbers in [0, 2^32))"),
    ({"set": {"data.tune_fraction": "0.05", "x": {"y": 1}}}, "set.x: must be a string, number or true/false"),
])
def test_study_paths_types_and_seeds_are_refused_in_one_line(here, over, message):
    with pytest.raises(StudyError) as e:
        parse_study(_doc(**over))
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_report_path_through_a_symbolic_link_is_refused(here):
    (here / "linked").symlink_to(here / "bench", target_is_directory=True)
    with pytest.raises(StudyError, match=r"report: linked is a symbolic link"):
        parse_study(_doc(report="linked/t.json"))


def test_inf_in_a_knob_and_a_study_nested_100k_deep_are_one_line(here):
    doc = _doc()
    doc["arms"]["baseline"]["grid"] = {"width": [float("inf")]}
    doc["arms"]["two_site"]["grid"] = {"width": [64]}
    with pytest.raises(StudyError, match=r"^arms\.baseline: .*") as e:
        parse_study(doc)
    assert "\n" not in str(e.value)
    deep = here / "deep.toml"
    deep.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(StudyError, match=r"deep\.toml: nested too deeply to be a study file$"):
        load_study(deep)


def test_an_oversized_grid_is_refused_before_any_trial_is_expanded(here):
    """A grid of 1,000 trials per arm took 132 s to dry-run (every trial expanded at load) and 10^6 loaded for hours
    with no output. The trial count comes from the grid's sizes, before anything is expanded."""
    doc = _doc()
    grid = {"optim.lr": [f"{i}e-4" for i in range(1, 11)], "optim.weight_decay": [f"0.0{i}" for i in range(10)],
            "optim.warmup_steps": [str(i) for i in range(10)]}
    doc["arms"]["baseline"]["grid"] = grid
    doc["arms"]["two_site"]["grid"] = grid
    t0 = time.perf_counter()
    with pytest.raises(StudyError, match=r"arms\.baseline\.grid: the grids make at least 1,000 trials .*over the "
                                         r"limit of 512; refused before expanding any"):
        parse_study(doc)
    assert time.perf_counter() - t0 < 1.0


def test_the_study_dry_run_makes_run_dry_runs_checks_memory_included(here, monkeypatch, capsys):
    """``[set] model.seq_len = "200000"`` was refused by ``run --dry-run`` (a step needs more memory than is free)
    while ``study run --dry-run`` went on to allocate it. The study's dry run now checks every distinct config the
    way a run does before it times anything."""
    from islands_kit.train import preflight

    timed = []
    monkeypatch.setattr(command, "estimate_within", lambda cfg: timed.append(cfg) or _Est())
    monkeypatch.setattr(preflight, "available_memory", lambda device: 1 << 30)  # this machine: 1 GiB free
    (here / "t.toml").write_text(STUDY.replace('"data.tune_fraction" = "0.05"',
                                               '"data.tune_fraction" = "0.05"\n"model.seq_len" = "200000"'))
    assert main(["study", "run", "t.toml", "--dry-run"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("islands-kit study: baseline ((defaults)): ") and "model.seq_len" in out, out
    assert len(out.strip().splitlines()) == 1 and timed == []


def test_study_report_restores_nothing_into_runs(here, capsys):
    """``study report`` restored the ledger's runs into runs/ as stub result.json files, after which ``compare runs``
    failed. It reads them in a scratch copy: runs/ is left as it was."""
    study = load_study("t.toml")
    write_lines(here / "bench" / "t.runs.jsonl", [record(key_of(study, "baseline", s), seed=s) for s in range(3)])
    assert main(["study", "report", "t.toml"]) == 0
    assert "2.5000 / 2.5000 / 2.5000" in capsys.readouterr().out  # the ledger's runs were read
    assert not (here / "runs").exists()


def test_every_committed_study_and_ledger_loads_within_the_limits(monkeypatch, capsys):
    """The bounds leave room for what the project commits: every study file loads and every ledger line is
    believed (none skipped)."""
    monkeypatch.chdir(ROOT)
    studies = sorted((ROOT / "benchmarks" / "studies").rglob("*.toml"))
    ledgers = sorted((ROOT / "benchmarks").rglob("*.runs.jsonl"))
    assert studies and ledgers
    for p in studies:
        load_study(p.relative_to(ROOT))
    for p in ledgers:
        n = sum(1 for line in p.read_text().splitlines() if line.strip())
        assert len(read_ledger(p)) == n, p
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_a_dry_run_of_a_200000_byte_context_answers_within_a_minute(tmp_path, monkeypatch, capsys):
    """``run two_site --preset smoke --set model.seq_len=200000 --dry-run`` printed "valid" and then timed steps for
    over 5 minutes (over 10 minutes here). The timing runs in a child process stopped at its deadline, and says the
    figure is a lower bound."""
    monkeypatch.setenv("ISLANDS_KIT_DRY_RUN_BUDGET_S", "15")
    t0 = time.perf_counter()
    code = main(["run", "two_site", "--preset", "smoke", "--set", "model.seq_len=200000", "--dry-run",
                 "--out", str(tmp_path / "o")])
    spent = time.perf_counter() - t0
    out = capsys.readouterr().out
    if code == 2:  # a machine with less free memory than the step needs refuses before timing: also an answer
        assert spent < 60
        return
    assert code == 0 and spent < 60, (code, spent)
    assert "timing stopped after 15 s" in out and "a lower bound" in out, out


@pytest.mark.parametrize("content, rule", [
    (None, "over the limit of 67,108,864"),  # a sparse file past MAX_RESULT_BYTES: refused from its size, unread
    (b'{"final_val_bpb": 2.5', "Expecting"),  # torn
    (b"\xff\xfe{}", "utf-8"),
    (b"[1, 2]", "a JSON list, not an object"),
])
def test_a_run_result_that_is_too_big_torn_or_not_an_object_is_named_with_what_to_do(here, capsys, content, rule):
    """A run's result.json was read whole and unchecked (``json.loads(p.read_text())``): a 2 GB file was read into
    memory, a torn one raised a bare JSONDecodeError without its path. It is read within MAX_RESULT_BYTES and refused
    as a StudyError naming the file, the rule and the remedy; ``study status`` only asks whether it exists."""
    study = load_study("t.toml")
    run = Run(study.trials("baseline")[0], 0, study.preset, here / "runs" / "t" / BOX, "score")
    run.dir.mkdir(parents=True)
    p = run.dir / "result.json"
    if content is None:
        with open(p, "wb") as f:
            f.truncate((64 << 20) + 1)
    else:
        p.write_bytes(content)
    assert run.finished
    with pytest.raises(StudyError) as e:
        run.result()
    msg = str(e.value)
    assert str(p) in msg and rule in msg and f"remove {run.dir} to run it again" in msg
    assert msg.count(str(p)) == 1  # named once as the subject, not repeated by the rule


def test_a_torn_history_row_is_named_by_file_and_line_and_a_whole_one_read(here):
    """history.jsonl was parsed unchecked in two places (the report and the ledger); one bounded reader now."""
    study = load_study("t.toml")
    run = Run(study.trials("baseline")[0], 0, study.preset, here / "runs" / "t" / BOX, "score")
    assert run.history() == []
    run.dir.mkdir(parents=True)
    p = run.dir / "history.jsonl"
    p.write_text('{"step": 5, "val_bpb": 3.0}\n\n{"step": 10, "val_bpb": 2.9}\n')
    assert [r["step"] for r in run.history()] == [5, 10]
    p.write_text('{"step": 5, "val_bpb": 3.0}\n{"step": 10, "val_\n')
    with pytest.raises(StudyError, match=r"history\.jsonl: line 2: not a run's history\.jsonl \(Unterminated"):
        run.history()
    p.write_text('{"step": 5}\n7\n')
    with pytest.raises(StudyError, match=r"line 2: not a run's history\.jsonl \(a JSON int, not an object\); remove"):
        run.history()
