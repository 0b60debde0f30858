"""``islands-kit`` command line (also ``python -m islands_kit``).

    islands-kit run {baseline|two_site|eight_cell} [--preset NAME] [--set key=value ...] [--out DIR] [--resume DIR]
                    [--seeds S [S ...]] [--quiet]
    islands-kit notebook NAME [-p key value ...] [--out DIR] [--quiet]
    islands-kit compare DIR [DIR ...] [--format table|markdown|csv|json] [--reference RUN] [--allow-mismatch]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from islands_kit.config import ConfigError, ExperimentConfig, apply_overrides, parse_set


def _cmd_run(args: argparse.Namespace) -> int:
    from islands_kit.presets import get_preset

    cfg = get_preset(args.experiment, args.preset)
    if args.set:
        cfg = apply_overrides(cfg, parse_set(args.set))
    if args.quiet:
        cfg = apply_overrides(cfg, {"progress": False})
    if not args.seeds:
        out = Path(args.out) if args.out else Path("runs") / f"{cfg.experiment}-{cfg.preset}-s{cfg.seed}"
        _run_one(cfg, out, args.resume)
        return 0
    # a seed sweep: one run per seed in OUT/s<seed>, one wandb group, then the comparison with mean ± spread
    if args.resume:
        raise ConfigError("--resume: resume the runs of a sweep one at a time (--resume OUT/s<seed> --set seed=<seed>)")
    seeds = list(dict.fromkeys(args.seeds))
    for s in seeds:
        if s < 0:
            raise ConfigError(f"--seeds: every seed must be an integer >= 0 (got {s})")
    root = Path(args.out) if args.out else Path("runs") / f"{cfg.experiment}-{cfg.preset}-seeds"
    group = cfg.wandb_group or f"{cfg.experiment}-{cfg.preset}-seeds-{time.strftime('%Y%m%d-%H%M%S')}"
    cfgs = [apply_overrides(cfg, {"seed": s, "wandb_group": group}) for s in seeds]  # all validated before any run
    dirs = [root / f"s{s}" for s in seeds]
    for c, d in zip(cfgs, dirs):
        _run_one(c, d, None)
    if _is_writer():
        from islands_kit.compare import report
        from islands_kit.tracking import load_result

        print(report([load_result(d) for d in dirs])[2])
    return 0


def _run_one(cfg: ExperimentConfig, out: Path, resume: str | None) -> None:
    from islands_kit.run import run_experiment

    transport = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # launched by torchrun: torch.distributed transport
        from islands_kit.distributed import make_transport

        transport = make_transport(cfg)
    res = run_experiment(cfg, out, transport, resume=resume)
    if res is not None and getattr(res, "get", None) and res.get("final_val_bpb") is not None and _is_writer():
        bpb = (f"DIVERGED at step {res['diverged_at_step']} ({res['diverged_reason']}), final_val_bpb=nan"
               if res.get("diverged_at_step") is not None else f"final_val_bpb={res['final_val_bpb']:.4f}")
        print(f"{cfg.experiment}: {bpb} (xz on the same bytes: "
              f"{res['compressor_bpb']['xz']:.3f}) cross_site_bytes={res['cross_site_bytes']:,} "
              f"ddp_equivalent_bytes={res['ddp_equivalent_bytes']:,} sim_wall_clock_s={res['sim_wall_clock_s']:.2f} "
              f"compute_utilization={res['compute_utilization']:.3f} -> {out / 'result.json'}")


def _is_writer() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _cmd_notebook(args: argparse.Namespace) -> int:
    from islands_kit.notebooks import parse_cli_parameters, run_notebook

    params = parse_cli_parameters(args.name, args.param or [])
    out = run_notebook(args.name, params, args.out, stream=not args.quiet)
    print(f"executed notebook -> {out}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from islands_kit.compare import expand_run_dirs, report
    from islands_kit.tracking import load_result

    results = [load_result(d) for d in expand_run_dirs(args.dirs)]
    text = report(results, args.format, args.reference, args.allow_mismatch)[2]
    if args.output:
        Path(args.output).write_text(text + "\n")
        print(f"compare: {len(results)} runs -> {args.output}")
    else:
        print(text)
        if args.format == "table":  # where the runs' wandb runs are (and a comparison's: PARENT/wandb)
            from islands_kit.tracking import offline_runs_hint

            dirs = [Path(r["dir"]) for r in results]
            roots = dirs + [w for w in dict.fromkeys(d.parent / "wandb" for d in dirs) if w.is_dir()]
            hint = offline_runs_hint(roots)
            if hint:
                print("\n" + hint)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="islands-kit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train one experiment and write DIR/result.json")
    r.add_argument("experiment", choices=["baseline", "two_site", "eight_cell"])
    r.add_argument("--preset", default="smoke")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field by dotted path")
    r.add_argument("--out", default=None)
    r.add_argument("--resume", default=None, metavar="DIR", help="continue from DIR/checkpoint.pt (same config)")
    r.add_argument("--seeds", type=int, nargs="+", metavar="S",
                   help="a seed sweep: one run per seed into OUT/s<seed>, one wandb group, then mean ± spread")
    r.add_argument("--quiet", action="store_true", help="no progress lines (also: ISLANDS_KIT_QUIET=1)")
    r.set_defaults(fn=_cmd_run)
    n = sub.add_parser("notebook", help="execute notebooks/NAME.ipynb with papermill")
    n.add_argument("name")
    n.add_argument("-p", "--param", nargs=2, action="append", metavar=("KEY", "VALUE"))
    n.add_argument("--out", default=None)
    n.add_argument("--quiet", action="store_true", help="do not stream the notebook's output (progress) here")
    n.set_defaults(fn=_cmd_notebook)
    c = sub.add_parser("compare", help="table of the runs' result.json")
    c.add_argument("dirs", nargs="+", help="run folders (a folder without result.json: every run folder under it)")
    c.add_argument("--format", default="table", choices=["table", "markdown", "csv", "json"])
    c.add_argument("--reference", default=None, metavar="RUN",
                   help="the reference run (a folder given) or experiment; default: the first baseline, else the first")
    c.add_argument("--allow-mismatch", action="store_true",
                   help="compare runs on different corpora or token budgets anyway (warns, marks the rows)")
    c.add_argument("--output", default=None, metavar="FILE", help="write the table to FILE instead of printing it")
    c.set_defaults(fn=_cmd_compare)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        print(f"islands-kit: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # DistributedError: a peer died or never answered; NotebookError: a cell raised
        if type(e).__name__ not in ("DistributedError", "NotebookError"):
            raise
        print(f"islands-kit: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
