"""Where a study's runs are made (islands_kit/protocol/executor.py): the ``[executor]`` table and flags, the missing
extra's one-line error, the Slurm dry run's sbatch parameters, a Slurm submission recorded and attached to rather than
submitted twice (a stand-in ``sbatch``/``sacct`` on PATH), and submitit's local executor on real smoke studies: a job
killed mid-run and the submitter killed, then resumed with nothing submitted twice; the same report as ``local``."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from islands_kit.cli import main
from islands_kit.protocol import executor as executor_mod
from islands_kit.protocol.executor import JOB, Cluster, Settings, settings_from
from islands_kit.protocol.runs import Run, machine_slug
from islands_kit.protocol.study import StudyError, load_study, parse_study

pytest.importorskip("submitit")  # the 'cluster' extra (scripts/setup.sh installs it)

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "studies" / "tiny.toml"
BOX = machine_slug("torch x | AVX512 | test box")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}


def two_arm_study(tmp: Path, executor: str = "") -> Path:
    """Two arms, one trial each, seeds 0-1: four smoke runs of 12 steps."""
    p = tmp / "two.toml"
    p.write_text(f"""name = "two"
preset = "smoke"
seeds = [0, 1]
tune_seeds = [0]
[set]
"data.tune_fraction" = "0.05"
steps = "12"
eval_every = "6"
[arms.baseline]
experiment = "baseline"
grid = {{ batch = ["20"] }}
[arms.two_site]
experiment = "two_site"
ref = "baseline"
grid = {{ "optim.lr" = ["6e-3"] }}
{executor}""")
    return p


def test_the_executor_table_is_checked_and_the_flags_go_on_top():
    doc = {"name": "t", "preset": "smoke", "seeds": [0], "arms": {"b": {"experiment": "baseline"}}, "set": {"data.tune_fraction": "0.05"},
           "executor": {"kind": "slurm", "partition": "cpu", "time_min": 90, "setup": ["module load python"]}}
    study = parse_study(doc)
    s = settings_from(study.executor, {"partition": "big", "cpus_per_run": None}, "s.toml: executor")
    assert (s.kind, s.partition, s.time_min, s.setup) == ("slurm", "big", 90, ("module load python",))
    for bad, rule in [({"partitoin": "x"}, r"executor: unknown field\(s\) partitoin"),
                      ({"time_min": "90"}, r"executor\.time_min: must be int"),
                      ({"kind": "pbs"}, r"executor\.kind: 'pbs' is not an executor"),
                      ({"cpus_per_run": 0}, r"executor\.cpus_per_run: must be at least 1"),
                      ({"machine": "My Box"}, r"machine: 'My Box' is not a machine folder name")]:
        with pytest.raises(StudyError, match=rule):
            settings_from(bad, {}, "s.toml: executor")
    with pytest.raises(StudyError, match=r"executor: must be a table"):
        parse_study({**doc, "executor": "slurm"})


@pytest.mark.parametrize("extra", [[], ["--dry-run"]])
def test_slurm_without_the_cluster_extra_is_one_line_naming_it(tmp_path, monkeypatch, capsys, extra):
    monkeypatch.setitem(sys.modules, "submitit", None)  # `import submitit` raises ImportError, as when not installed
    code = main(["study", "run", str(TINY), "--out", str(tmp_path), "--executor", "slurm", *extra])
    out = capsys.readouterr().out
    assert code == 2 and out.count("\n") == 1
    assert "'cluster' extra" in out and "pip install 'islands_kit[cluster]'" in out
    assert not any(tmp_path.iterdir())  # nothing planned, nothing submitted


def test_the_slurm_dry_run_prints_each_submission_and_its_sbatch_parameters(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("islands_kit.protocol.command.estimate_within", lambda cfg: SimpleNamespace(total_s=60.0, cut_s=None))
    study = two_arm_study(tmp_path, '[executor]\nkind = "slurm"\npartition = "cpu"\naccount = "lab"\ntime_min = 90\n'
                                    'constraint = "avx512"\nsetup = ["module load python/3.11"]\n')
    out_dir = tmp_path / "runs"
    code = main(["study", "run", str(study), "--out", str(out_dir), "--dry-run", "--cpus-per-run", "2",
                 "--partition", "big"])
    out = capsys.readouterr().out
    assert code == 0
    for line in ["#SBATCH --partition=big", "#SBATCH --account=lab", "#SBATCH --time=90", "#SBATCH --cpus-per-task=2",
                 "#SBATCH --constraint=avx512", "#SBATCH --job-name=ik-baseline-s0", "module load python/3.11",
                 "srun --unbuffered"]:
        assert line in out, line
    submits = [ln for ln in out.splitlines() if "would submit" in ln]
    assert len(submits) == 2 and all("islands_kit run" in ln and "--set seed=0" in ln for ln in submits)
    # the seed-1 scores wait for the picks the tuning runs make: listed, not submitted (their cost is counted)
    waiting = [ln for ln in out.splitlines() if ln.startswith("  waiting     score")]
    assert len(waiting) == 2 and all("seed 1: the pick it needs is not known yet" in ln for ln in waiting)
    assert "2 jobs to submit (slurm)" in out and "not probed yet" in out and "4 runs" in out
    assert not out_dir.exists()  # a dry run writes nothing and submits nothing


def test_a_record_is_read_within_its_limit_and_one_unfit_to_use_is_none(tmp_path):
    """Job, lock, probe and landed records were read whole (``path.read_text()``): a multi-GB file there was read into
    memory by ``study status``. Each is read within ``MAX_RECORD`` bytes (a landed result within MAX_RESULT_BYTES);
    past it, torn, UTF-16 or not an object, it is none."""
    p = tmp_path / JOB
    p.write_text(json.dumps({"job_id": "7", "pad": "x" * 1000}))
    assert executor_mod.read_json(p)["job_id"] == "7"
    with open(p, "ab") as f:
        f.truncate(executor_mod.MAX_RECORD + 1)  # sparse: the size alone refuses it
    assert executor_mod.read_json(p) is None
    for bad in (b'{"job_id": "7"', b"\xff\xfe{\x00}\x00", b"[1]", b"[" * 100_000):
        p.write_bytes(bad)
        assert executor_mod.read_json(p) is None, bad[:10]
    assert executor_mod.read_json(tmp_path / "missing.json") is None


def test_status_names_each_runs_state_and_a_failed_ones_log_tail(tmp_path):
    from islands_kit.protocol.status import Jobs, show_status
    from islands_kit.records.locks import _start_time, acquire, release

    study = load_study(two_arm_study(tmp_path))
    root = tmp_path / "runs" / BOX
    runs = [Run(t, s, study.preset, root, "tune") for t in (study.trials("baseline")[0], study.trials("two_site")[0])
            for s in (0, 1)]
    runs.append(Run(study.trials("baseline")[0], 2, study.preset, root, "score"))
    for r in runs:
        r.dir.mkdir(parents=True)
    runs[0].dir.joinpath("result.json").write_text("{}")
    runs[1].dir.joinpath("log.txt").write_text("step 3\nValueError: the config broke a rule\n")  # a local run that failed
    me = {"pid": os.getpid(), "host": os.uname().nodename, "started": _start_time(os.getpid())}
    assert acquire(runs[2].dir / "run.lock") is None  # a local runner making it (this process holds the lock)
    err = tmp_path / "job.err"
    err.write_text("srun: error: node7: task 0: Killed\n")
    dead = {"executor": "submitit-local", "job_id": str(2 ** 22 + 4321), "host": os.uname().nodename, "started": "1",
            "stderr": str(err), "folder": str(tmp_path / "jobs" / "%j")}
    runs[3].dir.joinpath(JOB).write_text(json.dumps(dead))  # a job gone without a result.json
    alive = {**dead, "job_id": str(os.getpid()), "started": me["started"]}
    runs[4].dir.joinpath(JOB).write_text(json.dumps(alive))  # a job whose process is live
    lines: list[str] = []
    counts = show_status([("two on box", runs)], Jobs(tmp_path / ".cluster"), say=lines.append)
    assert counts == {"finished": 1, "failed": 2, "running": 2}
    text = "\n".join(lines)
    assert "the config broke a rule" in text and "task 0: Killed" in text and f"job {os.getpid()} (submitit-local)" in text
    release(runs[2].dir / "run.lock")
    runs[4].dir.joinpath("run.lock").unlink(missing_ok=True)
    runs[4].dir.joinpath(JOB).unlink()
    assert show_status([("h", runs[4:])], Jobs(tmp_path / ".cluster"), say=lambda s: None) == {"not started": 1}


def test_the_status_total_is_the_planned_machines_and_another_folder_only_adds_its_finished_count(tmp_path, monkeypatch, capsys):
    """Every machine's folder plans the whole study. The total once summed them: the headline's status said "52 not
    started" where 21 were left on its machine, the rest planned in an older box's folder that will run nothing."""
    from islands_kit.protocol.command import all_runs, status_command

    study = load_study(two_arm_study(tmp_path))
    base = tmp_path / "runs"
    other = machine_slug("torch x | AVX2 | an older box")
    for machine, n in ((BOX, 1), (other, 2)):
        for r in [r for r in all_runs(study, base, machine) if not r.stand_in][:n]:
            r.dir.mkdir(parents=True)
            r.dir.joinpath("result.json").write_text("{}")
    monkeypatch.setattr("islands_kit.protocol.command.this_machine", lambda: BOX)
    assert status_command(study, base, Settings()) == 0
    out = capsys.readouterr().out
    assert f"two on {BOX}: 1 finished, 1 not started, 2 waiting" in out
    assert f"two on {other}: 2 finished, 2 waiting" in out
    assert out.rstrip().splitlines()[-1] == f"study two on {BOX}: 1 finished, 1 not started, 2 waiting; {other}'s folder: 2 finished"


