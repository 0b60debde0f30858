"""Every ``islands-kit`` command the README, docs/ and the notebooks' headers write works as written.

The commands are read from the texts themselves (fenced blocks and inline code; a notebook's header is its comment
lines), so a command added to a doc is tested without touching this file. A synopsis line (``[--out DIR]``) or a
command with a placeholder (``RUN_DIR``, ``runs/...``, ``MODE``) is no command to run: the synopses are checked
against the parser instead, option by option, both ways.

Two tiers: the fast one parses every command and validates what it names (the config of a ``run``/``config``, a
notebook's parameters, a study file); the slow one runs them, one document at a time in a fresh folder and in the
document's order: a ``run`` trains at the smoke preset when a later command reads what it writes, else is a dry run
at its own preset; a notebook is a dry run at smoke (its own validation cell, no training); a ``study`` (hours of runs, whose own dry run
times every config for minutes) is validated only. A command a doc shows failing (followed by ``islands-kit: error:``
in its block) must fail with those words. A folder a command reads that no earlier command of its document makes
(``sample runs/demo/two_site``, after ``make demo``) is a smoke run of the experiment its name says.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch

from islands_kit import cli
from islands_kit.commands.run_config import resolve_config
from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.config.presets import GPU_PRESETS, PRESETS
from islands_kit.notebooks import check_parameters, parse_cli_parameters
from islands_kit.protocol.study import load_study

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "notebooks").glob("*.py"))]
_CMD = re.compile(r"(?:\.venv/bin/)?islands-kit\s")
_PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*(\.[a-z]+)?")  # DIR, RUN_DIR, FILE.png, MODE


def _text(f: Path) -> str:
    """A doc's text; for a notebook's source its comment lines (the markdown cells), without the ``# ``."""
    if f.suffix != ".py":
        return f.read_text()
    return "\n".join(line[2:] if line.startswith("# ") else line[1:]
                     for line in f.read_text().splitlines() if line.startswith("#"))


def written_commands(f: Path) -> list[str]:
    """Every ``islands-kit ...`` text of ``f`` in order: lines of fenced blocks (inline code where a line has some)
    and inline code spans, from ``islands-kit`` on, without a trailing comment."""
    found: list[tuple[int, str]] = []
    text = _text(f)

    def spans(chunk: str, at: int) -> None:
        for m in re.finditer(r"`([^`]+)`", chunk):
            found.append((at + m.start(), " ".join(m.group(1).split())))

    def fence(m: re.Match[str]) -> str:
        offset = m.start(1)
        for line in m.group(1).splitlines(keepends=True):
            spans(line, offset) if "`" in line else found.append((offset, line.strip()))
            offset += len(line)
        return " " * len(m.group(0))  # keep the offsets of what follows

    rest = re.sub(r"```[\w-]*\n(.*?)```", fence, text, flags=re.S)
    spans(rest, 0)
    out = []
    for _, c in sorted(found):
        m = _CMD.search(c)
        if m:
            cmd = c[m.start():]
            out.append(shlex.join(shlex.split(cmd, comments=True)) if "#" in cmd else cmd)
    return out


def documented_errors(f: Path) -> dict[str, str]:
    """Commands a doc shows failing: a fenced line ``islands-kit ...`` followed by ``islands-kit: error: ...`` (the
    error's lines joined) -> that error's text."""
    out: dict[str, str] = {}
    for block in re.findall(r"```[\w-]*\n(.*?)```", _text(f), flags=re.S):
        lines = block.splitlines()
        for i, line in enumerate(lines[:-1]):
            if _CMD.match(line.strip()) and lines[i + 1].startswith("islands-kit: error: "):
                rest = [x for x in lines[i + 1:] if x.strip()]
                end = next((k for k, x in enumerate(rest[1:], 1) if _CMD.match(x)), len(rest))
                out[line.strip()] = " ".join(" ".join(rest[:end]).split())
    return out


