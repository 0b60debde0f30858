"""The orbit section (``link.orbit.*``): satellites in low Earth orbit and their ground stations, from which
``windows.py`` derives each link's contact windows and each satellite's eclipses. Torch-free, like the rest of the
config. Every default is a public figure or a stated choice; docs/methods.md ("Orbital islands: the orbit model")
gives the source of each.

Two models of where the satellites are: the analytic one (the default: ``n_satellites`` evenly spaced in one
circular orbit, ``circular.py``) and real orbits (``tle_file`` or ``tle``: element sets propagated by SGP4,
``sgp4_orbit.py``, the optional ``orbit`` extra). With element sets the circular orbit's fields (``altitude_km``,
``inclination_deg``, ``raan_deg``, ``phase_deg``, ``beta_deg``) do not apply: SGP4 places the satellites and the
ephemeris the Sun.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from islands_kit.orbital import geometry, tle
from islands_kit.rules import _check, _check_fields

# Named elevation masks (degrees above the horizon a ground link needs). ground_station: the upper end of the 5-10°
# that LEO ground stations such as ESA's Redu track down to; user_terminal: Starlink's user-terminal mask (FCC 2021).
ELEVATION_MASKS: dict[str, float] = {"ground_station": 10.0, "user_terminal": 25.0}
ECLIPSE = ("auto", "on", "off")  # auto: satellites are throttled in shadow when the link flies (link.schedule=orbit)


@dataclass
class StationConfig:
    """One ground station on a spherical Earth (geocentric latitude and longitude, degrees)."""

    name: str = "redu"  # ESA ESTRACK station Redu, Belgium
    lat_deg: float = 50.00  # geocentric latitude, degrees (Redu: 50.00 N)
    lon_deg: float = 5.15  # longitude, degrees east (Redu: 5.15 E)

    def __post_init__(self) -> None:
        self.validate("link.orbit.stations[*].")

    def validate(self, p: str) -> None:
        _check_fields(self, p)
        _check(-90 <= self.lat_deg <= 90, p + "lat_deg", "must be in [-90, 90]", self.lat_deg)
        _check(-180 <= self.lon_deg <= 360, p + "lon_deg", "must be in [-180, 360]", self.lon_deg)


def parse_mask(value: str) -> float | None:
    """Degrees of an ``elevation_mask`` value (a name of ``ELEVATION_MASKS`` or a number in [0, 90)); None if neither."""
    if value in ELEVATION_MASKS:
        return ELEVATION_MASKS[value]
    try:
        deg = float(value)
    except ValueError:
        return None
    return deg if math.isfinite(deg) and 0 <= deg < 90 else None


def parse_utc(value: str) -> datetime | None:
    """An ISO 8601 UTC time (``2025-07-19T05:02:17``, a trailing Z allowed); None if it is not one."""
    try:
        return datetime.fromisoformat(value[:-1] if value.endswith("Z") else value)
    except ValueError:
        return None


@dataclass
class OrbitConfig:
    """Satellites in low Earth orbit and their ground stations; ground stations ``0..G-1`` and satellites
    ``G..G+N-1`` are the island ids. Used when ``link.schedule = "orbit"`` (and for eclipses with ``eclipse=on``)."""

    n_satellites: int = 9  # evenly spaced, satellite k at phase + 360°·k/N (with element sets: the file's first N)
    altitude_km: float = 550.0  # Starlink's first shell (FCC, 2019 and 2021 orders)
    inclination_deg: float = 53.0  # the same shell's inclination
    raan_deg: float = 0.0  # longitude of the ascending node at t = 0 (the inertial and Earth-fixed frames agree then)
    phase_deg: float = 0.0  # argument of latitude of satellite 0 at t = 0
    earth_radius_km: float = 6371.0088  # mean Earth radius R1 of GRS 80 (spherical Earth: shadow, horizon, sight)
    mu_km3_s2: float = 398600.4418  # GM of the Earth (IERS Conventions 2010): Kepler's T = 2π sqrt(a³/μ)
    earth_rotation_rad_s: float = 7.292115e-5  # the Earth's rotation rate (IERS 2010); 0 neglects the rotation
    elevation_mask: str = "ground_station"  # a ground link's mask: ground_station (10°) | user_terminal (25°) | degrees
    stations: list[StationConfig] = field(default_factory=lambda: [StationConfig()])  # island ids 0..G-1
    isl: bool = False  # optical inter-satellite links between ring neighbours (k, k+1 mod N) that see each other
    isl_rate_bps: float = 1.8e9  # their rate: the EDRS laser terminal's 1.8 Gbit/s (ESA)
    isl_grazing_km: float = 80.0  # how far above the surface a link's line of sight must stay (the atmosphere)
    beta_deg: float = 0.0  # angle between the orbit plane and the Sun direction (0: the longest eclipse)
    eclipse: str = "auto"  # throttle satellites in shadow: auto (when link.schedule=orbit) | on | off
    eclipse_throttle: float = 0.5  # compute speed in eclipse, as a share of sunlit speed (an assumption, methods.md)
    tle_file: str = ""  # element sets to propagate by SGP4 instead of the circular orbit (a path or a shipped name)
    tle: list[str] = field(default_factory=list)  # or their lines, in the config itself
    tle_start_utc: str = ""  # orbital time 0 with element sets, ISO 8601 UTC ("" = the latest epoch among them)
    horizon_s: float = 86400.0  # windows are computed over this span of orbital time, then repeat (windows.py)
    step_s: float = 10.0  # visibility sampling step; window edges are then refined by bisection
    time_compression: float = 1.0  # orbital seconds per simulated second (1 = real time)

    def __post_init__(self) -> None:
        p = "link.orbit."
        _check_fields(self, p)
        _check(1 <= self.n_satellites <= 1024, p + "n_satellites", "must be >= 1 and <= 1024", self.n_satellites)
        _check(self.earth_radius_km > 0, p + "earth_radius_km", "must be > 0", self.earth_radius_km)
        _check(self.altitude_km > 0, p + "altitude_km", "must be > 0 (above the surface)", self.altitude_km)
        _check(self.mu_km3_s2 > 0, p + "mu_km3_s2", "must be > 0", self.mu_km3_s2)
        _check(0 <= self.inclination_deg <= 180, p + "inclination_deg", "must be in [0, 180]", self.inclination_deg)
        _check(abs(self.earth_rotation_rad_s) < 1e-3, p + "earth_rotation_rad_s",
               "must be in (-1e-3, 1e-3) rad/s (the Earth's is 7.29e-5; 0 neglects the rotation)",
               self.earth_rotation_rad_s)
        _check(parse_mask(self.elevation_mask) is not None, p + "elevation_mask", "must be one of "
               f"{'|'.join(ELEVATION_MASKS)} or a number of degrees in [0, 90)", self.elevation_mask)
        _check(len(self.stations) >= 1, p + "stations", "must list at least one ground station", self.stations)
        for i, s in enumerate(self.stations):
            _check(isinstance(s, StationConfig), f"{p}stations[{i}]", "must be a StationConfig", s)
            s.validate(f"{p}stations[{i}].")
        _check(self.isl_rate_bps > 0, p + "isl_rate_bps", "must be > 0", self.isl_rate_bps)
        _check(0 <= self.isl_grazing_km < 1000, p + "isl_grazing_km", "must be in [0, 1000) km", self.isl_grazing_km)
        _check(-90 <= self.beta_deg <= 90, p + "beta_deg", "must be in [-90, 90]", self.beta_deg)
        _check(self.eclipse in ECLIPSE, p + "eclipse", "must be one of " + "|".join(ECLIPSE), self.eclipse)
        _check(0 < self.eclipse_throttle <= 1, p + "eclipse_throttle", "must be in (0, 1] (1 = no throttle)",
               self.eclipse_throttle)
        _check(self.step_s > 0, p + "step_s", "must be > 0", self.step_s)
        _check(self.horizon_s >= self.step_s, p + "horizon_s", "must be >= link.orbit.step_s", self.horizon_s)
        _check(self.horizon_s / self.step_s <= 10**7, p + "horizon_s", "must be <= 1e7 sampling steps "
               "(horizon_s / step_s)", self.horizon_s)
        _check(self.time_compression > 0, p + "time_compression", "must be > 0", self.time_compression)
        self._check_tle(p)
        if self.isl and not self.uses_tle():
            self._check_ring(p)

    def mask_deg(self) -> float:
        """The elevation mask in degrees (a named mask's figure, or the number given)."""
        deg = parse_mask(self.elevation_mask)
        assert deg is not None  # validated in __post_init__
        return deg

    def uses_tle(self) -> bool:
        """Are the satellites real orbits (element sets propagated by SGP4) rather than the circular model?"""
        return bool(self.tle_file or self.tle)

    def _check_tle(self, p: str) -> None:
        _check(isinstance(self.tle, list) and all(isinstance(x, str) for x in self.tle), p + "tle",
               "must be a list of TLE lines (strings)", self.tle)
        _check(not (self.tle_file and self.tle), p + "tle", "must be empty when link.orbit.tle_file is set (one source "
               "of element sets)", self.tle)
        _check(not self.tle_start_utc or parse_utc(self.tle_start_utc) is not None, p + "tle_start_utc",
               "must be empty or an ISO 8601 UTC time such as 2025-07-19T05:00:00", self.tle_start_utc)
        if not self.uses_tle():
            return
        where = p + ("tle_file" if self.tle_file else "tle")
        try:
            sets = tle.element_sets(self.tle_file, self.tle)
        except (OSError, ValueError) as e:
            _check(False, where, f"must name readable two-line element sets: {e}", self.tle_file or "[...]")
            return
        _check(self.n_satellites <= len(sets), p + "n_satellites", f"must be <= {len(sets)}, the element sets in "
               f"{where} (the satellites are its first n_satellites sets)", self.n_satellites)

    def _check_ring(self, p: str) -> None:
        """Inter-satellite links of the circular model exist only if neighbours 360°/N apart see each other over the
        Earth and the grazing margin (``geometry.ring``): refuse a ring that can never link, and say what it needs."""
        a = self.earth_radius_km + self.altitude_km
        floor = self.earth_radius_km + self.isl_grazing_km
        need = geometry.ring(a, floor)
        N = self.n_satellites
        if N >= 2 and geometry.chord_clearance_km(a, 360.0 / N) > floor:
            return
        plane = (f"{N} satellites are {360.0 / N:.3g}° apart and the line between neighbours passes "
                 f"{geometry.chord_clearance_km(a, 360.0 / N):,.0f} km from the Earth's centre, below the {floor:,.0f} "
                 "km it must clear" if N >= 2 else "one satellite has no neighbour")
        fix = (f"the plane needs >= {need.min_satellites} satellites (neighbours <= {need.max_spacing_deg:.1f}° apart)"
               if need.min_satellites else "no ring clears it: raise link.orbit.altitude_km")
        _check(False, p + "n_satellites", f"inter-satellite links (link.orbit.isl=true) have no line of sight at "
               f"{self.altitude_km:g} km with a grazing margin of {self.isl_grazing_km:g} km (link.orbit.isl_grazing_km): "
               f"{plane}; {fix}", N)
