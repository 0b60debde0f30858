"""A compromised island, attack by attack: caught at the first sync of each fragment after the attack starts (within
one sync window)? bpb with the defence against the clean run (no more than 1 % worse?) and without it (the damage).

For each attack, three runs of the same two_site configuration share one clean run: clean (no attack, no defence),
attacked with no defence, attacked with the defence; plus the defence on the clean run (false positives). Every
figure comes from ``result.json`` (``final_val_bpb``, ``faults_report``) and ``faults.detection_summary``.

    OMP_NUM_THREADS=1 python benchmarks/faults.py --preset smoke            # about a minute on a CPU core
    OMP_NUM_THREADS=1 python benchmarks/faults.py --preset demo             # 11 demo runs (hours on 2 shared cores)
    python benchmarks/faults.py --preset smoke --islands 4                  # four equal islands: trimmed mean

``--attack-start -1`` starts the attack 40 % into the run. A run whose model turns NaN/inf (a NaN island, or a x100
island that blows the model up, without the defence) stops there and is reported as ``diverged@STEP``
(``diverged_at_step`` in its result.json).
"""
from __future__ import annotations

import argparse
import os
import time
import warnings
from typing import Any

import torch

from islands_kit.config import ATTACKS, ExperimentConfig, apply_overrides
from islands_kit.config.presets import preset_dict
from islands_kit.faults import detection_summary
from islands_kit.run import run_experiment


def base_config(preset: str, n_islands: int) -> ExperimentConfig:
    """two_site at ``preset``; for n_islands != 2, n equal islands sharing the preset's global batch."""
    d = preset_dict("two_site", preset)
    if n_islands != 2:
        total = sum(i["batch_size"] for i in d["islands"])
        b = total // n_islands
        d["islands"] = [dict(name=f"site-{k}", batch_size=b, micro_batch_size=b, dp_ranks=1, hardware="cpu-2core",
                             n_accelerators=1) for k in range(n_islands)]
    d["wandb_mode"], d["progress"] = "disabled", False
    return ExperimentConfig.from_dict(d)


def run(cfg: ExperimentConfig) -> tuple[dict[str, Any], float]:
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a divergence is reported in the table instead
        return run_experiment(cfg), time.time() - t0


def bpb_or_diverged(r: dict[str, Any], c: float) -> tuple[str, str]:
    if r["diverged_at_step"] is not None:
        return f"{'diverged@' + str(r['diverged_at_step']):>14s}", ""
    return f"{r['final_val_bpb']:14.4f}", f"{r['final_val_bpb'] / c - 1:+9.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="demo", choices=["smoke", "demo", "gpu"])
    ap.add_argument("--islands", type=int, default=2)
    ap.add_argument("--attacks", default=",".join(a for a in ATTACKS if a != "none"))
    ap.add_argument("--attack-island", type=int, default=1)
    ap.add_argument("--attack-start", type=int, default=-1, help="-1: 40 %% into the run")
    ap.add_argument("--noise-std", type=float, default=1.0, help="faults.attack_noise_std")
    ap.add_argument("--scale", type=float, default=100.0, help="faults.attack_scale")
    ap.add_argument("--defense", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("WANDB_MODE", "disabled")

    base = base_config(args.preset, args.islands)
    start = args.attack_start if args.attack_start >= 0 else int(0.4 * base.steps)
    # the plain mean (the rule the defences replace) in every run, so the defence is the one change
    common = {"seed": args.seed, "sync.diloco.average": "mean", "faults.attack_island": args.attack_island,
              "faults.attack_start": start,
              "faults.attack_noise_std": args.noise_std, "faults.attack_scale": args.scale}

    def cfg(attack: str, defense: str) -> ExperimentConfig:
        return apply_overrides(base, {**common, "faults.attack": attack, "faults.defense": defense})

    print(f"two_site preset {args.preset}, {args.islands} islands, {base.steps} steps, H={base.sync.H}, "
          f"P={base.sync.n_fragments}, codec {base.sync.codec}; attack from island {args.attack_island} "
          f"at step {start}; "
          f"defence {args.defense}; noise std {args.noise_std}, scale {args.scale}; seed {args.seed}", flush=True)
    clean, t_clean = run(cfg("none", "none"))
    guarded, t_guard = run(cfg("none", args.defense))
    c = clean["final_val_bpb"]
    print(f"clean: bpb {c:.4f} ({t_clean:.0f} s); defence on the clean run: bpb {guarded['final_val_bpb']:.4f} "
          f"({guarded['final_val_bpb'] / c - 1:+.2%}), false positives {len(guarded['faults_report'])}", flush=True)

    first_syncs = detection_summary([], cfg("scale", args.defense))
    print(f"first attacked sync per fragment: {'/'.join(str(s['first_attacked_sync']) for s in first_syncs.values())}")
    print(f"{'attack':10s} {'caught in 1 window':>18s} {'first flag/fragment':>20s} {'flags':>5s} "
          f"{'bpb defended':>12s} {'vs clean':>9s} {'<=+1%':>5s} {'bpb undefended':>14s} {'vs clean':>9s}", flush=True)
    for attack in [a for a in args.attacks.split(",") if a]:
        off, _ = run(cfg(attack, "none"))
        on, _ = run(cfg(attack, args.defense))
        if on["diverged_at_step"] is not None:
            print(f"{attack:10s} defended run diverged at step {on['diverged_at_step']}: {on['diverged_reason']}",
                  flush=True)
            continue
        summ = detection_summary(on["faults_report"], cfg(attack, args.defense))
        caught = all(s["within_one_window"] for s in summ.values())
        first = "/".join(str(s["first_detection"]) for s in summ.values())
        d = on["final_val_bpb"]
        undef, rel = bpb_or_diverged(off, c)
        print(f"{attack:10s} {('yes' if caught else 'no'):>18s} {first:>20s} {len(on['faults_report']):5d} "
              f"{d:12.4f} {d / c - 1:+9.2%} {('yes' if d <= 1.01 * c else 'no'):>5s} {undef} {rel}", flush=True)


if __name__ == "__main__":
    main()
