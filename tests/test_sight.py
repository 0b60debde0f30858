"""Line of sight between satellites (islands_kit/orbital/geometry.py) against closed forms, the refusal of a ring that
can never link (``OrbitConfig``, ``--dry-run``), and relaying over inter-satellite links that come and go
(islands_kit/orbital/windows.py)."""
from __future__ import annotations

import math
import random

import pytest

from islands_kit.cli import main
from islands_kit.config import ConfigError, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.orbital import geometry, windows
from islands_kit.orbital.config import OrbitConfig

R = 6371.0088  # km: written out here, not read from the library


def test_four_satellites_at_550_km_have_their_chord_inside_the_earth() -> None:
    r = R + 550.0
    assert geometry.chord_clearance_km(r, 90.0) == pytest.approx(r * math.sqrt(0.5), rel=1e-12)
    assert geometry.chord_clearance_km(r, 90.0) == pytest.approx(4894, abs=1)  # the issue's figure, 1,477 km below ground
    assert geometry.chord_clearance_km(r, 180.0) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("h,margin,want", [(550.0, 0.0, 8), (550.0, 80.0, 9), (550.0, 100.0, 9), (1200.0, 80.0, 6),
                                           (340.0, 80.0, 12)])
def test_the_smallest_ring_is_the_first_n_whose_neighbours_clear_the_floor(h: float, margin: float, want: int) -> None:
    """N evenly spaced satellites link iff r cos(π/N) > R + margin: the smallest such N, found by counting up."""
    r, floor = R + h, R + margin
    first = next(n for n in range(2, 100) if r * math.cos(math.pi / n) > floor)
    ring = geometry.ring(r, floor)
    assert ring.min_satellites == first == want
    assert geometry.chord_clearance_km(r, 360.0 / want) > floor >= geometry.chord_clearance_km(r, 360.0 / (want - 1))
    assert ring.max_spacing_deg == pytest.approx(2 * math.degrees(math.acos(floor / r)), rel=1e-12)
    assert geometry.chord_clearance_km(r, ring.max_spacing_deg) == pytest.approx(floor, rel=1e-12)
    assert geometry.ring(r, r + 1.0).min_satellites == 0  # an orbit below its own floor: no ring at all


def test_segment_clearance_is_the_closest_point_of_the_segment() -> None:
    rng = random.Random(0)
    for _ in range(200):
        p = tuple(rng.uniform(-8000, 8000) for _ in range(3))
        q = tuple(rng.uniform(-8000, 8000) for _ in range(3))
        brute = min(math.hypot(*(a + s / 2000 * (b - a) for a, b in zip(p, q))) for s in range(2001))
        assert geometry.segment_clearance_km(p, q) == pytest.approx(brute, abs=1e-3 * math.dist(p, q) + 1e-9)  # type: ignore[arg-type]
    a = R + 550.0  # two satellites 90° apart in one plane: the midpoint
    p, q = (a, 0.0, 0.0), (0.0, a, 0.0)
    assert geometry.segment_clearance_km(p, q) == pytest.approx(geometry.chord_clearance_km(a, 90.0), rel=1e-12)


@pytest.mark.parametrize("n,margin", [(4, 80.0), (8, 80.0), (2, 80.0), (1, 80.0), (8, 100.0)])
def test_a_ring_that_can_never_link_is_refused_with_what_it_needs(n: int, margin: float) -> None:
    with pytest.raises(ConfigError, match=r"link\.orbit\.n_satellites: inter-satellite links .* no line of sight .* "
                                          r"the plane needs >= 9 satellites \(neighbours <= 4[12]\.\d° apart\)"):
        OrbitConfig(n_satellites=n, isl=True, isl_grazing_km=margin)
    OrbitConfig(n_satellites=n, isl=False)  # without links the ring may be anything
    OrbitConfig(n_satellites=8, isl=True, isl_grazing_km=0.0)  # 45° apart clear the bare Earth (23 km up)


def test_the_issue_repro_is_refused_by_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "orbital", "--preset", "smoke", "--set", "link.orbit.n_satellites=4", "--set", "link.orbit.isl=true",
            "--dry-run"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no line of sight" in err and "4,894 km from the Earth's centre" in err and "needs >= 9 satellites" in err


def test_the_default_ring_has_only_links_that_exist() -> None:
    """The orbital experiment's ring (9 at 550 km, 80 km margin): every neighbour pair sees the other at all times,
    checked on the positions themselves; every other pair of the plan is absent (never up)."""
    cfg = apply_overrides(get_preset("orbital", "smoke"), {"link.orbit.isl": "true"}).link.orbit
    assert cfg.n_satellites == 9 and cfg.isl_grazing_km == 80.0
    plan = windows.contact_plan(cfg)
    src, floor = windows.source(cfg), R + cfg.isl_grazing_km
    times = [j * 97.3 for j in range(60)]
    for k in range(9):
        j = (k + 1) % 9
        assert plan.links[(1 + k, 1 + j)] == (None, cfg.isl_rate_bps)
        clear = [geometry.segment_clearance_km(p, q) for p, q in zip(src.satellites_km(k, times), src.satellites_km(j, times))]
        assert min(clear) > floor + 40  # 6,503 km: 52 km of margin to spare
        far = (k + 2) % 9  # 80° apart: hidden, and not in the plan
        assert (1 + k, 1 + far) not in plan.links
        hidden = [geometry.segment_clearance_km(p, q) for p, q in zip(src.satellites_km(k, times), src.satellites_km(far, times))]
        assert max(hidden) < floor
    assert plan.isl_never == ()


def test_find_windows_brackets_every_excursion_of_a_known_function() -> None:
    f = math.sin  # up on [2πm, 2πm + π)
    times = geometry.sample_times(20.0, 0.5)
    got = geometry.find_windows(f, [f(t) for t in times], times, 1e-9)
    want = [(0.0, math.pi), (2 * math.pi, 3 * math.pi), (4 * math.pi, 5 * math.pi), (6 * math.pi, 20.0)]
    assert got == [pytest.approx(w, abs=1e-8) for w in want]


def test_relay_joins_a_satellite_to_the_passes_of_those_its_links_reach() -> None:
    """Three satellites: 0-1 linked always, 1-2 linked on [40, 60); passes 0: [0, 10), 1: [30, 35), 2: [50, 70).
    Satellite 0 reaches the ground in its own pass, in 1's, and in 2's while 1-2 is up: [50, 60)."""
    passes = [[(0.0, 10.0)], [(30.0, 35.0)], [(50.0, 70.0)]]
    links: dict[tuple[int, int], list[tuple[float, float]] | None] = {(0, 1): None, (1, 2): [(40.0, 60.0)]}
    got = windows.relay(passes, links, 100.0)
    assert got[0] == got[1] == [(0.0, 10.0), (30.0, 35.0), (50.0, 60.0)]
    assert got[2] == [(50.0, 70.0)]  # its own pass; 0's and 1's passes fall outside the link's window
    # every link always up: each satellite's windows are the union of all passes
    assert windows.relay(passes, {(0, 1): None, (1, 2): None}, 100.0) == [windows.union(passes)] * 3
    assert windows.relay(passes, {(0, 1): [], (1, 2): []}, 100.0) == passes  # never up: each alone
