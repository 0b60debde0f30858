"""Test-wide settings: no wandb, and one intra-op thread.

The models in the tests are tiny; on a busy 2-core machine two torch threads per process spin against each other and
every other process (a smoke step measured 17x slower with 2 threads than with 1 under load), so tests and the
subprocesses they start use one thread."""
import os

os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
