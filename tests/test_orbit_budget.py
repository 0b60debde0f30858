"""The orbital study's planning and units (islands_kit/train/orbit.py): the inner steps a decoupled run's islands
compute, counted from the config alone and checked against smoke runs; the ticks that give equal processed tokens
(the study's ``equal_tokens`` knob); result.json's ``orbit_budget`` (orbital days, ground-link and inter-satellite
bytes, the ground baseline's time); and the hops a relayed transfer crosses (``windows.relay_hops``)."""
from __future__ import annotations

import json
import math

import pytest

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.model.transformer import active_params
from islands_kit.orbital import report, windows
from islands_kit.orbital.settings import CONTROLS
from islands_kit.protocol.knobs import KnobError, resolve
from islands_kit.run import run_experiment
from islands_kit.train import orbit
from islands_kit.train.islands import step_seconds


def _cfg(preset: str, control: str, **more: str):
    return apply_overrides(get_preset("orbital", preset), {**CONTROLS[control], **more})


def _budget(cfg) -> int:
    return cfg.steps * sum(i.batch_size for i in cfg.islands) * cfg.model.seq_len


@pytest.mark.parametrize("control", ["ground+eclipse", "passes"])
def test_the_planned_ticks_process_the_demo_budget_within_one_percent(control: str) -> None:
    cfg = _cfg("demo", control)
    budget = _budget(cfg)
    assert orbit.processed_tokens(cfg) < 0.9 * budget  # the eclipses skip over a tenth of the planned tokens
    ticks = orbit.steps_for_tokens(cfg, budget)
    got = orbit.processed_tokens(cfg, ticks)
    assert budget <= got <= 1.01 * budget
    assert orbit.processed_tokens(cfg, ticks - 1) < budget  # the fewest such ticks
    steps = orbit.inner_steps(cfg, ticks)
    assert steps[0] == ticks and all(steps[j] < ticks for j in range(1, 5))  # the ground island never throttles


def test_a_run_that_throttles_nothing_keeps_its_steps() -> None:
    cfg = _cfg("demo", "ground")
    assert orbit.inner_steps(cfg) == {j: cfg.steps for j in range(5)}
    assert orbit.steps_for_tokens(cfg, _budget(cfg)) == cfg.steps
    with pytest.raises(ValueError, match="tokens: must be > 0"):
        orbit.steps_for_tokens(cfg, 0)


def test_the_equal_tokens_knob_plans_the_steps_and_scales_the_schedule() -> None:
    base = get_preset("orbital", "demo")
    lit = resolve(base, "demo", dict(CONTROLS["ground+eclipse"]), {"equal_tokens": "true"})
    cfg = apply_overrides(base, lit)
    assert cfg.steps == orbit.steps_for_tokens(_cfg("demo", "ground+eclipse"), _budget(base)) > base.steps
    assert cfg.optim.warmup_steps == round(base.optim.warmup_steps * cfg.steps / base.steps)
    ground = resolve(base, "demo", dict(CONTROLS["ground"]), {"equal_tokens": "true"})
    assert "steps" not in ground  # nothing throttled: the preset's steps
    assert "steps" not in resolve(base, "demo", dict(CONTROLS["passes"]), {"equal_tokens": "false"})
    with pytest.raises(KnobError, match="equal_tokens: must be true or false"):
        resolve(base, "demo", {}, {"equal_tokens": "yes"})


def test_the_ground_baseline_time_is_its_slowest_islands_steps() -> None:
    cfg = get_preset("orbital", "demo")
    base = get_preset("baseline", "demo")
    a = active_params(cfg.model)
    per_step = max(step_seconds(ic, cfg.model, a) for ic in base.islands)
    tokens = 1000 * sum(ic.batch_size for ic in base.islands) * cfg.model.seq_len
    assert orbit.ground_baseline_s(cfg, tokens) == pytest.approx(1000 * per_step, rel=1e-12)


