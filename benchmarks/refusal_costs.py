"""What refusing each hostile study, ledger, checkpoint and element-set input costs (docs/threat-model.md, "Studies
and ledgers: files from strangers"): builds each input in a scratch folder, then reads it in a process of its own and
prints one JSON line per case — the seconds the read took and how far the process's peak memory grew over the kit's
imports, and what it said.

    python benchmarks/refusal_costs.py                 # this checkout
    PYTHONPATH=/path/to/old/checkout python benchmarks/refusal_costs.py --cases-only DIR   # another checkout, same inputs
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CASES = ("ledger_line_50mb", "ledger_torn", "checkpoint_deflated", "history_142mb", "tle_100mb", "toml_deep",
         "grid_2000")

_MEASURE = r'''
import json, resource, sys, time
from pathlib import Path
case, work = sys.argv[1], Path(sys.argv[2])
import torch  # noqa: F401 - the kit's imports are counted before the baseline
import islands_kit.compare, islands_kit.protocol.command, islands_kit.train.checkpoint  # noqa: F401
from islands_kit.protocol.ledger import read_ledger
def rss(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
base, t0 = rss(), time.perf_counter()
try:
    if case.startswith("ledger"):
        msg = f"kept {len(read_ledger(work / (case + '.runs.jsonl')))} line(s)"
    elif case == "checkpoint_deflated":
        from islands_kit.train.checkpoint import load_checkpoint
        load_checkpoint(work / "ck"); msg = "loaded"
    elif case == "history_142mb":
        from islands_kit.compare.folders import run_history
        run_history({"dir": str(work / "hist")}); msg = "read"
    elif case == "tle_100mb":
        from islands_kit.orbital.config import OrbitConfig
        OrbitConfig(tle_file=str(work / "big.tle"), n_satellites=1); msg = "accepted"
    elif case == "toml_deep":
        from islands_kit.protocol.study import load_study
        load_study(work / "deep.toml"); msg = "loaded"
    else:
        from islands_kit.protocol.study import parse_study
        g = {"optim.lr": [f"{i}e-4" for i in range(1, 11)], "optim.weight_decay": [f"0.0{i}" for i in range(10)],
             "optim.warmup_steps": [str(i) for i in range(10)]}
        parse_study({"name": "t", "preset": "smoke", "seeds": [0], "set": {"data.tune_fraction": "0.05"},
                     "arms": {"a": {"experiment": "baseline", "grid": g},
                              "b": {"experiment": "two_site", "ref": "a", "grid": g}}}); msg = "loaded"
except Exception as e:  # noqa: BLE001 - what each checkout says is the measurement
    msg = f"{type(e).__name__}: {str(e)[:160]}"
print(json.dumps({"case": case, "s": round(time.perf_counter() - t0, 4),
                  "grew_mb": round((rss() - base) / 2 ** 20, 1), "said": msg}))
'''


def make_inputs(work: Path) -> None:
    """Every case's input under ``work`` (a kit checkpoint comes from a 4-step smoke run: about a minute)."""
    ledger = Path(__file__).resolve().parent / "headline-demo.runs.jsonl"
    line = ledger.read_text().splitlines(keepends=True)[0]
    (work / "ledger_torn.runs.jsonl").write_text(line + line[:150] + "\n" + line)
    with open(work / "ledger_line_50mb.runs.jsonl", "wb") as f:
        f.write(b'{"key": "' + b"x" * (50 << 20) + b'"}\n')
    (work / "hist").mkdir()
    row = json.dumps({"step": 1, "tokens": 1000, "sim_time_s": 1.0, "val_bpb": 2.5, "final": False}) + "\n"
    (work / "hist" / "history.jsonl").write_text(row * ((142 << 20) // len(row)))
    with open(work / "big.tle", "wb") as f:
        f.truncate(100 << 20)
    (work / "deep.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    run = work / "run"
    subprocess.run([sys.executable, "-m", "islands_kit", "run", "two_site", "--preset", "smoke", "--set", "steps=4",
                    "--set", "checkpoint_every=2", "--set", "progress=false", "--out", str(run)], check=True,
                   capture_output=True, env={**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"})
    (work / "ck").mkdir()
    with zipfile.ZipFile(run / "checkpoint.pt") as src, zipfile.ZipFile(work / "ck" / "checkpoint.pt", "w") as dst:
        big = max((n for n in src.namelist() if "/data/" in n), key=lambda n: src.getinfo(n).file_size)
        for n in src.namelist():
            if n != big:
                dst.writestr(zipfile.ZipInfo(n), src.read(n), compress_type=zipfile.ZIP_STORED)
        info = zipfile.ZipInfo(big)
        info.compress_type = zipfile.ZIP_DEFLATED  # the largest record deflated, claiming 1 GiB
        with dst.open(info, "w", force_zip64=True) as f:
            for _ in range(1024):
                f.write(bytes(1 << 20))


def measure(work: Path) -> None:
    for case in CASES:
        out = subprocess.run([sys.executable, "-c", _MEASURE, case, str(work)], capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        print((out.stdout.strip().splitlines() or [json.dumps({"case": case, "error": out.stderr[-300:]})])[-1],
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases-only", metavar="DIR", help="measure the inputs already in DIR (made by an earlier run)")
    ap.add_argument("--keep", metavar="DIR", help="make the inputs in DIR and keep them")
    args = ap.parse_args()
    if args.cases_only:
        measure(Path(args.cases_only))
        return
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        make_inputs(Path(args.keep))
        measure(Path(args.keep))
        return
    with tempfile.TemporaryDirectory() as tmp:
        make_inputs(Path(tmp))
        measure(Path(tmp))


if __name__ == "__main__":
    main()
