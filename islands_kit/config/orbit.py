"""The orbit section (``link.orbit.*``): a few satellites in one circular low Earth orbit and their ground stations,
from which ``islands_kit.orbit`` derives each link's contact windows and each satellite's eclipses. Every default is
a public figure; docs/methods.md ("Orbital islands: the orbit model") gives the source of each."""
from __future__ import annotations

from dataclasses import dataclass, field

from islands_kit.config.rules import _check, _check_fields


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


@dataclass
class OrbitConfig:
    """N satellites evenly spaced in one circular orbit; ground stations ``0..G-1`` and satellites ``G..G+N-1`` are
    the island ids. Used when ``link.schedule = "orbit"``."""

    n_satellites: int = 4  # evenly spaced in argument of latitude, satellite k at 360°·k/N at t = 0
    altitude_km: float = 550.0  # Starlink's first shell (FCC, 2019 and 2021 orders)
    inclination_deg: float = 53.0  # the same shell's inclination
    raan_deg: float = 0.0  # right ascension of the ascending node (t = 0: the inertial and Earth-fixed frames agree)
    earth_radius_km: float = 6371.0088  # mean Earth radius R1 of GRS 80 (spherical Earth: shadow and horizon)
    mu_km3_s2: float = 398600.4418  # GM of the Earth (IERS Conventions 2010): Kepler's T = 2π sqrt(a³/μ)
    earth_rotation_rad_s: float = 7.292115e-5  # the Earth's rotation rate (IERS 2010); 0 neglects the rotation
    min_elevation_deg: float = 25.0  # elevation mask of a ground link (Starlink's, FCC 2021 order)
    stations: list[StationConfig] = field(default_factory=lambda: [StationConfig()])  # island ids 0..G-1
    isl: bool = False  # optical inter-satellite links between in-plane neighbours (always up), relaying to the ground
    isl_rate_bps: float = 1.8e9  # their rate: the EDRS laser terminal's 1.8 Gbit/s (ESA)
    beta_deg: float = 0.0  # angle between the orbit plane and the Sun direction (0: the longest eclipse)
    eclipse_throttle: float = 0.5  # compute speed in eclipse, as a share of sunlit speed (an assumption, methods.md)
    horizon_s: float = 86400.0  # windows are computed over this span of orbital time, then repeat (see orbit.py)
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
        _check(0 <= self.min_elevation_deg < 90, p + "min_elevation_deg", "must be in [0, 90)", self.min_elevation_deg)
        _check(len(self.stations) >= 1, p + "stations", "must list at least one ground station", self.stations)
        for i, s in enumerate(self.stations):
            _check(isinstance(s, StationConfig), f"{p}stations[{i}]", "must be a StationConfig", s)
            s.validate(f"{p}stations[{i}].")
        _check(self.isl_rate_bps > 0, p + "isl_rate_bps", "must be > 0", self.isl_rate_bps)
        _check(-90 <= self.beta_deg <= 90, p + "beta_deg", "must be in [-90, 90]", self.beta_deg)
        _check(0 < self.eclipse_throttle <= 1, p + "eclipse_throttle", "must be in (0, 1] (1 = no throttle)",
               self.eclipse_throttle)
        _check(self.step_s > 0, p + "step_s", "must be > 0", self.step_s)
        _check(self.horizon_s >= self.step_s, p + "horizon_s", "must be >= link.orbit.step_s", self.horizon_s)
        _check(self.horizon_s / self.step_s <= 10**7, p + "horizon_s", "must be <= 1e7 sampling steps "
               "(horizon_s / step_s)", self.horizon_s)
        _check(self.time_compression > 0, p + "time_compression", "must be > 0", self.time_compression)
