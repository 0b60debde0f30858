"""Real orbits: two-line element sets propagated by SGP4, as a ``geometry.OrbitSource`` — the same questions the
analytic model answers, so ``windows.py`` derives the same kinds of windows from either. The optional ``orbit``
extra: ``sgp4`` (Vallado's SGP4, the reference implementation TLEs are made for) propagates, skyfield with
skyfield-data gives the Sun (the JPL DE421 ephemeris, offline).

Frames and times. Orbital time 0 is ``link.orbit.tle_start_utc`` (the latest epoch among the sets when empty). SGP4
gives positions in its TEME frame; turned about the pole by the Greenwich mean sidereal angle (IAU 1982, the
convention TEME is defined with; then ``earth_rotation_rad_s`` a second) they are Earth-fixed, where a station
stays put (polar motion, tens of metres, is neglected). Stations sit on the same spherical Earth as in the analytic
model (``earth_radius_km``), and elevation, line of sight and the shadow are the same functions, so a comparison of
the two models compares orbits only: the shadow is the cylinder of radius ``earth_radius_km`` behind the Earth, the
Sun's direction from DE421 (the TEME frame's, sampled every ``step_s`` and interpolated between), so ``beta_deg``
does not apply. Window edges are bisected to a millisecond.

``circular_twin`` gives the analytic model's closest match to one satellite (radius from its nodal period,
inclination, node and phase at time 0, β averaged over the horizon): what the kit checks the analytic model against
(``tests/test_sgp4.py``).
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

from islands_kit.orbital import geometry, tle
from islands_kit.orbital.config import OrbitConfig, parse_utc
from islands_kit.orbital.geometry import Vec, Window
from islands_kit.rules import ConfigError

try:
    import skyfield_data
    from sgp4.api import Satrec, jday
    from skyfield.api import Loader, load
    from skyfield.sgp4lib import TEME
    HAVE_SGP4 = True
except ImportError:  # the optional extra is not installed: the circular model still works
    HAVE_SGP4 = False

MISSING = "propagating element sets needs the orbit extra: pip install 'islands_kit[orbit]' (sgp4, skyfield, skyfield-data)"
DAY_S = 86400.0


@lru_cache(maxsize=1)
def _sky() -> tuple[Any, Any]:
    """skyfield's built-in timescale and the DE421 ephemeris shipped by skyfield-data (loaded once)."""
    with warnings.catch_warnings():
        # skyfield-data warns about its Earth-orientation table expiring; only the ephemeris is read from it
        warnings.simplefilter("ignore", RuntimeWarning)
        path = skyfield_data.get_skyfield_data_path()
    return load.timescale(builtin=True), Loader(path, verbose=False)("de421.bsp")


def gmst_rad(jd_ut1: Any) -> Any:
    """Greenwich mean sidereal angle (IAU 1982, Vallado's ``gstime`` that SGP4 ships) of UT1 Julian dates."""
    tu = (np.asarray(jd_ut1, dtype=float) - 2451545.0) / 36525.0
    sec = -6.2e-6 * tu ** 3 + 0.093104 * tu ** 2 + (876600.0 * 3600.0 + 8640184.812866) * tu + 67310.54841
    return np.mod(np.radians(sec / 240.0), 2.0 * math.pi)


