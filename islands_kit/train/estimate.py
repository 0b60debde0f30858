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
"""
from __future__ import annotations

import dataclasses
import time

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

    @property
    def total_s(self) -> float:
        return self.setup_s + self.steps * self.step_s + self.n_evals * self.eval_s + self.final_eval_s

    def describe(self) -> str:
        """``about 6m10s per run (measured here: 3 timed steps of 0.28 s, 8 evaluations of 1.2 s, set-up 2.1 s;
        1 torch thread)``."""
        return (f"about {format_duration(self.total_s)} per run (measured on this machine: {self.timed_steps} timed "
                f"steps of {self.step_s:.3g} s x {self.steps} steps, {self.n_evals} evaluations of {self.eval_s:.2g} s "
                f"and a final one of {self.final_eval_s:.2g} s, set-up {self.setup_s:.2g} s; {self.threads} torch "
                f"thread{'s' if self.threads != 1 else ''}; rough: syncs every H steps and other jobs move it)")


def estimate_run(cfg: ExperimentConfig, start_step: int = 0, warm_steps: int = 2, timed_steps: int = 3) -> RunEstimate:
    """Time a few steps and evaluations of ``cfg``'s experiment on this machine (see the module docstring)."""
    probe = ExperimentConfig.from_dict({**cfg.to_dict(), "progress": False, "wandb_mode": "disabled"})
    threads_before = torch.get_num_threads()
    if probe.threads > 0:
        torch.set_num_threads(probe.threads)
    try:
        t0 = time.perf_counter()
        exp = Experiment(probe)
        setup_s = time.perf_counter() - t0
        warm = min(warm_steps, max(0, probe.steps - 1))
        timed = max(1, min(timed_steps, probe.steps - warm))
        for _ in range(warm):
            exp.train_step()
        t0 = time.perf_counter()
        for _ in range(timed):
            exp.train_step()
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