def test_relay_hops_count_the_ring_links_to_a_satellite_in_a_pass() -> None:
    o = _cfg("smoke", "passes+isl").link.orbit
    assert o.isl and o.n_satellites == 9
    t0 = windows.visibility_windows(o, 0, 0)[0]
    t = 0.5 * (t0[0] + t0[1])  # satellite 0 in a pass (orbital seconds)
    lit = {k for k in range(9) if any(a <= t < b for a, b in windows.visibility_windows(o, 0, k))}
    assert 0 in lit
    hops = {k: windows.relay_hops(o, 0, k, t / o.time_compression) for k in range(9)}
    for k in range(9):  # every link of the circular ring is up: the ring distance to the nearest lit satellite
        assert hops[k] == min(min((k - j) % 9, (j - k) % 9) for j in lit)
    alone = _cfg("smoke", "passes").link.orbit
    assert windows.relay_hops(alone, 0, 0, t / alone.time_compression) == 0
    far = max(range(9), key=lambda k: hops[k])
    assert windows.relay_hops(alone, 0, far, t / alone.time_compression) is None  # no ring: out of a pass is out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """A smoke run of each control but the first, at the planned ticks of equal processed tokens."""
    out = {}
    for name in ("ground+eclipse", "passes", "passes+isl"):
        cfg = _cfg("smoke", name)
        cfg = apply_overrides(cfg, {"steps": str(orbit.steps_for_tokens(cfg, _budget(cfg)))})
        d = tmp_path_factory.mktemp(f"budget-{name.replace('+', '-')}")
        run_experiment(cfg, d)
        out[name] = (cfg, json.loads((d / "result.json").read_text()))
    return out


@pytest.mark.slow  # trains for seconds
@pytest.mark.parametrize("control", ["ground+eclipse", "passes", "passes+isl"])
def test_the_count_from_the_config_is_the_runs(runs: dict, control: str) -> None:
    cfg, res = runs[control]
    assert {str(j): n for j, n in orbit.inner_steps(cfg).items()} == {str(k): v for k, v in res["inner_steps"].items()}
    assert res["tokens"] == orbit.processed_tokens(cfg) >= _budget(get_preset("orbital", "smoke"))


@pytest.mark.slow  # trains for seconds
@pytest.mark.parametrize("control", ["ground+eclipse", "passes", "passes+isl"])
def test_orbit_budget_in_the_designs_units(runs: dict, control: str) -> None:
    cfg, res = runs[control]
    b = res["orbit_budget"]
    assert b["orbital_s"] == pytest.approx(res["sim_wall_clock_s"] * cfg.link.orbit.time_compression, rel=1e-12)
    assert b["orbital_days"] == pytest.approx(b["orbital_s"] / 86400, rel=1e-12) and b["orbital_days"] > 0.1
    assert b["tokens"] == res["tokens"]
    assert b["ground_baseline_s"] == pytest.approx(orbit.ground_baseline_s(cfg, res["tokens"]), rel=1e-12)
    assert b["ground_link_bytes"] == res["cross_site_bytes"] > 0  # one station: every byte crosses a ground link
    if control == "passes+isl":
        assert b["isl_bytes"] > 0  # some bytes were relayed through the ring
        assert b["isl_bytes"] <= 4 * b["ground_link_bytes"]  # at most four hops around a ring of nine
    else:
        assert b["isl_bytes"] == 0
    assert math.isfinite(b["ground_baseline_days"])


def _run(curve: list[list[float]], days: float = 8.0) -> dict:
    return {"val_curve": curve, "final_val_bpb": curve[-1][1],
            "orbit_budget": {"orbital_days": days, "tokens": int(curve[-1][0]), "ground_link_bytes": 10,
                             "isl_bytes": 0, "ground_baseline_days": 0.001}}


