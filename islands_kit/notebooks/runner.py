"""Execute the kit's notebooks with papermill, refusing unknown or mistyped parameters before any kernel starts.

``run_notebook("two_site", {"preset": "smoke"}, "runs/x")`` executes ``notebooks/two_site.ipynb`` with those values
injected after its ``parameters`` cell and keeps the executed copy in the output folder (``runs/x/two_site.ipynb``).
A ``ConfigError`` raised inside the notebook (a bad parameter, caught by its validation cell) comes back as a
``ConfigError`` naming the field, so ``islands-kit notebook`` reports it like ``islands-kit run`` does.
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from islands_kit.config import ConfigError, _check
from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.resources import resource_dir

NOTEBOOK_DIR = resource_dir("notebooks")
EXPERIMENT_NOTEBOOKS = tuple(r.notebook for r in EXPERIMENT_TABLE.values() if r.notebook)  # one per experiment
# the kernel's own log (a warning that its local TCP sockets are unencrypted, "KeyboardInterrupt caught in kernel" at
# shutdown) says nothing about the notebook; in a nested run (the compare notebook) it would land in the outputs
KERNEL_QUIET = ["--IPKernelApp.log_level=CRITICAL"]


def notebook_path(name: str) -> Path:
    p = NOTEBOOK_DIR / f"{name}.ipynb"
    if not p.exists():
        valid = sorted(q.stem for q in NOTEBOOK_DIR.glob("*.ipynb"))
        raise ConfigError(f"notebook: unknown notebook {name!r} (valid: {', '.join(valid)})")
    return p


class NotebookError(RuntimeError):
    """A notebook cell raised something other than a ConfigError; the message names the error, the cell and the
    executed copy (which holds the full traceback)."""


def notebook_parameters(name: str) -> dict[str, Any]:
    """The parameters NAME's ``parameters`` cell declares, with their default values (literals)."""
    import papermill as pm

    declared = pm.inspect_notebook(str(notebook_path(name)))
    return {k: ast.literal_eval(v["default"]) for k, v in declared.items()}


_KINDS: tuple[tuple[type, str], ...] = ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                                        (str, "a string"), (list, "a list"), (dict, "a mapping"))


def _kind(default: Any) -> tuple[tuple[type, ...], str] | None:
    """The types a parameter accepts, from its default: None accepts any literal; an int is not a float's only
    form (3 is a valid float) and a bool is no integer."""
    for tp, words in _KINDS:
        if isinstance(default, tp):
            return ((int, float) if tp is float else (tp,)), words
    return None


def check_parameters(name: str, params: Mapping[str, Any]) -> None:
    """Refuse, before any kernel starts, a parameter NAME does not declare or whose value's type differs from its
    default's (one ConfigError naming the parameter)."""
    declared = notebook_parameters(name)
    for key, value in params.items():
        if key not in declared:
            raise ConfigError(f"notebook {name}: unknown parameter {key!r} (valid: {', '.join(sorted(declared))})")
        kind = _kind(declared[key])
        if kind is not None:
            types, words = kind
            ok = isinstance(value, types) and (bool in types or not isinstance(value, bool))
            _check(ok, key, f"must be {words} (notebook {name}, default {declared[key]!r})", value)


def parse_cli_parameters(name: str, pairs: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``-p KEY VALUE`` pairs from the command line: VALUE is kept as text for a parameter whose default is a
    string, else read as JSON (``5``, ``true``, ``["a", "b"]``, ``{"optim.lr": 0.003}``), falling back to text."""
    declared = notebook_parameters(name)
    params: dict[str, Any] = {}
    for key, raw in pairs:
        if isinstance(declared.get(key), str):
            params[key] = raw
            continue
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params


def run_notebook(name: str, params: dict[str, Any] | None = None, out_dir: str | Path | None = None,
                 kernel_name: str = "python3", stream: bool = False) -> Path:
    """Execute notebooks/NAME.ipynb with papermill; returns the executed notebook's path (OUT/NAME.ipynb).

    Parameters not declared in the notebook's ``parameters`` cell, or of another type than their default, are
    refused before anything runs (``check_parameters``). ``out_dir`` (default ``runs/notebook-NAME``) is passed to
    the notebook as its ``out_dir`` parameter (absolute) unless given in ``params``, and is the kernel's working
    folder. A ConfigError raised in the notebook is re-raised as a ConfigError, any other error as a one-line
    ``NotebookError``; the executed copy (with the traceback) is kept either way.

    ``stream``: also write the notebook's stdout/stderr here as the cells produce them (the progress lines of a
    training run), so the terminal running ``islands-kit notebook`` follows the run live; they are in the executed
    notebook's output cells either way."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    src = notebook_path(name)
    params = dict(params or {})
    check_parameters(name, params)
    declared = notebook_parameters(name)
    out = Path(out_dir) if out_dir else Path("runs") / f"notebook-{name}"
    out.mkdir(parents=True, exist_ok=True)
    if "out_dir" in declared:
        params.setdefault("out_dir", str(out.resolve()))
    # no WANDB_MODE is set here: the notebook's wandb_mode parameter (default offline) decides, unless the caller's
    # environment sets WANDB_MODE, which wandb lets win
    dst = out / f"{name}.ipynb"
    try:
        pm.execute_notebook(str(src), str(dst), parameters=params, kernel_name=kernel_name, cwd=str(out.resolve()),
                            progress_bar=False, stdout_file=sys.stdout if stream else None,
                            stderr_file=sys.stderr if stream else None, extra_arguments=KERNEL_QUIET)
    except PapermillExecutionError as e:
        where = f"[notebook {name}, cell {e.cell_index}; executed copy: {dst}]"
        if e.ename == "ConfigError":
            raise ConfigError(f"{e.evalue} {where}") from None
        raise NotebookError(f"{e.ename}: {e.evalue} {where}") from None
    return dst
