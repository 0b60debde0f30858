"""The orbital experiment (its row of the experiment table, islands_kit/train/orbit.py and settings.py):
satellites that relay over inter-satellite links, eclipse throttling on the simulated clock, the controls that take
the orbit apart one effect at a time, and smoke runs whose transfers all move inside their link's contact windows,
with result.json's orbit section and its figure."""
from __future__ import annotations

import json

import pytest

from islands_kit import plots
from islands_kit.comm.link import LinkModel
from islands_kit.comm.link.contact import contact_plan, up_windows
from islands_kit.config import apply_overrides
from islands_kit.config.experiment_table import experiment_row
from islands_kit.config.presets import PRESETS, get_preset
from islands_kit.orbital import windows
from islands_kit.orbital.config import OrbitConfig
from islands_kit.orbital.settings import CONTROLS, N_TRAINING, RING
from islands_kit.run import run_experiment
from islands_kit.sync.hooks import Hooks
from islands_kit.train.orbit import attach, eclipses, on_orbit


def test_inter_satellite_links_relay_every_satellite_through_any_pass() -> None:
    cfg = OrbitConfig(horizon_s=20000.0)
    alone = windows.contact_plan(cfg)
    ring = windows.contact_plan(OrbitConfig(horizon_s=20000.0, isl=True))
    union = windows.union([list(alone.links[(0, 1 + k)].windows or ()) for k in range(9)])
    for k in range(9):
        assert ring.links[(1 + k, 0)].windows == tuple(union)  # one schedule for the whole ring
        for a, b in alone.links[(0, 1 + k)].windows or ():  # ... that holds each satellite's own passes
            assert any(x <= a and b <= y for x, y in union)
    assert sum(b - a for a, b in union) > max(sum(b - a for a, b in alone.links[(0, 1 + k)].windows or ())
                                              for k in range(9))
    assert windows.union([[(0.0, 2.0)], [(1.0, 3.0), (5.0, 6.0)]]) == [(0.0, 3.0), (5.0, 6.0)]


def test_eclipse_throttles_the_satellites_only_and_only_on_the_orbit() -> None:
    cfg = get_preset("orbital", "smoke")
    assert on_orbit(cfg) and cfg.link.orbit.eclipse_throttle == 0.5
    hooks = Hooks()
    attach(hooks, cfg)
    o = cfg.link.orbit
    shade = windows.eclipse_windows(o, 0)[0][0] / o.time_compression  # satellite 0 (island 1) enters the shadow
    assert hooks.step_seconds(1, shade + 1e-12, 0.01) == pytest.approx(0.02)  # half speed in shadow
    assert hooks.step_seconds(0, shade + 1e-12, 0.01) == 0.01  # the ground island (0) is never throttled
    sunlit = shade - 1e-6  # just before the shadow
    assert windows.compute_factor(o, 0, sunlit) == 1.0
    assert hooks.step_seconds(1, sunlit, 0.01) == 0.01  # a step that starts in sunlight runs at full speed
    ground = Hooks()
    attach(ground, get_preset("two_site", "smoke"))
    assert not ground.has("step_seconds") and not ground.has("result")


@pytest.mark.parametrize("preset", [p for p in PRESETS if not p.startswith("gpu")])
def test_every_cpu_preset_flies_the_leo_orbit_link(preset: str) -> None:
    cfg = get_preset("orbital", preset)
    assert cfg.link.preset == "leo-orbit" and cfg.sync.mode == "decoupled" and len(cfg.islands) == 5
    assert sum(i.batch_size for i in cfg.islands) == sum(i.batch_size for i in get_preset("baseline", preset).islands)
    assert cfg.steps == get_preset("baseline", preset).steps  # the baseline's token budget
    assert experiment_row("orbital").notebook == "orbital"


