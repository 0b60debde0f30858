"""Measure how far the golden smoke numbers move between CPU kernel sets, and write the tolerance the fixtures use
elsewhere than on the machine that wrote them (``tests/golden/tolerance.json``).

The same torch wheel dispatches to different kernels per CPU (``ATEN_CPU_CAPABILITY`` = default / avx2 / avx512 picks
them on one box); their summation orders differ in the last bits. Each experiment's smoke run is made once per
capability, in a fresh process (the capability is read when torch loads), and every pinned float is compared across
them. The tolerance is the largest relative difference seen, times a stated factor (at most 10):

    OMP_NUM_THREADS=1 .venv/bin/python scripts/measure_golden_tolerance.py

Re-run it whenever the fixtures are regenerated (``scripts/update_golden.py``) and commit both.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from islands_kit.train.golden import EXPERIMENTS, TOLERANCE_FACTOR, float_pairs, machine_fingerprint, relative_difference  # noqa: E402

CAPABILITIES = ("default", "avx2", "native")
OUT = ROOT / "tests" / "golden" / "tolerance.json"

_CHILD = """
import json, os, sys, tempfile
os.environ["WANDB_MODE"] = "disabled"
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
from islands_kit.train.golden import golden_config, pinned, read_run_files
from islands_kit.run import run_experiment
out = {}
for exp in sys.argv[2:]:
    with tempfile.TemporaryDirectory() as tmp:
        res = run_experiment(golden_config(exp), tmp)
        history, timeline = read_run_files(tmp)
    out[exp] = json.loads(json.dumps(pinned(dict(res), history, timeline), sort_keys=True))
out["_capability"] = torch.backends.cpu.get_cpu_capability()
print(json.dumps(out))
"""


def run_under(capability: str, experiments: list[str]) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability != "native":
        env["ATEN_CPU_CAPABILITY"] = capability
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT), *experiments], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> None:
    experiments = argv or list(EXPERIMENTS)
    runs = {cap: run_under(cap, experiments) for cap in CAPABILITIES}
    per_exp: dict[str, dict[str, Any]] = {}
    for exp in experiments:
        worst = (0.0, "", 0.0, 0.0)
        for a, b in combinations(CAPABILITIES, 2):
            for path, x, y in float_pairs(runs[a][exp], runs[b][exp]):
                r = relative_difference(x, y)
                if r > worst[0]:
                    worst = (r, path, x, y)
        per_exp[exp] = {"max_rel_diff": worst[0], "field": worst[1], "values": [worst[2], worst[3]]}
        print(f"{exp}: max relative difference {worst[0]:.3g} at {worst[1] or '-'}")
    largest = max(v["max_rel_diff"] for v in per_exp.values())
    record = {
        "measured_on": machine_fingerprint(),
        "capabilities": {cap: runs[cap]["_capability"] for cap in CAPABILITIES},
        "per_experiment": per_exp,
        "max_rel_diff": largest,
        "factor": TOLERANCE_FACTOR,
        "rtol": largest * TOLERANCE_FACTOR,
        "command": "OMP_NUM_THREADS=1 .venv/bin/python scripts/measure_golden_tolerance.py",
    }
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{OUT.relative_to(ROOT)}: rtol {record['rtol']:.3g} = {largest:.3g} x {TOLERANCE_FACTOR}")


if __name__ == "__main__":
    main(sys.argv[1:])
