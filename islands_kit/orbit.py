"""A simple orbit model for orbital islands: N satellites evenly spaced in one circular low Earth orbit, ground stations
on a rotating spherical Earth, and what follows from them — each link's contact windows and each satellite's
eclipses. Pure ``math``; the constants are ``OrbitConfig`` fields (``link.orbit.*``), sourced in docs/methods.md.

Model
-----
* Orbit. Circular, radius ``a = R + h`` (``earth_radius_km`` + ``altitude_km``), period by Kepler's third law
  ``T = 2π sqrt(a³/μ)``, mean motion ``n = 2π/T``. Satellite ``k`` (of N) has argument of latitude
  ``u_k(t) = 2πk/N + n t``; its inertial position is ``a·(cos Ω cos u − sin Ω sin u cos i, sin Ω cos u +
  cos Ω sin u cos i, sin u sin i)`` (``Ω = raan_deg``, ``i = inclination_deg``). No perturbation (J2, drag): the
  plane and the spacing stay fixed.
* Ground stations turn with the Earth: longitude ``λ + ω_E t`` in the inertial frame (the frames agree at t = 0;
  ``earth_rotation_rad_s = 0`` neglects the rotation). A satellite is visible from a station while its elevation
  ``asin(ẑ·(r_sat − r_st)/|r_sat − r_st|)`` (``ẑ`` the station's local vertical) is at least ``min_elevation_deg``.
  For an overhead pass the satellite is in view across the Earth central angle ``2θ``,
  ``θ = acos(R cos ε / a) − ε`` (ε the mask), so the pass lasts ``2θ / (n − ω_E cos i)`` for an equatorial station
  under a prograde orbit (``overhead_pass_s``; exact for i = 0, and for ω_E = 0 at any inclination).
* Windows are found by sampling the elevation every ``step_s`` and bisecting each crossing of the mask; a pass that
  is shorter than ``step_s`` can slip between samples (default 10 s: passes of a few minutes are found, a grazing
  one of a few seconds may not be). They are computed over ``[0, horizon_s)`` and repeat every ``horizon_s``: a
  repeat-ground-track approximation (a real orbit's track drifts from day to day). Times are divided by
  ``time_compression`` to give simulated seconds.
* Eclipse: the Earth's shadow is a cylinder of radius R away from the Sun (the Sun a point at infinity, no
  penumbra), the Sun at angle β (``beta_deg``) to the orbit plane, its projection on the plane along the ascending
  node, fixed over the horizon (the Earth's yearly motion, ~1°/day, is neglected). A satellite is in shadow while
  ``u`` is within ``u_e`` of 180°, ``cos u_e = sqrt(a² − R²) / (a cos β)``: the eclipse fraction is ``u_e / π``, which
  for β = 0 is ``asin(R/a) / π``; no eclipse once ``a cos β <= sqrt(a² − R²)``. Compute runs at
  ``eclipse_throttle`` of its sunlit speed in shadow. The Sun direction is set by β alone, not tied to the station's
  local time.

Links and island ids: ground stations are islands ``0..G-1``, satellites ``G..G+N-1``. A station and a satellite
talk during that satellite's passes over that station, at the link's own rate (``link.bandwidth_bps``); two stations
over the ground, always (fibre; the rate is the same link's); with ``isl`` two in-plane neighbours (k, k ± 1 mod N)
over an optical link, always, at ``isl_rate_bps``; any other pair of satellites never (a run that sends on such a
pair stops with an error naming it). With ``isl`` a satellite also reaches a station through the ring: its bytes
are stored and forwarded over the inter-satellite links to whichever satellite is in a pass, so its ground link is
up during the union of every satellite's passes over that station (``relayed``; the hops add no delay, the optical
links being faster than the ground link, and the satellites do not share the downlink's rate: an upper bound).
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

from islands_kit.config.orbit import OrbitConfig

Vec = tuple[float, float, float]
Window = tuple[float, float]


class LinkContacts(NamedTuple):
    """One directed link's contacts: ``windows`` (sorted, disjoint, simulated seconds within ``[0, cycle_s)``,
    repeating every ``cycle_s``) or None for always up; ``rate_bps`` None for the link's own rate."""

    windows: tuple[Window, ...] | None
    rate_bps: float | None


class OrbitPlan(NamedTuple):
    """Every pair's contacts (both directions listed) for ``n_islands`` islands; a pair not listed is never up."""

    n_islands: int
    cycle_s: float
    links: dict[tuple[int, int], LinkContacts]


# -- closed forms ----------------------------------------------------------------------------------------------------
def radius_km(cfg: OrbitConfig) -> float:
    return cfg.earth_radius_km + cfg.altitude_km


def period_s(cfg: OrbitConfig) -> float:
    """Kepler's third law for a circular orbit: T = 2π sqrt(a³/μ) (orbital seconds)."""
    return 2.0 * math.pi * math.sqrt(radius_km(cfg) ** 3 / cfg.mu_km3_s2)


def mask_central_angle(cfg: OrbitConfig) -> float:
    """θ: the Earth central angle between a station and a satellite seen at the elevation mask ε,
    θ = acos(R cos ε / a) − ε (radians)."""
    eps = math.radians(cfg.min_elevation_deg)
    return math.acos(cfg.earth_radius_km * math.cos(eps) / radius_km(cfg)) - eps


def overhead_pass_s(cfg: OrbitConfig) -> float:
    """Length of an overhead pass (orbital seconds) for an equatorial station, 2θ / (n − ω_E cos i)."""
    n = 2.0 * math.pi / period_s(cfg)
    return 2.0 * mask_central_angle(cfg) / (n - cfg.earth_rotation_rad_s * math.cos(math.radians(cfg.inclination_deg)))