def test_a_run_waiting_for_a_pick_is_waiting_even_where_its_stand_in_has_a_result(tmp_path, monkeypatch):
    """Before an arm's pick is made its scoring runs are planned with its first trial standing in (for the count and
    the cost). A result.json in that trial's folder (an older protocol's run, another study's) is not the score: the
    status said "finished" for it, and the dry run counted it done."""
    from islands_kit.protocol.command import all_runs, dry_run
    from islands_kit.protocol.status import Jobs, show_status

    monkeypatch.setattr("islands_kit.protocol.command.estimate_within", lambda cfg: SimpleNamespace(total_s=60.0, cut_s=None))
    study = load_study(two_arm_study(tmp_path))
    base = tmp_path / "runs"
    runs = all_runs(study, base, BOX)
    waits = [r for r in runs if r.stand_in]
    assert sorted((r.phase, r.trial.arm, r.seed) for r in waits) == [("score", "baseline", 1), ("score", "two_site", 1)]
    stale = next(r for r in waits if r.trial.arm == "baseline")
    stale.dir.mkdir(parents=True)
    stale.dir.joinpath("result.json").write_text(json.dumps({"final_val_bpb": 2.0}))
    lines: list[str] = []
    counts = show_status([("two", all_runs(study, base, BOX))], Jobs(tmp_path / ".cluster"), say=lines.append)
    assert counts == {"not started": 2, "waiting": 2}
    assert "  waiting     score baseline seed 1 (batch=20): the pick it needs is not known yet" in "\n".join(lines)
    said: list[str] = []
    got = dry_run(study, base, say=said.append, machine=BOX)
    assert (got["finished"], got["left"]) == (0, 4)


