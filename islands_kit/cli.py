"""``islands-kit`` command line (also ``python -m islands_kit``).

    islands-kit run {baseline|two_site|eight_cell} [--preset NAME] [--set key=value ...] [--out DIR] [--resume DIR]
    islands-kit notebook NAME [-p key value ...] [--out DIR]
    islands-kit compare DIR [DIR ...]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from islands_kit.config import ConfigError, apply_overrides, parse_set


def _cmd_run(args: argparse.Namespace) -> int:
    from islands_kit.presets import get_preset

    cfg = get_preset(args.experiment, args.preset)
    if args.set:
        cfg = apply_overrides(cfg, parse_set(args.set))
    out = Path(args.out) if args.out else Path("runs") / f"{cfg.experiment}-{cfg.preset}-s{cfg.seed}"
    from islands_kit.run import run_experiment

    transport = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # launched by torchrun: torch.distributed transport
        from islands_kit.distributed import make_transport

        transport = make_transport(cfg)
    res = run_experiment(cfg, out, transport, resume=args.resume)
    if res is not None and getattr(res, "get", None) and res.get("final_val_bpb") is not None and _is_writer():
        bpb = (f"DIVERGED at step {res['diverged_at_step']} ({res['diverged_reason']}), final_val_bpb=nan"
               if res.get("diverged_at_step") is not None else f"final_val_bpb={res['final_val_bpb']:.4f}")
        print(f"{cfg.experiment}: {bpb} (xz on the same bytes: "
              f"{res['compressor_bpb']['xz']:.3f}) cross_site_bytes={res['cross_site_bytes']:,} "
              f"ddp_equivalent_bytes={res['ddp_equivalent_bytes']:,} sim_wall_clock_s={res['sim_wall_clock_s']:.2f} "
              f"compute_utilization={res['compute_utilization']:.3f} -> {out / 'result.json'}")
    return 0


def _is_writer() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _cmd_notebook(args: argparse.Namespace) -> int:
    from islands_kit.notebooks import parse_cli_parameters, run_notebook

    params = parse_cli_parameters(args.name, args.param or [])
    out = run_notebook(args.name, params, args.out)
    print(f"executed notebook -> {out}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from islands_kit.tracking import compare_table, format_table, load_result

    rows = compare_table([load_result(d) for d in args.dirs])
    print(format_table(rows))
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
    r.set_defaults(fn=_cmd_run)
    n = sub.add_parser("notebook", help="execute notebooks/NAME.ipynb with papermill")
    n.add_argument("name")
    n.add_argument("-p", "--param", nargs=2, action="append", metavar=("KEY", "VALUE"))
    n.add_argument("--out", default=None)
    n.set_defaults(fn=_cmd_notebook)
    c = sub.add_parser("compare", help="table of the runs' result.json")
    c.add_argument("dirs", nargs="+")
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