def eclipse_half_angle(cfg: OrbitConfig) -> float:
    """u_e: half the arc of the orbit in the cylindrical shadow (radians; 0 when the orbit never enters it)."""
    a, R = radius_km(cfg), cfg.earth_radius_km
    c = a * math.cos(math.radians(cfg.beta_deg))
    edge = math.sqrt(a * a - R * R)
    return math.acos(edge / c) if c > edge else 0.0


def eclipse_fraction(cfg: OrbitConfig) -> float:
    """Share of each orbit in shadow: u_e / π (asin(R/a) / π when β = 0)."""
    return eclipse_half_angle(cfg) / math.pi


# -- positions -------------------------------------------------------------------------------------------------------
def n_islands(cfg: OrbitConfig) -> int:
    return len(cfg.stations) + cfg.n_satellites


def satellite_id(cfg: OrbitConfig, k: int) -> int:
    """Island id of satellite ``k`` (0-based): stations come first."""
    return len(cfg.stations) + k


def argument_of_latitude(cfg: OrbitConfig, k: int, t: float) -> float:
    return 2.0 * math.pi * k / cfg.n_satellites + 2.0 * math.pi * t / period_s(cfg)


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
    s, p = satellite_position(cfg, k, t), station_position(cfg, g, t)
    d = (s[0] - p[0], s[1] - p[1], s[2] - p[2])
    up = sum(di * pi for di, pi in zip(d, p)) / cfg.earth_radius_km
    return math.asin(max(-1.0, min(1.0, up / math.sqrt(sum(di * di for di in d)))))


# -- windows ---------------------------------------------------------------------------------------------------------
def _crossing(f: Callable[[float], float], lo: float, hi: float) -> float:
    """A root of f in [lo, hi] where f changes sign, by bisection to well under a microsecond."""
    flo = f(lo) >= 0.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if (f(mid) >= 0.0) == flo:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-7:
            break
    return 0.5 * (lo + hi)


def visibility_windows(cfg: OrbitConfig, g: int, k: int) -> list[Window]:
    """Orbital-time intervals within [0, horizon_s) when satellite ``k`` is above station ``g``'s mask."""
    sin_mask = math.sin(math.radians(cfg.min_elevation_deg))

    def f(t: float) -> float:
        return math.sin(elevation_rad(cfg, g, k, t)) - sin_mask

    H, step = cfg.horizon_s, cfg.step_s
    m = math.ceil(H / step)
    times = [min(j * step, H) for j in range(m + 1)]
    out: list[Window] = []
    start = 0.0 if f(0.0) >= 0.0 else None
    prev_t, prev_up = 0.0, start is not None
    for t in times[1:]:
        up = f(t) >= 0.0
        if up and not prev_up:
            start = _crossing(f, prev_t, t)
        elif prev_up and not up:
            assert start is not None
            out.append((start, _crossing(f, prev_t, t)))
            start = None
        prev_t, prev_up = t, up
    if start is not None:
        out.append((start, H))
    return [(a, b) for a, b in out if b > a]


def eclipse_windows(cfg: OrbitConfig, k: int) -> list[Window]:
    """Orbital-time intervals within [0, horizon_s) when satellite ``k`` is in shadow (analytic: u within u_e of
    180°)."""
    ue = eclipse_half_angle(cfg)
    if ue <= 0.0:
        return []
    T, H = period_s(cfg), cfg.horizon_s
    u0 = 2.0 * math.pi * k / cfg.n_satellites
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


def compute_factor(cfg: OrbitConfig, k: int, t_sim: float) -> float:
    """Compute speed of satellite ``k`` at simulated time ``t_sim``: ``eclipse_throttle`` in shadow, else 1 (the
    same shadow as ``eclipse_windows``, repeating every ``horizon_s`` like the contact windows)."""
    t = (t_sim * cfg.time_compression) % cfg.horizon_s  # orbital time within the repeating horizon
    ue = eclipse_half_angle(cfg)
    off = argument_of_latitude(cfg, k, t) % (2.0 * math.pi) - math.pi  # from the middle of the shadow
    return cfg.eclipse_throttle if ue > 0.0 and abs(off) < ue else 1.0


def relayed(windows: list[list[Window]]) -> list[Window]:
    """The union of several satellites' windows over one station: when *some* satellite of the ring is in a pass."""
    out: list[Window] = []
    for a, b in sorted(w for ws in windows for w in ws):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def contact_plan(cfg: OrbitConfig) -> OrbitPlan:
    """Every link's contacts (the module docstring says which pairs talk, when and at what rate)."""
    G, N, c = len(cfg.stations), cfg.n_satellites, cfg.time_compression
    links: dict[tuple[int, int], LinkContacts] = {}
    for g in range(G):
        for h in range(G):
            if g != h:
                links[(g, h)] = LinkContacts(None, None)
        passes = [visibility_windows(cfg, g, k) for k in range(N)]
        ring = relayed(passes) if cfg.isl and N > 1 else None
        for k in range(N):
            w = LinkContacts(tuple((a / c, b / c) for a, b in (ring if ring is not None else passes[k])), None)
            links[(g, G + k)] = links[(G + k, g)] = w
    if cfg.isl and N > 1:
        for k in range(N):
            j = (k + 1) % N
            links[(G + k, G + j)] = links[(G + j, G + k)] = LinkContacts(None, cfg.isl_rate_bps)
    return OrbitPlan(G + N, cfg.horizon_s / c, links)
