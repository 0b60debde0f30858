"""The package's layers point one way: no import circle among islands_kit modules, counting every import statement
(module level, inside functions, under TYPE_CHECKING): a circle hidden by a late import is still a circle; no circle
among its packages either, counting what importing a module runs (its module-level imports and the ``__init__`` of
every package above what it imports); no import from a higher layer (``LAYERS``, docs/architecture.md); a short top
level and short modules."""
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


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """The statements that run when the module is imported: its body, and the branches of its top-level ``if`` and
    ``try`` statements (an ``if TYPE_CHECKING:`` block runs only for a type checker), never a function's body."""
    out: list[ast.stmt] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop(0)
        out.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            todo[:0] = node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo[:0] = node.body + [s for h in node.handlers for s in h.body] + node.orelse + node.finalbody
    return out


def _imports(name: str, path: Path, mods: dict[str, Path], module_level: bool = False) -> set[str]:
    """The islands_kit modules ``name`` imports anywhere in its source (a ``from pkg import x`` names ``pkg.x`` when
    that is a module, else ``pkg``); ``module_level``: only the imports that run when it is imported."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in (_module_level(tree) if module_level else ast.walk(tree)):
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


def _package(module: str) -> str:
    """``islands_kit.config.link`` -> ``islands_kit.config``; a top-level module is its own (``islands_kit.run``)."""
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, set[str]]:
    """Which of islands_kit's packages (and top-level modules) importing one runs another: an edge ``a -> b`` when a
    module of ``a`` imports a module of ``b`` at module level. Importing ``islands_kit.b.x`` runs
    ``islands_kit/b/__init__.py`` first, so the edge is there whichever of ``b``'s modules is named; the package's own
    ``islands_kit/__init__.py`` is left out (every import runs it)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for m, p in mods.items():
        if m == "islands_kit":
            continue
        src = _package(m)
        graph.setdefault(src, set())
        for t in _imports(m, p, mods, module_level=True):
            if t != "islands_kit" and _package(t) != src:
                graph[src].add(_package(t))
    return graph


def import_cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Every strongly connected group of more than one node in an import graph (Tarjan); by default the modules'."""
    if graph is None:
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


# The kit's folders (and the top-level modules that are layers of their own), bottom to top, as docs/architecture.md
# draws them: a module imports only from its own entry or one below it, wherever the import sits. Outside the order
# (each mixes layers): protocol (statistics used by
# compare and plots beside the study runner built on train), compare and plots (drawn on by records and notebooks),
# scaling and references (being replaced), and the package's __init__.
LAYERS = ["rules", "io", "resources", "stats", "orbital", "config", "kernels", "device", "data", "model", "optim", "comm",
          "sync", "faults",
          "compare", "plots", "records", "train", "projection", "run", "protocol", "notebooks", "scaling", "commands",
          "cli", "__main__"]
MAX_TOP_LEVEL = 12  # islands_kit/*.py, __init__ and __main__ counted
MAX_LINES = 400


def _layer(module: str) -> str:
    """``islands_kit.train.islands`` -> ``train``; ``islands_kit.run`` -> ``run``; ``islands_kit`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(layers: list[str]) -> list[str]:
    """Every ``module -> imported module`` where the imported one sits in a higher entry of ``layers``."""
    mods = _modules()
    rank = {name: i for i, name in enumerate(layers)}
    found = []
    for m, p in sorted(mods.items()):
        src = _layer(m)
        for t in sorted(_imports(m, p, mods)):
            dst = _layer(t)
            if src in rank and dst in rank and rank[dst] > rank[src]:
                found.append(f"{m} -> {t} ({src} below {dst})")
    return found


def test_no_module_imports_from_a_higher_layer():
    assert set(LAYERS) <= {_layer(m) for m in _modules()}, "LAYERS names a folder or module that is not there"
    assert upward_imports(LAYERS) == []


def test_the_layer_check_sees_an_import_upwards(tmp_path, monkeypatch):
    pkg = tmp_path / "islands_kit"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from islands_kit import high\n    return high\n")
    (pkg / "high.py").write_text("from islands_kit.low import a\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    assert upward_imports(["low", "high"]) == ["islands_kit.low.a -> islands_kit.high (low below high)"]
    assert upward_imports(["high", "low"]) == ["islands_kit.high -> islands_kit.low.a (high below low)"]


def test_the_top_level_is_short_and_every_module_too():
    top = sorted(f.name for f in PKG.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} modules at islands_kit/'s top level (at most {MAX_TOP_LEVEL}): {top}"
    lines = {str(p.relative_to(PKG.parent)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    long = {path: n for path, n in lines.items() if n > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines"


def test_no_import_circle_among_the_packages_modules():
    assert import_cycles() == []


def test_no_import_circle_among_the_packages():
    """No two packages import each other through any of their modules: ``config -> config.link -> orbital.config``
    runs ``orbital/__init__.py``, so an import of the config there closes a circle no module-level graph shows."""
    assert import_cycles(package_graph()) == []


def test_the_package_check_sees_a_circle_through_an_init(tmp_path, monkeypatch):
    pkg = tmp_path / "islands_kit"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("import islands_kit.high  # load order\n")
    (pkg / "low" / "leaf.py").write_text("X = 1\n")
    (pkg / "high" / "__init__.py").write_text("")
    (pkg / "high" / "a.py").write_text("from islands_kit.low.leaf import X\n")
    (pkg / "high" / "b.py").write_text("def f():\n    from islands_kit.low import leaf\n    return leaf\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    assert import_cycles() == []  # no module imports one that imports it
    assert import_cycles(package_graph()) == [["islands_kit.high", "islands_kit.low"]]
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "high" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import islands_kit.low\n")
    (pkg / "low" / "d.py").write_text("def f():\n    import islands_kit.high.a\n")
    assert import_cycles(package_graph()) == []  # type checking and function bodies run no import at load time


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
                                    "islands_kit.orbital.report", "islands_kit.config"])
def test_the_config_and_the_orbits_settings_import_first_and_torch_free(module: str) -> None:
    """``config/link.py`` and the experiment table import the orbit's settings, which use only ``rules.py``: either
    side imported first must load, and neither pulls in torch."""
    code = f"import sys, {module}; assert 'torch' not in sys.modules, 'torch imported'"
    run = subprocess.run([sys.executable, "-c", code], cwd=PKG.parent, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
