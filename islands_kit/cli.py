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
    islands-kit study run|report FILE [--out DIR] [--jobs N] [--arms A,B] [--points P,Q] [--dry-run] [--write]

``--seeds`` takes ``0 1 2``, ``0,1,2`` or ``0-2``. ``islands-kit config EXPERIMENT`` prints every config field with its
value, default and help.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from islands_kit import __version__
from islands_kit.commands.subcommands import HelpFormatter, add_notebook, add_tools, is_writer, parse_seeds
from islands_kit.compare import smoke_note
from islands_kit.config import ConfigError, ExperimentConfig, apply_overrides, parse_set
from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.io import OutputError
from islands_kit.protocol.command import add_study_command


def resolve_config(args: argparse.Namespace) -> ExperimentConfig:
    """The config a ``run``/``config`` invocation means: ``--resume`` restores the checkpoint's (only the fields
    listed in ``checkpoint.RESUMABLE`` may be changed with ``--set``); else ``--config FILE`` laid over the preset,
    or the preset alone; then ``--set`` overrides, in order."""
    from islands_kit.config.configfile import config_from_file, load_config_file
    from islands_kit.config.presets import get_preset

    if getattr(args, "resume", None):
        return _resume_config(args)
    if args.config:
        cfg = config_from_file(load_config_file(args.config), args.experiment, args.preset)
    elif args.experiment:
        cfg = get_preset(args.experiment, args.preset or "smoke")
    else:
        raise ConfigError(f"experiment: name one ({'|'.join(EXPERIMENT_TABLE)}) or give --config FILE")
    return apply_overrides(cfg, parse_set(args.set)) if args.set else cfg


def _resume_config(args: argparse.Namespace) -> ExperimentConfig:
    from islands_kit.train.checkpoint import RESUMABLE, read_config

    data, step = read_config(args.resume)
    cfg = ExperimentConfig.from_dict(data)
    if args.config:
        raise ConfigError("--config: --resume restores the configuration from the checkpoint; drop --config")
    # retyping the original command is harmless: experiment, preset and --set values must then match the checkpoint
    for name, given in (("experiment", args.experiment), ("preset", args.preset)):
        if given and given != getattr(cfg, name):
            raise ConfigError(f"{name}: the checkpoint in {args.resume} is a {getattr(cfg, name)} run (got {given!r})")
    sets = parse_set(args.set) if args.set else {}
    for key, value in sets.items():
        if key not in RESUMABLE and apply_overrides(cfg, {key: value}).to_dict() != cfg.to_dict():
            raise ConfigError(f"{key}: cannot change on --resume (the checkpoint was trained with another value); "
                              f"changeable: {', '.join(RESUMABLE)}")
    cfg = apply_overrides(cfg, sets)
    if cfg.steps <= step:
        raise ConfigError(f"steps: must be > the checkpoint's step {step} to resume (got {cfg.steps})")
    return cfg


def _out_dir_of_resume(resume: str) -> Path:
    """The run folder a ``--resume`` path belongs to: its default output, and one a resume may rewrite in place."""
    p = Path(resume)
    return (p if p.is_dir() else p.parent).resolve()


def _out_dir(args: argparse.Namespace, cfg: ExperimentConfig) -> Path:
    if args.out:
        return Path(args.out)
    if args.resume:
        return _out_dir_of_resume(args.resume)
    return Path("runs") / f"{cfg.experiment}-{cfg.preset}-s{cfg.seed}"


def _cmd_run(args: argparse.Namespace) -> int:
    from islands_kit.commands.dry_run import dry_run

    cfg = resolve_config(args)
    out = _out_dir(args, cfg)
    resuming_in_place = args.resume is not None and out.resolve() == _out_dir_of_resume(args.resume)
    if (out / "result.json").exists() and not args.force and not resuming_in_place:
        raise ConfigError(f"--out: {out} holds a finished run (result.json); choose another --out, or pass --force "
                          "to overwrite it")
    if args.quiet:
        cfg = apply_overrides(cfg, {"progress": False})
    if not args.seeds:
        if args.dry_run:
            return dry_run([cfg], [out], args.resume)
        _run_one(cfg, out, args.resume)
        return 0
    # a seed sweep: one run per seed in OUT/s<seed>, one wandb group, then the comparison over seeds (paired intervals)
    if args.resume:
        raise ConfigError("--resume: resume the runs of a sweep one at a time (--resume OUT/s<seed>)")
    seeds = parse_seeds(args.seeds)
    root = Path(args.out) if args.out else Path("runs") / f"{cfg.experiment}-{cfg.preset}-seeds"
    group = cfg.wandb_group or f"{cfg.experiment}-{cfg.preset}-seeds-{time.strftime('%Y%m%d-%H%M%S')}"
    cfgs = [apply_overrides(cfg, {"seed": s, "wandb_group": group}) for s in seeds]  # all validated before any run
    dirs = [root / f"s{s}" for s in seeds]
    for d in dirs:
        if (d / "result.json").exists() and not args.force:
            raise ConfigError(f"--out: {d} holds a finished run (result.json); choose another --out, or pass --force")
    if args.dry_run:
        return dry_run(cfgs, dirs, None)
    for c, d in zip(cfgs, dirs):
        _run_one(c, d, None)
    if is_writer():
        from islands_kit.compare import report
        from islands_kit.records.tracking import load_result

        print(report([load_result(d) for d in dirs])[2])
    return 0


