"""The optimizer-step timing window shared by ``shampoo_step.py`` and ``muon_step.py``: ``steps`` training steps of
one model and optimizer, timed in two parts (the step alone; forward + backward + step) on a clock the caller picks
(``time.process_time`` for this process's CPU seconds on a shared box, ``time.perf_counter`` for wall seconds)."""
from __future__ import annotations

import time
from typing import Callable

import torch
from torch import Tensor, nn


def window(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable[[nn.Module], Tensor], steps: int,
           clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """Seconds per step over ``steps`` steps on ``clock``: (step only, forward + backward + step)."""
    t_step = t_full = 0.0
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        t0 = clock()
        loss_fn(model).backward()
        t1 = clock()
        opt.step()
        t2 = clock()
        t_step += t2 - t1
        t_full += t2 - t0
    return t_step / steps, t_full / steps
