"""The comparison protocol, end to end from one command: every arm tuned with the same budget on a tuning split,
scored on the untouched validation bytes, ratios paired per seed.

    python benchmarks/protocol.py --preset demo --out runs/protocol --jobs 2            # run (resumable) + report
    python benchmarks/protocol.py --preset demo --out runs/protocol --report            # report only
    python benchmarks/protocol.py --preset demo --out runs/protocol --write-results     # report into RESULTS.md
    python benchmarks/protocol.py --preset demo --remake-point "int2" --out runs/remake  # one frontier point again

The protocol (also written into the report):
  1. Tuning. Every arm gets the same budget as the baseline it is paired against: a grid of as many settings
     (``check_budgets``), each trained at seed 0 with ``data.tune_fraction`` of the bytes just before the validation
     tail held out of training. The winner is the trial with the lowest ``final_tune_bpb`` (bpb on that tuning
     split); the validation bytes play no part in the choice.
  2. Scoring. The winner of each arm is trained at every seed of ``--seeds`` (seed 0 is the tuning run itself: the
     same config, so the same run). Seeds pair arms: the same seed gives the same initial weights and data order.
  3. Ratios. arm / baseline per seed on ``final_val_bpb`` (all validation bytes), then mean and spread (min..max).
  4. Ablations: one change at a time on top of a tuned winner (two_site, eight_cell), paired with it at the same seeds
     (``--ablation-seeds``, seed 0 by default: one run per row).
Every run is its own ``islands-kit run`` process with one torch thread (bit-reproducible per seed and thread count),
read back from its result.json; a finished run (result.json present) is never run again, so an interrupted protocol
resumes where it stopped.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from islands_kit.config import MOVED_KEYS
from islands_kit.io import replace_marked_block
from islands_kit.presets import EIGHT_CELL_ALLREDUCE_CONTROL, SPARSELOCO, TWO_SITE_M1_CONTROL

ROOT = Path(__file__).resolve().parent.parent
TUNE_FRACTION = 0.05


@dataclass
class Arm:
    """One experiment with fixed settings and a grid of settings to tune over (as many as its ``ref``'s:
    ``check_budgets``); ``ref`` is the arm its ratios are paired against (the synchronous baseline with the same inner
    optimizer)."""

    experiment: str
    grid: dict[str, list[str]]
    fixed: dict[str, str] = field(default_factory=dict)
    ref: str = "baseline"

    def trials(self) -> list[dict[str, str]]:
        keys = sorted(self.grid)
        return [dict(zip(keys, vals)) for vals in itertools.product(*(self.grid[k] for k in keys))]


def check_budgets(arms: dict[str, Arm]) -> dict[str, int]:
    """Trials per arm; ValueError unless every arm tunes over exactly as many settings as the baseline it is paired
    against (a bigger grid is a bigger tuning budget: the comparison would favour the arm that had it)."""
    n = {name: len(arm.trials()) for name, arm in arms.items()}
    for name, arm in arms.items():
        if n[name] != n[arm.ref]:
            raise ValueError(f"arm {name}: grid has {n[name]} trials, its baseline {arm.ref} {n[arm.ref]}: "
                             "every arm gets its baseline's tuning budget")
    return n


def _lr(v: float) -> str:
    """An lr as the grids spell it: 3e-3, 5.48e-3."""
    mantissa, exp = f"{v:.2e}".split("e")
    return f"{float(mantissa):g}e{int(exp)}"


# What the two_site method is (fixed, chosen from the literature before tuning) and what is tuned. The published
# settings that cost no extra bytes: keep the τ overlap steps on top of the new global state (instead of α-blending
# them away), and a final flush at int8 so the last sync does not leave int4 rounding in the deployed model.
TWO_SITE_METHOD = {"sync.diloco.merge": "keep_local", "sync.diloco.alpha": "0.0", "sync.diloco.final_codec": "int8"}
SHAMPOO = {"optim.name": "shampoo"}
# eight cells: merge the partner against the snapshot as sent (the delay's local steps keep full weight) and end with
# one complete butterfly, so every cell — and the deployed model — is the exact cell mean
# the butterfly as the protocol tuned it: E = 6 exchanges per window pinned, because the demo preset now mixes 16 times
# (the "mixing every ~3 steps" row on top of this arm's winner, which won at 3 seeds): the arm stays the experiment its
# runs on disk and in RESULTS were, and that row stays the demo default's own run
EIGHT_CELL_METHOD = {"sync.butterfly.merge": "delay_aware", "sync.butterfly.final_average": "true",
                     "sync.butterfly.exchanges_per_window": "6"}
# DiLoCo's outer optimizer, tuned: outer SGD lr x momentum (0 = plain averaging at that lr; 0.9 = Nesterov, the
# sync.diloco.nesterov default, its momentum ramped from 0 over the first 10 outer steps: started at once it cost 7%
# even with one replica at this length, and the ramp took that back: RESULTS, "What DiLoCo's outer optimizer is worth").
# Charles et al. 2025 find Nesterov 0.9 with lr ~0.6 for M = 2 and 0.8-1.0 for M = 8; 1.0 without momentum is plain
# averaging.
OUTER_GRID = {"sync.diloco.outer_lr": ["0.6", "1.0"], "sync.diloco.outer_momentum": ["0.0", "0.9"]}
OUTER_WARMUP = {"sync.diloco.outer_momentum_warmup": "10"}
LR = 3e-3  # two_site's demo lr (the inner lr the baseline and two_site both won at the 300-step demo): the grids' centre


def quarter_octaves(lo: int, hi: int) -> list[str]:
    """LR x 2^(k/4) for k in [lo, hi): inner lrs a quarter octave apart."""
    return [_lr(LR * 2 ** (k / 4)) for k in range(lo, hi)]


# Eight trials per arm: a 1200-step demo run costs ~6 min on one thread, so the three arms' tuning is ~24 runs.
# The baseline tunes only its inner lr, so its budget (two_site's: 2 inner lrs x the outer grid) buys a fine lr grid:
# 8 values a quarter octave apart around LR, 1.78e-3 to 6e-3
FINE_LRS = quarter_octaves(-3, 5)
# the inner lr scaled with the replica count M = 8 from LR: the scaling-law fit's M^0.29 and sqrt(M) (Charles et al.)
M8_LRS = [_lr(LR * 8 ** 0.29), _lr(LR * 8 ** 0.5)]
# eight cells synchronised by the DiLoCo all-reduce (presets.EIGHT_CELL_ALLREDUCE_CONTROL) with the outer optimizer
# tuned instead of fixed to plain averaging
EIGHT_CELL_ALLREDUCE_METHOD = {**{k: v for k, v in EIGHT_CELL_ALLREDUCE_CONTROL.items() if k not in OUTER_GRID},
                               **OUTER_WARMUP}
ARMS: dict[str, Arm] = {
    "baseline": Arm("baseline", {"optim.lr": FINE_LRS}),
    "two_site": Arm("two_site", {"optim.lr": ["3e-3", "4.24e-3"], **OUTER_GRID}, {**TWO_SITE_METHOD, **OUTER_WARMUP}),
    # the butterfly has no outer optimizer: its budget goes to the inner lr, quarter octaves from LR up to LR x sqrt(8)
    # (= LR x 2^1.5) with the scaling-law fit's LR x 8^0.29 between them
    "eight_cell": Arm("eight_cell", {"optim.lr": sorted(set(quarter_octaves(0, 7)) | set(M8_LRS), key=float)},
                      EIGHT_CELL_METHOD),
    "eight_cell_allreduce": Arm("eight_cell", {"optim.lr": M8_LRS, **OUTER_GRID}, EIGHT_CELL_ALLREDUCE_METHOD),
    "baseline_shampoo": Arm("baseline", {"optim.lr": ["1e-3", "2e-3", "3e-3", "4e-3"]}, SHAMPOO, ref="baseline_shampoo"),
    "two_site_shampoo": Arm("two_site", {"optim.lr": ["2e-3", "3e-3"], "sync.diloco.outer_lr": ["1.0", "1.3"]},
                            {**TWO_SITE_METHOD, **SHAMPOO}, ref="baseline_shampoo"),
}
# arms run phase by phase (tuning, then seeds); a phase's arms share its tuning stage
PHASES = [["baseline", "two_site"], ["eight_cell", "eight_cell_allreduce"], ["baseline_shampoo", "two_site_shampoo"]]
# what averaging the replicas' parameters after every inner step reaches at all (as many bytes as data-parallel):
# DiLoCo with H = 1, one fragment, no overlap, fp32 and plain averaging (outer SGD lr 1, no momentum)
TWO_SITE_FLOOR = {"sync.H": "1", "sync.n_fragments": "1", "sync.tau": "0", "sync.codec": "fp32",
                  "sync.diloco.final_codec": ""}
# SparseLoCo as published (presets.SPARSELOCO: chunks of 4096, 1/64 kept, 2-bit, beta 0.95, no outer momentum, outer lr
# 1, H = 15) and, as in the paper, the whole model in one piece synced without overlap
SPARSELOCO_PAPER = {**SPARSELOCO, "sync.n_fragments": "1", "sync.tau": "0"}
EIGHT_CELL_FLOOR = {"sync.strategy": "diloco", "sync.H": "1", "sync.n_fragments": "1", "sync.tau": "0",
                    "sync.codec": "fp32", "sync.routing_sync_mode": "all_reduce", "sync.diloco.outer_lr": "1.0",
                    "sync.diloco.outer_momentum": "0.0"}
ABLATIONS: dict[str, dict[str, dict[str, str]]] = {
    "two_site": {
        "alpha merge 0.5 (before)": {"sync.diloco.merge": "alpha", "sync.diloco.alpha": "0.5"},
        "final sync int4": {"sync.diloco.final_codec": ""},
        "final sync fp32": {"sync.diloco.final_codec": "fp32"},
        "eager updates": {"sync.diloco.eager": "true"},
        "inner lr 4e-3 (beyond the grid's edge)": {"optim.lr": "4e-3"},
        "Nesterov 0.7/0.9, momentum warm-up 2": {"sync.diloco.outer_lr": "0.7", "sync.diloco.outer_momentum": "0.9",
                                                 "sync.diloco.outer_momentum_warmup": "2"},
        "warm start 30 steps (post-local SGD)": {"sync.diloco.warm_start_steps": "30"},
        "H=25": {"sync.H": "25"},
        # quadratic synchronisation rule: windows of max(25, (1e-2 / lr)^2) steps — 25 until the cosine has brought
        # the lr below 2e-3, then longer (16 syncs in 300 steps against H=25's 24 and H=50's 12)
        "QSR H from 25 (alpha 1e-2)": {"sync.H": "25", "sync.diloco.h_schedule": "qsr", "sync.diloco.qsr_alpha": "1e-2"},
        # the same rule stretched to about H=50's byte budget: 13 syncs, dense early and sparse late
        "QSR H from 25 (alpha 1.5e-2)": {"sync.H": "25", "sync.diloco.h_schedule": "qsr",
                                         "sync.diloco.qsr_alpha": "1.5e-2"},
        "floor: H=1, P=1, tau=0, fp32": TWO_SITE_FLOOR,
        # DiLoCo with one replica (site A alone with the whole batch, no bytes on a link): what the outer optimizer is
        # worth without a second replica to average with — with the tuned outer settings and with the papers' M = 1 ones
        "control: DiLoCo M = 1 (site A alone, batch 40, tuned sync)": TWO_SITE_M1_CONTROL,
        "control: DiLoCo M = 1, Nesterov 0.4/0.9": {**TWO_SITE_M1_CONTROL, "sync.diloco.outer_lr": "0.4",
                                                    "sync.diloco.outer_momentum": "0.9"},
        # the floor given the lr the baseline's grid ends on: is the every-step-averaging gap an lr mismatch?
        "floor at inner lr 4e-3": {**TWO_SITE_FLOOR, "optim.lr": "4e-3"},
        "floor at inner lr 6e-3": {**TWO_SITE_FLOOR, "optim.lr": "6e-3"},
        "inner lr 6e-3": {"optim.lr": "6e-3"},
        # the inner lr the baseline's tuning split picked (below two_site's grid), and the plain token-weighted mean of the
        # outer gradients instead of the radial-directional merge (the default rests on a 300-step comparison)
        "inner lr 2.52e-3 (the baseline's tuning-split pick)": {"optim.lr": "2.52e-3"},
        "plain mean of the outer gradients": {"sync.diloco.average": "mean"},
        # the bpb-vs-bytes frontier: codec x H x sparsity (top-k with error feedback, SparseLoCo-style)
        "frontier: int8": {"sync.codec": "int8"},
        "frontier: int2": {"sync.codec": "int2"},
        "frontier: top8_int4": {"sync.codec": "top8_int4"},
        "frontier: top16_int4": {"sync.codec": "top16_int4"},
        "frontier: top32_int4": {"sync.codec": "top32_int4"},
        "frontier: top16_int2": {"sync.codec": "top16_int2"},
        "frontier: int4, H=100": {"sync.H": "100"},
        # half the window at half the bits: about the bytes of H = 50 int4 (the default), twice the syncs
        "frontier: int2, H=25": {"sync.codec": "int2", "sync.H": "25"},
        # between the every-step floor and H = 25: what syncing often enough for parity costs in bytes
        "frontier: int4, H=10": {"sync.H": "10"},
        "frontier: int4, H=5": {"sync.H": "5"},
        # the same at the lr that brings the every-step floor to 1.013
        "frontier: int4, H=10, inner lr 4e-3": {"sync.H": "10", "optim.lr": "4e-3"},
        "frontier: int4, H=5, inner lr 4e-3": {"sync.H": "5", "optim.lr": "4e-3"},
        "frontier: top16_int4, H=25": {"sync.codec": "top16_int4", "sync.H": "25"},
        "frontier: top32_int4, H=10": {"sync.codec": "top32_int4", "sync.H": "10"},
        "frontier: top16_int2, H=10": {"sync.codec": "top16_int2", "sync.H": "10"},
        "frontier: top32_int4, H=10, final fp32": {"sync.codec": "top32_int4", "sync.H": "10", "sync.diloco.final_codec": "fp32"},
        # Streaming DiLoCo's own 4-bit float (E3M0) beside the OCP one
        "frontier: fp4_e3m0": {"sync.codec": "fp4_e3m0"},
        "frontier: fp4_e2m1": {"sync.codec": "fp4_e2m1"},
        # SparseLoCo with the paper's settings, then one change each: density (1/32, 1/128 of each chunk), H (the
        # paper's 30 and 50 beside 15), value bits (4), the decay (beta 1: plain error feedback), and streamed as
        # two_site streams (P = 2 fragments, tau = 1, the kept steps merge)
        "frontier: SparseLoCo as published (H=15, 1/64, 2-bit, beta 0.95)": SPARSELOCO_PAPER,
        "frontier: SparseLoCo, 1/32 (3.1 %)": {**SPARSELOCO_PAPER, "sync.codec": "ctop32_int2"},
        "frontier: SparseLoCo, 1/128 (0.8 %)": {**SPARSELOCO_PAPER, "sync.codec": "ctop128_int2"},
        "frontier: SparseLoCo, H=30": {**SPARSELOCO_PAPER, "sync.H": "30"},
        "frontier: SparseLoCo, H=50": {**SPARSELOCO_PAPER, "sync.H": "50"},
        "frontier: SparseLoCo, 4-bit values": {**SPARSELOCO_PAPER, "sync.codec": "ctop64_int4"},
        "frontier: SparseLoCo, beta 1 (no decay)": {**SPARSELOCO_PAPER, "sync.diloco.error_feedback_decay": "1.0"},
        "frontier: SparseLoCo streamed (P=2, tau=1)": SPARSELOCO,
        # the H x density x value-bits sweep on the streamed layout (the better of the two at 1200 steps): H 15 and 30 x
        # 1/64 and 1/32 kept per chunk x 2- and 4-bit values
        "frontier: SparseLoCo streamed, 1/32": {**SPARSELOCO, "sync.codec": "ctop32_int2"},
        "frontier: SparseLoCo streamed, 4-bit values": {**SPARSELOCO, "sync.codec": "ctop64_int4"},
        "frontier: SparseLoCo streamed, 1/32, 4-bit values": {**SPARSELOCO, "sync.codec": "ctop32_int4"},
        "frontier: SparseLoCo streamed, H=30": {**SPARSELOCO, "sync.H": "30"},
        "frontier: SparseLoCo streamed, H=30, 1/32": {**SPARSELOCO, "sync.H": "30", "sync.codec": "ctop32_int2"},
        "frontier: SparseLoCo streamed, H=30, 4-bit values": {**SPARSELOCO, "sync.H": "30", "sync.codec": "ctop64_int4"},
        "frontier: SparseLoCo streamed, H=30, 1/32, 4-bit values": {**SPARSELOCO, "sync.H": "30", "sync.codec": "ctop32_int4"},
        # density against H at about 1000x fewer bytes: 1/32 synced every 16 steps, 1/16 every 32
        "frontier: SparseLoCo streamed, 1/32, H=16": {**SPARSELOCO, "sync.H": "16", "sync.codec": "ctop32_int2"},
        "frontier: SparseLoCo streamed, 1/16, H=32": {**SPARSELOCO, "sync.H": "32", "sync.codec": "ctop16_int2"},
        # H mattered more than density at 1200 steps (H=30 lost 7% at 1/64, 2% at 1/32): the sparser chunk synced twice
        # as often as the paper's H, at about the paper layout's bytes
        "frontier: SparseLoCo streamed, 1/128, H=8": {**SPARSELOCO, "sync.H": "8", "sync.codec": "ctop128_int2"},
        # the same sparse chunk at ~1200x (H=5) and about the goal's 3000x (H=13, 14)
        "frontier: SparseLoCo streamed, 1/128, H=5": {**SPARSELOCO, "sync.H": "5", "sync.codec": "ctop128_int2"},
        "frontier: SparseLoCo streamed, 1/128, H=13": {**SPARSELOCO, "sync.H": "13", "sync.codec": "ctop128_int2"},
        "frontier: SparseLoCo streamed, 1/128, H=14": {**SPARSELOCO, "sync.H": "14", "sync.codec": "ctop128_int2"},
    },
    "eight_cell": {
        "plain mean merge (before)": {"sync.butterfly.merge": "mean"},
        "no final average (cell 0 deployed)": {"sync.butterfly.final_average": "false"},
        "exact average every window": {"sync.butterfly.exact_average_every": "1"},
        "mixing twice as often (exchanges_per_window 12)": {"sync.butterfly.exchanges_per_window": "12"},
        # deltas against the cells' last common state (error feedback is meaningful on them; sync/butterfly.py)
        "int8 payloads + error feedback": {"sync.codec": "int8", "sync.butterfly.payload": "delta"},
        # the same with a fresh reference every window (pair it with "exact average every window"): the deltas then
        # span one window's drift instead of the whole run's
        "int8 payloads + error feedback, exact average every window": {
            "sync.codec": "int8", "sync.butterfly.payload": "delta", "sync.butterfly.exact_average_every": "1"},
        "int4 payloads + error feedback, exact average every window": {
            "sync.codec": "int4", "sync.butterfly.payload": "delta", "sync.butterfly.exact_average_every": "1"},
        # toward the floor: mix more often (each fragment every ~3 steps, still more than tau apart), the two best
        # single choices together, and without the overlap delay
        "mixing every ~3 steps (exchanges_per_window 16)": {"sync.butterfly.exchanges_per_window": "16"},
        "mixing every 2 steps (exchanges_per_window 25)": {"sync.butterfly.exchanges_per_window": "25"},
        "exchanges_per_window 12 + exact average every window": {"sync.butterfly.exchanges_per_window": "12",
                                                                 "sync.butterfly.exact_average_every": "1"},
        "no overlap delay (tau=0)": {"sync.tau": "0"},
        # the like-for-like all-reduce control: the same cells, cadence (each fragment every 8 steps), delay and fp32
        # payloads, but an exact mean of all eight instead of a pairwise exchange
        "control: DiLoCo all-reduce, same cadence (H=8, tau=2, fp32)": EIGHT_CELL_ALLREDUCE_CONTROL,
        # no mixing rule can beat the eight replicas averaged after every step: the bound on any butterfly choice
        "floor: 8 replicas averaged every step (H=1, fp32)": EIGHT_CELL_FLOOR,
        "floor at inner lr 4e-3 (8 replicas)": {**EIGHT_CELL_FLOOR, "optim.lr": "4e-3"},
        # per-cell batch at equal training tokens: 10 sequences per cell for half the steps (and half the warm-up),
        # H halved so that the cells mix as many times (and send as many bytes) as the tuned eight_cell
        "per-cell batch 10, 150 steps, H=25 (equal tokens)": {
            **{f"islands.{i}.{k}": "10" for i in range(8) for k in ("batch_size", "micro_batch_size")},
            "steps": "150", "optim.warmup_steps": "15", "sync.H": "25"},
    },
}


def run_dir(out: Path, arm: str, sets: dict[str, str], seed: int) -> Path:
    # hashed under the sync keys' flat names from before the per-strategy sub-configs (config.MOVED_KEYS): the
    # numbers did not move, so the runs already on disk stay found
    legacy = {new: old for old, new in MOVED_KEYS.items() if new != "sync.tau"}  # tau was flat before too
    key = json.dumps(sorted((legacy.get(k, k), v) for k, v in sets.items()))
    return out / arm / hashlib.sha256(key.encode()).hexdigest()[:10] / f"seed{seed}"


# what every protocol run sets besides its arm's settings and its seed (one thread: bit-reproducible per seed)
RUN_SETS = {"threads": "1", "data.tune_fraction": str(TUNE_FRACTION), "data.score_tune": "true", "wandb_mode": "disabled",
            "progress": "false"}


def overrides(sets: dict[str, str]) -> dict[str, str]:
    """Every ``--set`` a protocol run of ``sets`` passes, but its seed (a frontier point records these)."""
    return {**sets, **RUN_SETS}


def islands_kit_run(experiment: str, preset: str, sets: dict[str, str], seed: int, d: Path) -> dict:
    """``islands-kit run EXPERIMENT --preset PRESET --set ... --set seed=SEED --out D`` in its own process with one
    thread; the result.json it wrote (a failure raises with the log's tail)."""
    d.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "islands_kit", "run", experiment, "--preset", preset, "--out", str(d)]
    for k, v in {**sets, "seed": str(seed)}.items():
        cmd += ["--set", f"{k}={v}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    (d / "log.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not (d / "result.json").exists():
        raise RuntimeError(f"{experiment} {sets} seed {seed} failed (see {d / 'log.txt'}):\n{proc.stderr[-2000:]}")
    return json.loads((d / "result.json").read_text())


def run_one(out: Path, arm: str, experiment: str, sets: dict[str, str], seed: int, preset: str,
            log: "Progress") -> dict:
    d = run_dir(out, arm, sets, seed)
    if (d / "result.json").exists():
        return json.loads((d / "result.json").read_text())
    d.mkdir(parents=True, exist_ok=True)
    (d / "settings.json").write_text(json.dumps({"arm": arm, "experiment": experiment, "sets": sets, "seed": seed}))
    log.start(arm, sets, seed)
    t0 = time.time()
    res = islands_kit_run(experiment, preset, overrides(sets), seed, d)
    log.done(arm, sets, seed, res, time.time() - t0)
    return res


class Progress:
    """One line per run as it starts and ends, with a running ETA from the runs finished so far."""

    def __init__(self, total: int, done: int, jobs: int) -> None:
        self.total, self.done_n, self.jobs, self.times = total, done, max(1, jobs), []

    def start(self, arm: str, sets: dict[str, str], seed: int) -> None:
        print(f"[{self.done_n}/{self.total}] start {arm} seed {seed} {sets}", flush=True)

    def done(self, arm: str, sets: dict[str, str], seed: int, res: dict, secs: float) -> None:
        self.done_n += 1
        self.times.append(secs)
        left = self.total - self.done_n
        eta = statistics.median(self.times) * left / self.jobs
        print(f"[{self.done_n}/{self.total}] done  {arm} seed {seed}: tune {res.get('final_tune_bpb')} "
              f"val {res.get('final_val_bpb')} in {secs / 60:.1f} min; ~{eta / 60:.0f} min left", flush=True)


SKIPPED: set[str] = set()  # ablation rows left out of this invocation (--only-ablations)


def winner(out: Path, arm: str) -> tuple[dict[str, str], list[tuple[dict[str, str], float | None]]]:
    """The tuned settings of ``arm``: lowest final_tune_bpb over its trials (a diverged trial never wins)."""
    rows = []
    for t in ARMS[arm].trials():
        sets = {**ARMS[arm].fixed, **t}
        f = run_dir(out, arm, sets, 0) / "result.json"
        bpb = json.loads(f.read_text()).get("final_tune_bpb") if f.exists() else None
        rows.append((sets, bpb))
    done = [(s, b) for s, b in rows if b is not None]
    if len(done) < len(rows):
        raise LookupError(f"{arm}: {len(rows) - len(done)} tuning runs not finished")
    return min(done, key=lambda r: r[1])[0], rows


def _finished(out: Path, arms: list[str], seeds: list[int], ablation_seeds: list[int]) -> int:
    """How many of this invocation's runs are already done (the seed and ablation runs count once their arm's
    tuning has a winner)."""
    done = 0
    for a in arms:
        trials = [{**ARMS[a].fixed, **t} for t in ARMS[a].trials()]
        done += sum((run_dir(out, a, t, 0) / "result.json").exists() for t in trials)
        try:
            best, _ = winner(out, a)
        except LookupError:
            continue
        done += sum((run_dir(out, a, best, s) / "result.json").exists() for s in seeds if s != 0)
        done += sum((run_dir(out, f"{a}_ablation", {**best, **c}, s) / "result.json").exists()
                    for n, c in ABLATIONS.get(a, {}).items() if n not in SKIPPED for s in ablation_seeds)
    return done


def execute(out: Path, preset: str, seeds: list[int], jobs: int, ablation_seeds: list[int], arms: list[str]) -> None:
    check_budgets(ARMS)
    n_trials = sum(len(ARMS[a].trials()) for a in arms)
    n_abl = sum(1 for a in arms for n in ABLATIONS.get(a, {}) if n not in SKIPPED)
    total = n_trials + len(arms) * (len(seeds) - 1) + n_abl * len(ablation_seeds)
    log = Progress(total, _finished(out, arms, seeds, ablation_seeds), jobs)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for phase in PHASES:
            mine = [a for a in phase if a in arms]
            if not mine:
                continue
            tune = [(a, ARMS[a].experiment, {**ARMS[a].fixed, **t}, 0) for a in mine for t in ARMS[a].trials()]
            list(pool.map(lambda r: run_one(out, *r, preset=preset, log=log), tune))
            stage2 = []
            for a in mine:
                best, _ = winner(out, a)
                stage2 += [(a, ARMS[a].experiment, best, s) for s in seeds]
            for a in mine:
                best, _ = winner(out, a)
                for change in [c for n, c in ABLATIONS.get(a, {}).items() if n not in SKIPPED]:
                    stage2 += [(f"{a}_ablation", ARMS[a].experiment, {**best, **change}, s) for s in ablation_seeds]
            # the arms' seeds first (seed by seed, so a stopped protocol holds complete pairs), then the ablations
            stage2.sort(key=lambda r: (r[0].endswith("_ablation"), r[3]))
            list(pool.map(lambda r: run_one(out, *r, preset=preset, log=log), stage2))


def _load(out: Path, arm: str, sets: dict[str, str], seed: int) -> dict | None:
    f = run_dir(out, arm, sets, seed) / "result.json"
    return json.loads(f.read_text()) if f.exists() else None


def _spread(xs: list[float]) -> str:
    if not xs:
        return "—"
    if len(xs) == 1:
        return f"{xs[0]:.4f} (1 seed)"
    return f"{statistics.mean(xs):.4f} ({min(xs):.4f}..{max(xs):.4f})"


def report(out: Path, preset: str, seeds: list[int], arms: list[str], ablation_seeds: list[int]) -> str:
    budgets = check_budgets(ARMS)
    lines = ["Protocol: every arm tuned over as many settings as its baseline ("
             + ", ".join(f"{a} {budgets[a]}" for a in arms) + f") at seed 0 on the tuning split (data.tune_fraction = "
             f"{TUNE_FRACTION}: the bytes just before the validation tail, held out of training), winner = lowest "
             f"final_tune_bpb; the winner then trained at seeds {seeds}; bpb on all validation bytes; ratios paired "
             f"per seed (same initial weights and data order), mean (min..max). One torch thread per run.", ""]
    lines += ["| arm | grid (tune bpb per trial) | winner | val bpb, mean (min..max) | / its baseline, paired | "
              "bytes vs DDP |", "|---|---|---|---|---|---|"]
    def best_of(a: str) -> dict[str, str] | None:
        try:
            return winner(out, a)[0]
        except LookupError:
            return None

    winners = {}
    for a in arms:
        try:
            best, rows = winner(out, a)
        except LookupError as e:
            lines.append(f"| {a} | {e} | | | | |")
            continue
        winners[a] = best
        grid = "; ".join(", ".join(f"{k.split('.')[-1]}={v}" for k, v in s.items() if k in ARMS[a].grid)
                         + f": {b:.4f}" for s, b in rows)
        res = {s: _load(out, a, best, s) for s in seeds}
        vals = [r["final_val_bpb"] for r in res.values() if r and r.get("final_val_bpb") is not None]
        ratios = []
        ref_best = best_of(ARMS[a].ref)
        if ref_best is not None:
            for s, r in res.items():
                b = _load(out, ARMS[a].ref, ref_best, s)
                if r and b and r.get("final_val_bpb") and b.get("final_val_bpb"):
                    ratios.append(r["final_val_bpb"] / b["final_val_bpb"])
        r0 = next((r for r in res.values() if r), None)
        fewer = f"{r0['ddp_equivalent_bytes'] / r0['cross_site_bytes']:.0f}x less" if r0 and r0["cross_site_bytes"] else "—"
        win = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in best.items() if k in ARMS[a].grid)
        lines.append(f"| {a} | {grid} | {win} | {_spread(vals)} | {_spread(ratios)} | {fewer} |")
    for a, rows in ABLATIONS.items():
        if a not in winners:
            continue
        best = winners[a]
        ref, ref_best = ARMS[a].ref, best_of(ARMS[a].ref)
        lines += ["", f"Ablations on the tuned {a} (one change each; seeds {ablation_seeds}), paired with it per seed:",
                  "", f"| change | val bpb | / tuned {a} | / {ref} | bytes vs DDP |", "|---|---|---|---|---|"]
        not_run = []
        for name, change in rows.items():
            rs, vs_arm, vs_ref = [], [], []
            for s in ablation_seeds:
                r = _load(out, f"{a}_ablation", {**best, **change}, s)
                t = _load(out, a, best, s)
                b = _load(out, ref, ref_best, s) if ref_best else None
                if r and r.get("final_val_bpb"):
                    rs.append(r["final_val_bpb"])
                    if t and t.get("final_val_bpb"):
                        vs_arm.append(r["final_val_bpb"] / t["final_val_bpb"])
                    if b and b.get("final_val_bpb"):
                        vs_ref.append(r["final_val_bpb"] / b["final_val_bpb"])
            r0 = next((x for x in (_load(out, f"{a}_ablation", {**best, **change}, s) for s in ablation_seeds) if x),
                      None)
            if r0 is None:
                not_run.append(name)
                continue
            fewer = f"{r0['ddp_equivalent_bytes'] / r0['cross_site_bytes']:.0f}x less" if r0["cross_site_bytes"] else "—"
            lines.append(f"| {name} | {_spread(rs)} | {_spread(vs_arm)} | {_spread(vs_ref)} | {fewer} |")
        if not_run:
            lines += ["", "Not run yet (the same command with `--only-ablations` naming them runs them): "
                      + "; ".join(not_run) + "."]
    cmd = (f"python benchmarks/protocol.py --preset {preset} --seeds {' '.join(map(str, seeds))} --ablation-seeds "
           f"{' '.join(map(str, ablation_seeds))} --out {out}")
    lines += ["", f"Command: `{cmd}` (resumable; `--report` re-prints this table)."]
    return "\n".join(lines)