def is_synopsis(cmd: str) -> bool:
    """A synopsis writes optional parts in brackets (``[--out DIR]``); a JSON value (``'[0, 1]'``) is no bracket."""
    for token in shlex.split(cmd):
        if any(b in token for b in "[]{}"):
            try:
                json.loads(token)
            except ValueError:
                return True
    return False


def _args(cmd: str) -> list[str]:
    """The argv after ``islands-kit``."""
    return shlex.split(cmd)[1:]


def runnable(cmd: str) -> list[list[str]]:
    """The argvs a written command stands for (``--preset smoke|demo``: one per alternative), or [] when it is a
    synopsis, names a placeholder, or only names a subcommand in prose (``islands-kit compare`` without a folder)."""
    if is_synopsis(cmd) or "..." in cmd:
        return []
    argv = _args(cmd.split(" > ")[0])
    values = [v for a in argv for v in a.split("=")[-1:]]
    if any(_PLACEHOLDER.fullmatch(v) for v in values):
        return []
    alts = [i for i, a in enumerate(argv) if "|" in a]
    argvs = [argv[:alts[0]] + [a] + argv[alts[0] + 1:] for a in argv[alts[0]].split("|")] if alts else [argv]
    # a subcommand named in a sentence ("`islands-kit compare` reads ...", "`islands-kit study run`") lacks the
    # arguments it requires: no command to run
    return [a for a in argvs if not _lacks_arguments(a)]


def _lacks_arguments(argv: list[str]) -> bool:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.build_parser().parse_args(argv)
        except SystemExit:
            return "the following arguments are required" in err.getvalue()
    return False


COMMANDS = [(f, cmd) for f in SOURCES for cmd in written_commands(f)]
CONCRETE = [(f, argv) for f, cmd in COMMANDS for argv in runnable(cmd)]
ERRORS = {shlex.join(_args(cmd)): error for f in SOURCES for cmd, error in documented_errors(f).items()}


def test_the_docs_write_commands_and_the_scan_finds_them():
    names = {f.name for f, _ in CONCRETE}
    assert {"README.md", "cli.md", "outputs.md", "orbital.py", "two_site.py", "tour.py"} <= names
    assert [a for f, a in CONCRETE if f.name == "orbital.py"] == [
        ["notebook", "orbital", "-p", "preset", "smoke", "--out", "runs/orbital-smoke"],
        ["run", "baseline", "--preset", "demo", "--out", "runs/baseline-demo-s0"],
        ["notebook", "orbital", "-p", "preset", "demo", "-p", "baseline_dir", "runs/baseline-demo-s0"]]
    assert ["run", "orbital", "--preset", "demo"] in [a for _, a in CONCRETE]  # smoke|demo: both
    assert not any(a[:1] == ["compare"] and len(a) == 1 for _, a in CONCRETE)


