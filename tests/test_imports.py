"""The package's layers point one way: no import circle among islands_kit modules, counting every import statement
(module level, inside functions, under TYPE_CHECKING): a circle hidden by a late import is still a circle."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "islands_kit"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = f.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The islands_kit modules ``name`` imports anywhere in its source (a ``from pkg import x`` names ``pkg.x`` when
    that is a module, else ``pkg``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in mods:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def import_cycles() -> list[list[str]]:
    """Every strongly connected group of more than one module in the import graph (Tarjan)."""
    mods = _modules()
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_circle_among_the_packages_modules():
    assert import_cycles() == []


def test_the_checker_sees_a_circle_hidden_inside_a_function(tmp_path, monkeypatch):
    pkg = tmp_path / "islands_kit"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from islands_kit.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import islands_kit.a\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    assert import_cycles() == [["islands_kit.a", "islands_kit.sub.b"]]


@pytest.mark.slow  # starts a fresh interpreter per module
@pytest.mark.parametrize("module", ["islands_kit.orbital.config", "islands_kit.orbital.settings",
                                    "islands_kit.orbital.geometry", "islands_kit.orbital.windows",
                                    "islands_kit.config"])
def test_the_config_and_the_orbits_settings_import_first_and_torch_free(module: str) -> None:
    """``config/link.py`` and the experiment table import the orbit's settings, which use the config's rules: either
    side imported first must load (the package loads the config first), and neither pulls in torch."""
    code = f"import sys, {module}; assert 'torch' not in sys.modules, 'torch imported'"
    run = subprocess.run([sys.executable, "-c", code], cwd=PKG.parent, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
