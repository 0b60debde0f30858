"""The outer step's rows (issue: "the outer step that beats synchronous training"): SNOO on the baseline (one model,
data-parallel, plus Nesterov on the pseudo-gradient of K inner steps: DiLoCo with M = 1 on the baseline's own data),
one hypothesis a row, and the winner carried to two_site and eight_cell. Each row is one ``islands-kit run`` per seed
with one thread, paired with the same-code baseline at the same seed, run by this script too.

    OMP_NUM_THREADS=1 python benchmarks/outer_rows.py --stage snoo --jobs 2           # run what is missing (resumable)
    python benchmarks/outer_rows.py --write                                           # benchmarks/outer-demo.json
    python benchmarks/outer_rows.py --remake-point "SNOO K=25, 0.5/0.5"               # one row again at seed 0

Runs land in ``runs/outer/<experiment>/<hash of the overrides>/seed<N>`` (``protocol.run_dir``); a finished run is
never run again, so an interrupted invocation resumes. ``outer-demo.json`` holds the frontier files' schema (label,
experiment, preset, overrides, seeds, bpb, baseline, fewer) plus ``replicas`` (models trained: 1, 2 or 8), the
tuning split's bpb and both ratios (choices are read on the tuning split; the validation ratio is the one quoted).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import ROOT, islands_kit_run, overrides, run_dir  # noqa: E402

from islands_kit.presets import TWO_SITE_M1_CONTROL  # noqa: E402

OUT = ROOT / "runs" / "outer"
FILE = ROOT / "benchmarks" / "outer-demo.json"
FRONTIER = ROOT / "benchmarks" / "frontier-demo.json"  # two_site's protocol points (its default: the control)
FRONTIER8 = ROOT / "benchmarks" / "frontier-eight_cell-demo.json"
SEEDS3 = [0, 1, 2]


def snoo(k: int, lr: float, mu: float, **extra: str) -> dict[str, str]:
    """``--set`` keys of SNOO with K inner steps, outer lr η and momentum μ on top of any experiment."""
    return {"optim.snoo.k": str(k), "optim.snoo.lr": str(lr), "optim.snoo.momentum": str(mu),
            **{f"optim.snoo.{k2}": v for k2, v in extra.items()}}


def outer(lr: float, mu: float, **extra: str) -> dict[str, str]:
    """``--set`` keys of DiLoCo's outer step (two_site, the M = 1 control)."""
    return {"sync.diloco.outer_lr": str(lr), "sync.diloco.outer_momentum": str(mu),
            **{f"sync.{k}" if k in ("H", "codec", "error_feedback") else f"sync.diloco.{k}": v for k, v in extra.items()}}


# the same 6,144,000 tokens at twice the batch in half the steps (warm-up and evaluations scaled with the steps)
BATCH80 = {"steps": "600", "eval_every": "75", "optim.warmup_steps": "60",
           "islands.0.batch_size": "48", "islands.0.micro_batch_size": "24",
           "islands.1.batch_size": "32", "islands.1.micro_batch_size": "16"}
M1 = TWO_SITE_M1_CONTROL  # site A alone with the whole batch of 40
FP32 = {"sync.codec": "fp32", "sync.error_feedback": "false", "sync.diloco.final_codec": "fp32"}