def write_results(text: str, preset: str) -> None:
    replace_marked_block(ROOT / "benchmarks" / "RESULTS.md", "protocol",
                         f"## Tuned comparison under the protocol ({preset} preset; benchmarks/protocol.py)\n\n{text}",
                         at_top=True)


def _frontier_label(name: str) -> str:
    """A two_site frontier row's label: its name without "frontier: ", the streamed SparseLoCo rows as "SparseLoCo,
    2 fragments, ..." (the labels benchmarks/frontier-demo.json carries)."""
    if name == "frontier: SparseLoCo streamed (P=2, tau=1)":
        return "SparseLoCo, 2 fragments (H=15, 1/64, 2-bit, beta 0.95)"
    return name.replace("frontier: SparseLoCo streamed, ", "SparseLoCo, 2 fragments, ").replace("frontier: ", "")


# the rows each arm's bpb-vs-bytes frontier draws (name -> label): two_site the codec x H x sparsity points and the
# floor, eight_cell the mixing intensities and payload codecs between the tuned butterfly and the every-step floor
FRONTIER_ROWS: dict[str, dict[str, str]] = {
    "two_site": {**{n: _frontier_label(n) for n in ABLATIONS["two_site"] if n.startswith(("frontier:", "floor:"))},
                 "H=25": "int4, H=25", "QSR H from 25 (alpha 1e-2)": "int4, QSR from H=25 (alpha 1e-2)",
                 "QSR H from 25 (alpha 1.5e-2)": "int4, QSR from H=25 (alpha 1.5e-2)"},
    "eight_cell": {
        "exact average every window": "exact average every window",
        "mixing twice as often (exchanges_per_window 12)": "E=12",
        "mixing every ~3 steps (exchanges_per_window 16)": "E=16, every ~3 steps (the demo default, the best E measured)",
        "mixing every 2 steps (exchanges_per_window 25)": "E=25",
        "exchanges_per_window 12 + exact average every window": "E=12 + exact average",
        "int8 payloads + error feedback": "int8 deltas",
        "int8 payloads + error feedback, exact average every window": "int8 deltas + exact average",
        "int4 payloads + error feedback, exact average every window": "int4 deltas + exact average",
        "control: DiLoCo all-reduce, same cadence (H=8, tau=2, fp32)": "all-reduce control, H=8",
        "floor: 8 replicas averaged every step (H=1, fp32)": "floor: every-step average",
    },
}
# the tuned arm's label; the star (``default``) goes to the row the demo preset runs where that is not the arm's winner
DEFAULT_LABEL = {"two_site": "two_site defaults (int4, H=50, radial-directional)",
                 "eight_cell": "E=6, every ~8 steps (the lr grid's pick, made before E was tuned)"}
