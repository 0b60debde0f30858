"""The analytic orbit model (the default, and the teaching version): N satellites evenly spaced in one circular low
Earth orbit, ground stations on a rotating spherical Earth, a cylindrical shadow. Pure ``math``; the constants are
``OrbitConfig`` fields (``link.orbit.*``), sourced in docs/methods.md. ``sgp4_orbit.py`` is the same interface for real
orbits (TLEs).

Model
-----
* Orbit. Circular, radius ``a = R + h`` (``earth_radius_km`` + ``altitude_km``), period by Kepler's third law
  ``T = 2π sqrt(a³/μ)``, mean motion ``n = 2π/T``. Satellite ``k`` (of N) has argument of latitude
  ``u_k(t) = φ + 2πk/N + n t`` (``φ = phase_deg``); its inertial position is ``a·(cos Ω cos u − sin Ω sin u cos i,
  sin Ω cos u + cos Ω sin u cos i, sin u sin i)`` (``Ω = raan_deg``, ``i = inclination_deg``). No perturbation (J2,
  drag): the plane and the spacing stay fixed.
* Ground stations turn with the Earth: longitude ``λ + ω_E t`` in the inertial frame (the frames agree at t = 0, so
  ``raan_deg`` is the node's longitude then; ``earth_rotation_rad_s = 0`` neglects the rotation). A satellite is
  visible from a station while its elevation is at least the mask ε (``link.orbit.elevation_mask``). For an overhead
  pass the satellite is in view across the Earth central angle ``2θ``, ``θ = acos(R cos ε / a) − ε``, so the pass
  lasts ``2θ / (n − ω_E cos i)`` for an equatorial station under a prograde orbit (``overhead_pass_s``; exact for
  i = 0, and for ω_E = 0 at any inclination).
* Eclipse: the Earth's shadow is a cylinder of radius R away from the Sun (the Sun a point at infinity, no
  penumbra), the Sun at angle β (``beta_deg``) to the orbit plane, its projection on the plane along the ascending
  node, fixed over the horizon (the Earth's yearly motion, ~1°/day, is neglected). A satellite is in shadow while
  ``u`` is within ``u_e`` of 180°, ``cos u_e = sqrt(a² − R²) / (a cos β)``: the eclipse fraction is ``u_e / π``,
  which for β = 0 is ``asin(R/a) / π``; no eclipse once ``a cos β <= sqrt(a² − R²)``. The Sun direction is set by β
  alone, not tied to the station's local time.
* Inter-satellite links: in-plane neighbours keep their spacing ``2π/N``, so their line of sight
  (``geometry.chord_clearance_km``) is constant: up at every time or at none (a configuration whose ring can never
  link is refused by ``OrbitConfig``).
"""
from __future__ import annotations

import math
from typing import Sequence

from islands_kit.orbital import geometry
from islands_kit.orbital.config import OrbitConfig
from islands_kit.orbital.geometry import Vec, Window


# -- closed forms ----------------------------------------------------------------------------------------------------
def radius_km(cfg: OrbitConfig) -> float:
    return cfg.earth_radius_km + cfg.altitude_km


def period_s(cfg: OrbitConfig) -> float:
    """Kepler's third law for a circular orbit: T = 2π sqrt(a³/μ) (orbital seconds)."""
    return geometry.period_s(radius_km(cfg), cfg.mu_km3_s2)


def mask_central_angle(cfg: OrbitConfig) -> float:
    """θ = acos(R cos ε / a) − ε (radians) at the configured mask ε."""
    return geometry.mask_central_angle(cfg.earth_radius_km, radius_km(cfg), cfg.mask_deg())


def overhead_pass_s(cfg: OrbitConfig) -> float:
    """Length of an overhead pass (orbital seconds) for an equatorial station, 2θ / (n − ω_E cos i)."""
    n = 2.0 * math.pi / period_s(cfg)
    return 2.0 * mask_central_angle(cfg) / (n - cfg.earth_rotation_rad_s * math.cos(math.radians(cfg.inclination_deg)))


def eclipse_half_angle(cfg: OrbitConfig) -> float:
    """u_e: half the arc of the orbit in the cylindrical shadow (radians; 0 when the orbit never enters it)."""
    return geometry.eclipse_half_angle(cfg.earth_radius_km, radius_km(cfg), cfg.beta_deg)


def eclipse_fraction(cfg: OrbitConfig) -> float:
    """Share of each orbit in shadow: u_e / π (asin(R/a) / π when β = 0)."""
    return eclipse_half_angle(cfg) / math.pi


