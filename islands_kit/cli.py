"""``islands-kit`` command line (also ``python -m islands_kit``).

    islands-kit run [EXPERIMENT] [--preset NAME] [--config FILE] [--set key=value ...] [--out DIR] [--force]
                    [--resume DIR] [--dry-run] [--seeds S [S ...]] [--quiet]
    islands-kit config [EXPERIMENT] [--preset NAME] [--config FILE] [--set key=value ...] [--resume DIR]
    islands-kit notebook NAME [-p key value ...] [--out DIR] [--dry-run] [--quiet]
    islands-kit compare DIR [DIR ...] [--format table|markdown|csv|json] [--reference RUN] [--allow-mismatch]
                        [--wide] [--plot FILE.png] [--output FILE]
    islands-kit corpora [NAME ...]
    islands-kit sample RUN_DIR [--prompt TEXT] [--temperature T] [--top-k K] [--max-bytes N] [--seed S] [--island I]
                       [--raw]
    islands-kit env [--short]
    islands-kit study run|report|status FILE [--out DIR] [--jobs N] [--arms A,B] [--points P,Q] [--dry-run] [--write]
                      [--executor local|submitit-local|slurm] [--partition P] [--account A] [--time-min M]
                      [--cpus-per-run N] [--constraint C]

``--seeds`` takes ``0 1 2``, ``0,1,2`` or ``0-2``. ``islands-kit config EXPERIMENT`` prints every config field with its
value, default and help.
"""
from __future__ import annotations

import argparse
import sys

from islands_kit import __version__
from islands_kit.commands.subcommands import Handler, HelpFormatter, add_notebook, add_study, add_tools
from islands_kit.config import ConfigError
from islands_kit.config.experiment_table import EXPERIMENT_TABLE, PRESETS
from islands_kit.io import OutputError


def _config_epilog() -> str:
    """The run and config commands' epilog: the experiments of the table (rows registered later included)."""
    return (f"experiments: {' | '.join(EXPERIMENT_TABLE)}\n"
            f"presets:     {' | '.join(PRESETS)} (smoke: seconds, tests; demo: minutes on 2 CPU cores; demo-long: 2x "
            "demo's steps; gpu-small, gpu: one GPU)\n"
            "config:      `islands-kit config EXPERIMENT` lists every field (--set KEY=VALUE takes its dotted key, e.g.\n"
            "             sync.H=100, islands.1.batch_size=8); `--config FILE` takes that listing back (YAML or JSON), or a\n"
            "             run's result.json to rerun it exactly\n")


def _description() -> str:
    """The module's synopsis, then one line per experiment of the table (read when the parser is built, so a row
    registered later is listed too)."""
    width = max(map(len, EXPERIMENT_TABLE))
    rows = "\n".join(f"  {name:<{width}}  {row.description}" for name, row in EXPERIMENT_TABLE.items())
    return (f"{__doc__}\nExperiments (islands-kit run EXPERIMENT):\n{rows}\n\nPresets (--preset): {', '.join(PRESETS)}\n  "
            "(smoke: seconds; demo: minutes on 2 CPU cores; demo-long: twice demo's steps; gpu-small, gpu: one GPU)\n")


def _config_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", nargs="?", choices=tuple(EXPERIMENT_TABLE),
                   help="optional with --config FILE or --resume DIR")
    p.add_argument("--preset", default=None, choices=PRESETS, help="named preset (default smoke)")
    p.add_argument("--config", default=None, metavar="FILE", help="YAML/JSON config (or a result.json) over the preset")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field by dotted path (repeatable)")


def _check_set_pairs(argv: list[str]) -> None:
    """``--set sync.H 10`` reaches argparse as a stray argument ("unrecognized arguments: 10"): say what was meant."""
    for i, a in enumerate(argv[:-1]):
        key = argv[i + 1]
        if a == "--set" and "=" not in key and not key.startswith("-"):
            value = argv[i + 2] if i + 2 < len(argv) and not argv[i + 2].startswith("-") else ""
            hint = f" (--set {key}={value})" if value else ""
            raise ConfigError(f"--set {key}: use key=value, one word{hint}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="islands-kit", description=_description(), formatter_class=HelpFormatter)
    ap.add_argument("--version", action="version", version=f"islands-kit {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train one experiment and write DIR/result.json", epilog=_config_epilog(),
                       formatter_class=HelpFormatter)
    _config_arguments(r)
    r.add_argument("--out", default=None, help="output folder (default runs/EXPERIMENT-PRESET-sSEED; the --resume "
                   "folder when resuming)")
    r.add_argument("--force", action="store_true", help="overwrite a finished run in --out")
    r.add_argument("--resume", default=None, metavar="DIR", help="continue from DIR's checkpoint with its config "
                   "(--set only for: steps, threads, checkpoint_every, progress, wandb_*)")
    r.add_argument("--dry-run", action="store_true", help="validate and print what would run, train nothing")
    r.add_argument("--seeds", nargs="+", metavar="S", help="a seed sweep (0 1 2, 0,1,2 or 0-2): one run per seed "
                   "into OUT/s<seed>, one wandb group, then the comparison over seeds")
    r.add_argument("--quiet", action="store_true", help="no progress lines (also: ISLANDS_KIT_QUIET=1)")
    r.set_defaults(fn=Handler("islands_kit.commands.run_config", "run_command"))
    g = sub.add_parser("config", help="print the resolved config (YAML: every field with its default and help)",
                       epilog=_config_epilog(), formatter_class=HelpFormatter)
    _config_arguments(g)
    g.add_argument("--resume", default=None, metavar="DIR", help="the config a --resume DIR run would use")
    g.set_defaults(fn=Handler("islands_kit.commands.run_config", "config_command"))
    add_notebook(sub)
    add_tools(sub)
    add_study(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    try:
        _check_set_pairs(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as e:
        print(f"islands-kit: error: {e}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        print(f"islands-kit: error: {e}", file=sys.stderr)
        return 2
    except OutputError as e:  # a file could not be written (full disk, read-only): named, nothing half-written
        print(f"islands-kit: error: {e}", file=sys.stderr)
        return 1
    except RuntimeError as e:  # DistributedError: a peer died or never answered; NotebookError: a cell raised
        if type(e).__name__ not in ("DistributedError", "NotebookError"):
            raise
        print(f"islands-kit: error: {e}", file=sys.stderr)
        if type(e).__name__ == "DistributedError":  # raised by comm.torch_dist, so torch is loaded already
            from islands_kit.comm.distributed import abandon

            abandon(1)  # a peer is gone: the collective teardown at exit could wait on it for the whole timeout
        return 1


if __name__ == "__main__":
    sys.exit(main())
