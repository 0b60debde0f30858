"""Write the golden smoke ``result.json`` fixtures that ``tests/test_golden.py`` compares against.

Run this only when a change is *meant* to move a smoke number, and say which fields moved (and why) in the commit
(``git log -- tests/golden/`` is the record):

    OMP_NUM_THREADS=1 .venv/bin/python scripts/update_golden.py            # all three experiments
    OMP_NUM_THREADS=1 .venv/bin/python scripts/update_golden.py two_site   # one

One intra-op thread, as in the tests: torch's CPU reductions are split by thread, so the thread count is part of what
makes a run bit-reproducible.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ["WANDB_MODE"] = "disabled"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from islands_kit.run import run_experiment  # noqa: E402
from islands_kit.train.golden import EXPERIMENTS, MACHINE_KEY, golden_config, machine_fingerprint, pinned, read_run_files  # noqa: E402


def main(argv: list[str]) -> None:
    import torch

    torch.set_num_threads(1)
    for exp in argv or EXPERIMENTS:
        with tempfile.TemporaryDirectory() as tmp:
            res = run_experiment(golden_config(exp), tmp)
            history, timeline = read_run_files(tmp)
        path = ROOT / "tests" / "golden" / f"{exp}.smoke.json"
        fixture = {MACHINE_KEY: machine_fingerprint(), **pinned(dict(res), history, timeline)}
        path.write_text(json.dumps(fixture, sort_keys=True, indent=0) + "\n")
        print(f"{path.relative_to(ROOT)}: final_val_bpb={res['final_val_bpb']!r} cross_site_bytes={res['cross_site_bytes']}")


if __name__ == "__main__":
    main(sys.argv[1:])
