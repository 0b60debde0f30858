"""Schedules: when each link is up and when each satellite is in shadow, from whichever orbit model the config
names (``circular.py`` by default, ``sgp4_orbit.py`` with element sets) — the plan the link model reads
(``comm/link/contact.py``) and the eclipse the simulated clock reads (``experiment.py``).

Windows are found by sampling a sign (elevation above the mask, line of sight above the grazing floor, shadow) every
``step_s`` and bisecting each change (``geometry.find_windows``): a pass shorter than ``step_s`` can slip between two
samples (default 10 s: passes of minutes are found, a grazing one of a few seconds may not be). They are computed
over ``[0, horizon_s)`` of orbital time and repeat every ``horizon_s`` (a repeat-ground-track approximation: a real
track drifts from day to day); times are divided by ``time_compression`` to give simulated seconds.

Links and island ids: ground stations are islands ``0..G-1``, satellites ``G..G+N-1``. A station and a satellite
talk during that satellite's passes over that station, at the link's own rate (``link.bandwidth_bps``); two stations
over the ground, always (fibre; the rate is the same link's); with ``isl``, ring neighbours (k, k+1 mod N) over an
optical link at ``isl_rate_bps`` while they see each other (``OrbitSource.isl_windows``: always or never in one
circular plane, coming and going between real orbits); any other pair of satellites never (a run that sends on such
a pair stops with an error naming it). With ``isl`` a satellite also reaches a station through the ring: its bytes
are stored and forwarded over the inter-satellite links that are up to whichever satellite is in a pass, so its
ground link is up while some satellite connected to it is in a pass (``relay``; the hops add no delay, the optical
links being faster than the ground link, and the satellites do not share the downlink's rate: an upper bound).
"""
from __future__ import annotations

import bisect
import math
from typing import Any, Callable, NamedTuple, TypeVar

from islands_kit.orbital import circular, geometry
from islands_kit.orbital.config import OrbitConfig
from islands_kit.orbital.geometry import OrbitSource, Window
from islands_kit.orbital.sgp4_orbit import Sgp4Orbit
from islands_kit.rules import ConfigError


class LinkContacts(NamedTuple):
    """One directed link's contacts: ``windows`` (sorted, disjoint, simulated seconds within ``[0, cycle_s)``,
    repeating every ``cycle_s``) or None for always up; ``rate_bps`` None for the link's own rate."""

    windows: tuple[Window, ...] | None
    rate_bps: float | None


class OrbitPlan(NamedTuple):
    """Every pair's contacts (both directions listed) for ``n_islands`` islands; a pair not listed is never up.
    ``isl_never`` lists the ring neighbours (satellite indices) that never see each other."""

    n_islands: int
    cycle_s: float
    links: dict[tuple[int, int], LinkContacts]
    isl_never: tuple[tuple[int, int], ...] = ()


# The plan and the eclipses of a config are asked for many times in a run (the link model, the report, every
# throttled step): each is computed once per distinct config (``repr`` names every field) and kept.
_CACHE: dict[tuple[str, str], Any] = {}
_CACHE_SIZE = 32
T = TypeVar("T")


def _cached(kind: str, cfg: OrbitConfig, make: Callable[[], T]) -> T:
    key = (kind, repr(cfg))
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = make()
    value: T = _CACHE[key]
    return value


def source(cfg: OrbitConfig) -> OrbitSource:
    """The orbit model ``cfg`` names: SGP4 on its element sets, else the circular orbit."""
    def make() -> OrbitSource:
        return Sgp4Orbit(cfg) if cfg.uses_tle() else circular.CircularOrbit(cfg)
    return _cached("source", cfg, make)


def n_islands(cfg: OrbitConfig) -> int:
    return len(cfg.stations) + cfg.n_satellites


def satellite_id(cfg: OrbitConfig, k: int) -> int:
    """Island id of satellite ``k`` (0-based): stations come first."""
    return len(cfg.stations) + k


