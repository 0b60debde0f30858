"""What the golden smoke fixtures pin (``tests/golden/*.smoke.json``, written by ``scripts/update_golden.py``).

Every number a smoke run reports — bpb and the validation curve, the byte ledger and link timeline, the simulated
clock — is pinned, so a refactor that moves one shows exactly which. Left out: what describes the machine or the
moment (wall time, versions, git SHA) and the config echo (it gains fields as the kit grows; the config that made a
fixture is :func:`golden_config`).
"""
from __future__ import annotations

import math
from typing import Any

from islands_kit.config import ExperimentConfig, apply_overrides
from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.config.presets import get_preset
from islands_kit.train.result import machine_fingerprint

EXPERIMENTS = tuple(EXPERIMENT_TABLE)  # one fixture per experiment of the table
UNPINNED = frozenset({"wall_time_s", "cpu_time_s", "versions", "git_sha", "config"})
MACHINE_KEY = "_machine"
# Elsewhere than on the machine kind that wrote a fixture, floats are compared to a relative tolerance measured, not
# chosen: the same torch wheel picks other CPU kernels per CPU (AVX2 / AVX-512 / AMX, MKL's per-CPU paths) whose
# summation orders differ in the last bits. scripts/measure_golden_tolerance.py runs every smoke fixture under each
# ATEN_CPU_CAPABILITY, takes the largest relative difference of any pinned float, and multiplies it by this factor
# (tests/golden/tolerance.json holds the measurement). Integers (bytes, steps, tokens) and strings are always exact.
TOLERANCE_FACTOR = 10.0


def relative_difference(a: float, b: float) -> float:
    """|a − b| / max(|a|, |b|): what ``math.isclose(a, b, rel_tol=r)`` bounds by r (0 for equal numbers)."""
    if a == b:
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


def float_pairs(expected: Any, actual: Any, path: str = "") -> list[tuple[str, float, float]]:
    """Every float of ``expected`` beside the float at the same place in ``actual`` (places whose shape or type differ
    are left to :func:`diff`)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return [p for k in expected if k in actual for p in float_pairs(expected[k], actual[k], f"{path}.{k}")]
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [p for i, (a, b) in enumerate(zip(expected, actual)) for p in float_pairs(a, b, f"{path}[{i}]")]
    if isinstance(expected, float) and isinstance(actual, float):
        return [(path, expected, actual)]
    return []


def measured_rtol(golden_dir: Any) -> float:
    """The cross-machine tolerance written beside the fixtures by scripts/measure_golden_tolerance.py."""
    import json
    from pathlib import Path

    record = json.loads((Path(golden_dir) / "tolerance.json").read_text())
    rtol = float(record["rtol"])
    if not (0.0 <= rtol <= TOLERANCE_FACTOR * float(record["max_rel_diff"]) + 1e-300):
        raise ValueError(f"tolerance.json: rtol {rtol!r} is not the measured {record['max_rel_diff']!r} times at most "
                         f"{TOLERANCE_FACTOR}")
    return rtol


def fixture_diff(fixture: dict[str, Any], actual: dict[str, Any], rtol: float) -> list[str]:
    """:func:`diff` of a run against a fixture: bit for bit on the machine kind that wrote it (same CPU, kernel set and
    torch), floats within ``rtol`` (the measured cross-capability tolerance) elsewhere."""
    expected = {k: v for k, v in fixture.items() if k != MACHINE_KEY}
    exact = fixture.get(MACHINE_KEY) == machine_fingerprint()
    return diff(expected, actual, rtol=0.0 if exact else rtol)


def same_number(fixture: dict[str, Any], expected: float, actual: float, rtol: float) -> bool:
    """One pinned float of ``fixture`` compared as :func:`fixture_diff` compares it."""
    return not fixture_diff({MACHINE_KEY: fixture.get(MACHINE_KEY), "x": expected}, {"x": actual}, rtol)


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


def diff(expected: Any, actual: Any, path: str = "", rtol: float = 0.0) -> list[str]:
    """Every place where ``actual`` differs from ``expected`` (exact by default: numbers must match bit for bit once
    written to JSON; ``rtol`` > 0 lets two floats differ by that relative amount), as ``path: expected -> actual``
    lines. Keys only in ``actual`` are new fields and not differences."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for k in expected:
            if k not in actual:
                out.append(f"{path}.{k}: missing")
            else:
                out += diff(expected[k], actual[k], f"{path}.{k}", rtol)
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: length {len(expected)} -> {len(actual)}"]
        return [d for i, (a, b) in enumerate(zip(expected, actual)) for d in diff(a, b, f"{path}[{i}]", rtol)]
    if (rtol > 0 and isinstance(expected, float) and isinstance(actual, float) and math.isfinite(expected)
            and math.isclose(expected, actual, rel_tol=rtol, abs_tol=0.0)):
        return []
    if expected != actual and not (expected is None and actual is None):
        return [f"{path}: {expected!r} -> {actual!r}"]
    return []
