"""Golden smoke fixtures: every number of a smoke run of each experiment (bpb, curve, ledger, link timeline,
simulated clock) equals the committed fixture — bit for bit on the machine kind that wrote it, within the measured
cross-capability tolerance (tests/golden/tolerance.json) elsewhere. A change that moves one on purpose regenerates the
fixtures with ``scripts/update_golden.py``, re-measures the tolerance with ``scripts/measure_golden_tolerance.py`` and
says in its commit which figures moved and why (git log -- tests/golden/ is the record).

`make test` runs this file a second and third time under ``ATEN_CPU_CAPABILITY=default`` and ``=avx2``, so a fixture
that holds on only one kernel set fails here, not on the next CPU CI lands on."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from islands_kit.config import apply_overrides
from islands_kit.run import run_experiment
from islands_kit.train.golden import (
    EXPERIMENTS,
    MACHINE_KEY,
    TOLERANCE_FACTOR,
    diff,
    fixture_diff,
    float_pairs,
    golden_config,
    machine_fingerprint,
    measured_rtol,
    pinned,
    read_run_files,
    relative_difference,
)

GOLDEN = Path(__file__).parent / "golden"


def smoke_pinned(cfg, out) -> dict:
    res = run_experiment(cfg, out)
    history, timeline = read_run_files(out)
    # through JSON, as the fixture was written: floats compare bit for bit after a repr round trip
    return json.loads(json.dumps(pinned(dict(res), history, timeline), sort_keys=True))


def fixture(experiment: str) -> dict:
    return json.loads((GOLDEN / f"{experiment}.smoke.json").read_text())


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_smoke_result_matches_golden_fixture(experiment, tmp_path):
    problems = fixture_diff(fixture(experiment), smoke_pinned(golden_config(experiment), tmp_path), measured_rtol(GOLDEN))
    assert not problems, f"{len(problems)} pinned fields moved:\n" + "\n".join(problems[:20])


def test_a_small_real_change_fails_the_fixture_even_within_the_cross_machine_tolerance(tmp_path):
    """The tolerance lets kernel-order noise through and nothing else: the inner lr moved by 1% moves the pinned
    floats by far more than it, compared as on another machine (the tolerance, not bit for bit)."""
    cfg = golden_config("baseline")
    moved = smoke_pinned(apply_overrides(cfg, {"optim.lr": cfg.optim.lr * 1.01}), tmp_path)
    expected = {k: v for k, v in fixture("baseline").items() if k != MACHINE_KEY}
    problems = diff(expected, moved, rtol=measured_rtol(GOLDEN))
    assert any(p.startswith(".final_val_bpb:") for p in problems), problems
    assert len(problems) > 10, problems  # the whole curve moves, not one digit


def test_the_same_config_twice_on_one_machine_gives_identical_bytes(tmp_path):
    """Bit-identity where it is real: the same machine, thread count and config, twice."""
    a = json.dumps(smoke_pinned(golden_config("two_site"), tmp_path / "a"), sort_keys=True)
    b = json.dumps(smoke_pinned(golden_config("two_site"), tmp_path / "b"), sort_keys=True)
    assert a == b


def test_the_tolerance_is_a_measurement_times_at_most_ten():
    record = json.loads((GOLDEN / "tolerance.json").read_text())
    assert set(record["capabilities"]) >= {"default", "avx2", "native"}
    assert set(record["per_experiment"]) == set(EXPERIMENTS)
    assert record["max_rel_diff"] == max(v["max_rel_diff"] for v in record["per_experiment"].values())
    assert record["factor"] == TOLERANCE_FACTOR <= 10
    assert measured_rtol(GOLDEN) == record["rtol"] == pytest.approx(record["max_rel_diff"] * record["factor"], rel=1e-12)
    # the measured noise is last-bits noise: far below the 1% lr change the test above must catch
    assert 0 < record["rtol"] < 1e-3


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
    assert fixture_diff(here, moved, rtol=1e-6) == [".a: 1.0 -> 1.000000001"]  # the machine that wrote it: bit for bit
    assert fixture_diff(elsewhere, moved, rtol=1e-6) == []


def test_relative_difference_is_what_isclose_bounds():
    assert relative_difference(2.0, 2.0) == 0.0
    assert relative_difference(1.0, 1.1) == pytest.approx(0.1 / 1.1)
    assert relative_difference(-1.0, 1.0) == 2.0
    assert float_pairs({"a": [1.0, 2, "x", {"b": 3.0}], "c": 1.0}, {"a": [1.5, 2, "x", {"b": 3.0}]}) == [
        (".a[0]", 1.0, 1.5), (".a[3].b", 3.0, 3.0)]
