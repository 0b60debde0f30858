"""How far the islands' outer gradients agree, sync by sync, and what that does to the radial-directional merge.

At every sync of every fragment, the lock-step DiLoCo strategy's islands each post an outer gradient Δ_i (their
fragment's drift from the global model since the last sync, before the wire codec) with a weight w_i (tokens trained
since). This script records, for each sync:

  * ``cos``: the cosine between the islands' outer gradients (mean over island pairs; two_site has one pair);
  * ``amplification``: the radial-directional merge's norm over the plain mean's,
    (Σ w_i ‖Δ_i‖ / W) / ‖Σ w_i Δ_i / W‖ >= 1 (the triangle inequality): 1 when the islands agree; for two equal
    norms and weights, 1 / sqrt((1 + cos) / 2). The merge keeps the mean's direction and scales it by this factor, so
    it is the extra outer step radial-directional averaging takes over plain averaging at that sync.

The run itself is the ordinary one (the strategy is wrapped, not changed: the run's bpb equals an uninstrumented run's
to the last digit, checked in tests/test_merge_agreement.py). It prints the records' medians per window of
``--window`` steps and writes every record to OUT/merge_agreement.jsonl beside the run's own files.

    OMP_NUM_THREADS=1 python benchmarks/merge_agreement.py --out runs/agree-rd --preset demo-long \
        [--set sync.diloco.average=mean] [--window 300]
"""
from __future__ import annotations

import argparse
import json
import statistics
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from islands_kit.config import apply_overrides, parse_set
from islands_kit.config.presets import get_preset
from islands_kit.run import run_experiment
from islands_kit.sync.diloco import DiLoCo


def agreement(deltas: dict[int, torch.Tensor], weights: dict[int, float]) -> dict[str, float]:
    """``cos`` (mean pairwise cosine of the outer gradients), ``amplification`` (radial-directional norm over the
    weighted mean's norm), ``mean_norm`` and ``norm`` (the token-weighted mean of the islands' norms)."""
    ids = sorted(deltas)
    flat = {i: deltas[i].detach().float().reshape(-1) for i in ids}
    total = float(sum(weights[i] for i in ids))
    w = {i: (weights[i] / total if total > 0 else 1.0 / len(ids)) for i in ids}
    norms = {i: float(flat[i].norm()) for i in ids}
    mean = sum(w[i] * flat[i] for i in ids)
    mean_norm = float(mean.norm())  # type: ignore[union-attr]
    radius = sum(w[i] * norms[i] for i in ids)
    pairs = [(a, b) for k, a in enumerate(ids) for b in ids[k + 1:]]
    cos = [float(flat[a] @ flat[b]) / (norms[a] * norms[b]) for a, b in pairs if norms[a] > 0 and norms[b] > 0]
    return {"cos": statistics.mean(cos) if cos else float("nan"), "norm": radius, "mean_norm": mean_norm,
            "amplification": radius / mean_norm if mean_norm > 0 else float("nan")}


@contextmanager
def recording() -> Iterator[list[dict[str, Any]]]:
    """Within the block, every lock-step DiLoCo post appends ``{"step", "fragment", **agreement(...)}`` to the yielded
    list (islands alone at a sync, e.g. M = 1, are skipped: nothing to agree with)."""
    records: list[dict[str, Any]] = []
    original = DiLoCo._post

    def _post(self: DiLoCo, step: int, p: int, codec: Any) -> tuple[Any, dict[int, torch.Tensor], dict[int, float]]:
        handle, deltas, weights = original(self, step, p, codec)
        if len(deltas) >= 2:
            records.append({"step": step, "fragment": p, **agreement(deltas, weights)})
        return handle, deltas, weights

    DiLoCo._post = _post  # type: ignore[method-assign]
    try:
        yield records
    finally:
        DiLoCo._post = original  # type: ignore[method-assign]


def window_table(records: list[dict[str, Any]], window: int) -> list[tuple[int, int, int, float, float, float]]:
    """Per window of ``window`` steps (by the sync's step): (first step, last step, syncs, median cos, median
    amplification, median mean_norm / norm)."""
    rows = []
    if not records:
        return rows
    last = max(r["step"] for r in records)
    for lo in range(0, last + 1, window):
        rs = [r for r in records if lo <= r["step"] < lo + window]
        if rs:
            rows.append((lo, lo + window - 1, len(rs), statistics.median(r["cos"] for r in rs),
                         statistics.median(r["amplification"] for r in rs),
                         statistics.median(r["mean_norm"] / r["norm"] for r in rs if r["norm"] > 0)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experiment", default="two_site")
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--window", type=int, default=300, help="steps per row of the printed table")
    ap.add_argument("--out", required=True, help="the run's folder (result.json, history, merge_agreement.jsonl)")
    args = ap.parse_args()
    cfg = apply_overrides(get_preset(args.experiment, args.preset), parse_set(["threads=1", *args.overrides]))
    if cfg.sync.strategy != "diloco":
        ap.error(f"--experiment/--set: needs the lock-step DiLoCo strategy (sync.strategy=diloco; got {cfg.sync.strategy})")
    out = Path(args.out)
    with recording() as records:
        res = run_experiment(cfg, out)
    with open(out / "merge_agreement.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    print(f"{cfg.experiment} {cfg.preset} seed {cfg.seed}, average {cfg.sync.diloco.average}: final val bpb "
          f"{res.final_val_bpb!r}, {len(records)} syncs recorded -> {out / 'merge_agreement.jsonl'}")
    print("| steps | syncs | cos(Δ_A, Δ_B), median | radial-directional / mean norm, median | ‖mean‖ / mean ‖Δ_i‖ |")
    print("|---|---:|---:|---:|---:|")
    for lo, hi, n, cos, amp, shrink in window_table(records, args.window):
        print(f"| {lo}-{hi} | {n} | {cos:.3f} | {amp:.3f} | {shrink:.3f} |")


if __name__ == "__main__":
    main()
