"""Real orbits: element sets as text (islands_kit/orbital/tle.py, no extra needed), and with the ``orbit`` extra
(sgp4, skyfield, skyfield-data) the analytic model checked against SGP4 on a near-circular TLE (passes per day,
contact seconds per day, eclipse fraction, pass starts), inter-satellite links that come and go between real
orbits, and a smoke run on the shipped Starlink plane."""
from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import pytest

from islands_kit.config import ConfigError, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.orbital import circular, geometry, sgp4_orbit, tle, windows
from islands_kit.orbital.config import OrbitConfig

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = "starlink-plane-2025-07-19.tle"
# two real element sets of the same CelesTrak snapshot (data_cards/starlink-plane-2025-07-19.md) in planes 20° of
# node apart: their line of sight comes and goes as the planes cross
CROSSING = ["STARLINK-1020",
            "1 44725U 19074N   25200.20992115  .00001082  00000+0  91527-4 0  9999",
            "2 44725  53.0543 174.7517 0001201  87.7457 272.3670 15.06383100313447",
            "STARLINK-1067",
            "1 44771U 19074BL  25200.20438071  .00000369  00000+0  43664-4 0  9992",
            "2 44771  53.0540 194.7758 0000842  69.5032 290.6048 15.06409531313170"]


def test_the_shipped_sets_parse_and_match_their_data_card() -> None:
    path = tle.resolve(SHIPPED)
    assert path == ROOT / "islands_kit" / "orbital" / SHIPPED
    sets = tle.parse(path.read_text(), SHIPPED)
    assert [s.name for s in sets] == ["STARLINK-1020", "STARLINK-1060", "STARLINK-1068", "STARLINK-1036", "STARLINK-1011"]
    card = (ROOT / "data_cards" / SHIPPED.replace(".tle", ".md")).read_text()
    assert hashlib.sha256(path.read_bytes()).hexdigest() in card
    for s in sets:
        assert s.line1 in card or s.line1[2:7] in card  # every satellite named by its catalogue number
        assert re.fullmatch(r"1 \d{5}U .{59}\d", s.line1) and s.line2.startswith("2 " + s.line1[2:7])


def test_bad_element_sets_are_refused_naming_the_line() -> None:
    good = CROSSING[:3]
    broken = [good[0], good[1], good[2][:-1] + str((int(good[2][-1]) + 1) % 10)]
    with pytest.raises(ValueError, match=r"x: line 3: checksum '\d' does not match the line's"):
        tle.parse("\n".join(broken), "x")
    with pytest.raises(ValueError, match=r"x: line 2: an element set needs a line 1 and a line 2"):
        tle.parse("\n".join(good[:2]), "x")
    with pytest.raises(ValueError, match=r"catalogue numbers differ"):
        tle.parse("\n".join([good[1], CROSSING[5]]), "x")
    with pytest.raises(ConfigError, match=r"link\.orbit\.tle_file: must name readable two-line element sets: no such file"):
        OrbitConfig(tle_file="nowhere.tle", n_satellites=1)
    with pytest.raises(ConfigError, match=r"link\.orbit\.tle: must be empty when link\.orbit\.tle_file is set"):
        OrbitConfig(tle_file=SHIPPED, tle=good, n_satellites=1)
    with pytest.raises(ConfigError, match=r"link\.orbit\.n_satellites: must be <= 5, the element sets in link\.orbit\.tle_file"):
        OrbitConfig(tle_file=SHIPPED)  # the default ring of 9 is more than the file's 5
    with pytest.raises(ConfigError, match=r"link\.orbit\.tle: .*checksum"):
        OrbitConfig(tle=broken, n_satellites=1)
    assert OrbitConfig(tle=CROSSING, n_satellites=2).uses_tle()


def _with(line: str, cols: slice, text: str) -> str:
    """``line`` with ``text`` in ``cols`` and its checksum made right again (the checksum is no format check)."""
    out = line[:cols.start] + text + line[cols.stop:68]
    return out + str(tle.checksum(out))


