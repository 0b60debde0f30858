"""``run_experiment(config) -> Result``: train one experiment (baseline, two_site, eight_cell, ...) end to end.

The public entry point of the kit (the CLI, the notebooks, the benchmarks and the tests call it): preflight checks,
an optional resume, the run itself (``train/experiment.py``: the one loop, whatever the strategy), and its files
(``train/outputs.py``: ``result.json``, ``history.jsonl``, the link timeline, the weights and figures). Along the way
the writer process prints progress lines (``progress.Progress``) and logs to wandb (``tracking.Tracker``).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from islands_kit import kernels
from islands_kit.comm.transport import Transport
from islands_kit.config import ExperimentConfig
from islands_kit.io import OutputError, sweep_stale_temporaries
from islands_kit.records.locks import folder_lock
from islands_kit.records.tracking import Tracker, wandb_line
from islands_kit.sync.schedule import diloco_schedule
from islands_kit.train.checkpoint import load_checkpoint
from islands_kit.train.experiment import Experiment
from islands_kit.train.outputs import LINK_TIMELINE, write_outputs
from islands_kit.train.preflight import preflight
from islands_kit.train.progress import Progress, describe
from islands_kit.train.result import Diverged, Result, git_sha

__all__ = ["LINK_TIMELINE", "Diverged", "Experiment", "Result", "diloco_schedule", "git_sha", "run_experiment",
           "write_outputs"]


def run_experiment(cfg: ExperimentConfig, out_dir: str | Path | None = None,
                   transport: Transport | None = None, resume: str | Path | None = None) -> Result:
    """Train one experiment end to end; with ``out_dir`` write result.json and history.jsonl there.

    ``resume``: a folder (or file) holding a checkpoint of this same configuration; training continues from it and
    the result is bit-identical to an uninterrupted run. The checkpoint is read and checked before any work starts."""
    # output folder, corpus, device and memory: refused now rather than after training (the same checks as --dry-run)
    preflight(cfg, out_dir, len(transport.local_islands) if transport is not None else None)
    state = None
    if resume is not None:
        state = load_checkpoint(resume, transport)
    # the writer holds the folder for the run: a second run into it is refused while this one lives
    holds = out_dir is not None and (transport is None or transport.is_writer)
    with folder_lock(out_dir) if holds and out_dir is not None else contextlib.nullcontext():
        return _locked(cfg, out_dir, transport, state, resume)


def _locked(cfg: ExperimentConfig, out_dir: str | Path | None, transport: Transport | None,
            state: dict[str, Any] | None, resume: str | Path | None) -> Result:
    if out_dir is not None:  # a run killed mid-write in this folder left temporaries: they go now
        sweep_stale_temporaries(out_dir)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    # model.kernels = torch|triton forces the expert-GEMM and codec paths for this run only; auto leaves the choice to
    # $ISLANDS_KIT_KERNELS and to what the machine has
    backend = contextlib.nullcontext() if cfg.model.kernels == "auto" else kernels.set_backend(cfg.model.kernels)
    with backend:
        return _run(cfg, out_dir, transport, state, resume)


def _run(cfg: ExperimentConfig, out_dir: str | Path | None, transport: Transport | None,
         state: dict[str, Any] | None, resume: str | Path | None = None) -> Result:
    exp = Experiment(cfg, out_dir, transport)
    if state is not None:
        exp.load_state_dict(state)
    is_writer = exp.is_writer
    progress = exp.progress = Progress(f"{cfg.experiment} s{cfg.seed}", cfg.steps, exp.tokens_per_step, exp.step,
                                       quiet=not (cfg.progress and is_writer), eval_every=cfg.eval_every)
    tracker = Tracker(cfg, out_dir, resume=resume) if (out_dir and is_writer) else None
    progress.start(describe(cfg, out_dir))
    failed = True
    info = None
    try:
        res = exp.run(tracker)
        if out_dir:
            try:
                write_outputs(exp, Path(out_dir), res, tracker)
            except OutputError as e:  # the training is done: its figures go into the error rather than nowhere
                raise OutputError(f"{e}. The run itself finished ({_figures(res)}); {out_dir} holds no result.json, "
                                  "so it is not marked finished") from None
        if tracker is not None:  # wandb's summary and artifact (which holds result.json)
            tracker.finish(res, exp.history)
        failed = False
    finally:
        if tracker is not None:
            info = tracker.info()
            tracker.close(failed)
    bpb = (f"diverged at step {res['diverged_at_step']}" if res.get("diverged_at_step") is not None
           else f"final val bpb {res['final_val_bpb']:.4f} (xz on the same bytes {res['compressor_bpb']['xz']:.3f})")
    progress.end(bpb)
    if tracker is not None:  # what wandb did, whatever the progress setting: off, or where the run is and its upload
        print(wandb_line(cfg, info), flush=True)
    return res


def _figures(res: Result) -> str:
    if res.get("diverged_at_step") is not None:
        return f"diverged at step {res['diverged_at_step']}"
    return (f"final_val_bpb {res['final_val_bpb']:.6f} after {res['steps']} steps, {res['tokens']:,} tokens, "
            f"cross_site_bytes {res['cross_site_bytes']:,}")
