"""No switch on a strategy, sync-mode or experiment name outside the strategy's own module, the registry and the
experiment table: callers ask the registry for a capability or the table for a row (DESIGN.md, "one home per
concept"). An AST scan for ``==``, ``!=``, ``in`` and ``not in`` against such a name string."""
from __future__ import annotations

import ast
from pathlib import Path

from islands_kit.config.experiment_table import EXPERIMENTS
from islands_kit.config.strategies import MODES, STRATEGY_TRAITS

PKG = Path(__file__).resolve().parent.parent / "islands_kit"
# each registered strategy's home (its module and its spec beside it), the registry and the tables
HOMES = {f"sync/{name}{part}.py" for name in STRATEGY_TRAITS for part in ("", "_spec")
         if (PKG / "sync" / f"{name}{part}.py").is_file()} | {
    "sync/__init__.py", "sync/registry.py", "config/strategies.py", "config/experiment_table.py"}
# the routing channel's own setting (all_reduce | butterfly: how expert loads travel), not a strategy
NOT_A_STRATEGY = {"routing_sync_mode"}
NAMES = set(EXPERIMENTS) | set(MODES) | set(STRATEGY_TRAITS) | {t.strategy for t in STRATEGY_TRAITS.values()}


def _strings(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for e in node.elts for s in _strings(e)}
    return set()


def _is_routing(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in NOT_A_STRATEGY


def name_switches(src: str) -> list[tuple[int, str]]:
    """(line, name) of every comparison in ``src`` against a strategy, mode or experiment name string."""
    out = []
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, a, b in zip(node.ops, operands, operands[1:]):
            if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) or _is_routing(a) or _is_routing(b):
                continue
            for name in sorted((_strings(a) | _strings(b)) & NAMES):
                out.append((node.lineno, name))
    return out


def test_the_scan_finds_a_switch() -> None:
    assert name_switches('if cfg.sync.strategy == "ddp" or e not in ("baseline",): pass') == [(1, "ddp"), (1, "baseline")]
    assert name_switches('if s.routing_sync_mode == "butterfly": pass') == []


def test_no_name_switch_outside_the_homes() -> None:
    found = [f"{f.relative_to(PKG)}:{line}: {name!r}" for f in sorted(PKG.rglob("*.py"))
             if str(f.relative_to(PKG)) not in HOMES for line, name in name_switches(f.read_text())]
    assert not found, "compare against a name outside its home (ask the registry or the table):\n" + "\n".join(found)


ROOT = PKG.parent
LISTS_IN = [*PKG.rglob("*.py"), *(ROOT / "notebooks").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]


def name_lists(src: str) -> list[tuple[int, list[str]]]:
    """(line, names) of every list, tuple or set literal in ``src`` that spells two or more experiment or strategy
    names: a list the tables should have made."""
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            names = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in NAMES - set(MODES)]
            if len(names) >= 2:
                out.append((node.lineno, names))
    return out


def test_the_list_scan_finds_a_list() -> None:
    assert name_lists('experiments = ["baseline", "two_site"]\nxs = ("baseline", [])') == [(1, ["baseline", "two_site"])]


def test_no_hand_written_experiment_or_strategy_list_outside_the_tables() -> None:
    homes = {PKG / h for h in HOMES}
    found = [f"{f.relative_to(ROOT)}:{line}: {names}" for f in sorted(LISTS_IN) if f not in homes
             for line, names in name_lists(f.read_text())]
    assert not found, "derive the list from the experiment table or the strategy registry:\n" + "\n".join(found)
