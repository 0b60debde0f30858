"""The analytic orbit model (islands_kit/orbital/circular.py) against closed forms: Kepler's period, the pass length
of an overhead pass from the Earth central angle at the elevation mask, the cylindrical-shadow eclipse fraction; and
the per-link plan it gives the link model (islands_kit/orbital/windows.py). Line of sight between satellites:
tests/test_sight.py."""
from __future__ import annotations

import dataclasses
import math

import pytest

from islands_kit.comm.link import LinkModel, Windows, link_config
from islands_kit.config import ConfigError, ExperimentConfig, IslandConfig, apply_overrides
from islands_kit.orbital import circular as orbit
from islands_kit.orbital import geometry, windows
from islands_kit.orbital.config import OrbitConfig, StationConfig

MU, R = 398600.4418, 6371.0088  # km^3/s^2, km: written out here, not read from the library
EQUATOR = [StationConfig("equator", 0.0, 0.0)]


def test_period_is_keplers_third_law() -> None:
    for h in (400.0, 550.0, 1200.0):
        a = R + h
        assert orbit.period_s(OrbitConfig(altitude_km=h)) == pytest.approx(2 * math.pi * math.sqrt(a ** 3 / MU), rel=1e-12)
    assert orbit.period_s(OrbitConfig()) / 60 == pytest.approx(95.5, abs=0.05)  # the 550 km shell: ~95.5 minutes
    cfg = OrbitConfig()
    T = orbit.period_s(cfg)
    for k in range(cfg.n_satellites):  # the positions come back after one period, on a circle of radius a
        p0, p1 = orbit.satellite_position(cfg, k, 123.0), orbit.satellite_position(cfg, k, 123.0 + T)
        assert math.dist(p0, p1) < 1e-6 and math.hypot(*p0) == pytest.approx(R + 550.0, rel=1e-12)


def _central_angle(h: float, mask_deg: float) -> float:
    """θ from the triangle (Earth centre, station, satellite): the law of sines at the mask elevation ε."""
    eps = math.radians(mask_deg)
    nadir = math.asin(R / (R + h) * math.cos(eps))  # angle at the satellite
    return math.pi / 2 - eps - nadir


@pytest.mark.parametrize("rotation", [0.0, 7.292115e-5])
@pytest.mark.parametrize("mask,deg,minutes", [("ground_station", 10.0, (8, 9)), ("user_terminal", 25.0, (4, 5)),
                                              ("5", 5.0, (10, 11))])
def test_an_overhead_pass_lasts_two_central_angles_over_the_relative_rate(rotation: float, mask: str, deg: float,
                                                                          minutes: tuple[float, float]) -> None:
    """Equatorial orbit over an equatorial station: every pass is overhead; it lasts 2θ / (n − ω_E) and passes recur
    every synodic period 2π / (n − ω_E), the satellites 1/N of it apart. A pass above a station's 10° lasts ~8.5
    minutes, above 5° ~10.5, above a user terminal's 25° ~4.7."""
    cfg = OrbitConfig(inclination_deg=0.0, stations=EQUATOR, earth_rotation_rad_s=rotation, horizon_s=30000.0,
                      step_s=5.0, elevation_mask=mask)
    assert cfg.mask_deg() == deg
    theta = _central_angle(550.0, deg)
    assert orbit.mask_central_angle(cfg) == pytest.approx(theta, rel=1e-12)
    rel = 2 * math.pi / orbit.period_s(cfg) - rotation
    want = 2 * theta / rel
    assert orbit.overhead_pass_s(cfg) == pytest.approx(want, rel=1e-12)
    if rotation:
        assert minutes[0] * 60 < want < minutes[1] * 60
    starts = []
    for k in range(cfg.n_satellites):
        inner = [(a, b) for a, b in windows.visibility_windows(cfg, 0, k) if 0 < a and b < cfg.horizon_s]
        assert len(inner) >= 4
        for a, b in inner:
            assert b - a == pytest.approx(want, abs=1e-4)
            assert math.degrees(orbit.elevation_rad(cfg, 0, k, (a + b) / 2)) == pytest.approx(90.0, abs=1e-4)
            assert math.degrees(orbit.elevation_rad(cfg, 0, k, a)) == pytest.approx(deg, abs=1e-4)
        gaps = [b[0] - a[0] for a, b in zip(inner, inner[1:])]
        assert gaps == pytest.approx([2 * math.pi / rel] * len(gaps), abs=1e-4)
        starts.append(inner[0][0])
    # satellite k is 360°/N further along, so it meets the station 1/N of a synodic period earlier
    assert sorted(starts, reverse=True) == starts
    assert [a - b for a, b in zip(starts, starts[1:])] == pytest.approx([2 * math.pi / rel / cfg.n_satellites] * 8,
                                                                         abs=1e-4)