TWO_SITE = "two_site defaults (int4, H=50, radial-directional)"  # the frontier file's default point
EIGHT_CELL = "eight_cell defaults (butterfly, E=16)"
BATCH80_BASE = "baseline, batch 80 (600 steps)"
WIDTH128_BASE = "baseline, width 128"
WIDTH128 = {"model.d_model": "128"}
HALF_BASE = "baseline, half the corpus"
# repeated data: the first half of the corpus (its own train / validation split), so the same 6,144,000 tokens pass
# over its training bytes ~2.7 times instead of ~1.35 (windows are drawn with replacement)
HALF = {"data.max_bytes": "2528599"}
# label -> (stage, experiment, replicas, overrides, seeds)
ROWS: dict[str, tuple[str, str, int, dict[str, str], list[int]]] = {
    "baseline (AdamW, lr 3e-3)": ("base", "baseline", 1, {}, SEEDS3),
    # SNOO on the baseline: the published settings first, then one hypothesis a row
    "SNOO K=25, 0.5/0.5": ("snoo", "baseline", 1, snoo(25, 0.5, 0.5), SEEDS3),
    "SNOO K=25, 0.7/0.9 (DiLoCo's)": ("snoo", "baseline", 1, snoo(25, 0.7, 0.9), [0]),
    "SNOO K=25, 0.7/0.9, ramp 10": ("snoo", "baseline", 1, snoo(25, 0.7, 0.9, momentum_warmup="10"), [0]),
    "SNOO K=28, 0.68/0.37 (modded-nanogpt record)": ("snoo", "baseline", 1, snoo(28, 0.68, 0.37), [0]),
    "SNOO K=100, 0.8/0.75": ("snoo", "baseline", 1, snoo(100, 0.8, 0.75), [0]),
    "SNOO K=10, 0.5/0.5": ("snoo", "baseline", 1, snoo(10, 0.5, 0.5), [0]),
    "SNOO K=10, 0.5/0.5, ramp 10": ("snoo", "baseline", 1, snoo(10, 0.5, 0.5, momentum_warmup="10"), SEEDS3),
    "SNOO K=50, 0.5/0.5": ("snoo", "baseline", 1, snoo(50, 0.5, 0.5), [0]),
    # the window with the ramp (the K in {5, 10, 25}; K = 10 and 25 over 3 seeds below)
    "SNOO K=5, 0.5/0.5, ramp 10": ("snoo", "baseline", 1, snoo(5, 0.5, 0.5, momentum_warmup="10"), [0]),
    "SNOO K=50, 0.5/0.5, ramp 10": ("snoo", "baseline", 1, snoo(50, 0.5, 0.5, momentum_warmup="10"), [0]),
    "SNOO K=25, 0.8/0.5": ("snoo", "baseline", 1, snoo(25, 0.8, 0.5), [0]),
    "SNOO K=25, 0.5/0.7": ("snoo", "baseline", 1, snoo(25, 0.5, 0.7), [0]),
    "SNOO K=25, 0.5/0.5, hidden matrices only": ("snoo", "baseline", 1, snoo(25, 0.5, 0.5, params="hidden"), [0]),
    "SNOO K=25, 0.5/0.5, slow decay 0.04": ("snoo", "baseline", 1, snoo(25, 0.5, 0.5, weight_decay="0.04"), [0]),
    "SNOO K=25, 0.5/0.5, inner lr 4.5e-3": ("snoo", "baseline", 1, {**snoo(25, 0.5, 0.5), "optim.lr": "4.5e-3"}, [0]),
    "SNOO K=25, 0.7/0.9, no warm-up ramp of the inner lr": (
        "snoo", "baseline", 1, {**snoo(25, 0.7, 0.9), "optim.warmup_steps": "0"}, [0]),
    "SNOO K=25, 0.7/0.9, experts follow AdamW (dense)": ("snoo2", "baseline", 1, snoo(25, 0.7, 0.9, params="dense"), [0]),
    "SNOO K=25, 0.5/0.5, experts follow AdamW (dense)": ("snoo2", "baseline", 1, snoo(25, 0.5, 0.5, params="dense"), [0]),
    "SNOO K=25, 0.7/0.9, ramp 10, slow decay 0.04": (
        "snoo2", "baseline", 1, snoo(25, 0.7, 0.9, momentum_warmup="10", weight_decay="0.04"), [0]),
    # the M = 1 lead's structure on the baseline's own data: two staggered fragments (offsets 12 and 0), the ramp
    "SNOO K=25, 2 fragments, 0.5/0.5, ramp 10": (
        "snoo2", "baseline", 1, snoo(25, 0.5, 0.5, momentum_warmup="10", fragments="2"), SEEDS3),
    # and SNOO's structure on site A's data: M = 1 DiLoCo with one fragment and no overlap
    "M=1 DiLoCo H=25 fp32, 1 fragment, tau 0, 0.5/0.5, ramp 10": (
        "m1", "two_site", 1, {**M1, **FP32, **outer(0.5, 0.5, H="25", outer_momentum_warmup="10"),
                              "sync.n_fragments": "1", "sync.tau": "0"}, SEEDS3),
    "SNOO K=25, 0.7/0.9, final fast": ("snoo2", "baseline", 1, snoo(25, 0.7, 0.9, final="fast"), [0]),
    "SNOO K=25, 0.5/0.5, final fast": ("snoo2", "baseline", 1, snoo(25, 0.5, 0.5, final="fast"), [0]),
    "SNOO K=25, 0.5/0.5, ramp 10": ("snoo", "baseline", 1, snoo(25, 0.5, 0.5, momentum_warmup="10"), SEEDS3),
    # the data-stream control: site A alone with the whole batch (no outer step): what the M = 1 rows' stream is worth
    "site A alone (M = 1 stream, no outer step)": ("m1", "two_site", 1, {**M1, "sync.strategy": "ddp"}, SEEDS3),
    # the M = 1 DiLoCo control (site A's own stream) beside SNOO on the baseline's stream
    "M=1 DiLoCo H=25 fp32, 0.5/0.5, ramp 10": (
        "m1", "two_site", 1, {**M1, **FP32, **outer(0.5, 0.5, H="25", outer_momentum_warmup="10")}, [0]),
    # the winner (0.5 / 0.5 with the ramp), one hypothesis a row: a larger inner lr (Lookahead's robustness to it),
    # the slow weights scored without the last extrapolation, a slightly larger effective step (1.2), the norm
    # mechanism at DiLoCo's setting (decay of the slow weights against the 3.6x norm), and the noise scale: the same
    # tokens in half the steps at twice the batch (paired with the baseline at that batch, its control)
    "SNOO K=25, 0.5/0.5, ramp 10, inner lr 4.5e-3": (
        "win", "baseline", 1, {**snoo(25, 0.5, 0.5, momentum_warmup="10"), "optim.lr": "4.5e-3"}, SEEDS3),
    "SNOO K=25, 0.5/0.5, ramp 10, inner lr 6e-3": (
        "win", "baseline", 1, {**snoo(25, 0.5, 0.5, momentum_warmup="10"), "optim.lr": "6e-3"}, [0]),
    "SNOO K=25, 0.5/0.5, ramp 10, final fast": (
        "win", "baseline", 1, snoo(25, 0.5, 0.5, momentum_warmup="10", final="fast"), [0]),
    "SNOO K=25, 0.6/0.5, ramp 10": ("win", "baseline", 1, snoo(25, 0.6, 0.5, momentum_warmup="10"), SEEDS3),
    "SNOO K=25, 0.7/0.5, ramp 10": ("win", "baseline", 1, snoo(25, 0.7, 0.5, momentum_warmup="10"), [0]),
    # the effective step η / (1 − μ) past 1.4 with the ramp: by η (1.6) and by μ (1.5)
    "SNOO K=25, 0.8/0.5, ramp 10": ("win", "baseline", 1, snoo(25, 0.8, 0.5, momentum_warmup="10"), [0]),
    # 0.6 / 0.6 is the tuning split's best at seed 0 (0.985 there against 0.6 / 0.5's 0.9895): its 3 seeds
    "SNOO K=25, 0.6/0.6, ramp 10": ("win", "baseline", 1, snoo(25, 0.6, 0.6, momentum_warmup="10"), SEEDS3),
    "baseline, batch 80 (600 steps)": ("batch", "baseline", 1, BATCH80, SEEDS3),
    "SNOO K=25, 0.5/0.5, ramp 10, batch 80 (600 steps)": (
        "batch", "baseline", 1, {**BATCH80, **snoo(25, 0.5, 0.5, momentum_warmup="10")}, SEEDS3),
    # width: the papers' gains grow with size; the model at width 128 (experts' d_expert kept: ~2x the time) on the
    # same tokens, SNOO paired with the baseline at that width (its control); the inner lr is the demo's, not retuned
    WIDTH128_BASE: ("width", "baseline", 1, WIDTH128, [0, 1]),
    HALF_BASE: ("repeat", "baseline", 1, HALF, [0, 1]),
    "SNOO K=25, 0.5/0.5, ramp 10, half the corpus": (
        "repeat", "baseline", 1, {**HALF, **snoo(25, 0.5, 0.5, momentum_warmup="10")}, [0, 1]),
    "SNOO K=25, 0.5/0.5, ramp 10, width 128": (
        "width", "baseline", 1, {**WIDTH128, **snoo(25, 0.5, 0.5, momentum_warmup="10")}, [0, 1]),
    # carried to two sites and eight cells: the defaults (their protocol rows, the controls), the winner's outer step
    # as DiLoCo's (plain mean and radial-directional merge; H = 50 keeps int4's 353x), and SNOO inside each site /
    # cell under the strategy's own sync (the merge moves SNOO's slow weights with it: Snoo.external)
    TWO_SITE: ("two", "two_site", 2, {"sync.diloco.outer_momentum_warmup": "10"}, SEEDS3),
    EIGHT_CELL: ("eight", "eight_cell", 8, {}, SEEDS3),
    "two_site + SNOO inside each site K=25, 0.5/0.5, ramp 10": (
        "two", "two_site", 2, snoo(25, 0.5, 0.5, momentum_warmup="10"), SEEDS3),
    "eight_cell + SNOO inside each cell K=25, 0.5/0.5, ramp 10": (
        "eight", "eight_cell", 8, snoo(25, 0.5, 0.5, momentum_warmup="10"), SEEDS3),
    "two_site + SNOO inside each site K=25, 0.5/0.5, ramp 10, inner lr 4.5e-3": (
        "two", "two_site", 2, {**snoo(25, 0.5, 0.5, momentum_warmup="10"), "optim.lr": "4.5e-3"}, SEEDS3),
    "two_site + SNOO inside each site K=25, 0.5/0.5, ramp 10, inner lr 4.5e-3, mean": (
        "two", "two_site", 2, {**snoo(25, 0.5, 0.5, momentum_warmup="10"), "optim.lr": "4.5e-3",
                               "sync.diloco.average": "mean"}, [0]),
    # the best single-site row (0.6 / 0.5: 0.9939 over 3 seeds) carried the same way
    "two_site + SNOO inside each site K=25, 0.6/0.5, ramp 10, inner lr 4.5e-3": (
        "two", "two_site", 2, {**snoo(25, 0.6, 0.5, momentum_warmup="10"), "optim.lr": "4.5e-3"}, SEEDS3),
    "two_site + SNOO inside each site K=25, 0.7/0.5, ramp 10, inner lr 4.5e-3": (
        "two", "two_site", 2, {**snoo(25, 0.7, 0.5, momentum_warmup="10"), "optim.lr": "4.5e-3"}, SEEDS3),
    "two_site + SNOO inside each site K=25, 0.5/0.5, ramp 10, inner lr 6e-3": (
        "two", "two_site", 2, {**snoo(25, 0.5, 0.5, momentum_warmup="10"), "optim.lr": "6e-3"}, [0]),
    "two_site + SNOO inside each site K=25, 0.5/0.5, ramp 10, merges smooth": (
        "two", "two_site", 2, snoo(25, 0.5, 0.5, momentum_warmup="10", merges="smooth"), [0]),
    "eight_cell + SNOO inside each cell K=25, 0.5/0.5, ramp 10, merges smooth": (
        "eight", "eight_cell", 8, snoo(25, 0.5, 0.5, momentum_warmup="10", merges="smooth"), [0]),
    "two_site 0.5/0.5, ramp 10, mean": ("two", "two_site", 2, outer(0.5, 0.5, outer_momentum_warmup="10",
                                                                   average="mean"), [0]),
    "two_site 0.5/0.5, ramp 10, radial-directional": (
        "two", "two_site", 2, outer(0.5, 0.5, outer_momentum_warmup="10"), [0]),
}
BASELINE = "baseline (AdamW, lr 3e-3)"
# the baseline at another batch, width or corpus: the control of every row that carries its overrides
VARIANT_BASES = (BATCH80_BASE, WIDTH128_BASE, HALF_BASE)
SNOO_BASE = "SNOO K=25, 0.5/0.5, ramp 10"  # the single-site optimizer the distributed rows are also divided by
STREAM_A = "site A alone (M = 1 stream, no outer step)"  # the M = 1 rows' own-stream control (same data, no outer step)


