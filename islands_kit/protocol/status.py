"""What a study's runs are doing: ``islands-kit study status FILE`` and the cluster dry run.

A run is finished (its result.json), queued or running (its job record's scheduler state, or a live ``run.lock`` of a
local runner), failed (a job that ended without a result.json, or a log.txt without one: the log's tail is shown), or
not started. A run that a job made in another machine's folder says where (``landed.json``). A run whose config waits
on a pick not made yet (an arm's scoring, equal-time and row runs, a later tuning rung's survivors) is waiting: its
arm's first trial stands in for it, and a folder that trial has from an earlier run does not make it finished.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from islands_kit.protocol.executor import JOB, LANDED, Cluster, Settings, landed_result, read_json, tail
from islands_kit.protocol.runs import Run
from islands_kit.records.locks import holder

STATES = ("finished", "queued", "running", "failed", "not started", "waiting")


class Jobs:
    """Asks the scheduler about job records (one ``Cluster`` per executor kind, made on first need)."""

    def __init__(self, folder: Path, settings: Settings | None = None) -> None:
        self.folder = folder
        self.settings = settings
        self._by_kind: dict[str, Cluster] = {}

    def cluster(self, kind: str) -> Cluster:
        if kind not in self._by_kind:
            base = self.settings if self.settings is not None and self.settings.kind == kind else Settings(kind=kind)
            self._by_kind[kind] = Cluster(base, self.folder, say=lambda s: None)
        return self._by_kind[kind]


def run_state(run: Run, jobs: Jobs) -> tuple[str, str]:
    """``(state, detail)`` of one run: the state one of ``STATES``, the detail its job, holder or log tail."""
    if run.stand_in:
        what = "the rung's survivors are" if run.phase == "tune" else "the pick it needs is"
        return "waiting", f"{what} not known yet (the arm's first trials stand in, for the count)"
    if run.finished:
        return "finished", ""
    rec = read_json(run.dir / JOB)
    if rec is not None:
        st = jobs.cluster(str(rec.get("executor"))).state(rec)
        job = f"job {rec.get('job_id')} ({rec.get('executor')})"
        if st != "ended":
            return st, job
        if landed_result(run) is not None:
            doc = read_json(run.dir / LANDED) or {}
            return "finished", f"{job} ran on {doc.get('machine')}: filed there, this machine's slot is open"
        log = run.dir / "log.txt"
        where = log if log.is_file() else rec.get("stderr")
        return "failed", f"{job} ended without a result.json; {where}:\n{tail(where, 600)}"
    owner = holder(run.dir / "run.lock")
    if owner is not None:
        return "running", owner
    if (run.dir / "log.txt").is_file():
        return "failed", f"{run.dir / 'log.txt'}:\n{tail(run.dir / 'log.txt', 600)}"
    return "not started", ""


def show_status(groups: list[tuple[str, list[Run]]], jobs: Jobs, say: Callable[[str], None] = print) -> Counter[str]:
    """One line per run (``groups``: a heading and its runs), failed ones with their log's tail; the counts."""
    counts: Counter[str] = Counter()
    for heading, runs in groups:
        states = [(r, *run_state(r, jobs)) for r in runs]
        here = Counter(s for _, s, _ in states)
        counts += here
        say(f"{heading}: " + ", ".join(f"{here[s]} {s}" for s in STATES if here[s]))
        for r, s, detail in states:
            first, _, rest = detail.partition("\n")
            say(f"  {s:<11} {r.phase:<5} {r.trial.arm} seed {r.seed} ({r.trial.describe()})" + (f": {first}" if first else ""))
            if rest:
                say("\n".join("      | " + line for line in rest.rstrip().splitlines()[-12:]))
    return counts


def show_submissions(runs: list[Run], cluster: Cluster, say: Callable[[str], None] = print) -> int:
    """The cluster dry run: the jobs a ``study run`` would submit now (a run whose job is queued or running is
    attached to, not submitted again), and the scheduler parameters each is submitted with; how many."""
    from islands_kit.protocol.executor import job_name

    jobs = Jobs(cluster.folder, cluster.settings)
    jobs._by_kind[cluster.settings.kind] = cluster
    n = 0
    for r in runs:
        st, detail = run_state(r, jobs)
        if st == "waiting":
            say(f"  waiting     {r.phase:<5} {r.trial.arm} seed {r.seed}: {detail}; submitted once it is known")
            continue
        if st in ("queued", "running", "finished"):
            say(f"  in flight   {r.phase:<5} {r.trial.arm} seed {r.seed}: {detail or st} (not submitted again)")
            continue
        n += 1
        say(f"  would submit {job_name(r)}: {' '.join(r.command())}")
    if runs:
        name = job_name(runs[0])
        if cluster.settings.kind == "slurm":
            say(f"each job's sbatch file (this one for {name}; scoring and row runs join as picks become known):")
            say("\n".join("    " + line for line in cluster.sbatch_text(name).splitlines() if line.strip()))
        else:
            say(f"each job: submitit's local executor, parameters {cluster.params(name)}")
    machine = cluster.known_machine()
    say(f"{n} jobs to submit ({cluster.settings.kind}); their machine folder: " +
        (machine or "not probed yet (the first `study run` submits one short probe job; planned here as this machine)"))
    return n