def visibility_windows(cfg: OrbitConfig, g: int, k: int) -> list[Window]:
    """Orbital-time intervals within [0, horizon_s) when satellite ``k`` is above station ``g``'s mask."""
    src, sin_mask = source(cfg), math.sin(math.radians(cfg.mask_deg()))

    def above(t: float) -> float:
        (s,), (p,) = src.satellites_km(k, [t]), src.stations_km(g, [t])
        return math.sin(geometry.elevation_rad(s, p)) - sin_mask

    times = geometry.sample_times(cfg.horizon_s, cfg.step_s)
    sats, stations = src.satellites_km(k, times), src.stations_km(g, times)
    samples = [math.sin(geometry.elevation_rad(s, p)) - sin_mask for s, p in zip(sats, stations)]
    return geometry.find_windows(above, samples, times, src.tolerance_s)


def union(windows: list[list[Window]]) -> list[Window]:
    """The union of several lists of windows (sorted, touching windows merged)."""
    out: list[Window] = []
    for a, b in sorted(w for ws in windows for w in ws):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _inside(windows: list[Window], t: float) -> bool:
    i = bisect.bisect_right(windows, (t, math.inf)) - 1
    return i >= 0 and windows[i][0] <= t < windows[i][1]


def _find(root: list[int], x: int) -> int:
    """The representative of ``x``'s group in a union-find forest (path halving)."""
    while root[x] != x:
        root[x] = root[root[x]]
        x = root[x]
    return x


def relay(passes: list[list[Window]], links: dict[tuple[int, int], list[Window] | None],
          horizon_s: float) -> list[list[Window]]:
    """Each satellite's ground windows through the ring: satellite k reaches the station while some satellite joined
    to k by inter-satellite links that are up (``links``: None always, else windows) is in a pass (``passes[k]``).
    The span is cut at every window edge; between two edges who is in a pass and which links are up does not change,
    so one connectivity check (union-find) per piece is exact."""
    n = len(passes)
    edges = sorted({0.0, horizon_s, *(x for ws in passes for w in ws for x in w),
                    *(x for ws in links.values() if ws for w in ws for x in w)})
    out: list[list[Window]] = [[] for _ in range(n)]
    for a, b in zip(edges, edges[1:]):
        if b <= a or a >= horizon_s:
            continue
        mid = 0.5 * (a + b)
        root = list(range(n))
        for (k, j), ws in links.items():
            if ws is None or _inside(ws, mid):
                root[_find(root, k)] = _find(root, j)
        lit = {_find(root, k) for k in range(n) if _inside(passes[k], mid)}
        for k in range(n):
            if _find(root, k) in lit:
                if out[k] and out[k][-1][1] == a:
                    out[k][-1] = (out[k][-1][0], b)
                else:
                    out[k].append((a, b))
    return out


def ring_links(cfg: OrbitConfig) -> dict[tuple[int, int], list[Window] | None]:
    """The inter-satellite links of the ring (k, k+1 mod N) and when each is up (None always, [] never)."""
    src, N = source(cfg), cfg.n_satellites
    pairs = sorted({(min(k, (k + 1) % N), max(k, (k + 1) % N)) for k in range(N)}) if N > 1 else []
    return {p: src.isl_windows(*p) for p in pairs}


def contact_plan(cfg: OrbitConfig) -> OrbitPlan:
    """Every link's contacts (the module docstring says which pairs talk, when and at what rate); a ring of element
    sets none of whose neighbours ever see each other is refused (ConfigError), as the circular model's is by
    ``OrbitConfig``."""
    return _cached("plan", cfg, lambda: _plan(cfg))


