"""Where a study's runs are made: ``local`` (each run an ``islands-kit run`` process on this box, ``runner.execute``),
``slurm`` (each run one Slurm job, submitted through submitit) or ``submitit-local`` (submitit's local executor: the
same job path as Slurm's, real processes on this box; what the tests use, since CI has no cluster).

A job runs ``runner.execute`` on its node, so a cluster run writes the same folder, takes the same ``run.lock`` and
lands in the same ledger and report as a local one. The submitting side records each job in its run's folder
(``job.json``: executor, job id, submitit folder, log paths) and holds nothing while it waits, so a re-run after the
submitting shell died attaches to a job still queued or running instead of submitting it again; a job that ended
without a result.json (failed, killed, timed out) is resubmitted, its record kept as ``job-<id>.json``.

A run's machine is where it ran. Runs are planned under the cluster's machine folder: ``[executor] machine`` when the
study names it, else the machine one short probe job reported (kept in ``OUT/.cluster/``, so it is asked once per
partition and constraint). A job that lands on another machine kind makes its run in that machine's folder (the
machine read on the node, and checked against the result.json's ``versions.machine``), notes it in the planned
folder (``landed.json``) and forgets the probe, so the report pairs each machine's runs on their own and a study
pinned to one partition or constraint is paired on it; the planned slot is submitted again on the next invocation.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from islands_kit.io import MAX_RESULT_BYTES, pid_alive, read_object
from islands_kit.protocol.runner import execute
from islands_kit.protocol.runs import Run, machine_folder, machine_slug, this_machine
from islands_kit.protocol.study import StudyError
from islands_kit.records.locks import LOCK_FILE, _start_time, acquire, holder, release

KINDS = ("local", "submitit-local", "slurm")
EXTRA = "pip install 'islands_kit[cluster]'"
JOB = "job.json"
LANDED = "landed.json"
SUBMIT_LOCK = "submit.lock"  # held only while a submitter checks a run's record and submits its job
_HOST = socket.gethostname()
# the [executor] table's fields and the command line's flags (None: the flag's name is the field's with dashes)
FIELDS: dict[str, type] = {"kind": str, "partition": str, "account": str, "time_min": int, "cpus_per_run": int,
                           "constraint": str, "mem_gb": int, "setup": list, "machine": str, "poll_s": float}
QUEUED = {"PENDING", "REQUEUED", "CONFIGURING", "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}


@dataclass(frozen=True)
class Settings:
    """Where the runs go and what a job asks the scheduler for (``time_min``: a job's time limit, one run)."""

    kind: str = "local"
    partition: str | None = None
    account: str | None = None
    time_min: int = 240
    cpus_per_run: int = 1
    constraint: str | None = None
    mem_gb: int | None = None
    setup: tuple[str, ...] = ()
    machine: str | None = None
    poll_s: float | None = None


def settings_from(table: dict[str, Any], cli: dict[str, Any], where: str = "[executor]") -> Settings:
    """The study file's ``[executor]`` table with the command line's values on top; StudyError naming the field."""
    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        raise StudyError(f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(FIELDS))})")
    merged = {**table, **{k: v for k, v in cli.items() if v is not None}}
    out: dict[str, Any] = {}
    for k, v in merged.items():
        want = FIELDS[k]
        ok = isinstance(v, want) and not isinstance(v, bool) if want is not float else isinstance(v, (int, float))
        if want is list:
            ok = isinstance(v, list) and all(isinstance(s, str) for s in v)
        if not ok:
            raise StudyError(f"{where}.{k}: must be {'a list of shell lines' if want is list else want.__name__} (got {v!r})")
        out[k] = tuple(v) if want is list else v
    if out.get("kind", "local") not in KINDS:
        raise StudyError(f"{where}.kind: {out['kind']!r} is not an executor (one of {', '.join(KINDS)})")
    for k in ("time_min", "cpus_per_run", "mem_gb"):
        if k in out and out[k] < 1:
            raise StudyError(f"{where}.{k}: must be at least 1 (got {out[k]})")
    if "poll_s" in out and not out["poll_s"] > 0:
        raise StudyError(f"{where}.poll_s: must be > 0 (got {out['poll_s']})")
    if "machine" in out:
        machine_folder(out["machine"])
    return Settings(**out)