def test_days_to_quality_reads_the_first_crossing_on_the_same_bytes() -> None:
    ref = _run([[100, 3.0], [200, 2.5], [200, 2.4]])  # curve bytes: 2.5 at the end; final bytes: 2.4
    assert report.crossing_tokens([[100, 2.9], [200, 2.4], [200, 2.45]], 2.45, 2.5, 2.4) == pytest.approx(180.0)
    assert report.days_to_quality(_run([[100, 2.9], [200, 2.4], [200, 2.45]]), ref) == pytest.approx(8.0 * 0.9)
    # never below 2.5 on the curve, but its final score on the final bytes matches the baseline's: reached at the end
    assert report.days_to_quality(_run([[100, 2.9], [200, 2.6], [200, 2.4]]), ref) == pytest.approx(8.0)
    assert report.days_to_quality(_run([[100, 2.9], [200, 2.6], [200, 2.41]]), ref) is None
    assert report.crossing_tokens([[100, 2.0], [200, 1.9], [200, 1.9]], 1.9, 2.5, 2.4) == 100.0


def test_the_verdict_carries_an_interval_or_says_not_reached() -> None:
    v = report.verdict([6.0, 7.0, 8.0], [9.0, 9.0, 9.0])
    assert v["mean"] == pytest.approx(7.0) and v["ci95"][0] < 7.0 < v["ci95"][1] and v["reached"] == 3
    assert v["ci95"][1] - 7.0 == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-3)
    v = report.verdict([6.0, None, None], [9.0, 8.5, 9.2])
    assert v["mean"] is None and v["text"] == "not reached in 8.5 days (1 of 3 seeds reached it)"
    assert report.verdict([None], [8.0])["text"] == "not reached in 8 days"
    assert report.row_fields({0: {"final_val_bpb": 2.0}}, {}) == {}  # a row that neither flies nor throttles


@pytest.mark.slow  # trains for seconds
def test_a_rows_units_from_smoke_runs(runs: dict, tmp_path) -> None:
    run_experiment(get_preset("baseline", "smoke"), tmp_path)
    ref = json.loads((tmp_path / "result.json").read_text())
    cfg, res = runs["passes+isl"]
    u = report.row_fields({0: res}, {0: ref})["orbit_units"]
    assert u["seeds"] == [0] and u["orbital_days"] == [res["orbit_budget"]["orbital_days"]]
    assert u["isl_bytes"][0] > 0 and u["tokens"] == [res["tokens"]]
    d = u["days_to_baseline_quality"]
    assert d["seeds"] == [0] and d["n"] == 1
    if d["days"][0] is None:
        assert res["final_val_bpb"] > ref["final_val_bpb"] and d["text"].startswith("not reached in")
    else:
        assert 0 < d["days"][0] <= res["orbit_budget"]["orbital_days"]
    assert report.lines({"row": "(iv)", "orbit_units": u})[0].startswith("(iv): ")


@pytest.mark.slow  # four smoke runs, each its own process
def test_a_smoke_orbital_study_reports_each_row_in_orbital_units(tmp_path) -> None:
    from pathlib import Path

    from islands_kit.protocol.report import make_report
    from islands_kit.protocol.runner import run_study
    from islands_kit.protocol.study import load_study

    study = load_study(Path(__file__).parent / "studies" / "orbital-smoke.toml")
    assert len(run_study(study, tmp_path, jobs=2, say=lambda s: None)) == 4  # a tuning run at seed 0 is scored too
    doc = make_report(study, tmp_path, "cmd")
    rows = {e["row"]: e for e in doc["entries"] if e["kind"] == "row"}
    base = next(e for e in doc["entries"] if e["kind"] == "arm" and e["arm"] == "baseline")
    assert base["status"] == "done"
    budget = 24 * 40 * get_preset("orbital", "smoke").model.seq_len  # the baseline's tokens
    for name, e in rows.items():
        assert e["status"] == "done" and e["vs_ref"]["ratio_n"] == 1 and e["vs_control"]["ratio_n"] == 1
        u = e["orbit_units"]
        assert budget <= u["tokens"][0] == e["tokens"][0] <= budget * 1.1  # at most one smoke tick past it
        assert u["orbital_days"][0] > 0 and u["days_to_baseline_quality"]["n"] == 1
        assert (u["isl_bytes"][0] > 0) == name.startswith("(iv)")
        assert report.lines(e)[0].startswith(name)
    assert report.effect_lines(doc)[0].startswith("(ii) ground + eclipse throttling: vs orbital ")