class Sgp4Orbit:
    """The first ``n_satellites`` element sets of ``link.orbit.tle_file`` / ``link.orbit.tle``, propagated by SGP4."""

    tolerance_s = 1e-3  # a millisecond: far below what a TLE's accuracy makes of a pass edge

    def __init__(self, cfg: OrbitConfig) -> None:
        if not HAVE_SGP4:
            raise ConfigError(f"link.orbit.{'tle_file' if cfg.tle_file else 'tle'}: {MISSING}")
        self.cfg = cfg
        sets = tle.element_sets(cfg.tle_file, cfg.tle)[: cfg.n_satellites]
        self.names = [s.name for s in sets]
        self.sats = [Satrec.twoline2rv(s.line1, s.line2) for s in sets]
        self.n_satellites = len(self.sats)
        start = parse_utc(cfg.tle_start_utc) if cfg.tle_start_utc else None
        if start is not None:
            jd, fr = jday(start.year, start.month, start.day, start.hour, start.minute,
                          start.second + start.microsecond * 1e-6)
            self.jd0 = jd + fr
        else:
            self.jd0 = max(s.jdsatepoch + s.jdsatepochF for s in self.sats)
        self.gmst0 = float(gmst_rad(self.jd0))
        self._sun: tuple[Any, Any] | None = None
        R = cfg.earth_radius_km
        self.stations: list[Vec] = [
            (R * math.cos(math.radians(st.lat_deg)) * math.cos(math.radians(st.lon_deg)),
             R * math.cos(math.radians(st.lat_deg)) * math.sin(math.radians(st.lon_deg)),
             R * math.sin(math.radians(st.lat_deg))) for st in cfg.stations]

    def teme_km(self, k: int, times: Sequence[float]) -> tuple[Any, Any]:
        """Satellite ``k``'s TEME positions and velocities (km, km/s; arrays of shape (len(times), 3))."""
        t = np.asarray(times, dtype=float)
        jd = np.full(t.shape, math.floor(self.jd0))
        err, r, v = self.sats[k].sgp4_array(jd, (self.jd0 - jd) + t / DAY_S)
        if np.any(err):
            raise ConfigError(f"link.orbit.tle: SGP4 cannot propagate {self.names[k]} over the horizon (error code "
                              f"{int(err[err != 0][0])}: e.g. it decays or its elements are out of range)")
        return r, v

    def satellites_km(self, k: int, times: Sequence[float]) -> list[Vec]:
        r, _ = self.teme_km(k, times)
        th = self.gmst0 + self.cfg.earth_rotation_rad_s * np.asarray(times, dtype=float)  # TEME -> Earth-fixed
        c, s = np.cos(th), np.sin(th)
        return list(zip((c * r[:, 0] + s * r[:, 1]).tolist(), (c * r[:, 1] - s * r[:, 0]).tolist(), r[:, 2].tolist()))

    def stations_km(self, g: int, times: Sequence[float]) -> list[Vec]:
        return [self.stations[g]] * len(times)

    def _windows(self, f: Callable[[float], float], f_many: Callable[[Sequence[float]], Sequence[float]]) -> list[Window]:
        times = geometry.sample_times(self.cfg.horizon_s, self.cfg.step_s)
        return geometry.find_windows(f, f_many(times), times, self.tolerance_s)

    @property
    def sun(self) -> Any:
        """The Sun's direction (TEME unit vectors) on the sampling grid, from DE421 (computed once)."""
        if self._sun is None:
            ts, eph = _sky()
            times = np.asarray(geometry.sample_times(self.cfg.horizon_s, self.cfg.step_s))
            # the grid in UTC Julian days, read as UT1 (they differ by under a second: nothing to the Sun's direction)
            when = ts.ut1_jd(self.jd0 + times / DAY_S)
            s = np.asarray((eph["sun"] - eph["earth"]).at(when).frame_xyz(TEME).km).T
            self._sun = (times, s / np.linalg.norm(s, axis=1, keepdims=True))
        return self._sun

    def _sun_at(self, t: Any) -> Any:
        times, s = self.sun
        return np.stack([np.interp(t, times, s[:, i]) for i in range(3)], axis=-1)

    def eclipse_windows(self, k: int) -> list[Window]:
        R = self.cfg.earth_radius_km

        def shade(ts: Sequence[float]) -> list[float]:
            r, _ = self.teme_km(k, ts)
            s = self._sun_at(np.asarray(ts, dtype=float))
            along = np.sum(r * s, axis=1)  # behind the Earth (< 0) and within R of the Sun line: in the cylinder
            off = np.linalg.norm(r - along[:, None] * s, axis=1)
            return np.where((along < 0) & (off < R), 1.0, -1.0).tolist()

        return self._windows(lambda t: shade([t])[0], shade)

    def isl_windows(self, k: int, j: int) -> list[Window] | None:
        floor = self.cfg.earth_radius_km + self.cfg.isl_grazing_km

        def margins(times: Sequence[float]) -> list[float]:
            return [geometry.segment_clearance_km(p, q) - floor
                    for p, q in zip(self.satellites_km(k, times), self.satellites_km(j, times))]

        w = self._windows(lambda t: margins([t])[0], margins)
        return None if w == [(0.0, self.cfg.horizon_s)] else w

    def period_s(self, k: int = 0) -> float:
        """Satellite ``k``'s anomalistic period from its mean motion (SGP4's ``no_kozai``, radians a minute)."""
        return 2.0 * math.pi / self.sats[k].no_kozai * 60.0

    def eclipse_fraction(self) -> float:
        shade = sum(b - a for k in range(self.n_satellites) for a, b in self.eclipse_windows(k))
        return shade / (self.cfg.horizon_s * self.n_satellites)


def circular_twin(cfg: OrbitConfig, k: int = 0) -> OrbitConfig:
    """The analytic model's closest match to satellite ``k`` of ``cfg``'s element sets: a circular orbit with the
    satellite's nodal period (Kepler's radius for it), its inclination, its node's longitude and its argument of
    latitude at time 0 (TEME, turned Earth-fixed by the sidereal angle), and the Sun's angle to its plane averaged
    over the horizon; the stations, mask, horizon and sampling of ``cfg``; one satellite."""
    orbit = Sgp4Orbit(cfg)
    times = geometry.sample_times(cfg.horizon_s, cfg.step_s)
    r, v = orbit.teme_km(k, times)
    h = np.cross(r, v)
    h /= np.linalg.norm(h, axis=1, keepdims=True)  # the orbit's pole at every sample
    node = np.cross([0.0, 0.0, 1.0], h[0])
    node /= np.linalg.norm(node)
    u0 = math.atan2(float(np.dot(np.cross(node, r[0]), h[0])), float(np.dot(node, r[0])))
    lon_node = math.degrees(math.atan2(node[1], node[0]) - orbit.gmst0)
    z = r[:, 2]  # ascending node crossings, linearly interpolated between samples: the nodal period
    up = [times[j] - z[j] * (times[j + 1] - times[j]) / (z[j + 1] - z[j]) for j in range(len(z) - 1) if z[j] < 0 <= z[j + 1]]
    T = float(np.mean(np.diff(up))) if len(up) >= 2 else orbit.period_s(k)
    a = (cfg.mu_km3_s2 * (T / (2.0 * math.pi)) ** 2) ** (1.0 / 3.0)
    _, sun = orbit.sun
    beta = math.degrees(float(np.mean(np.arcsin(np.clip(np.sum(h * sun, axis=1), -1.0, 1.0)))))
    return dataclasses.replace(cfg, n_satellites=1, altitude_km=a - cfg.earth_radius_km,
                               inclination_deg=math.degrees(math.acos(float(h[0, 2]))), raan_deg=lon_node % 360.0,
                               phase_deg=math.degrees(u0) % 360.0, beta_deg=beta, isl=False, tle_file="", tle=[],
                               tle_start_utc="")
