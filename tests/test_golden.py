"""Golden smoke fixtures: every number of a smoke run of each experiment (bpb, curve, ledger, link timeline,
simulated clock) equals the committed fixture exactly. A change that moves one on purpose regenerates the fixture
with ``scripts/update_golden.py`` and re-states the moved figures in benchmarks/RESULTS.md."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from islands_kit.golden import EXPERIMENTS, diff, golden_config, pinned, read_run_files
from islands_kit.run import run_experiment

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_smoke_result_matches_golden_fixture(experiment, tmp_path):
    expected = json.loads((GOLDEN / f"{experiment}.smoke.json").read_text())
    res = run_experiment(golden_config(experiment), tmp_path)
    history, timeline = read_run_files(tmp_path)
    # through JSON, as the fixture was written: floats compare bit for bit after a repr round trip
    actual = json.loads(json.dumps(pinned(dict(res), history, timeline), sort_keys=True))
    problems = diff(expected, actual)
    assert not problems, f"{len(problems)} pinned fields moved:\n" + "\n".join(problems[:20])


def test_diff_reports_a_moved_number():
    assert diff({"a": [1.0, {"b": 2}]}, {"a": [1.0, {"b": 2}], "new": 1}) == []
    assert diff({"a": [1.0, {"b": 2}]}, {"a": [1.0000001, {"b": 2}]}) == [".a[0]: 1.0 -> 1.0000001"]
    assert diff({"a": {"b": 2}}, {"a": {}}) == [".a.b: missing"]
