"""The orbit's closed forms, as functions of numbers (no config): Kepler's period, the Earth central angle at an
elevation mask, the cylindrical shadow, and the line of sight between two satellites. Pure ``math``; a leaf of the
package (``config.py`` checks a configuration with these, the models compute with them).

Line of sight. Two satellites see each other while the segment between them stays clear of the Earth plus a
grazing margin: its closest approach to the Earth's centre exceeds ``floor = R + margin`` (the margin keeps the beam
out of the atmosphere, where it is absorbed and bent). For two satellites at the same radius ``r`` an angle ``θ``
apart, the segment's closest point is its midpoint, at ``r cos(θ/2)``; a ring of ``N`` evenly spaced satellites
(``θ = 2π/N``) has links only when ``r cos(π/N) > floor``, that is ``N > π / acos(floor / r)``.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Protocol, Sequence

Vec = tuple[float, float, float]
Window = tuple[float, float]


class Ring(NamedTuple):
    """What line of sight allows a ring: ``min_satellites`` the fewest evenly spaced satellites whose neighbours see
    each other, ``max_spacing_deg`` the widest neighbour spacing that still clears the floor."""

    min_satellites: int
    max_spacing_deg: float


def period_s(a_km: float, mu_km3_s2: float) -> float:
    """Kepler's third law for a circular orbit of radius ``a``: T = 2π sqrt(a³/μ)."""
    return 2.0 * math.pi * math.sqrt(a_km ** 3 / mu_km3_s2)


def mask_central_angle(r_earth_km: float, a_km: float, mask_deg: float) -> float:
    """θ: the Earth central angle between a station and a satellite at radius ``a`` seen at the elevation mask ε,
    θ = acos(R cos ε / a) − ε (radians)."""
    eps = math.radians(mask_deg)
    return math.acos(r_earth_km * math.cos(eps) / a_km) - eps


def slant_range_km(r_earth_km: float, a_km: float, mask_deg: float) -> float:
    """Distance from a station to a satellite at radius ``a`` seen at elevation ε: sqrt(a² − R² cos² ε) − R sin ε (the
    longest a ground link gets above the mask)."""
    eps = math.radians(mask_deg)
    return math.sqrt(a_km ** 2 - (r_earth_km * math.cos(eps)) ** 2) - r_earth_km * math.sin(eps)


def eclipse_half_angle(r_earth_km: float, a_km: float, beta_deg: float) -> float:
    """u_e: half the arc of a circular orbit inside the Earth's cylindrical shadow, the Sun at β to the orbit plane,
    cos u_e = sqrt(a² − R²) / (a cos β) (radians; 0 when the orbit never enters it)."""
    c = a_km * math.cos(math.radians(beta_deg))
    edge = math.sqrt(a_km * a_km - r_earth_km * r_earth_km)
    return math.acos(edge / c) if c > edge else 0.0


def chord_clearance_km(r_km: float, separation_deg: float) -> float:
    """Closest approach to the Earth's centre of the segment between two satellites at radius ``r`` an angle θ apart:
    r cos(θ/2) (the midpoint; 0 for satellites on opposite sides)."""
    return r_km * math.cos(math.radians(separation_deg) / 2.0)


def segment_clearance_km(p: Vec, q: Vec) -> float:
    """Closest approach to the origin (the Earth's centre) of the segment from ``p`` to ``q``, any two points: the
    foot of the perpendicular when it falls inside the segment, else the nearer end."""
    d = (q[0] - p[0], q[1] - p[1], q[2] - p[2])
    dd = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    s = 0.0 if dd == 0.0 else min(1.0, max(0.0, -(p[0] * d[0] + p[1] * d[1] + p[2] * d[2]) / dd))
    return math.hypot(p[0] + s * d[0], p[1] + s * d[1], p[2] + s * d[2])