@pytest.mark.parametrize("line, cols, text, message", [
    (2, slice(52, 63), "1X.0638310Q", r"columns 53-63, the mean motion, read '1X\.0638310Q': not in the element-set format"),
    (2, slice(52, 63), "-5.06383100", r"columns 53-63, the mean motion, read '-5\.06383100': not in the element-set"),
    (2, slice(52, 63), " 0.00000000", r"the mean motion 0\.00000000 is outside \[1e-06, 20\]"),
    (2, slice(8, 16), "999.9999", r"the inclination 999\.9999 is outside \[0, 180\]"),
    (1, slice(18, 32), "25400.20992115", r"the epoch's day of the year 400\.20992115 is outside \[1, 367\)"),
    (1, slice(53, 61), " 9152Z-4", r"columns 54-61, the drag term \(B\*\), read ' 9152Z-4'"),
])
def test_an_element_set_that_passes_its_checksum_but_not_its_format_is_refused(line, cols, text, message) -> None:
    """Digits and letters the checksum does not see (``1X.0638310Q`` for a mean motion) failed later with a raw
    RuntimeError inside the propagator; a negative mean motion or an inclination of 999.9999 passed quietly."""
    sets = list(CROSSING[:3])
    sets[line] = _with(sets[line], cols, text)
    with pytest.raises(ValueError, match=rf"^x: line {line + 1}: {message}"):
        tle.parse("\n".join(sets), "x")
    with pytest.raises(ConfigError, match=r"^link\.orbit\.tle: "):
        OrbitConfig(tle=sets, n_satellites=1)


def test_an_element_set_file_over_its_limit_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big.tle"
    with open(big, "wb") as f:
        f.truncate(tle.MAX_BYTES + 1)  # sparse: its size alone refuses it
    with pytest.raises(ConfigError, match=rf"link\.orbit\.tle_file: .*big\.tle: {tle.MAX_BYTES + 1:,} bytes, over "
                                          rf"the limit of {tle.MAX_BYTES:,} for an element-set file"):
        OrbitConfig(tle_file=str(big), n_satellites=1)


def test_without_the_extra_element_sets_ask_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sgp4_orbit, "HAVE_SGP4", False)
    with pytest.raises(ConfigError, match=r"link\.orbit\.tle_file: .*pip install 'islands_kit\[orbit\]'"):
        sgp4_orbit.Sgp4Orbit(OrbitConfig(tle_file=SHIPPED, n_satellites=5))


@pytest.fixture(scope="module")
def extra() -> None:
    pytest.importorskip("sgp4")
    pytest.importorskip("skyfield")
    pytest.importorskip("skyfield_data")


def _inner(ws: list[tuple[float, float]], horizon: float) -> list[tuple[float, float]]:
    return [(a, b) for a, b in ws if 0 < a and b < horizon]


def test_the_analytic_model_agrees_with_sgp4_on_a_near_circular_orbit(extra: None) -> None:
    """STARLINK-1020 (e = 0.00012) seen from Redu over a day, against its circular twin (the nodal period's radius,
    the node and phase at time 0, the mean Sun angle): the same passes, each starting within a minute (J2 turns the
    real plane ~5° a day, which the analytic model leaves out), contact and eclipse within a few percent."""
    real = OrbitConfig(tle_file=SHIPPED, n_satellites=1)
    twin = sgp4_orbit.circular_twin(real)
    assert twin.altitude_km == pytest.approx(550.0, abs=5.0) and twin.inclination_deg == pytest.approx(53.05, abs=0.05)
    H = real.horizon_s
    p_real, p_twin = _inner(windows.visibility_windows(real, 0, 0), H), _inner(windows.visibility_windows(twin, 0, 0), H)
    assert len(p_real) == len(p_twin) >= 4  # passes a day
    for (a, b), (c, d) in zip(p_real, p_twin):
        assert abs(a - c) < 60.0 and abs((b - a) - (d - c)) < 60.0  # starts, lengths
    contact_real, contact_twin = sum(b - a for a, b in p_real), sum(b - a for a, b in p_twin)
    assert contact_twin == pytest.approx(contact_real, rel=0.03)
    assert circular.eclipse_fraction(twin) == pytest.approx(windows.eclipse_fraction(real), rel=0.03)
    assert circular.period_s(twin) == pytest.approx(windows.period_s(real), rel=0.005)  # nodal vs anomalistic


