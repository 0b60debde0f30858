"""A bpb-vs-bytes frontier file from finished runs: each point's ``--set`` overrides are read back from its
result.json (its config against its experiment's preset), so ``islands-kit run EXP --preset P --set ...`` makes it
again.

    python benchmarks/frontier_from_runs.py --out benchmarks/frontier-demo.json \\
        --baseline runs/demo1200/baseline/seed0 runs/demo1200/baseline/seed1 \\
        --default "two_site defaults (int4, H=50)" \\
        "two_site defaults (int4, H=50)=runs/demo1200/two_site/seed0,runs/demo1200/two_site/seed1" \\
        "SparseLoCo as published=runs/q/sparseloco_s0"

A point is ``LABEL=DIR[,DIR...]`` (one run folder per seed); each run is paired with the ``--baseline`` run of its
seed. ``ratio`` is the mean over seeds of bpb / the baseline's; ``fewer`` is data-parallel's bytes over the run's.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from islands_kit.config import ExperimentConfig
from islands_kit.config.configfile import flatten
from islands_kit.config.presets import get_preset

# run settings that are not part of what a point is (where it writes, how it reports, which seed)
NOT_OVERRIDES = {"seed", "wandb_mode", "wandb_project", "wandb_group", "progress", "out_dir", "experiment", "preset"}


def _as_set(v: Any) -> str:
    """A config value as ``--set`` spells it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return "" if v is None else str(v)


def overrides_of(res: dict[str, Any]) -> dict[str, str]:
    """The ``--set`` keys that turn the run's preset into the run's config (islands as one JSON list)."""
    cfg = ExperimentConfig.from_dict(res["config"]).to_dict()  # as the kit reads it today (moved keys moved)
    base = get_preset(res["experiment"], res["preset"]).to_dict()
    out: dict[str, str] = {}
    islands = cfg.pop("islands")
    if islands != base.pop("islands"):
        out["islands"] = json.dumps(islands)
    got, ref = flatten(cfg), flatten(base)
    for k in sorted(got):
        if k.split(".")[0] not in NOT_OVERRIDES and got[k] != ref.get(k):
            out[k] = _as_set(got[k])
    return out


def point(label: str, dirs: list[Path], baselines: dict[int, dict[str, Any]], default: bool) -> dict[str, Any]:
    runs = [json.loads((d / "result.json").read_text()) for d in dirs]
    seeds = [r["seed"] for r in runs]
    missing = [s for s in seeds if s not in baselines]
    if missing:
        raise SystemExit(f"{label}: no --baseline run of seed(s) {missing}")
    sets = {overrides_of(r).__repr__() for r in runs}
    if len(sets) != 1:
        raise SystemExit(f"{label}: its runs differ in more than the seed: {sets}")
    if not runs[0]["cross_site_bytes"]:
        raise SystemExit(f"{label}: no byte crossed a link (one island?): not a point of the bytes frontier")
    base = baselines[seeds[0]]
    return {"label": label, "fewer": runs[0]["ddp_equivalent_bytes"] / runs[0]["cross_site_bytes"],
            "ratio": statistics.mean(r["final_val_bpb"] / baselines[r["seed"]]["final_val_bpb"] for r in runs),
            "default": default, "experiment": runs[0]["experiment"], "preset": runs[0]["preset"], "seeds": seeds,
            "overrides": overrides_of(runs[0]), "bpb": [r["final_val_bpb"] for r in runs],
            "baseline": {"experiment": base["experiment"], "overrides": overrides_of(base),
                         "bpb": [baselines[s]["final_val_bpb"] for s in seeds]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="+", metavar="LABEL=DIR[,DIR...]")
    ap.add_argument("--baseline", type=Path, nargs="+", required=True, help="baseline run folders (one per seed)")
    ap.add_argument("--default", default="", help="the label of the point the notebook marks as the defaults")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    baselines = {}
    for d in args.baseline:
        r = json.loads((d / "result.json").read_text())
        baselines[r["seed"]] = r
    pts = []
    for spec in args.points:
        label, _, dirs = spec.rpartition("=")
        if not label:
            raise SystemExit(f"point {spec!r}: expected LABEL=DIR[,DIR...]")
        pts.append(point(label, [Path(x) for x in dirs.split(",")], baselines, label == args.default))
    args.out.write_text(json.dumps(pts, indent=1) + "\n")
    for p in pts:
        print(f"{p['label']:50s} {p['fewer']:9.1f}x fewer  ratio {p['ratio']:.4f}  seeds {p['seeds']}  "
              f"{' '.join(f'{k}={v}' for k, v in p['overrides'].items())}")


if __name__ == "__main__":
    main()
