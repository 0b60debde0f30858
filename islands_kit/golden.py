"""What the golden smoke fixtures pin (``tests/golden/*.smoke.json``, written by ``scripts/update_golden.py``).

Every number a smoke run reports — bpb and the validation curve, the byte ledger and link timeline, the simulated
clock — is pinned, so a refactor that moves one shows exactly which. Left out: what describes the machine or the
moment (wall time, versions, git SHA) and the config echo (it gains fields as the kit grows; the config that made a
fixture is :func:`golden_config`).
"""
from __future__ import annotations

from typing import Any

from islands_kit.config import ExperimentConfig, apply_overrides
from islands_kit.presets import get_preset

EXPERIMENTS = ("baseline", "two_site", "eight_cell")
UNPINNED = frozenset({"wall_time_s", "versions", "git_sha", "config"})


def golden_config(experiment: str) -> ExperimentConfig:
    """The smoke preset of ``experiment`` with one thread (what the fixtures were made with)."""
    return apply_overrides(get_preset(experiment, "smoke"), {"threads": 1})


def pinned(result: dict[str, Any], history: list[dict[str, Any]],
           link_timeline: list[list[Any]] | None = None) -> dict[str, Any]:
    """The fields of a result (and its history and link timeline, which live in files of their own) that a fixture
    pins."""
    out = {k: v for k, v in result.items() if k not in UNPINNED}
    out["history"] = history
    if link_timeline is not None:
        out["link_timeline"] = link_timeline
    return out


def read_run_files(out_dir: Any) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """``(history, link_timeline)`` of a run folder, as written (history.jsonl, link_timeline.jsonl)."""
    import json
    from pathlib import Path

    d = Path(out_dir)
    rows = [[json.loads(line) for line in (d / name).read_text().splitlines() if line.strip()]
            for name in ("history.jsonl", "link_timeline.jsonl")]
    return rows[0], rows[1]


def diff(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Every place where ``actual`` differs from ``expected`` (exact: numbers must match bit for bit once written
    to JSON), as ``path: expected -> actual`` lines. Keys only in ``actual`` are new fields and not differences."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for k in expected:
            if k not in actual:
                out.append(f"{path}.{k}: missing")
            else:
                out += diff(expected[k], actual[k], f"{path}.{k}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: length {len(expected)} -> {len(actual)}"]
        return [d for i, (a, b) in enumerate(zip(expected, actual)) for d in diff(a, b, f"{path}[{i}]")]
    if expected != actual and not (expected is None and actual is None):
        return [f"{path}: {expected!r} -> {actual!r}"]
    return []