def _plan(cfg: OrbitConfig) -> OrbitPlan:
    G, N, c = len(cfg.stations), cfg.n_satellites, cfg.time_compression
    links: dict[tuple[int, int], LinkContacts] = {}
    isl = ring_links(cfg) if cfg.isl else {}
    never = tuple(p for p, ws in isl.items() if ws == [])
    if isl and len(never) == len(isl):
        raise ConfigError(f"link.orbit.isl: no pair of ring neighbours (satellites k, k+1 of {N}) ever sees the other "
                          f"over the Earth with a {cfg.isl_grazing_km:g} km grazing margin within link.orbit.horizon_s; "
                          "set link.orbit.isl=false or order the element sets so that neighbours share a plane")

    def scaled(ws: list[Window]) -> tuple[Window, ...]:
        return tuple((a / c, b / c) for a, b in ws)

    for g in range(G):
        for h in range(G):
            if g != h:
                links[(g, h)] = LinkContacts(None, None)
        passes = [visibility_windows(cfg, g, k) for k in range(N)]
        ground = relay(passes, isl, cfg.horizon_s) if isl else passes
        for k in range(N):
            links[(g, G + k)] = links[(G + k, g)] = LinkContacts(scaled(ground[k]), None)
    for (k, j), ws in isl.items():
        if ws != []:
            links[(G + k, G + j)] = links[(G + j, G + k)] = LinkContacts(None if ws is None else scaled(ws),
                                                                         cfg.isl_rate_bps)
    return OrbitPlan(G + N, cfg.horizon_s / c, links, never)


def eclipse_windows(cfg: OrbitConfig, k: int) -> list[Window]:
    """Orbital-time intervals within [0, horizon_s) when satellite ``k`` is in the Earth's shadow."""
    return _cached("eclipse", cfg, lambda: [source(cfg).eclipse_windows(j) for j in range(cfg.n_satellites)])[k]


def compute_factor(cfg: OrbitConfig, k: int, t_sim: float) -> float:
    """Compute speed of satellite ``k`` at simulated time ``t_sim``: ``eclipse_throttle`` in shadow, else 1 (the
    shadow of ``eclipse_windows``, repeating every ``horizon_s`` like the contact windows)."""
    return compute_factors(cfg, k)(t_sim)


def compute_factors(cfg: OrbitConfig, k: int) -> Callable[[float], float]:
    """``compute_factor`` for satellite ``k`` with its eclipses looked up once: a run asks for every inner step's
    factor (``train/orbit.py``), and naming the config for the cache on each of them cost more than the steps."""
    ws, compression, horizon, throttle = eclipse_windows(cfg, k), cfg.time_compression, cfg.horizon_s, cfg.eclipse_throttle

    def factor(t_sim: float) -> float:
        return throttle if _inside(ws, (t_sim * compression) % horizon) else 1.0  # orbital time within the horizon
    return factor


def relay_hops(cfg: OrbitConfig, g: int, k: int, t_sim: float) -> int | None:
    """How many inter-satellite links satellite ``k``'s bytes cross at simulated time ``t_sim`` to reach station
    ``g``: 0 while ``k`` is in a pass itself, else the fewest ring links that are up to a satellite in a pass (the
    shortest path of ``relay``'s connected group); None when no satellite joined to ``k`` is in a pass (or without
    ``isl``, when ``k`` is not in one)."""
    t = (t_sim * cfg.time_compression) % cfg.horizon_s
    lit = {j for j, ws in enumerate(_cached("passes", cfg, lambda: [[visibility_windows(cfg, h, i)
                                                                      for i in range(cfg.n_satellites)]
                                                                     for h in range(len(cfg.stations))])[g])
           if _inside(ws, t)}
    if k in lit:
        return 0
    if not cfg.isl:
        return None
    up = [p for p, ws in _cached("ring", cfg, lambda: ring_links(cfg)).items() if ws is None or _inside(ws, t)]
    seen, frontier = {k}, [k]
    for hops in range(1, cfg.n_satellites):  # breadth first over the links that are up
        frontier = [b for a in frontier for p in up if a in p for b in p if b not in seen]
        seen.update(frontier)
        if lit & set(frontier):
            return hops
        if not frontier:
            return None
    return None


def period_s(cfg: OrbitConfig) -> float:
    """The orbital period (seconds of orbital time; satellite 0's with element sets)."""
    return source(cfg).period_s()


def eclipse_fraction(cfg: OrbitConfig) -> float:
    """Share of the time the satellites spend in shadow (the closed form of the circular model; the mean over the
    horizon and the satellites with element sets)."""
    return source(cfg).eclipse_fraction()
