"""Execute the kit's notebooks with papermill, refusing unknown or mistyped parameters before any kernel starts.

``run_notebook("two_site", {"preset": "smoke"}, "runs/x")`` executes ``notebooks/two_site.ipynb`` with those values
injected after its ``parameters`` cell and keeps the executed copy in the output folder (``runs/x/two_site.ipynb``).
A ``ConfigError`` raised inside the notebook (a bad parameter, caught by its validation cell) comes back as a
``ConfigError`` naming the field, so ``islands-kit notebook`` reports it like ``islands-kit run`` does.

The kernel runs in the output folder, so a relative path parameter is made absolute first, from the caller's folder
(``resolve_path_parameters``). ``dry_run_notebook`` executes only the parameters and the validation cell (the first
code cell after them, which builds every config and trains nothing).
"""
from __future__ import annotations

import ast
import glob
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from islands_kit.config import ConfigError, _check
from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.data import CORPORA
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
        except json.JSONDecodeError as e:
            if isinstance(declared.get(key), (dict, list)):  # a mapping or list comes only as JSON: say so, and how
                fixed = raw.replace("'", '"')
                hint = f"; e.g. -p {key} '{fixed}'" if _is_json(fixed) else ""
                raise ConfigError(f"-p {key}: must be JSON ({e.msg} at character {e.pos} of {raw!r}; JSON quotes "
                                  f"keys and strings with \"){hint}") from None
            params[key] = raw
    return params


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def path_kind(key: str) -> str | None:
    """What a notebook parameter names, by its name: ``out`` (``out_dir``, where the notebook writes), ``dir`` (any
    other ``*_dir``: a folder it reads, which must exist), ``file`` (``*_file`` / ``*_path``: a file, or a resource
    the wheel carries), ``corpus`` (a corpus: a registered name, a hub dataset, or local files), else None."""
    if key == "out_dir":
        return "out"
    if key.endswith("_dir"):
        return "dir"
    if key.endswith(("_file", "_path")):
        return "file"
    return "corpus" if key == "corpus" else None


def resolve_path_parameters(name: str, params: Mapping[str, Any], base: str | Path | None = None) -> dict[str, Any]:
    """``params`` with every relative path parameter (``path_kind``) made absolute from ``base`` (default: the
    working directory, the caller's), since the kernel runs in the output folder. A folder parameter that names no
    folder is refused here (a ConfigError naming it); a file or corpus that is not found from ``base`` is passed as
    given (a resource of the wheel, a registered corpus, a hub dataset: the notebook checks those)."""
    here = Path(base or Path.cwd()).resolve()
    out = dict(params)
    for key, value in params.items():
        kind = path_kind(key)
        if kind is None or not isinstance(value, str) or value == "":
            continue
        p = Path(value).expanduser()
        full = p if p.is_absolute() else here / p
        if kind == "dir" and not full.is_dir():
            raise ConfigError(f"{key}: {full} is no folder (notebook {name}; a relative path is read from the folder "
                              "the command runs in)")
        if kind in ("out", "dir"):
            out[key] = str(full.resolve())
        elif kind == "file" and full.exists():
            out[key] = str(full.resolve())
        elif kind == "corpus" and value not in CORPORA and not value.startswith("hub:") and glob.glob(str(full)):
            out[key] = str(full)
    return out


def _prepare(name: str, params: Mapping[str, Any] | None, out_dir: str | Path | None) -> tuple[dict[str, Any], Path]:
    """Checked parameters with absolute paths and ``out_dir`` set (when the notebook declares it), and the output
    folder (``out_dir`` or ``runs/notebook-NAME``, absolute)."""
    params = dict(params or {})
    check_parameters(name, params)
    params = resolve_path_parameters(name, params)
    out = (Path(out_dir) if out_dir else Path("runs") / f"notebook-{name}").resolve()
    if "out_dir" in notebook_parameters(name):
        params.setdefault("out_dir", str(out))
    return params, out


