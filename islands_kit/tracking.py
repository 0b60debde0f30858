"""Run records: result.json (written atomically), wandb logging (offline by default) and the offline compare table.

wandb is optional at run time: ``wandb_mode="disabled"`` (the tests) never imports it, ``offline`` (the kit's default)
writes runs under ``<out_dir>/wandb`` for a later ``wandb sync``. The runs of one comparison share ``wandb_group``.
``compare`` reads result.json files, so it needs no wandb server (wandb has no reader for offline runs).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

RESULT_KEYS = (
    "experiment", "preset", "seed", "corpus", "corpus_sha256", "tokens", "steps", "params_total", "params_active",
    "final_val_bpb", "val_curve", "compressor_bpb", "cross_site_bytes", "ddp_equivalent_bytes", "routing_sync_bytes",
    "peak_link_bytes_per_s", "sim_wall_clock_s", "compute_utilization", "wall_time_s", "versions", "git_sha", "config",
)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to a temporary file in the same folder, fsync, then rename: readers never see a partial file.

    Strict JSON: a NaN/inf (a diverged run's bpb) is written as ``null``; :func:`load_result` reads it back as NaN."""
    from islands_kit.io import atomic_write_bytes

    atomic_write_bytes(Path(path), dumps_strict(obj, indent=1).encode())


def dumps_strict(obj: Any, indent: int | None = None) -> str:
    """``json.dumps`` that any JSON reader accepts: non-finite floats become ``null``."""
    return json.dumps(_finite(obj), indent=indent, default=_jsonable, allow_nan=False)


def _finite(o: Any) -> Any:
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _jsonable(o: Any) -> Any:
    if hasattr(o, "item"):
        return _finite(o.item())
    if isinstance(o, (set, tuple)):
        return [_finite(v) for v in o]
    return str(o)


class Tracker:
    """Logs evaluations and the result summary to wandb (unless disabled)."""

    def __init__(self, cfg: Any, out_dir: str | Path | None) -> None:
        self.run = None
        mode = os.environ.get("WANDB_MODE", cfg.wandb_mode) if cfg.wandb_mode != "disabled" else "disabled"
        if mode == "disabled":
            return
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        wdir = Path(out_dir) if out_dir else Path(".")
        wdir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=cfg.wandb_project, group=cfg.wandb_group or None, mode=mode, dir=str(wdir),
                              name=f"{cfg.experiment}-s{cfg.seed}", config=cfg.to_dict(), reinit=True)

    def log(self, rec: dict[str, Any], step: int) -> None:
        if self.run is not None:
            self.run.log({k: v for k, v in rec.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}, step=step)

    def summary(self, res: dict[str, Any]) -> None:
        if self.run is not None:
            for k, v in res.items():
                if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                    self.run.summary[k] = v

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def load_result(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        p = p / "result.json"
    if not p.exists():
        raise FileNotFoundError(f"compare: no result.json at {p}")
    with open(p) as f:
        res = json.load(f)
    missing = [k for k in RESULT_KEYS if k not in res]
    if missing:
        raise ValueError(f"compare: {p} lacks result keys {missing}")
    # a diverged run's bpb is stored as null (strict JSON): NaN again here, so tables and ratios stay numeric
    if res["final_val_bpb"] is None:
        res["final_val_bpb"] = math.nan
    res["val_curve"] = [[t, math.nan if b is None else b] for t, b in res["val_curve"]]
    return res


def compare_table(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per run: bpb, ratio to the baseline (the first run whose experiment is 'baseline', else the first),
    bytes on the link, times less than data-parallel, simulated time and compute utilisation."""
    base = next((r for r in results if r["experiment"] == "baseline"), results[0])
    rows = []
    for r in results:
        sent = r["cross_site_bytes"]
        ddp = r["ddp_equivalent_bytes"]
        rows.append({
            "experiment": r["experiment"], "seed": r["seed"], "tokens": r["tokens"],
            "final_val_bpb": r["final_val_bpb"], "bpb_vs_baseline": r["final_val_bpb"] / base["final_val_bpb"],
            "cross_site_bytes": sent, "ddp_equivalent_bytes": ddp,
            "x_less_than_ddp": (ddp / sent) if sent else math.inf,
            "sim_wall_clock_s": r["sim_wall_clock_s"], "compute_utilization": r["compute_utilization"],
            "diverged_at_step": r.get("diverged_at_step"),
        })
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    hdr = ["experiment", "seed", "tokens", "bpb", "vs base", "link bytes", "x less than DDP", "sim s", "util"]
    lines = [hdr]
    for r in rows:
        lines.append([r["experiment"], str(r["seed"]), f"{r['tokens']:,}", _fmt_bpb(r),
                      f"{r['bpb_vs_baseline']:.4f}", _fmt_bytes(r["cross_site_bytes"]),
                      "inf" if math.isinf(r["x_less_than_ddp"]) else f"{r['x_less_than_ddp']:,.0f}",
                      f"{r['sim_wall_clock_s']:.2f}", f"{100 * r['compute_utilization']:.1f}%"])
    widths = [max(len(l[c]) for l in lines) for c in range(len(hdr))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(l, widths)) for l in lines)


def _fmt_bpb(r: dict[str, Any]) -> str:
    if r.get("diverged_at_step") is not None:
        return f"diverged at step {r['diverged_at_step']}"
    return f"{r['final_val_bpb']:.4f}"


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"
