"""Golden smoke fixtures: every number of a smoke run of each experiment (bpb, curve, ledger, link timeline,
simulated clock) equals the committed fixture exactly. A change that moves one on purpose regenerates the fixture
with ``scripts/update_golden.py`` and re-states the moved figures in benchmarks/RESULTS.md."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from islands_kit.golden import EXPERIMENTS, MACHINE_KEY, diff, fixture_diff, golden_config, machine_fingerprint, pinned, read_run_files
from islands_kit.run import run_experiment

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_smoke_result_matches_golden_fixture(experiment, tmp_path):
    expected = json.loads((GOLDEN / f"{experiment}.smoke.json").read_text())
    res = run_experiment(golden_config(experiment), tmp_path)
    history, timeline = read_run_files(tmp_path)
    # through JSON, as the fixture was written: floats compare bit for bit after a repr round trip
    actual = json.loads(json.dumps(pinned(dict(res), history, timeline), sort_keys=True))
    problems = fixture_diff(expected, actual)
    assert not problems, f"{len(problems)} pinned fields moved:\n" + "\n".join(problems[:20])


def test_diff_reports_a_moved_number():
    assert diff({"a": [1.0, {"b": 2}]}, {"a": [1.0, {"b": 2}], "new": 1}) == []
    assert diff({"a": [1.0, {"b": 2}]}, {"a": [1.0000001, {"b": 2}]}) == [".a[0]: 1.0 -> 1.0000001"]
    assert diff({"a": {"b": 2}}, {"a": {}}) == [".a.b: missing"]


def test_diff_tolerates_last_bits_only_off_the_fixture_machine():
    moved = {"a": 1.0 + 1e-9, "n": 3}
    assert diff({"a": 1.0, "n": 3}, moved, rtol=1e-6) == []
    assert diff({"a": 1.0, "n": 3}, {"a": 1.001, "n": 3}, rtol=1e-6) == [".a: 1.0 -> 1.001"]
    assert diff({"a": 1.0, "n": 3}, {"a": 1.0, "n": 4}, rtol=1e-6) == [".n: 3 -> 4"]  # integers stay exact
    here = {MACHINE_KEY: machine_fingerprint(), "a": 1.0}
    elsewhere = {MACHINE_KEY: "another machine", "a": 1.0}
    assert fixture_diff(here, moved) == [".a: 1.0 -> 1.000000001"]  # the machine that wrote it: bit for bit
    assert fixture_diff(elsewhere, moved) == []