def submitit_module(kind: str) -> Any:
    """submitit, or a one-line StudyError naming the extra that installs it."""
    try:
        import submitit
    except ImportError:
        raise StudyError(f"--executor {kind}: needs the 'cluster' extra (submitit), not installed here: {EXTRA}") from None
    return submitit


def write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


MAX_RECORD = 1 << 20  # bytes in a job, lock, probe or landed record: each holds a few hundred


def read_json(path: Path, limit: int = MAX_RECORD) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None where there is none to use: missing, over ``limit`` bytes (refused from its
    size, unread), torn, not UTF-8, or not an object. A record the runner cannot read is one it has not got."""
    try:
        return read_object(path, limit, "a record")
    except (OSError, ValueError):
        return None


def tail(path: Path | str | None, n: int = 1500) -> str:
    try:
        return Path(str(path)).read_text(errors="replace")[-n:] if path else ""
    except OSError:
        return ""


# -- what a job does on its node --------------------------------------------------------------------------------------
def probe_machine() -> str:
    """The machine folder name of the node this runs on (the probe job)."""
    return this_machine()


def run_on_node(run: Run) -> dict[str, Any] | None:
    """Make ``run`` on this node through ``runner.execute`` (its lock, settings.json, log.txt), in the folder of the
    machine it runs on; when that is not the planned one, ``landed.json`` in the planned folder says where it went."""
    here = this_machine()
    base = run.root.parent
    target = run if run.root.name == here else replace(run, root=base / here)
    res = execute(target)
    if res is not None:  # the machine the result.json records decides, should the node's view ever disagree
        recorded = machine_slug(str(res.get("versions", {}).get("machine", "")))
        if recorded != target.root.name:
            moved = replace(run, root=base / recorded)
            if not moved.dir.exists():
                moved.dir.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(target.dir), str(moved.dir))
            target = moved
    if target is not run:
        run.dir.mkdir(parents=True, exist_ok=True)
        write_json(run.dir / LANDED, {"machine": target.root.name, "dir": str(target.dir), "host": _HOST})
    return res


# -- the submitting side ----------------------------------------------------------------------------------------------
class Cluster:
    """Runs as scheduler jobs (``slurm`` or ``submitit-local``): ``execute`` is the runner's ``execute_run``."""

    def __init__(self, settings: Settings, folder: Path, say: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.folder = Path(folder).resolve()  # OUT/.cluster: the probe's answer and submitit's job folders
        self.say = say
        self.submitit = submitit_module(settings.kind)
        self.poll_s = settings.poll_s or (30.0 if settings.kind == "slurm" else 1.0)
        self._lock = threading.Lock()  # one executor, parameters updated per job: one submission at a time
        self._executor: Any = None
        self._jobs: dict[str, Any] = {}  # this invocation's submitit jobs: a local one's process is reaped through it

    # the scheduler's view
    def params(self, name: str) -> dict[str, Any]:
        """The job's scheduler parameters (submitit's names; for Slurm, the sbatch options)."""
        s = self.settings
        if s.kind == "submitit-local":
            return {"timeout_min": s.time_min, "name": name}
        p: dict[str, Any] = {"job_name": name, "time": s.time_min, "cpus_per_task": s.cpus_per_run, "nodes": 1,
                             "ntasks_per_node": 1}
        p.update({k: v for k, v in (("partition", s.partition), ("account", s.account), ("constraint", s.constraint))
                  if v is not None})
        if s.mem_gb is not None:
            p["mem"] = f"{s.mem_gb}GB"
        if s.setup:
            p["setup"] = list(s.setup)
        return p

    def sbatch_text(self, name: str) -> str:
        """The sbatch file a Slurm job of this study would be submitted with (made without a cluster)."""
        from submitit.slurm.slurm import _make_sbatch_string

        jobs = self.folder / "jobs" / "%j"  # as SlurmExecutor._submitit_command_str writes it
        cmd = f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {shlex.quote(str(jobs))}"
        return _make_sbatch_string(command=cmd, folder=jobs, **self.params(name))

    def _make_executor(self) -> Any:
        if self._executor is None:
            jobs = self.folder / "jobs" / "%j"
            if self.settings.kind == "slurm":
                self._executor = self.submitit.SlurmExecutor(folder=jobs)
            else:
                self._executor = self.submitit.LocalExecutor(folder=jobs)
        return self._executor

    def submit(self, name: str, fn: Callable[..., Any], *args: Any, minutes: int | None = None) -> dict[str, Any]:
        """Submit ``fn(*args)`` as one job (``minutes``: its own time limit); its record (what ``state`` and a later
        invocation need)."""
        params = self.params(name)
        if minutes is not None:
            params["timeout_min" if self.settings.kind == "submitit-local" else "time"] = minutes
        with self._lock:
            ex = self._make_executor()
            ex.update_parameters(**params)
            job = ex.submit(fn, *args)
            self._jobs[str(job.job_id)] = job
        rec = {"executor": self.settings.kind, "job_id": str(job.job_id), "folder": str(self.folder / "jobs" / "%j"),
               "stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr), "name": name, "host": _HOST,
               "submitted": time.time()}
        if self.settings.kind == "submitit-local":  # the job is its controller process: pid and start time
            rec["started"] = _start_time(int(job.job_id))
        return rec

    def state(self, rec: dict[str, Any]) -> str:
        """``queued``, ``running`` or ``ended`` (however it ended) for a job record."""
        if rec.get("executor") == "submitit-local":
            job = self._jobs.get(str(rec["job_id"]))
            if job is not None:  # polls (and so reaps) the controller this process started
                return "running" if job.state == "RUNNING" else "ended"
            pid = int(rec["job_id"])
            if rec.get("host") != _HOST:
                return "running"  # another host's process cannot be judged from here
            alive = pid_alive(pid) and _start_time(pid) in ("", rec.get("started", ""))
            return "running" if alive and not _zombie(pid) else "ended"
        raw = str(self.submitit.SlurmJob(folder=rec["folder"], job_id=rec["job_id"]).state).split()[0].upper()
        if raw in QUEUED:
            return "queued"
        if raw in RUNNING:
            return "running"
        if raw == "UNKNOWN" and time.time() - float(rec.get("submitted", 0)) < 600:
            return "queued"  # sacct may not list a job in its first moments
        return "ended"

    # the runner's seam
    def execute(self, run: Run) -> dict[str, Any] | None:
        """Make ``run`` as a job (or attach to its job in flight) and wait for it; its result.json, None when another
        process is making it. A job that ended without a result raises with its log's tail, as a local run does."""
        done = run.result()
        if done is not None:
            return done
        run = replace(run, root=run.root.resolve())  # a node's working folder is not this shell's
        d = run.dir
        d.mkdir(parents=True, exist_ok=True)
        if acquire(d / SUBMIT_LOCK) is not None:
            return None
        try:
            rec = read_json(d / JOB)
            st = self.state(rec) if rec is not None else None
            if rec is not None and st in ("queued", "running"):
                self.say(f"attach {run.trial.arm} seed {run.seed}: job {rec['job_id']} {st} ({self.settings.kind})")
            else:
                if (done := run.result()) is not None:
                    return done
                if holder(d / "run.lock") is not None and (rec is None or _lock_host(d / "run.lock") == _HOST):
                    return None  # a live process here (a local runner) is making it
                if rec is not None:  # ended without a result: keep its record, clear what its process left
                    os.replace(d / JOB, d / f"job-{rec['job_id']}.json")
                    if (d / LANDED).exists():
                        os.replace(d / LANDED, d / f"landed-{rec['job_id']}.json")
                    clear_locks(d)
                rec = self.submit(job_name(run), run_on_node, run)
                write_json(d / JOB, rec)
                self.say(f"submit {run.trial.arm} seed {run.seed}: job {rec['job_id']} ({self.settings.kind})")
        finally:
            release(d / SUBMIT_LOCK)
        return self.wait(run, rec)

    def wait(self, run: Run, rec: dict[str, Any]) -> dict[str, Any] | None:
        while self.state(rec) != "ended":
            time.sleep(self.poll_s)
        for _ in range(10):  # a shared filesystem may show a node's files a moment late
            res = run.result()
            res = landed_result(run) if res is None else res
            if res is not None:
                if (run.dir / LANDED).exists():
                    self.forget_machine()
                    self.say(f"moved {run.trial.arm} seed {run.seed}: ran on {read_json(run.dir / LANDED) or {}}"
                             f" — filed there; pin a partition or constraint to keep a study on one machine kind")
                return res
            if holder(run.dir / "run.lock") is not None and _lock_host(run.dir / "run.lock") == _HOST:
                return None  # a live local runner here is making it (a node's lock is the ended job's own)
            time.sleep(min(self.poll_s, 1.0))
        log = run.dir / "log.txt"
        where = log if log.is_file() else rec.get("stderr")
        raise RuntimeError(f"{run.trial.arm} seed {run.seed} ({run.trial.describe()}) failed in job {rec['job_id']} "
                           f"({self.settings.kind}), see {where}:\n{tail(where)}")

    # the cluster's machine
    def known_machine(self) -> str | None:
        return known_machine(self.settings, self.folder)

    def machine(self) -> str:
        """The machine folder the study's jobs are planned under: known, or asked of one short probe job."""
        known = self.known_machine()
        if known is not None:
            return known
        self.folder.mkdir(parents=True, exist_ok=True)
        rec = self.submit("islands-kit-probe", probe_machine, minutes=min(10, self.settings.time_min))  # short: starts soon
        self.say(f"probe: job {rec['job_id']} asks the {self.settings.kind} nodes which machine they are")
        try:
            value = self._jobs[rec["job_id"]].result()
        except Exception as e:  # submitit's FailedJobError / UncompletedJobError carry the job's traceback or log
            raise StudyError(f"probe job {rec['job_id']} failed ({self.settings.kind}): {str(e)[-1500:]}") from None
        machine = machine_folder(str(value))
        write_json(probe_file(self.settings, self.folder), {"machine": machine, "job_id": rec["job_id"], "settings": self.params("probe")})
        return machine

    def forget_machine(self) -> None:
        if self.settings.machine is None:
            probe_file(self.settings, self.folder).unlink(missing_ok=True)


def probe_file(s: Settings, folder: Path) -> Path:
    """Where the probe's answer for these scheduler settings is kept (one per partition, constraint and account)."""
    key = hashlib.sha256(json.dumps([s.kind, s.partition, s.constraint, s.account]).encode()).hexdigest()[:12]
    return Path(folder) / f"machine-{key}.json"


def known_machine(s: Settings, folder: Path) -> str | None:
    """The machine a study's jobs run on, if known without a job: the study's ``machine``, or an earlier probe's."""
    if s.machine is not None:
        return s.machine
    doc = read_json(probe_file(s, folder))
    return str(doc["machine"]) if doc and isinstance(doc.get("machine"), str) else None


def job_name(run: Run) -> str:
    return f"ik-{run.trial.arm}-s{run.seed}"[:60]


def landed_result(run: Run) -> dict[str, Any] | None:
    """The result of ``run`` made in another machine's folder (``landed.json``), if it finished there."""
    doc = read_json(run.dir / LANDED)
    if doc is None:
        return None
    return read_json(Path(str(doc.get("dir", ""))) / "result.json", MAX_RESULT_BYTES)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _lock_host(lock: Path) -> str | None:
    doc = read_json(lock)
    return str(doc.get("host")) if doc else None


def clear_locks(d: Path) -> None:
    """Remove the locks a job's process left in run folder ``d`` once the scheduler says that job is over: a lock from
    another host cannot be judged by ``locks.holder`` (a live holder on this host is kept)."""
    for lock in (d / "run.lock", d / LOCK_FILE):
        if lock.exists() and (_lock_host(lock) != _HOST or holder(lock) is None):
            lock.unlink(missing_ok=True)


def make_executor(kind: str, settings: Settings, folder: Path,
                  say: Callable[[str], None] = print) -> Callable[[Run], dict[str, Any] | None] | Cluster:
    """``runner.execute`` for ``local``, else a ``Cluster`` (submitit imported here: the extra's error is raised now)."""
    if kind == "local":
        return execute
    return Cluster(replace(settings, kind=kind), folder, say)