DEMO_DEFAULT_ROW = {"eight_cell": "mixing every ~3 steps (exchanges_per_window 16)"}
# the baseline the frontiers divide by: the demo's (lr 3e-3, presets._DEMO_SETTINGS: ahead of the tuning split's pick
# on the validation bytes at every seed), a trial of the baseline's grid
FRONTIER_BASELINE = {"baseline": {"optim.lr": _lr(LR)}}


def frontier_points(out: Path, arm: str = "two_site", seed: int = 0, preset: str = "demo") -> list[dict]:
    """``arm``'s frontier as plot points at ``seed`` (the tuned arm and its ``FRONTIER_ROWS``): ``label``, ``fewer``
    (x fewer bytes than data-parallel), ``ratio`` (bpb / the demo's baseline, ``FRONTIER_BASELINE``, at that seed);
    ``default`` marks what the demo preset runs (the tuned arm, or its ``DEMO_DEFAULT_ROW``). Rows without a finished
    run at ``seed`` are left out. Each point also says how to make it again (``remake_point``): ``experiment``, ``preset``, ``seeds``,
    ``overrides`` (every ``--set`` of its run but the seed), its ``bpb`` per seed, and the same for the ``baseline``
    its ratio divides by."""
    ref = ARMS[arm].ref
    ref_best = {**ARMS[ref].fixed, **FRONTIER_BASELINE[ref]} if ref in FRONTIER_BASELINE else winner(out, ref)[0]
    best, _ = winner(out, arm)
    base = _load(out, ref, ref_best, seed)
    star = DEMO_DEFAULT_ROW.get(arm)
    rows = [(DEFAULT_LABEL[arm], arm, best, star is None)]
    rows += [(label, f"{arm}_ablation", {**best, **ABLATIONS[arm][name]}, name == star)
             for name, label in FRONTIER_ROWS[arm].items()]
    pts = []
    for label, run_arm, sets, default in rows:
        r = _load(out, run_arm, sets, seed)
        if r and base and r.get("final_val_bpb") and r["cross_site_bytes"]:
            pts.append({"label": label, "fewer": r["ddp_equivalent_bytes"] / r["cross_site_bytes"],
                        "ratio": r["final_val_bpb"] / base["final_val_bpb"], "default": default,
                        "experiment": ARMS[arm].experiment, "preset": preset, "seeds": [seed],
                        "overrides": overrides(sets), "bpb": [r["final_val_bpb"]],
                        "baseline": {"experiment": ARMS[ref].experiment, "overrides": overrides(ref_best),
                                     "bpb": [base["final_val_bpb"]]}})
    return pts


