"""Test-wide settings: no wandb, one intra-op thread, and Triton's interpreter on machines without a GPU.

The models in the tests are tiny; on a busy 2-core machine two torch threads per process spin against each other and
every other process (a smoke step measured 17x slower with 2 threads than with 1 under load), so tests and the
subprocesses they start use one thread.

Triton decides between compiled and interpreted kernels when its modules are first imported, and torch imports
triton as a side effect (building any optimizer loads torch._dynamo, which probes triton). So TRITON_INTERPRET must
be set before anything runs: here, for the whole session, when there is no GPU. The kernel choice itself stays on
the torch path (ISLANDS_KIT_KERNELS=torch) unless a test forces Triton, so the interpreter never slows the model
tests down.
"""
import os
import sys

os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
if not torch.cuda.is_available() and "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("ISLANDS_KIT_KERNELS", "torch")


# The files that take longest (measured with --durations; each runs whole in one xdist process, `--dist loadfile`)
# go first: xdist hands files out in collection order, and a long file collected last (test_torch_dist sorts late)
# ran alone on one core for minutes while the other core had finished.
LONG_FIRST = ("test_torch_dist.py", "test_notebooks.py", "test_executor.py", "test_doc_commands.py", "test_scaling.py",
              "test_study.py", "test_run.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(LONG_FIRST)), order[id(item)]))