def _dir(experiment: str, sets: dict[str, str], seed: int) -> Path:
    return run_dir(OUT, experiment, sets, seed)


def _result(experiment: str, sets: dict[str, str], seed: int) -> dict | None:
    f = _dir(experiment, sets, seed) / "result.json"
    return json.loads(f.read_text()) if f.exists() else None


def _run(label: str, seed: int) -> None:
    _, experiment, _, sets, _ = ROWS[label]
    d = _dir(experiment, sets, seed)
    if (d / "result.json").exists():
        return
    t0 = time.time()
    print(f"start {label} seed {seed}", flush=True)
    d.mkdir(parents=True, exist_ok=True)
    (d / "settings.json").write_text(json.dumps({"label": label, "experiment": experiment, "sets": sets, "seed": seed}))
    try:
        res = islands_kit_run(experiment, "demo", overrides(sets), seed, d)
    except RuntimeError as e:
        print(f"FAILED {label} seed {seed}: {e}", flush=True)
        return
    print(f"done  {label} seed {seed}: val {res['final_val_bpb']:.4f} tune {res.get('final_tune_bpb')} "
          f"in {(time.time() - t0) / 60:.1f} min", flush=True)


_START = threading.Lock()


def _running() -> int:
    """``islands-kit run`` processes writing under runs/outer (this invocation's and any other's)."""
    return _count(f"islands_kit run .*--out {OUT.resolve()}/")