def test_inclined_orbit_without_rotation_passes_over_the_node() -> None:
    """ω_E = 0, a station at the ascending node: every pass of an inclined orbit is overhead, 2θ/n long."""
    cfg = OrbitConfig(stations=EQUATOR, earth_rotation_rad_s=0.0, horizon_s=20000.0)
    want = 2 * orbit.mask_central_angle(cfg) / (2 * math.pi / orbit.period_s(cfg))
    inner = [(a, b) for k in range(9) for a, b in windows.visibility_windows(cfg, 0, k) if 0 < a and b < 20000.0]
    assert inner and all(b - a == pytest.approx(want, abs=1e-4) for a, b in inner)


def test_default_passes_are_a_few_minutes_and_never_longer_than_overhead() -> None:
    cfg = OrbitConfig()
    # the slowest the satellite can cross the station's sky: the ground moving with it at the full ω_E
    longest = 2 * orbit.mask_central_angle(cfg) / (2 * math.pi / orbit.period_s(cfg) - cfg.earth_rotation_rad_s)
    plan = windows.contact_plan(cfg)
    lengths = [b - a for (g, s), c in plan.links.items() if g == 0 and c.windows for a, b in c.windows
               if 0 < a and b < cfg.horizon_s]
    assert len(lengths) >= 9 * 3  # every satellite passes over Redu several times a day
    assert max(lengths) < longest and max(lengths) > 7 * 60  # up to ~8 minutes above the 10° mask
    assert plan.cycle_s == cfg.horizon_s and plan.n_islands == 10


@pytest.mark.parametrize("h", [400.0, 550.0, 1200.0])
def test_eclipse_fraction_at_beta_zero_is_asin_r_over_a_over_pi(h: float) -> None:
    cfg = OrbitConfig(altitude_km=h, inclination_deg=0.0, raan_deg=0.0)
    want = math.asin(R / (R + h)) / math.pi
    assert orbit.eclipse_fraction(cfg) == pytest.approx(want, rel=1e-12)
    T = orbit.period_s(cfg)
    for k in range(cfg.n_satellites):
        full = [(a, b) for a, b in orbit.eclipse_windows(cfg, k) if 0 < a and b < cfg.horizon_s]
        assert full and all(b - a == pytest.approx(want * T, rel=1e-9) for a, b in full)
    # independently: the Sun along +x (the ascending node, in the orbit plane); shadowed where x < 0 and the
    # distance from the x axis is under R; the throttle applies exactly there
    for j in range(2000):
        t = j * 7.31
        x, y, z = orbit.satellite_position(cfg, 1, t)
        shade = x < 0 and math.hypot(y, z) < R
        if abs(math.hypot(y, z) - R) > 1e-3:  # not on the shadow's edge
            assert windows.compute_factor(cfg, 1, t) == (cfg.eclipse_throttle if shade else 1.0)
            assert any(a <= t < b for a, b in orbit.eclipse_windows(cfg, 1)) == shade  # the listed windows agree


def test_eclipse_shrinks_with_beta_and_vanishes_beyond_the_critical_angle() -> None:
    a = R + 550.0
    critical = math.degrees(math.asin(R / a))
    fr = [orbit.eclipse_fraction(OrbitConfig(beta_deg=b)) for b in (0.0, 30.0, 60.0, critical + 0.1)]
    assert fr[0] > fr[1] > fr[2] > fr[3] == 0.0
    b = math.radians(30.0)
    assert fr[1] == pytest.approx(math.acos(math.sqrt(a * a - R * R) / (a * math.cos(b))) / math.pi, rel=1e-12)
    assert orbit.eclipse_windows(OrbitConfig(beta_deg=critical + 0.1), 0) == []


def test_time_compression_scales_the_windows() -> None:
    base = OrbitConfig(horizon_s=20000.0)
    fast = dataclasses.replace(base, time_compression=10.0)
    p0, p1 = windows.contact_plan(base), windows.contact_plan(fast)
    assert p1.cycle_s == 2000.0
    for pair, c in p0.links.items():
        if c.windows:
            assert [x for w in p1.links[pair].windows for x in w] == pytest.approx([x / 10 for w in c.windows for x in w])
    t_shade = orbit.eclipse_windows(base, 0)[0][0] + 1.0
    assert windows.compute_factor(base, 0, t_shade) == 0.5 == windows.compute_factor(fast, 0, t_shade / 10)


