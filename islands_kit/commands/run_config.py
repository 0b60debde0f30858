"""The handlers of ``islands-kit run`` and ``islands-kit config`` (``cli.py`` holds their parsers and imports this
module only when one of them runs: it loads torch through the run)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from islands_kit.commands.dry_run import dry_run
from islands_kit.commands.subcommands import is_writer, parse_seeds
from islands_kit.compare import report, smoke_note
from islands_kit.config import ConfigError, ExperimentConfig, apply_overrides, parse_set
from islands_kit.config.configfile import config_from_file, format_config, load_config_file
from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.config.presets import get_preset
from islands_kit.model import ByteTransformer
from islands_kit.optim.build import format_groups, optimizer_groups
from islands_kit.records.tracking import load_result
from islands_kit.run import run_experiment
from islands_kit.train.checkpoint import RESUMABLE, read_config


def resolve_config(args: argparse.Namespace) -> ExperimentConfig:
    """The config a ``run``/``config`` invocation means: ``--resume`` restores the checkpoint's (only the fields
    listed in ``checkpoint.RESUMABLE`` may be changed with ``--set``); else ``--config FILE`` laid over the preset,
    or the preset alone; then ``--set`` overrides, in order."""
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


def run_command(args: argparse.Namespace) -> int:

    cfg = resolve_config(args)
    if args.quiet:
        cfg = apply_overrides(cfg, {"progress": False})
    if not args.seeds:
        out = _out_dir(args, cfg)
        resuming_in_place = args.resume is not None and out.resolve() == _out_dir_of_resume(args.resume)
        if (out / "result.json").exists() and not args.force and not resuming_in_place:
            raise ConfigError(f"--out: {out} holds a finished run (result.json); choose another --out, or pass "
                              "--force to overwrite it")
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
        print(report([load_result(d) for d in dirs])[2])
    return 0


def _run_one(cfg: ExperimentConfig, out: Path, resume: str | None) -> None:

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


def config_command(args: argparse.Namespace) -> int:

    cfg = resolve_config(args)
    sys.stdout.write(format_config(cfg))
    with torch.device("meta"):  # the parameters' names and shapes, no memory
        model = ByteTransformer(cfg.model)
    sys.stdout.write(format_groups(optimizer_groups(model, cfg.optim)))
    return 0
