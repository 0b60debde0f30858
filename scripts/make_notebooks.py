"""Build notebooks/NAME.ipynb from its readable source notebooks/NAME.py (a jupytext "percent" script), without
outputs.

The ``.py`` files are the notebooks' sources: edit them (in any editor, or in Jupyter with jupytext, which pairs them
with the ``.ipynb`` through the ``formats: ipynb,py:percent`` header), then rebuild the committed ``.ipynb``:

    python scripts/make_notebooks.py          # rewrites every notebooks/*.ipynb from its .py (cell ids are stable)
    python scripts/make_notebooks.py --check  # exit 1 if a committed notebook differs from its source (a test runs it)

A source holds a ``parameters`` cell of literals (``# %% tags=["parameters"]``), then calls into ``islands_kit``
and plots; logic lives in the library (``islands_kit.notebooks`` and friends), not here.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
NB_DIR = ROOT / "notebooks"
METADATA = {
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"},
}


def build(source: Path) -> nbformat.NotebookNode:
    """The notebook of one percent script: its cells (type, source, tags), ids ``NAME-NN``, no outputs."""
    import jupytext

    name = source.stem
    cells = []
    for c in jupytext.read(source, fmt="py:percent").cells:
        new = new_markdown_cell(c.source) if c.cell_type == "markdown" else new_code_cell(c.source)
        tags = c.metadata.get("tags")
        if tags:
            new.metadata["tags"] = list(tags)
        cells.append(new)
    nb = new_notebook(cells=cells, metadata=METADATA)
    for i, c in enumerate(nb.cells):
        c["id"] = f"{name}-{i:02d}"
    nbformat.validate(nb)
    check_parameters(nb, name)
    return nb


def check_parameters(nb: nbformat.NotebookNode, name: str) -> None:
    """One ``parameters`` cell of literal assignments, every name of which papermill can see (it skips a line
    holding two '=')."""
    from papermill.translators import PythonTranslator

    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    if len(tagged) != 1:
        raise SystemExit(f"{name}: needs exactly one cell tagged parameters (found {len(tagged)})")
    assigned = []
    for node in ast.parse(tagged[0].source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            raise SystemExit(f"{name}: the parameters cell holds only `name = literal` lines ({ast.unparse(node)!r})")
        try:
            ast.literal_eval(node.value)
        except ValueError:
            raise SystemExit(f"{name}: parameter {node.targets[0].id} is not a literal") from None
        assigned.append(node.targets[0].id)
    seen = [p.name for p in PythonTranslator.inspect(tagged[0])]
    if assigned != seen:
        raise SystemExit(f"{name}: papermill sees parameters {seen}, the cell assigns {assigned}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed notebooks instead of writing")
    args = ap.parse_args(argv)
    sources = sorted(NB_DIR.glob("*.py"))
    if not sources:
        raise SystemExit(f"no notebook sources in {NB_DIR}")
    stale = []
    for src in sources:
        path = src.with_suffix(".ipynb")
        text = nbformat.writes(build(src)) + "\n"
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    orphans = sorted(str(p) for p in NB_DIR.glob("*.ipynb") if not p.with_suffix(".py").exists())
    if orphans:
        print("notebooks without a .py source:\n  " + "\n  ".join(orphans), file=sys.stderr)
        return 1
    if stale:
        print("out of date (run python scripts/make_notebooks.py):\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
