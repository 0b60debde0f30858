"""The files a finished run leaves in its folder, ``result.json`` last."""
from __future__ import annotations

from pathlib import Path

from islands_kit.io import RESULT_FILE, atomic_write_bytes
from islands_kit.records.tracking import Tracker, dumps_strict, write_json_atomic
from islands_kit.train import sampling
from islands_kit.train.experiment import Experiment
from islands_kit.train.result import Result

LINK_TIMELINE = "link_timeline.jsonl"  # one transfer per line: [start_s, end_s, bytes, src, dst, channel]


def write_outputs(exp: Experiment, out: Path, res: Result, tracker: Tracker | None = None) -> None:
    """A finished run's files: the final weights (every rank its islands' replicas, the writer the deployed model),
    history.jsonl, the link timeline and the figures, then (after every rank has written its files) result.json. A
    kill at any moment before that leaves a folder without result.json, which is visibly not a finished run (a
    re-run into it needs no ``--force``); every file is written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    sampling.save_final_models(out, exp.cfg, exp.step, {i: isl.model for i, isl in exp.islands.items()},
                               exp.deployed_model() if exp.is_writer else None)
    if exp.is_writer:
        atomic_write_bytes(out / "history.jsonl", "".join(dumps_strict(rec) + "\n" for rec in exp.history).encode())
        atomic_write_bytes(out / LINK_TIMELINE, "".join(dumps_strict(r) + "\n" for r in exp.link_timeline).encode())
        if tracker is not None:
            tracker.draw_figures(res, exp.history, exp.link_timeline)
    # torch.distributed: every rank's replicas are on disk before the run is marked finished; a strategy that goes on
    # without lost islands cannot wait for their ranks (dead or hung, and not every survivor knows which), so there
    # the writer marks the run finished once its own files are written
    if not exp.strategy.outlives_lost_islands:
        exp.transport.barrier()
    if exp.is_writer:
        write_json_atomic(out / RESULT_FILE, dict(res))