def test_the_sidereal_angle_is_sgp4s(extra: None) -> None:
    from sgp4.propagation import gstime

    for jd in (2451545.0, 2460875.70992115, 2470000.25):
        assert float(sgp4_orbit.gmst_rad(jd)) == pytest.approx(gstime(jd), abs=1e-12)


def test_links_between_real_orbits_come_and_go_with_their_line_of_sight(extra: None) -> None:
    """The windows of an inter-satellite link between two planes against the line of sight computed here, every
    second, from SGP4's own frame (TEME: sight does not depend on the frame)."""
    from sgp4.api import Satrec

    cfg = OrbitConfig(tle=CROSSING, n_satellites=2, isl=True, horizon_s=6 * 3600.0)
    got = windows.ring_links(cfg)[(0, 1)]
    assert got and len(got) >= 2  # comes and goes
    a, b = (Satrec.twoline2rv(CROSSING[i + 1], CROSSING[i + 2]) for i in (0, 3))
    jd0 = max(s.jdsatepoch + s.jdsatepochF for s in (a, b))
    floor = cfg.earth_radius_km + cfg.isl_grazing_km

    def sight(t: float) -> bool:
        jd, fr = math.floor(jd0), jd0 - math.floor(jd0) + t / 86400.0
        return geometry.segment_clearance_km(a.sgp4(jd, fr)[1], b.sgp4(jd, fr)[1]) > floor

    for t in range(0, int(cfg.horizon_s), 1):
        inside = any(x <= t < y for x, y in got)
        near_edge = any(abs(t - e) < 1.0 for w in got for e in w)
        assert inside == sight(t) or near_edge, t
    plan = windows.contact_plan(cfg)
    assert plan.links[(1, 2)].windows == tuple(got) and plan.links[(1, 2)].rate_bps == cfg.isl_rate_bps
    # relayed: each satellite reaches Redu in its own passes and, while the link is up, in the other's
    own = [windows.visibility_windows(cfg, 0, k) for k in range(2)]
    assert list(plan.links[(0, 1)].windows) == windows.relay(own, {(0, 1): got}, cfg.horizon_s)[0]


def test_the_shipped_plane_links_only_neighbours_in_sight(extra: None) -> None:
    """Five real satellites of one plane (arguments of latitude ~134°, 174°, 214°, 334°, 354°): the 40° and 20°
    neighbours see each other always, the 120° and 140° gaps never."""
    cfg = OrbitConfig(tle_file=SHIPPED, n_satellites=5, isl=True)
    assert windows.ring_links(cfg) == {(0, 1): None, (0, 4): [], (1, 2): None, (2, 3): [], (3, 4): None}
    plan = windows.contact_plan(cfg)
    assert plan.isl_never == ((0, 4), (2, 3))
    assert (1 + 2, 1 + 3) not in plan.links and plan.links[(1 + 0, 1 + 1)] == (None, cfg.isl_rate_bps)
    # two chains, {0, 1, 2} and {3, 4}: each satellite's ground windows are its chain's passes
    assert plan.links[(0, 1)] == plan.links[(0, 2)] == plan.links[(0, 3)] != plan.links[(0, 4)] == plan.links[(0, 5)]


@pytest.mark.slow  # trains for seconds
def test_the_orbital_experiment_runs_on_the_shipped_plane(extra: None, tmp_path: Path) -> None:
    from islands_kit.run import run_experiment

    cfg = apply_overrides(get_preset("orbital", "smoke"), {"link.orbit.tle_file": SHIPPED, "link.orbit.n_satellites": "5",
                                                           "link.orbit.isl": "true"})
    run_experiment(cfg, tmp_path)
    res = json.loads((tmp_path / "result.json").read_text())
    o = res["orbit"]
    assert o["windows_used"] > 0 and sum(o["bytes_per_link"].values()) == res["cross_site_bytes"]
    assert o["orbit_period_s"] == pytest.approx(5735.6 / cfg.link.orbit.time_compression, rel=1e-3)
    assert 0.2 < o["eclipse_fraction"] < 0.4