def _count(pattern: str) -> int:
    out = subprocess.run(["pgrep", "-fc", pattern], capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


def _run_when_free(label: str, seed: int, jobs: int) -> None:
    """Start when fewer than ``jobs`` runs are going (another invocation's included), so that two invocations
    never put more than ``jobs`` runs on the cores."""
    with _START:
        while _running() >= jobs:
            time.sleep(10)
        threading.Thread(target=_run, args=(label, seed)).start()
        time.sleep(5)  # let it appear in the process list


def execute(stages: list[str], jobs: int, labels: list[str] | None = None) -> None:
    """Every missing (row, seed) of the stages, seed 0 of every row first; or of ``labels`` in the order given,
    each with all of its seeds."""
    if labels:
        todo = [(lab, s) for lab in labels for s in ROWS[lab][4]]
    else:
        todo = sorted([(lab, s) for lab, row in ROWS.items() if row[0] in stages for s in row[4]], key=lambda t: t[1])
    todo = [t for t in todo if not (_dir(ROWS[t[0]][1], ROWS[t[0]][3], t[1]) / "result.json").exists()
            and not _count(f"islands_kit run .*--out {_dir(ROWS[t[0]][1], ROWS[t[0]][3], t[1]).resolve()}( |$)")]
    for lab, s in todo:
        _run_when_free(lab, s, jobs)


def control(label: str) -> str | None:
    """The row a row differs from by the one thing it tests (its ratio to it is quoted beside the baseline's): an
    M = 1 row's own stream (site A alone), a two_site / eight_cell row's defaults, a batch-80 / width-128 /
    half-corpus row's baseline at that setting (``VARIANT_BASES``); None for the controls themselves and for rows whose control is the baseline."""
    _, experiment, replicas, sets, _ = ROWS[label]
    if label in (BASELINE, STREAM_A, TWO_SITE, EIGHT_CELL, *VARIANT_BASES):
        return None
    if experiment == "two_site":
        return STREAM_A if replicas == 1 else TWO_SITE
    if experiment == "eight_cell":
        return EIGHT_CELL
    return next((b for b in VARIANT_BASES if ROWS[b][3].items() <= sets.items()), None)


def _stored() -> dict[str, dict]:
    """What was measured before, by label: ``outer-demo.json``'s rows, and the two_site / eight_cell defaults from
    the frontier files (their protocol runs, the same overrides). A row whose run folders are gone keeps these."""
    got: dict[str, dict] = {}
    for f, label in ((FRONTIER, TWO_SITE), (FRONTIER8, EIGHT_CELL)):
        point = next((q for q in json.loads(f.read_text()) if q.get("default")), None) if f.exists() else None
        if point is not None:
            got[label] = {**point, "label": label, "tune_bpb": [None] * len(point["bpb"])}
    if FILE.exists():
        got.update({r["label"]: r for r in json.loads(FILE.read_text())})
    return got


def _seed(label: str, seed: int, stored: dict[str, dict]) -> tuple[float, float | None, dict | None] | None:
    """(val bpb, tune bpb, result.json) of a row at a seed: its run folder's, else the stored figures (no result)."""
    _, experiment, _, sets, _ = ROWS[label]
    r = _result(experiment, sets, seed)
    old = stored.get(label)
    i = old["seeds"].index(seed) if old and seed in old["seeds"] else None
    if r is not None:
        if i is not None and old["bpb"][i] != r["final_val_bpb"]:
            print(f"note: {label} seed {seed}: the run gives {r['final_val_bpb']}, the file had {old['bpb'][i]}",
                  file=sys.stderr)
        return r["final_val_bpb"], r.get("final_tune_bpb"), r
    if i is None:
        return None
    tunes = old.get("tune_bpb") or []
    return old["bpb"][i], tunes[i] if i < len(tunes) else None, None


def rows() -> list[dict]:
    """The rows with results (run folders first, the stored figures where the folders are gone), in the frontier
    files' schema plus replicas, tuning-split bpb, paired ratios and each row's ratio to its control."""
    stored = _stored()
    out = []
    for label, (_, experiment, replicas, sets, seeds) in ROWS.items():
        got = [(s, _seed(label, s, stored), _seed(BASELINE, s, stored)) for s in seeds]
        pairs = [(s, r, b) for s, r, b in got if r is not None and b is not None]
        if not pairs:
            continue
        ratios = [r[0] / b[0] for _, r, b in pairs]
        tune_ratios = [r[1] / b[1] for _, r, b in pairs if r[1] and b[1]]
        ctl = control(label)
        vs = [(r, _seed(ctl, s, stored)) for s, r, _ in pairs] if ctl else []
        vs_ratios = [r[0] / c[0] for r, c in vs if c is not None]
        snoo_base = [(r, _seed(SNOO_BASE, s, stored)) for s, r, _ in pairs] if replicas > 1 else []
        snoo_ratios = [r[0] / c[0] for r, c in snoo_base if c is not None]
        r0 = pairs[0][1][2]  # the first seed's result.json (None: stored figures only)
        old = stored.get(label, {})
        if r0 is not None:
            measured = {"fewer": (r0["ddp_equivalent_bytes"] / r0["cross_site_bytes"]) if r0["cross_site_bytes"] else None,
                        "cross_site_bytes": r0["cross_site_bytes"],
                        "weight_norm_end": _model_norm(experiment, sets, pairs[0][0]),
                        "wall_time_s": round(r0["wall_time_s"], 1), **_movement(r0)}
        else:
            measured = {k: old.get(k) for k in ("fewer", "cross_site_bytes", "weight_norm_end", "wall_time_s",
                                                "rel_delta_median", "cos_prev_median", "applied_over_delta_median")}
        out.append({
            "label": label, "experiment": experiment, "preset": "demo", "replicas": replicas,
            "overrides": overrides(sets), "seeds": [s for s, _, _ in pairs], "bpb": [r[0] for _, r, _ in pairs],
            "tune_bpb": [r[1] for _, r, _ in pairs],
            "ratio": statistics.mean(ratios), "ratios": ratios,
            "tune_ratio": statistics.mean(tune_ratios) if tune_ratios else None,
            "control": ctl, "ratio_vs_control": statistics.mean(vs_ratios) if vs_ratios else None,
            "ratio_vs_snoo_baseline": statistics.mean(snoo_ratios) if snoo_ratios else None,
            "baseline": {"experiment": ROWS[BASELINE][1], "overrides": overrides(ROWS[BASELINE][3]),
                         "bpb": [b[0] for _, _, b in pairs]},
            **measured,
        })
    return out


def _model_norm(experiment: str, sets: dict[str, str], seed: int) -> float | None:
    """‖θ‖ of the deployed model (model.pt: every parameter, not the routers' balancing biases), and of the
    routed experts' matrices alone."""
    import torch

    f = _dir(experiment, sets, seed) / "model.pt"
    if not f.exists():
        return None
    sd = torch.load(f, map_location="cpu", weights_only=False)["state_dict"]
    return round(sum(float(v.double().pow(2).sum()) for k, v in sd.items()
                     if v.is_floating_point() and "expert_bias" not in k) ** 0.5, 2)


def _movement(res: dict) -> dict:
    """Medians over the run's outer steps (seed 0): ‖s‖/‖w‖, cos(s, previous s) and the applied step over ‖s‖."""
    log = res.get("outer_log") or []

    def med(k: str) -> float | None:
        xs = [r[k] for r in log if r.get(k) is not None]
        return round(statistics.median(xs), 4) if xs else None

    return {"rel_delta_median": med("rel_delta"), "cos_prev_median": med("cos_prev"),
            "applied_over_delta_median": med("applied_over_delta")}


SHORT = {STREAM_A: "site A alone", TWO_SITE: "two_site", EIGHT_CELL: "eight_cell", BATCH80_BASE: "baseline at batch 80",
         WIDTH128_BASE: "baseline at width 128", HALF_BASE: "baseline on half the corpus"}


def table(rs: list[dict]) -> str:
    lines = ["| row | seeds | val bpb | × baseline (val, per seed) | × baseline (tune) | × its control | bytes | "
             "‖θ‖ end | ‖s‖/‖θ‖, cos(s, s_prev), applied/‖s‖ (medians) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        tune = f"{r['tune_ratio']:.4f}" if r["tune_ratio"] else "—"
        own = f"{r['ratio_vs_control']:.4f} ({SHORT[r['control']]})" if r.get("ratio_vs_control") else "—"
        if r.get("ratio_vs_snoo_baseline"):
            vs = f"{r['ratio_vs_snoo_baseline']:.4f} (the SNOO baseline)"
            own = vs if own == "—" else f"{own}; {vs}"
        fewer = f"{r['fewer']:.0f}x fewer" if r.get("fewer") and r["fewer"] > 1.5 else "—"
        moves = (f"{r['rel_delta_median']}, {r['cos_prev_median']}, {r['applied_over_delta_median']}"
                 if r["rel_delta_median"] is not None else "—")
        lines.append(f"| {r['label']} | {len(r['seeds'])} | {statistics.mean(r['bpb']):.4f} | "
                     f"{r['ratio']:.4f} ({' / '.join(f'{x:.4f}' for x in r['ratios'])}) | {tune} | {own} | {fewer} | "
                     f"{r['weight_norm_end']} | {moves} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", nargs="*", default=[], help="stages to run: " + " ".join(sorted({r[0] for r in ROWS.values()})))
    ap.add_argument("--label", nargs="*", default=None, help="run only these rows (their labels)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write", action="store_true", help=f"write {FILE.name} and print the table")
    ap.add_argument("--remake-point", metavar="LABEL", help=f"re-make one row of {FILE.name} at seed 0 from its overrides")
    a = ap.parse_args(argv)
    if a.remake_point:
        point = next(p for p in json.loads(FILE.read_text()) if p["label"] == a.remake_point)
        res = islands_kit_run(point["experiment"], point["preset"], point["overrides"], 0, OUT / "remake" / "point")
        print(json.dumps({"bpb": res["final_val_bpb"], "stored_bpb": point["bpb"][0]}))
        return
    if a.stage or a.label:
        execute(a.stage, a.jobs, a.label)
    if a.write:
        rs = rows()
        FILE.write_text(json.dumps(rs, indent=1) + "\n")
        print(table(rs))


if __name__ == "__main__":
    main()
