"""A study's ledger: one line per finished run (``benchmarks/<study>.runs.jsonl``, beside its report), holding what
the report reads from the run — the figures, the machine, the evaluation curve on the simulated clock.

Run folders are scratch (kept out of git, lost with a machine); the ledger is committed with the report, so a study
resumes on a new checkout: ``islands-kit study run`` first restores every ledger run whose folder is missing (a
result.json marked ``restored_from`` and its history.jsonl), and a restored run is finished like any other. A line's
key is ``<machine>/<arm>/<hash>/seed<k>``: a run restored from another machine goes back into that machine's folder,
where it still counts as a tuning result (its arm is not tuned again) but is paired only with its own machine's runs.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from islands_kit.io import atomic_write_bytes, dumps_strict, finite
from islands_kit.protocol.runner import known_runs
from islands_kit.protocol.runs import Run, machines
from islands_kit.protocol.study import Study

KEYS = ("experiment", "preset", "seed", "final_val_bpb", "final_tune_bpb", "sim_wall_clock_s", "cross_site_bytes",
        "ddp_equivalent_bytes", "tokens", "steps", "params_active", "wall_time_s", "cpu_time_s", "versions",
        "compute_utilization", "ledger")  # ledger: the byte ledger's channels and directed links (a few dozen numbers)
HISTORY_KEYS = ("step", "tokens", "sim_time_s", "val_bpb", "final", "val_bpb_subset")


def ledger_path(study: Study) -> Path | None:
    return None if not study.report else Path(study.report).with_suffix(".runs.jsonl")


def ledger_key(run: Run) -> str:
    """``<machine>/<arm>/<hash>/seed<k>``: the run's folder under the study's folder."""
    return f"{run.root.name}/{run.key}"


def record_of(run: Run) -> dict[str, Any] | None:
    res = run.result()
    if res is None:
        return None
    hist = run.dir / "history.jsonl"
    rows = [json.loads(line) for line in hist.read_text().splitlines() if line.strip()] if hist.is_file() else []
    return finite({"key": ledger_key(run), "arm": run.trial.arm, "overrides": run.trial.overrides,
                   "result": {k: res[k] for k in KEYS if k in res},
                   "history": [{k: h[k] for k in HISTORY_KEYS if k in h} for h in rows if "val_bpb" in h]})


def read_ledger(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    return {r["key"]: r for r in (json.loads(line) for line in path.read_text().splitlines() if line.strip())}


def write_ledger(study: Study, base: Path, path: Path) -> int:
    """Add every finished run of ``study`` under ``base`` (every machine's) to the ledger at ``path`` (kept records
    stay); the count."""
    records = read_ledger(path)
    for machine in machines(base):
        for run in known_runs(study, base, machine)[0]:
            rec = record_of(run)
            if rec is not None:
                records[rec["key"]] = rec
    path.write_text("".join(dumps_strict(records[k]) + "\n" for k in sorted(records)))
    return len(records)


def restore(study: Study, base: Path, path: Path) -> int:
    """Write back every ledger run whose folder (under ``base``, in its machine's folder) has no result.json; how many
    were restored."""
    n = 0
    for key, rec in read_ledger(path).items():
        d = base / key
        if (d / "result.json").is_file():
            continue
        d.mkdir(parents=True, exist_ok=True)
        (d / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in rec["history"]))
        # result.json last and whole: a runner reading this folder meanwhile sees an unfinished run, never half a file
        atomic_write_bytes(d / "result.json", json.dumps({**rec["result"], "restored_from": str(path)}).encode())
        n += 1
    return n