def neighbour_clearance_km(cfg: OrbitConfig) -> float:
    """How close to the Earth's centre the line between two in-plane neighbours passes: a cos(π/N)."""
    return geometry.chord_clearance_km(radius_km(cfg), 360.0 / cfg.n_satellites)


# -- positions -------------------------------------------------------------------------------------------------------
def argument_of_latitude(cfg: OrbitConfig, k: int, t: float) -> float:
    return math.radians(cfg.phase_deg) + 2.0 * math.pi * k / cfg.n_satellites + 2.0 * math.pi * t / period_s(cfg)


def satellite_position(cfg: OrbitConfig, k: int, t: float) -> Vec:
    """Inertial position (km) of satellite ``k`` at orbital time ``t``."""
    u = argument_of_latitude(cfg, k, t)
    om, inc, a = math.radians(cfg.raan_deg), math.radians(cfg.inclination_deg), radius_km(cfg)
    cu, su = math.cos(u), math.sin(u)
    return (a * (math.cos(om) * cu - math.sin(om) * su * math.cos(inc)),
            a * (math.sin(om) * cu + math.cos(om) * su * math.cos(inc)),
            a * su * math.sin(inc))


def station_position(cfg: OrbitConfig, g: int, t: float) -> Vec:
    """Inertial position (km) of station ``g`` at orbital time ``t`` (the Earth has turned by ω_E t)."""
    st = cfg.stations[g]
    lat, lon = math.radians(st.lat_deg), math.radians(st.lon_deg) + cfg.earth_rotation_rad_s * t
    R = cfg.earth_radius_km
    return (R * math.cos(lat) * math.cos(lon), R * math.cos(lat) * math.sin(lon), R * math.sin(lat))


def elevation_rad(cfg: OrbitConfig, g: int, k: int, t: float) -> float:
    """Elevation of satellite ``k`` above station ``g``'s horizon at orbital time ``t``."""
    return geometry.elevation_rad(satellite_position(cfg, k, t), station_position(cfg, g, t))


def eclipse_windows(cfg: OrbitConfig, k: int) -> list[Window]:
    """Orbital-time intervals within [0, horizon_s) when satellite ``k`` is in shadow (analytic: u within u_e of
    180°)."""
    ue = eclipse_half_angle(cfg)
    if ue <= 0.0:
        return []
    T, H = period_s(cfg), cfg.horizon_s
    u0 = argument_of_latitude(cfg, k, 0.0)
    first = ((math.pi - ue - u0) % (2.0 * math.pi)) / (2.0 * math.pi) * T  # first entry at or after t = 0
    length = 2.0 * ue / (2.0 * math.pi) * T
    out: list[Window] = []
    if first + length > T:  # in shadow at t = 0: the tail of the previous orbit's eclipse
        out.append((0.0, first + length - T))
    t = first
    while t < H:
        out.append((t, min(t + length, H)))
        t += T
    return [(a, b) for a, b in out if b > a]


class CircularOrbit:
    """The analytic model as a ``geometry.OrbitSource`` (what ``windows.py`` asks every model)."""

    tolerance_s = 1e-7  # the model is cheap to evaluate: bisect window edges to well under a microsecond

    def __init__(self, cfg: OrbitConfig) -> None:
        self.cfg = cfg
        self.n_satellites = cfg.n_satellites

    def satellites_km(self, k: int, times: Sequence[float]) -> list[Vec]:
        return [satellite_position(self.cfg, k, t) for t in times]

    def stations_km(self, g: int, times: Sequence[float]) -> list[Vec]:
        return [station_position(self.cfg, g, t) for t in times]

    def eclipse_windows(self, k: int) -> list[Window]:
        return eclipse_windows(self.cfg, k)

    def isl_windows(self, k: int, j: int) -> list[Window] | None:
        """In one plane the spacing of ``k`` and ``j`` never changes: always up when their chord clears the grazing
        floor, never otherwise."""
        sep = 360.0 * ((j - k) % self.n_satellites) / self.n_satellites
        clear = geometry.chord_clearance_km(radius_km(self.cfg), min(sep, 360.0 - sep))
        return None if clear > self.cfg.earth_radius_km + self.cfg.isl_grazing_km else []

    def period_s(self) -> float:
        return period_s(self.cfg)

    def eclipse_fraction(self) -> float:
        return eclipse_fraction(self.cfg)