def test_the_controls_change_one_thing_each() -> None:
    """(i) ground: same islands, link always up, no eclipse; (ii) + eclipse; (iii) + ground passes (the orbit);
    (iv) + the inter-satellite links that exist. Each row differs from the one before it in one setting's effect."""
    assert list(CONTROLS) == ["ground", "ground+eclipse", "passes", "passes+isl"]
    base = get_preset("orbital", "smoke")
    cfgs = {name: apply_overrides(get_preset("orbital", "smoke"), o) for name, o in CONTROLS.items()}
    for cfg in cfgs.values():  # the same islands, batches, sync settings and budget in every row
        assert cfg.islands == base.islands and cfg.sync == base.sync and cfg.steps == base.steps
        assert cfg.link.bandwidth_bps == base.link.bandwidth_bps and cfg.link.rtt_s == base.link.rtt_s
    ground, lit, passes, isl = cfgs.values()
    assert (on_orbit(ground), eclipses(ground)) == (False, False)
    assert (on_orbit(lit), eclipses(lit)) == (False, True)
    assert (on_orbit(passes), eclipses(passes), passes.link.orbit.isl) == (True, True, False)
    assert (on_orbit(isl), eclipses(isl), isl.link.orbit.isl) == (True, True, True)
    for cfg in (ground, lit):  # off the orbit every link is up at every time
        sched = LinkModel(cfg.link).contacts.schedule(0, 1)
        assert sched.always_up and sched.next_up(1234.5) == (1234.5, float("inf"))
    hooks = Hooks()
    attach(hooks, lit)
    o = lit.link.orbit
    for k in range(4):  # (ii) throttles the satellites' islands as (iii) and (iv) do
        shade = windows.eclipse_windows(o, k)[0][0] / o.time_compression
        assert hooks.step_seconds(1 + k, shade + 1e-12, 0.01) == pytest.approx(0.02)
    assert hooks.step_seconds(0, 0.0, 0.01) == 0.01
    assert set(hooks.result([], 1.0)) == {"orbit_budget"}  # off the orbit: its time and bytes, no contact windows
    assert len(base.islands) == 1 + N_TRAINING and base.link.orbit.n_satellites == RING


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, list]]:
    """One smoke run of each control (CONTROLS)."""
    out = {}
    for name, o in CONTROLS.items():
        cfg = apply_overrides(get_preset("orbital", "smoke"), o)
        d = tmp_path_factory.mktemp(f"orbital-{name.replace('+', '-')}")
        run_experiment(cfg, d)
        tl = [json.loads(line) for line in (d / "link_timeline.jsonl").read_text().splitlines()]
        out[name] = (json.loads((d / "result.json").read_text()), tl)
    return out


@pytest.mark.slow  # trains for seconds
def test_the_ground_controls_train_without_windows(runs: dict) -> None:
    ground, lit = runs["ground"][0], runs["ground+eclipse"][0]
    assert "orbit" not in ground and "orbit" not in lit  # no contact windows to report
    assert "orbit_budget" not in ground and lit["orbit_budget"]["isl_bytes"] == 0  # (i) neither flies nor throttles
    steps = {k: ground["inner_steps"][str(k)] for k in range(5)}
    assert len(set(steps.values())) == 1  # (i): every island at the same pace
    lit_steps = lit["inner_steps"]
    assert all(lit_steps[str(i)] < lit_steps["0"] for i in range(1, 5))  # (ii): the eclipse slows the satellites
    assert lit["tokens"] < ground["tokens"] == sum(ground["tokens_per_island"].values())


@pytest.mark.slow  # trains for seconds
@pytest.mark.parametrize("isl", [False, True])
def test_a_smoke_run_moves_bytes_only_inside_contact_windows(runs: dict, isl: bool) -> None:
    res, timeline = runs["passes+isl" if isl else "passes"]
    cfg = apply_overrides(get_preset("orbital", "smoke"), {"link.orbit.isl": str(isl).lower()})
    plan = contact_plan(cfg.link)
    o = res["orbit"]
    assert o["isl"] is isl and timeline
    for start, end, nbytes, src, dst, _ in timeline:
        up = list(up_windows(plan.schedule(src, dst), start, end))
        assert up, f"{src}->{dst} moved {nbytes} bytes in [{start}, {end}) while its link was down"
    assert sum(o["bytes_per_link"].values()) == res["cross_site_bytes"]
    assert sum(w["bytes"] for w in o["bytes_per_window"]) == res["cross_site_bytes"]  # every ground link has windows
    assert o["window_wait_s"] > 0 and o["longest_window_wait_s"] <= o["window_wait_s"]
    steps = res["inner_steps"]
    assert all(steps[str(i)] < steps["0"] for i in range(1, 5))  # eclipses slow the satellites, not the ground
    assert res["outer_steps_per_fragment"] and min(res["outer_steps_per_fragment"]) >= 1


@pytest.mark.slow
def test_the_relay_gives_every_satellite_more_windows(runs: dict) -> None:
    alone, ring = runs["passes"][0]["orbit"], runs["passes+isl"][0]["orbit"]
    span = min(alone["ground_windows"]["1"][-1][1], ring["ground_windows"]["1"][-1][1])
    for s in "1234":
        assert sum(b - a for a, b in ring["ground_windows"][s] if b <= span) >= \
            sum(b - a for a, b in alone["ground_windows"][s] if b <= span)


@pytest.mark.slow
def test_the_contact_window_figure_draws(runs: dict) -> None:
    res, timeline = runs["passes"]
    fig = plots.contact_windows(res, timeline)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "simulated time (s)" and len(ax.get_yticklabels()) == 4
    assert "waited" in ax.get_title()
