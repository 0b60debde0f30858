"""Every file path that a docstring, a comment or a doc names exists: a module split into a package leaves no
stale ``comm/codecs.py`` behind. A path is looked up from the repository root, from ``islands_kit/`` and from the
naming file's folder; placeholders (``runs/...``, ``OUT/...``, ``NAME``) and files a named script writes are
exempt."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "islands_kit"
PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.(?:py|md|ipynb|json|toml|yaml))\b")
PLACEHOLDERS = ("runs/", "OUT/", "out_dir/", "x/")
# outputs a named command writes
WRITTEN = {"benchmarks/headline-demo.json": "islands-kit study report benchmarks/studies/headline-demo.toml --write",
           "benchmarks/orbital-demo.json": "islands-kit study report benchmarks/studies/orbital-demo.toml --write"}


def _texts(f: Path) -> list[str]:
    """The docstrings and comments of a module, or a whole doc."""
    src = f.read_text()
    if f.suffix != ".py":
        return [src]
    docs = [ast.get_docstring(n, clean=False) or "" for n in ast.walk(ast.parse(src))
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    return docs + [line[line.index("#"):] for line in src.splitlines() if "#" in line]


def missing_paths(f: Path) -> list[str]:
    out = []
    for text in _texts(f):
        for p in PATH.findall(text):
            if p.startswith(PLACEHOLDERS) or "NAME" in p or p in WRITTEN:
                continue
            if not any((base / p).exists() for base in (ROOT, PKG, f.parent)):
                out.append(p)
    return out


def test_named_paths_exist() -> None:
    files = [*sorted(PKG.rglob("*.py")), ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    stale = [f"{f.relative_to(ROOT)}: {p}" for f in files for p in missing_paths(f)]
    assert not stale, "paths that no longer exist:\n" + "\n".join(stale)


def test_the_scan_sees_a_stale_path(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text('"""The formats are in ``comm/codecs.py``; see sync/diloco.py."""\nx = 1  # written to runs/x/result.json\n')
    assert missing_paths(f) == ["comm/codecs.py"]