def _execute(name: str, src: Path, dst: Path, params: Mapping[str, Any], cwd: Path, kernel_name: str,
             stream: bool) -> None:
    """papermill on ``src`` into ``dst``; a ConfigError in a cell comes back as a ConfigError, anything else as a
    one-line NotebookError naming the cell and the executed copy."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    # no WANDB_MODE is set here: the notebook's wandb_mode parameter (by default the preset's) decides, unless the
    # caller's environment sets WANDB_MODE, which wandb lets win
    try:
        pm.execute_notebook(str(src), str(dst), parameters=dict(params), kernel_name=kernel_name, cwd=str(cwd),
                            progress_bar=False, stdout_file=sys.stdout if stream else None,
                            stderr_file=sys.stderr if stream else None, extra_arguments=KERNEL_QUIET)
    except PapermillExecutionError as e:
        where = f"[notebook {name}, cell {e.cell_index}; executed copy: {dst}]"
        if e.ename == "ConfigError":
            raise ConfigError(f"{e.evalue} {where}") from None
        raise NotebookError(f"{e.ename}: {e.evalue} {where}") from None


def run_notebook(name: str, params: dict[str, Any] | None = None, out_dir: str | Path | None = None,
                 kernel_name: str = "python3", stream: bool = False) -> Path:
    """Execute notebooks/NAME.ipynb with papermill; returns the executed notebook's path (OUT/NAME.ipynb).

    Parameters not declared in the notebook's ``parameters`` cell, or of another type than their default, are
    refused before anything runs (``check_parameters``); relative paths are read from the working directory
    (``resolve_path_parameters``). ``out_dir`` (default ``runs/notebook-NAME``) is passed to the notebook as its
    ``out_dir`` parameter (absolute) unless given in ``params``, and is the kernel's working folder. A ConfigError
    raised in the notebook is re-raised as a ConfigError, any other error as a one-line ``NotebookError``; the
    executed copy (with the traceback) is kept either way.

    ``stream``: also write the notebook's stdout/stderr here as the cells produce them (the progress lines of a
    training run), so the terminal running ``islands-kit notebook`` follows the run live; they are in the executed
    notebook's output cells either way."""
    src = notebook_path(name)
    params, out = _prepare(name, params, out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dst = out / f"{name}.ipynb"
    _execute(name, src, dst, params, out, kernel_name, stream)
    return dst


def dry_run_notebook(name: str, params: dict[str, Any] | None = None, out_dir: str | Path | None = None,
                     kernel_name: str = "python3") -> str:
    """Check ``params`` as ``run_notebook`` does, then execute only the notebook's parameters and its validation
    cell (the first code cell after them: every config is built there, nothing trains) in a scratch folder; the
    folders it made on the way to the output folder are not left behind (when they stayed empty). Returns what the
    validation cell printed and a line saying what would run; a bad parameter raises as ``run_notebook`` would."""
    import nbformat

    src = notebook_path(name)
    params, out = _prepare(name, params, out_dir)
    made = next((a for a in reversed([out, *out.parents]) if not a.exists()), None)  # the first folder a run would make
    nb = nbformat.read(src, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    after = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and i > first]
    nb.cells = nb.cells[:after[0] + 1] if after else nb.cells
    try:
        with tempfile.TemporaryDirectory(prefix=f"dry-{name}-") as tmp:
            cut, dst = Path(tmp) / f"{name}.ipynb", Path(tmp) / f"{name}.dry.ipynb"
            nbformat.write(nb, cut)
            _execute(name, cut, dst, params, Path(tmp), kernel_name, stream=False)
            done = nbformat.read(dst, as_version=4)
    finally:
        if made is not None:
            _remove_empty(made)
    printed = "".join(o.get("text", "") for c in done.cells if c.cell_type == "code" for o in c.get("outputs", [])
                      if o.get("output_type") == "stream" and o.get("name") == "stdout")
    return printed.rstrip("\n") + f"\ndry run: valid; notebook {name} would write {out / (name + '.ipynb')} (nothing trained)"


def _remove_empty(folder: Path) -> None:
    """Remove ``folder`` and the folders below it if they hold no file (a dry run's validation cell made them)."""
    if not folder.is_dir():
        return
    for root, _dirs, _files in sorted(os.walk(folder), key=lambda t: -len(t[0])):
        try:
            Path(root).rmdir()
        except OSError:
            return