def ring(r_km: float, floor_km: float) -> Ring:
    """The smallest ring of evenly spaced satellites at radius ``r`` whose neighbours see each other above
    ``floor_km`` from the centre: N > π / acos(floor / r), so N = floor(π / acos(floor / r)) + 1."""
    if floor_km >= r_km:
        return Ring(0, 0.0)  # the orbit itself is below the floor: no spacing clears it
    half = math.acos(floor_km / r_km)
    return Ring(math.floor(math.pi / half) + 1, math.degrees(2.0 * half))


def elevation_rad(sat: Vec, station: Vec) -> float:
    """Elevation of ``sat`` above the horizon of ``station`` (a point on a spherical Earth; its local vertical is its
    own direction), both in the same frame: asin(ẑ · (s − p) / |s − p|)."""
    d = (sat[0] - station[0], sat[1] - station[1], sat[2] - station[2])
    norm_p = math.hypot(*station)
    up = (d[0] * station[0] + d[1] * station[1] + d[2] * station[2]) / norm_p
    return math.asin(max(-1.0, min(1.0, up / math.hypot(*d))))


def _crossing(f: Callable[[float], float], lo: float, hi: float, tol_s: float) -> float:
    """A root of f in [lo, hi] where f changes sign, by bisection to ``tol_s``."""
    flo = f(lo) >= 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if (f(mid) >= 0.0) == flo:
            lo = mid
        else:
            hi = mid
        if hi - lo < tol_s:
            break
    return 0.5 * (lo + hi)


def find_windows(f: Callable[[float], float], samples: Sequence[float], times: Sequence[float],
                 tol_s: float) -> list[Window]:
    """The intervals within ``[times[0], times[-1]]`` where ``f >= 0``, from its values ``samples`` at ``times`` (a
    sampling grid: an excursion shorter than its step can slip between two samples) with every edge refined by
    bisection of ``f`` to ``tol_s``. A window open at either end of the grid is cut there."""
    out: list[Window] = []
    start = times[0] if samples[0] >= 0.0 else None
    for j in range(1, len(times)):
        up, was = samples[j] >= 0.0, samples[j - 1] >= 0.0
        if up and not was:
            start = _crossing(f, times[j - 1], times[j], tol_s)
        elif was and not up and start is not None:
            out.append((start, _crossing(f, times[j - 1], times[j], tol_s)))
            start = None
    if start is not None:
        out.append((start, times[-1]))
    return [(a, b) for a, b in out if b > a]


def sample_times(horizon_s: float, step_s: float) -> list[float]:
    """The sampling grid of ``[0, horizon_s]``: every ``step_s``, and the horizon itself."""
    m = math.ceil(horizon_s / step_s)
    return [min(j * step_s, horizon_s) for j in range(m + 1)]


class OrbitSource(Protocol):
    """Where the satellites and stations are (km, one frame for both) at orbital time ``t`` (seconds from the start),
    and what follows from it that a model can give in closed form. ``circular.CircularOrbit`` (the analytic model) and
    ``sgp4_orbit.Sgp4Orbit`` (TLEs propagated by SGP4) implement it; ``windows.py`` derives the contact windows."""

    n_satellites: int
    tolerance_s: float  # how finely window edges are bisected (the analytic model is cheap to ask, SGP4 is not)

    def satellites_km(self, k: int, times: Sequence[float]) -> list[Vec]:
        """Satellite ``k``'s positions at ``times``."""

    def stations_km(self, g: int, times: Sequence[float]) -> list[Vec]:
        """Station ``g``'s positions at ``times``."""

    def eclipse_windows(self, k: int) -> list[Window]:
        """Orbital-time intervals within ``[0, horizon_s)`` when satellite ``k`` is in the Earth's shadow."""

    def isl_windows(self, k: int, j: int) -> list[Window] | None:
        """When satellites ``k`` and ``j`` see each other within ``[0, horizon_s)``: None for always, [] for never."""

    def period_s(self) -> float:
        """The orbital period (satellite 0's)."""

    def eclipse_fraction(self) -> float:
        """The share of the time the satellites spend in shadow."""