def test_a_job_on_another_machine_kind_files_its_run_under_that_machine(tmp_path, monkeypatch):
    import islands_kit.protocol.executor as ex
    from islands_kit.protocol.runs import this_machine
    from islands_kit.train.result import machine_fingerprint

    study = load_study(two_arm_study(tmp_path))
    base = tmp_path / "runs"
    recorded = {"fp": machine_fingerprint()}

    def fake_execute(run: Run):  # what runner.execute leaves: the run's folder with its result.json
        run.dir.mkdir(parents=True, exist_ok=True)
        res = {"final_val_bpb": 1.25, "versions": {"machine": recorded["fp"]}}
        run.dir.joinpath("result.json").write_text(json.dumps(res))
        return res

    monkeypatch.setattr(ex, "execute", fake_execute)
    planned = Run(study.trials("baseline")[0], 0, study.preset, base / BOX, "tune")  # the probe said BOX; the node is not
    assert ex.run_on_node(planned)["final_val_bpb"] == 1.25
    here = Run(planned.trial, 0, study.preset, base / this_machine(), "tune")
    assert here.result() is not None and planned.result() is None
    assert json.loads((planned.dir / ex.LANDED).read_text())["machine"] == this_machine()
    # result.json's machine decides: a run whose result names another machine than the node's view is moved there
    recorded["fp"] = "torch 9 | AVX2 | x86_64 other box | flags 0"
    other = Run(study.trials("two_site")[0], 0, study.preset, base / BOX, "tune")
    ex.run_on_node(other)
    moved = Run(other.trial, 0, study.preset, base / machine_slug(recorded["fp"]), "tune")
    assert moved.result() is not None and not Run(other.trial, 0, study.preset, base / this_machine(), "tune").dir.exists()
    # the submitter takes the landed result, says where it went, and forgets the probe's answer
    settings = Settings(kind="submitit-local", poll_s=0.01)
    cluster = Cluster(settings, base / ".cluster", say=lambda s: None)
    probe = ex.probe_file(settings, cluster.folder)
    probe.parent.mkdir(parents=True)
    probe.write_text(json.dumps({"machine": BOX}))
    gone = {"executor": "submitit-local", "job_id": str(2 ** 22 + 4321), "host": os.uname().nodename, "started": "1"}
    assert cluster.known_machine() == BOX
    assert cluster.wait(planned, gone)["final_val_bpb"] == 1.25
    assert cluster.known_machine() is None