def _run_one(cfg: ExperimentConfig, out: Path, resume: str | None) -> None:
    from islands_kit.run import run_experiment

    transport = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # launched by torchrun: torch.distributed transport
        from islands_kit.comm.distributed import make_transport
        from islands_kit.sync.registry import link_model

        transport = make_transport(cfg, link_model(cfg))
    res = run_experiment(cfg, out, transport, resume=resume)
    if res is not None and getattr(res, "get", None) and res.get("final_val_bpb") is not None and is_writer():
        bpb = (f"DIVERGED at step {res['diverged_at_step']} ({res['diverged_reason']}), final_val_bpb=nan"
               if res.get("diverged_at_step") is not None else f"final_val_bpb={res['final_val_bpb']:.4f}")
        print(f"{cfg.experiment}: {bpb} (xz on the same {res['val_bytes']:,} bytes: "
              f"{res['compressor_bpb']['xz']:.3f}) cross_site_bytes={res['cross_site_bytes']:,} "
              f"ddp_equivalent_bytes={res['ddp_equivalent_bytes']:,} sim_wall_clock_s={res['sim_wall_clock_s']:.2f} "
              f"compute_utilization={res['compute_utilization']:.3f} -> {out / 'result.json'}")
    note = smoke_note([cfg.preset])
    if note and is_writer():
        print(note)


def _cmd_config(args: argparse.Namespace) -> int:
    import torch

    from islands_kit.config.configfile import format_config
    from islands_kit.model import ByteTransformer
    from islands_kit.optim.build import format_groups, optimizer_groups

    cfg = resolve_config(args)
    sys.stdout.write(format_config(cfg))
    with torch.device("meta"):  # the parameters' names and shapes, no memory
        model = ByteTransformer(cfg.model)
    sys.stdout.write(format_groups(optimizer_groups(model, cfg.optim)))
    return 0


def _config_epilog() -> str:
    """The run and config commands' epilog: the experiments of the table (rows registered later included)."""
    from islands_kit.config.presets import PRESETS

    return (f"experiments: {' | '.join(EXPERIMENT_TABLE)}\n"
            f"presets:     {' | '.join(PRESETS)} (smoke: seconds, tests; demo: minutes on 2 CPU cores; demo-long: 2x "
            "demo's steps; gpu-small, gpu: one GPU)\n"
            "config:      `islands-kit config EXPERIMENT` lists every field (--set KEY=VALUE takes its dotted key, e.g.\n"
            "             sync.H=100, islands.1.batch_size=8); `--config FILE` takes that listing back (YAML or JSON), or a\n"
            "             run's result.json to rerun it exactly\n")


def _description() -> str:
    """The module's synopsis, then one line per experiment of the table (read when the parser is built, so a row
    registered later is listed too)."""
    from islands_kit.config.presets import PRESETS

    width = max(map(len, EXPERIMENT_TABLE))
    rows = "\n".join(f"  {name:<{width}}  {row.description}" for name, row in EXPERIMENT_TABLE.items())
    return (f"{__doc__}\nExperiments (islands-kit run EXPERIMENT):\n{rows}\n\nPresets (--preset): {', '.join(PRESETS)}\n  "
            "(smoke: seconds; demo: minutes on 2 CPU cores; demo-long: twice demo's steps; gpu-small, gpu: one GPU)\n")


def _config_arguments(p: argparse.ArgumentParser) -> None:
    from islands_kit.config.presets import PRESETS

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
    r.set_defaults(fn=_cmd_run)
    g = sub.add_parser("config", help="print the resolved config (YAML: every field with its default and help)",
                       epilog=_config_epilog(), formatter_class=HelpFormatter)
    _config_arguments(g)
    g.add_argument("--resume", default=None, metavar="DIR", help="the config a --resume DIR run would use")
    g.set_defaults(fn=_cmd_config)
    add_notebook(sub)
    add_tools(sub)
    add_study_command(sub)
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