def test_the_scan_reads_fences_inline_code_and_notebook_headers(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("Run `islands-kit run two_site --preset\nsmoke` first.\n```bash\nislands-kit env   # versions\n"
                   "make demo   # = islands-kit notebook compare -p preset demo\n```\n`islands-kit sample RUN_DIR`\n")
    assert written_commands(doc) == ["islands-kit run two_site --preset smoke", "islands-kit env",
                                     "islands-kit notebook compare -p preset demo", "islands-kit sample RUN_DIR"]
    assert [runnable(c) for c in written_commands(doc)][3] == []
    nb = tmp_path / "n.py"
    nb.write_text("# %% [markdown]\n# ```bash\n# islands-kit notebook n -p preset smoke\n# ```\nx = 1  # islands-kit no\n")
    assert written_commands(nb) == ["islands-kit notebook n -p preset smoke"]


def _validate(argv: list[str]) -> None:
    """Parse ``argv`` as the CLI does and validate what it names, training nothing: a run's or config's config, a
    notebook's parameters (names and types)."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            args = cli.build_parser().parse_args(argv)
        except SystemExit as e:  # --version prints and exits 0
            assert e.code == 0, argv
            return
    if args.cmd in ("run", "config") and not (args.config and not Path(args.config).exists()) and not args.resume:
        resolve_config(args)
    if args.cmd == "notebook":
        check_parameters(args.name, parse_cli_parameters(args.name, args.param or []))
    if args.cmd == "study":  # a study file named from the checkout: it loads and validates
        load_study(ROOT / args.study)


@pytest.mark.parametrize("argv", [a for _, a in CONCRETE], ids=[" ".join(a)[:60] for _, a in CONCRETE])
def test_every_documented_command_parses_and_names_valid_things(argv):
    error = ERRORS.get(shlex.join(argv))
    if error is None:
        _validate(argv)
        return
    with pytest.raises(Exception) as e:  # a command the doc shows failing fails with the doc's words
        _validate(argv)
    assert "islands-kit: error: " + " ".join(str(e.value).split()) == error


def test_a_documented_failure_is_read_with_its_error(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("```\nislands-kit run x --dry-run\nislands-kit: error: a: no\nsecond line\n```\n")
    assert documented_errors(doc) == {"islands-kit run x --dry-run": "islands-kit: error: a: no second line"}
    assert ERRORS  # docs/methods.md shows a ring that can never link refused


# ---------------------------------------------------------------------------------------------------------------
# Synopses: every option a subcommand takes is written, and every option written exists


def _options(name: str) -> list[list[str]]:
    """The option strings of each option of subcommand ``name`` (``["-p", "--param"]``), less --help."""
    sub = cli.build_parser()._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]
    return [a.option_strings for a in sub._actions if a.option_strings and "--help" not in a.option_strings]


def _synopses(text: str) -> dict[str, str]:
    """subcommand -> its synopsis (continuation lines joined): the lines ``islands-kit NAME [...`` of ``text``."""
    out: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"\s*islands-kit (\w+) ", line)
        if m:
            name = m.group(1)
            out[name] = line.split("#")[0]
        elif name and line.startswith(" " * 8) and line.strip().startswith("["):
            out[name] += " " + line.split("#")[0]
        else:
            name = None
    return out


@pytest.mark.parametrize("where", ["cli.py", "docs/cli.md"])
def test_synopses_match_the_parser(where):
    text = cli.__doc__ if where == "cli.py" else (ROOT / "docs" / "cli.md").read_text().split("```")[1]
    syn = _synopses(text or "")
    subs = cli.build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(syn) == set(subs), f"{where}: synopses for {sorted(syn)}, commands {sorted(subs)}"
    for name, line in syn.items():
        written = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", line))
        options = _options(name)
        missing = [o[-1] for o in options if not written & set(o)]
        unknown = written - {s for o in options for s in o}
        assert not missing and not unknown, f"{where}, {name}: not written {missing}, no such option {sorted(unknown)}"


def test_docs_synopsis_lists_every_experiment_and_preset():
    line = next(x for x in (ROOT / "docs" / "cli.md").read_text().splitlines() if x.startswith("islands-kit run "))
    experiments, presets = re.findall(r"\[([\w|-]+)\]", line)[0], re.search(r"--preset ([\w|-]+)\]", line)
    assert experiments.split("|") == list(EXPERIMENT_TABLE)
    assert presets and presets.group(1).split("|") == list(PRESETS)


# ---------------------------------------------------------------------------------------------------------------
# The slow tier: run them


class SmokeRuns:
    """One smoke run per experiment, made once, copied wherever a command reads a folder nothing made."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache

    def copy_to(self, folder: Path) -> None:
        """Make ``folder`` a finished smoke run of the experiment its path names."""
        name = next((e for e in sorted(EXPERIMENT_TABLE, key=len, reverse=True) if e in str(folder)), None)
        assert name, f"{folder}: read by a documented command, made by none before it, and its name names no experiment"
        made = self.cache / name
        if not made.exists():
            with contextlib.redirect_stdout(io.StringIO()):
                assert cli.main(["run", name, "--preset", "smoke", "--out", str(made)]) == 0
        shutil.copytree(made, folder)


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory: pytest.TempPathFactory) -> SmokeRuns:
    return SmokeRuns(tmp_path_factory.mktemp("smoke-runs"))


def _at_smoke(argv: list[str]) -> list[str]:
    """``argv`` with every preset (``--preset P``, a notebook's ``-p preset P``) the smoke preset."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--preset" or (a == "preset" and i and out[i - 1] == "-p"):
            out[i + 1] = "smoke"
    return out


def _as_tested(argv: list[str], trains: bool) -> list[str]:
    """A written command as the slow tier runs it: a notebook as a dry run at smoke; a config at smoke (a later run
    trains on it); a run that a later command reads trains at smoke, any other is a dry run at its own preset (at
    smoke for a GPU preset on a machine without one: its device check would refuse it)."""
    if argv[0] == "notebook":
        return _at_smoke(argv) + ["--dry-run"]
    if argv[0] == "config" or (argv[0] == "run" and trains):
        return _at_smoke(argv)
    if argv[0] == "run" and "--dry-run" not in argv:
        gpu = any(p in argv for p in GPU_PRESETS) and not torch.cuda.is_available()
        return (_at_smoke(argv) if gpu else argv) + ["--dry-run"]
    return argv


def _inputs(args: argparse.Namespace) -> list[Path]:
    """The run folders a command reads."""
    if args.cmd == "compare":
        return [Path(d) for d in args.dirs]
    if args.cmd == "sample":
        return [Path(args.run_dir)]
    if args.cmd == "notebook":
        return [Path(v) for k, v in (args.param or []) if k.endswith("_dir") and k != "out_dir"]
    if args.cmd == "run" and args.config and args.config.endswith("result.json"):
        return [Path(args.config).parent]
    return []


def _writes(args: argparse.Namespace) -> Path | None:
    """The folder a ``run`` command writes (its --out, else the CLI's default for its experiment, preset and seed)."""
    if args.cmd != "run":
        return None
    if args.out:
        return Path(args.out)
    if args.experiment:
        return Path("runs") / f"{args.experiment}-{args.preset or 'smoke'}-s0"
    return None


@pytest.mark.slow  # trains a smoke run where a later command reads it, and starts a kernel per notebook command
@pytest.mark.parametrize("source", sorted({f for f, _ in CONCRETE}), ids=lambda f: f.name)
def test_every_documented_command_runs(source, tmp_path, monkeypatch, smoke_runs):
    """A ``run`` trains at the smoke preset when a later command of the document reads what it writes, else is a dry
    run at its own preset (every check a run makes, no training); a notebook is a dry run; a command the doc shows
    failing fails with the doc's error."""
    work = tmp_path / "checkout"
    work.mkdir()
    monkeypatch.chdir(work)
    planned: list[tuple[str, list[str], argparse.Namespace]] = []
    for cmd in written_commands(source):
        for written in runnable(cmd):
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    args = cli.build_parser().parse_args(_at_smoke(written))
                except SystemExit as e:
                    assert e.code == 0, written
                    continue
            planned.append((cmd, written, args))
    read_later = {str(f) for _, _, args in planned for f in _inputs(args)}
    seen: list[list[str]] = []
    for cmd, written, args in planned:
        if args.cmd == "study":  # hours of training (its own --dry-run times every config): validated only
            _validate(written)
            continue
        argv = _as_tested(written, trains=str(_writes(args)) in read_later)
        if argv in seen:  # smoke|demo: the same command once at smoke
            continue
        seen.append(argv)
        for folder in _inputs(args):
            if not folder.exists():
                smoke_runs.copy_to(folder)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(argv)
        error = ERRORS.get(shlex.join(written))
        if error is not None:
            assert code == 2 and " ".join(err.getvalue().split()) == error, (source.name, written, err.getvalue())
            continue
        assert code == 0, f"{source.name}: `islands-kit {' '.join(written)}` (run as {argv}) failed: {err.getvalue()}"
        if " > " in cmd:  # the shell redirection the doc writes
            (work / cmd.split(" > ")[1].strip()).write_text(out.getvalue())
        if "--dry-run" in argv:
            assert "dry run: valid" in out.getvalue()