FAKE_SLURM = {
    "srun": "#!/bin/sh\nexit 0\n",
    # records the sbatch file it was given and answers as Slurm does
    "sbatch": "#!/bin/sh\nn=$(cat \"$FAKE_SLURM/next\" 2>/dev/null || echo 100)\necho $((n+1)) > \"$FAKE_SLURM/next\"\n"
              "for a in \"$@\"; do f=$a; done\ncp \"$f\" \"$FAKE_SLURM/sbatch-$n.sh\"\necho \"Submitted batch job $n\"\n",
    # every job in the state the test wrote for it (PENDING until then)
    "sacct": "#!/bin/sh\necho 'JobID|State|NodeList'\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -j ]; then "
             "s=$(cat \"$FAKE_SLURM/state-$2\" 2>/dev/null || echo PENDING); echo \"$2|$s|node1\"; shift; fi; shift; done\n",
}


@pytest.fixture()
def fake_slurm(tmp_path, monkeypatch):
    d = tmp_path / "fake-slurm"
    d.mkdir()
    for name, text in FAKE_SLURM.items():
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(d))
    return d


@pytest.mark.slow
def test_a_slurm_job_is_recorded_attached_to_by_a_second_submitter_and_resubmitted_only_once_it_failed(tmp_path, fake_slurm):
    # slow: submitit's shared sacct watcher looks again every 2 s at best
    study = load_study(two_arm_study(tmp_path))
    settings = Settings(kind="slurm", partition="cpu", machine=BOX, poll_s=0.05)
    run = Run(study.trials("baseline")[0], 0, study.preset, tmp_path / "runs" / BOX, "tune")
    got: list = []

    def submitter() -> None:
        got.append(Cluster(settings, tmp_path / "runs" / ".cluster", say=lambda s: None).execute(run))

    first = threading.Thread(target=submitter, daemon=True)
    first.start()
    deadline = time.time() + 30
    while not (run.dir / JOB).exists() and time.time() < deadline:
        time.sleep(0.05)
    rec = json.loads((run.dir / JOB).read_text())
    assert rec["executor"] == "slurm" and rec["job_id"] == "100"
    assert "#SBATCH --partition=cpu" in (fake_slurm / "sbatch-100.sh").read_text()
    # the submitting shell is gone (its thread still waits): a second one finds job 100 queued and attaches
    second = threading.Thread(target=submitter, daemon=True)
    second.start()
    time.sleep(1.0)
    assert sorted(p.name for p in fake_slurm.glob("sbatch-*.sh")) == ["sbatch-100.sh"]
    (fake_slurm / "state-100").write_text("RUNNING")
    time.sleep(0.5)
    run.dir.joinpath("result.json").write_text(json.dumps({"final_val_bpb": 1.5, "versions": {"machine": "x"}}))
    (fake_slurm / "state-100").write_text("COMPLETED")
    first.join(30)
    second.join(30)
    assert got == [{"final_val_bpb": 1.5, "versions": {"machine": "x"}}] * 2
    assert sorted(p.name for p in fake_slurm.glob("sbatch-*.sh")) == ["sbatch-100.sh"]

    # a job that fails: its log's tail reaches the submitter; the next invocation submits the run again
    other = Run(study.trials("two_site")[0], 0, study.preset, tmp_path / "runs" / BOX, "tune")
    err = tmp_path / "runs" / ".cluster" / "jobs" / "101" / "101_0_log.err"
    err.parent.mkdir(parents=True)
    err.write_text("Traceback ...\nRuntimeError: the node ran out of disk\n")
    errors: list[str] = []

    def failing() -> None:
        try:
            Cluster(settings, tmp_path / "runs" / ".cluster", say=lambda s: None).execute(other)
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=failing, daemon=True)
    t.start()
    deadline = time.time() + 30
    while (executor_mod.read_json(other.dir / JOB) or {}).get("job_id") != "101" and time.time() < deadline:
        time.sleep(0.05)
    # the job started on node7, took the run's lock and died there: its lock stays, the run fails with the log's tail
    other.dir.joinpath("run.lock").write_text(json.dumps({"pid": 4321, "host": "node7", "started": "1"}))
    (fake_slurm / "state-101").write_text("FAILED")
    t.join(30)
    assert len(errors) == 1 and re.search(r"(?s)failed in job 101 \(slurm\).*ran out of disk", errors[0])
    got.clear()
    done = threading.Thread(target=lambda: got.append(Cluster(settings, tmp_path / "runs" / ".cluster", say=lambda s: None)
                                                      .execute(other)), daemon=True)
    done.start()
    deadline = time.time() + 30
    while (executor_mod.read_json(other.dir / JOB) or {}).get("job_id") != "102" and time.time() < deadline:
        time.sleep(0.05)  # (the sbatch file is there a moment before the record)
    assert json.loads((other.dir / JOB).read_text())["job_id"] == "102"
    assert json.loads((other.dir / "job-101.json").read_text())["job_id"] == "101"  # the failed job's record kept
    assert not (other.dir / "run.lock").exists()  # the ended job's lock, from a node this host cannot judge, cleared
    other.dir.joinpath("result.json").write_text("{}")
    (fake_slurm / "state-102").write_text("COMPLETED")
    done.join(30)
    assert got == [{}]


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parts = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        kids.setdefault(int(parts[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _kill_tree(pid: int) -> None:
    """A node gone: the job's controller and every process under it, at once (as Slurm ends a job's cgroup)."""
    for p in _descendants(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _records(root: Path) -> dict[str, list[str]]:
    """Per run folder (its key): the job ids it was submitted as, oldest first."""
    out: dict[str, list[str]] = {}
    for f in sorted(root.glob("*/*/*/seed*/job*.json")):
        key = str(f.parent.relative_to(root))
        rec = json.loads(f.read_text())
        out.setdefault(key, []).append(rec["job_id"])
    return out


@pytest.mark.slow
def test_submitit_local_a_killed_job_and_a_killed_submitter_resume_without_submitting_twice(tmp_path):
    study = two_arm_study(tmp_path)
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "islands_kit", "study", "run", str(study), "--out", str(out), "--executor", "submitit-local",
           "--jobs", "2"]
    sub = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    training: list[Path] = []
    try:
        deadline = time.time() + 600
        # both tuning runs submitted and one of them training (its `islands-kit run` holds the output folder)
        while time.time() < deadline:
            jobs = list(out.glob("*/*/*/seed*/job.json"))
            training = [j for j in jobs if (j.parent / ".islands_kit.lock").exists()]
            if len(jobs) == 2 and training:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the submitter never had two jobs in flight")
    finally:
        victim = json.loads(training[0].read_text()) if training else {"job_id": "0"}
        if training:
            _kill_tree(int(victim["job_id"]))  # a job killed mid-run
        sub.kill()  # and the submitting shell
        sub.wait()
    survivor = next(j for j in jobs if j != training[0])
    before = json.loads(survivor.read_text())
    assert not (training[0].parent / "result.json").exists()
    # re-run: the survivor's job (running or finished) is attached to, the killed one's run submitted again
    again = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    records = _records(out)
    key = str(survivor.parent.relative_to(out))
    assert records[key] == [before["job_id"]]  # never submitted twice
    killed = str(training[0].parent.relative_to(out))
    assert len(records[killed]) == 2 and victim["job_id"] in records[killed]
    arm, seed = training[0].parent.parts[-3], training[0].parent.name.removeprefix("seed")
    assert f"submit {arm} seed {seed}: job {records[killed][-1]}" in again.stdout
    assert len(list(out.glob("*/*/*/seed*/result.json"))) == 4
    status = subprocess.run([sys.executable, "-m", "islands_kit", "study", "status", str(study), "--out", str(out)],
                            cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert re.search(r"study two on \S+: 4 finished$", status.stdout, re.M), status.stdout
    # a third invocation finds everything finished and submits nothing
    third = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert "0 runs made" in third.stdout and _records(out) == records


@pytest.mark.slow
def test_the_smoke_length_study_reports_bit_for_bit_the_same_through_submitit_local_as_locally(tmp_path):
    from islands_kit.io import dumps_strict
    from islands_kit.protocol.points import point_root, point_studies
    from islands_kit.protocol.report import make_report

    # the smoke length axis cut to its first point and one scoring seed: a study of points, tuning and scoring, in a
    # sixth of the runs (what submitit changes is how a run is started, not how many there are)
    text = (ROOT / "benchmarks" / "studies" / "smoke" / "scaling-length.toml").read_text()
    text = text.replace("seeds = [0, 1]", "seeds = [1]").split('[[points]]\nname = "s16"')[0]
    path = tmp_path / "scaling-length.toml"
    path.write_text(text)
    assert len(load_study(path).points) == 1
    docs = {}
    for kind in ("local", "submitit-local"):
        out = tmp_path / kind
        proc = subprocess.run([sys.executable, "-m", "islands_kit", "study", "run", str(path), "--out", str(out), "--executor",
                               kind, "--jobs", "2"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=3000)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        docs[kind] = [dumps_strict(make_report(sub, point_root(out, p), "cmd"), indent=1) for p, sub in point_studies(load_study(path))]
    assert all('"status": "done"' in d for d in docs["local"])
    assert docs["submitit-local"] == docs["local"]


def test_the_cli_offers_exactly_the_executors_the_runner_knows():
    from islands_kit.commands.subcommands import EXECUTORS
    from islands_kit.protocol.executor import KINDS

    assert EXECUTORS == KINDS