def remake_point(point: dict, out: Path, preset: str | None = None, seed: int | None = None,
                 baseline: bool = False) -> dict:
    """Run a frontier point again from what the file holds (its experiment, ``overrides`` and first seed, at its own
    preset unless ``preset`` is given) into ``out``; with ``baseline`` its baseline too. Returns ``{"bpb": ...,
    "stored_bpb": ..., "seed": ..., "preset": ..., "baseline_bpb"/"ratio" with ``baseline``}``; the stored bpb is
    None for a point recorded before points carried their bpb."""
    if "overrides" not in point:
        raise ValueError(f"frontier point {point.get('label')!r} holds no overrides: it cannot be re-made")
    seed = point["seeds"][0] if seed is None else seed
    preset = preset or point["preset"]
    res = islands_kit_run(point["experiment"], preset, point["overrides"], seed, out / "point")
    stored = point.get("bpb")
    same_run = seed in point["seeds"] and preset == point["preset"] and stored is not None
    got = {"bpb": res["final_val_bpb"], "stored_bpb": stored[point["seeds"].index(seed)] if same_run else None,
           "seed": seed, "preset": preset, "fewer": res["ddp_equivalent_bytes"] / res["cross_site_bytes"]}
    if baseline:
        b = point["baseline"]
        base = islands_kit_run(b["experiment"], preset, b["overrides"], seed, out / "baseline")
        got.update(baseline_bpb=base["final_val_bpb"], ratio=res["final_val_bpb"] / base["final_val_bpb"])
    return got


