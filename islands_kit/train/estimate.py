"""How long a run will take on this machine, said before it starts (``islands-kit run --dry-run``).

Measured, not looked up: a stored rate would be another machine's, under another load. The run's own experiment is
built (corpus, replicas, strategy: the set-up a run pays), trains ``warm_steps`` untimed steps (the first steps
allocate), then ``timed_steps`` timed ones, and scores the validation windows of one evaluation once; the final
evaluation, which scores more bytes (all of the held-out tail at the demo), is that time scaled by its share of bytes.
The estimate is

    set-up + steps x (mean timed step) + evaluations x (one evaluation) + (the final evaluation),

in wall seconds with the run's own ``threads``. It is rough, and says so: a few steps miss the syncs that fall every
H steps (two_site's fragments, eight_cell's exchanges), and other jobs on a shared machine move it either way; the
files a run writes at the end (figures, weights) are not counted. Nothing is written and the measured steps are thrown
away with the experiment.

The dry runs time in a child process with a deadline (``estimate_within``): a config whose one step runs for minutes (a
context of 200,000 bytes) is stopped there, and the estimate says it is a lower bound and why. A signal cannot do it:
one attention call at such a context is a single long native call that no Python handler interrupts.
"""
from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from islands_kit.config import ExperimentConfig
from islands_kit.train.experiment import Experiment
from islands_kit.train.progress import format_duration


@dataclasses.dataclass(frozen=True)
class RunEstimate:
    """The measured pieces of a run's time and the run they add up to (``steps`` from ``start_step``)."""

    setup_s: float
    step_s: float
    eval_s: float
    final_eval_s: float
    steps: int
    n_evals: int
    timed_steps: int
    threads: int
    cut_s: float | None = None  # the deadline that stopped the timing (every figure a lower bound), or None

    @property
    def total_s(self) -> float:
        return self.setup_s + self.steps * self.step_s + self.n_evals * self.eval_s + self.final_eval_s

    def describe(self) -> str:
        """``about 6m10s per run (measured here: 3 timed steps of 0.28 s, 8 evaluations of 1.2 s, set-up 2.1 s;
        1 torch thread)``."""
        if self.cut_s is not None:
            done = f"{self.timed_steps} step(s) of {self.step_s:.3g} s" if self.timed_steps else (
                f"no step finished (one takes over {self.step_s:.3g} s)")
            return (f"at least {format_duration(self.total_s)} per run (timing stopped after {self.cut_s:g} s: "
                    f"set-up {self.setup_s:.2g} s, {done}; x {self.steps} steps; a lower bound)")
        return (f"about {format_duration(self.total_s)} per run (measured on this machine: {self.timed_steps} timed "
                f"steps of {self.step_s:.3g} s x {self.steps} steps, {self.n_evals} evaluations of {self.eval_s:.2g} s "
                f"and a final one of {self.final_eval_s:.2g} s, set-up {self.setup_s:.2g} s; {self.threads} torch "
                f"thread{'s' if self.threads != 1 else ''}; rough: syncs every H steps and other jobs move it)")


def estimate_run(cfg: ExperimentConfig, start_step: int = 0, warm_steps: int = 2, timed_steps: int = 3,
                 progress: Callable[[str, float], None] | None = None) -> RunEstimate:
    """Time a few steps and evaluations of ``cfg``'s experiment on this machine (see the module docstring);
    ``progress(kind, seconds)`` hears of the set-up and of every step as it ends."""
    say = progress or (lambda kind, s: None)
    probe = ExperimentConfig.from_dict({**cfg.to_dict(), "progress": False, "wandb_mode": "disabled"})
    threads_before = torch.get_num_threads()
    if probe.threads > 0:
        torch.set_num_threads(probe.threads)
    try:
        t0 = time.perf_counter()
        exp = Experiment(probe)
        setup_s = time.perf_counter() - t0
        say("setup", setup_s)
        warm = min(warm_steps, max(0, probe.steps - 1))
        timed = max(1, min(timed_steps, probe.steps - warm))
        for _ in range(warm):
            t1 = time.perf_counter()
            exp.train_step()
            say("step", time.perf_counter() - t1)
        t0 = time.perf_counter()
        for _ in range(timed):
            t1 = time.perf_counter()
            exp.train_step()
            say("step", time.perf_counter() - t1)
        step_s = (time.perf_counter() - t0) / timed
        t0 = time.perf_counter()
        with exp.transport.world_view():
            exp.evaluate()
        eval_s = time.perf_counter() - t0
        ev = exp.evaluator
        final_eval_s = eval_s * ev.final_windows[1].numel() / max(1, ev.eval_windows[1].numel())
        threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads_before)
    remaining = max(0, probe.steps - start_step)
    n_evals = sum(1 for s in range(start_step + 1, probe.steps) if s % probe.eval_every == 0)
    return RunEstimate(setup_s, step_s, eval_s, final_eval_s, remaining, n_evals, timed, threads)



BUDGET_S = 30.0  # a dry run's timing of one config, set-up included (ISLANDS_KIT_DRY_RUN_BUDGET_S overrides)


def _timing_child(conn: Any, cfg: dict[str, Any], start_step: int) -> None:
    try:
        est = estimate_run(ExperimentConfig.from_dict(cfg), start_step, progress=lambda k, s: conn.send((k, s)))
        conn.send(("done", dataclasses.asdict(est)))
    except BaseException as e:  # noqa: BLE001 - the parent says what failed, in one line
        conn.send(("error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]))


def estimate_within(cfg: ExperimentConfig, start_step: int = 0, budget_s: float | None = None) -> RunEstimate:
    """``estimate_run`` in a child process stopped after ``budget_s`` seconds (default ``BUDGET_S``): the whole
    estimate when it finishes in time, else a lower bound from the steps that did (``cut_s`` set). RuntimeError with
    the child's one-line error when the timing itself fails."""
    budget = float(budget_s if budget_s is not None else os.environ.get("ISLANDS_KIT_DRY_RUN_BUDGET_S", BUDGET_S))
    ctx = mp.get_context("spawn")  # a fresh interpreter: no thread pool or lock copied mid-use
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_timing_child, args=(send, cfg.to_dict(), start_step), daemon=True)
    t0 = time.perf_counter()
    child.start()
    send.close()
    setup: float | None = None
    steps: list[float] = []
    try:
        while (left := budget - (time.perf_counter() - t0)) > 0 and recv.poll(left):
            try:
                kind, value = recv.recv()
            except EOFError:  # the child died without a word (killed for memory)
                raise RuntimeError(f"time: the timing process ended with exit code {child.exitcode} before its "
                                   "estimate") from None
            if kind == "done":
                return RunEstimate(**value)
            if kind == "error":
                raise RuntimeError(f"time: timing the run failed: {value}")
            if kind == "setup":
                setup = float(value)
            else:
                steps.append(float(value))
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        recv.close()
    elapsed = time.perf_counter() - t0
    setup_s = setup if setup is not None else elapsed
    # a lower bound: the fastest finished step, or the time the unfinished first step has run so far
    step_s = min(steps) if steps else max(0.0, elapsed - setup_s)
    remaining = max(0, cfg.steps - start_step)
    return RunEstimate(setup_s, step_s, 0.0, 0.0, remaining, 0, len(steps), max(1, cfg.threads), cut_s=budget)