def test_plan_pairs_island_ids_and_inter_satellite_links() -> None:
    cfg = OrbitConfig(stations=[StationConfig(), StationConfig("equator", 0.0, 0.0)], isl=True, horizon_s=6000.0)
    plan = windows.contact_plan(cfg)
    G, N = 2, 9
    assert windows.satellite_id(cfg, 0) == G and plan.n_islands == G + N
    assert plan.links[(0, 1)] == plan.links[(1, 0)] == (None, None)  # stations: over the ground, always
    for k in range(N):
        nxt = G + (k + 1) % N
        assert plan.links[(G + k, nxt)] == plan.links[(nxt, G + k)] == (None, 1.8e9)
        assert plan.links[(0, G + k)] == plan.links[(G + k, 0)]
    assert (G + 0, G + 2) not in plan.links  # not neighbours: never up
    m = LinkModel(link_config("leo-orbit", orbit=cfg), seed=0)
    with pytest.raises(RuntimeError, match=r"2 -> 4.*inter-satellite"):
        m.transfer(1000, 0.0, G + 0, G + 2)
    tr = m.transfer(10 ** 6, 0.0, G, G + 1)  # the ISL runs at its own rate, always
    assert m.busy_intervals(G, G + 1) == [(0.0, pytest.approx(8e6 / 1.8e9, rel=1e-12))] and tr.end_s > 0


def test_leo_orbit_link_uses_the_orbit_windows() -> None:
    cfg = link_config("leo-orbit")
    assert cfg.schedule == "orbit" and cfg.orbit == OrbitConfig()
    sched = LinkModel(cfg).contacts.schedule(0, 1)
    assert isinstance(sched, Windows) and sched.cycle_s == 86400.0
    assert sched.up == windows.contact_plan(cfg.orbit).links[(0, 1)].windows
    assert cfg.rtt_s == pytest.approx(2 * geometry.slant_range_km(R, R + 550.0, 10.0) / 299792.458, rel=0.01)


@pytest.mark.parametrize("field,value,rule", [
    ("altitude_km", 0.0, "must be > 0"), ("n_satellites", 0, "must be >= 1"),
    ("elevation_mask", "90", "ground_station\\|user_terminal or a number of degrees in \\[0, 90\\)"),
    ("elevation_mask", "ground", "ground_station\\|user_terminal"), ("eclipse", "always", "auto\\|on\\|off"),
    ("isl_grazing_km", -1.0, "in \\[0, 1000\\)"), ("tle_start_utc", "yesterday", "ISO 8601"),
    ("eclipse_throttle", 0.0, "in \\(0, 1\\]"), ("beta_deg", 91.0, "in \\[-90, 90\\]"), ("step_s", 0.0, "must be > 0"),
    ("time_compression", -1.0, "must be > 0"), ("mu_km3_s2", math.inf, "finite"), ("stations", [], "at least one"),
])
def test_bad_orbit_settings_name_the_field(field: str, value: object, rule: str) -> None:
    with pytest.raises(ConfigError, match=rf"link\.orbit\.{field}: .*{rule}"):
        OrbitConfig(**{field: value})


def test_bad_station_and_schedule_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"lat_deg: must be in \[-90, 90\]"):
        StationConfig(lat_deg=91.0)
    with pytest.raises(ConfigError, match=r"link\.schedule: must be one of periodic\|orbit"):
        link_config("transpacific-25g", schedule="lunar")
    with pytest.raises(ConfigError, match=r"link\.contact_period_s: must be 0 with schedule=orbit"):
        link_config("leo-satellite", schedule="orbit")


def test_an_experiment_on_the_orbit_has_no_island_beyond_its_stations_and_satellites() -> None:
    cfg = ExperimentConfig(islands=[IslandConfig()] * 2)
    apply_overrides(cfg, {"link.preset": "leo-orbit"})  # station + satellite: fine
    with pytest.raises(ConfigError, match=r"islands: link.schedule=orbit: .*1 ground station.*2 satellites"):
        apply_overrides(ExperimentConfig(islands=[IslandConfig()] * 4),
                        {"link.preset": "leo-orbit", "link.orbit.n_satellites": "2"})