def frontier_file(arm: str, preset: str) -> Path:
    """Where ``--write-results`` puts ``arm``'s frontier points (the two_site and eight_cell notebooks draw them)."""
    name = f"frontier-{preset}.json" if arm == "two_site" else f"frontier-{arm}-{preset}.json"
    return ROOT / "benchmarks" / name


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("runs/protocol"))
    ap.add_argument("--ablation-seeds", type=int, nargs="*", default=[0], help="seeds of the ablation rows (none: skip)")
    ap.add_argument("--only-ablations", nargs="*", default=None, metavar="SUBSTRING",
                    help="run only the ablation rows whose name contains one of these (the report shows all rows)")
    ap.add_argument("--report", action="store_true", help="only print the table from finished runs")
    ap.add_argument("--write-results", action="store_true", help="also write the table into benchmarks/RESULTS.md")
    ap.add_argument("--remake-point", metavar="LABEL", default=None,
                    help="run the frontier point LABEL again from its stored overrides (into --out) and compare bpb")
    ap.add_argument("--frontier", type=Path, default=None,
                    help="with --remake-point: the frontier file (default: the two_site then eight_cell file of --preset)")
    ap.add_argument("--with-baseline", action="store_true", help="with --remake-point: re-make its baseline too")
    a = ap.parse_args(argv)
    if a.remake_point is not None:
        files = [a.frontier] if a.frontier else [frontier_file(arm, a.preset) for arm in FRONTIER_ROWS]
        points = [p for f in files if f.exists() for p in json.loads(f.read_text()) if p["label"] == a.remake_point]
        if not points:
            raise SystemExit(f"--remake-point: no point labelled {a.remake_point!r} in {', '.join(map(str, files))}")
        got = remake_point(points[0], a.out, a.preset, baseline=a.with_baseline)
        same = "identical" if got["bpb"] == got["stored_bpb"] else (
            "no stored bpb at this seed and preset to compare" if got["stored_bpb"] is None
            else f"differs by {got['bpb'] - got['stored_bpb']:+.3g}")
        print(json.dumps(got), f"\n{a.remake_point}: bpb {got['bpb']} ({same})")
        return
    if a.only_ablations is not None:
        for arm_rows in ABLATIONS.values():
            for name in [n for n in arm_rows if not any(sub in n for sub in a.only_ablations)]:
                SKIPPED.add(name)
    if not a.report:
        execute(a.out, a.preset, a.seeds, a.jobs, a.ablation_seeds, a.arms)
    text = report(a.out, a.preset, a.seeds, a.arms, a.ablation_seeds)
    print(text)
    if a.write_results:
        write_results(text, a.preset)
        for arm in FRONTIER_ROWS:  # the points the two_site and eight_cell notebooks draw
            if arm in a.arms and ARMS[arm].ref in a.arms:
                frontier_file(arm, a.preset).write_text(
                    json.dumps(frontier_points(a.out, arm, preset=a.preset), indent=1) + "\n")


if __name__ == "__main__":
    main()
