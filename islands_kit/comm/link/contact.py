"""When each directed link may serialise bytes: its contact schedule (``Periodic``, ``Windows``, ``ALWAYS_UP``), and
the plan that gives every (src, dst) its schedule and rate (``ContactPlan``, built from the link config by
``contact_plan``). A schedule answers one question, ``next_up(t)``: the earliest time >= t inside an up-interval,
and that interval's end; the wire (``wire.py``) pauses a transfer outside and resumes it at the next window."""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Iterator, Protocol

from islands_kit.config import LinkConfig
from islands_kit.orbital import windows as orbit


class Schedule(Protocol):
    @property
    def always_up(self) -> bool:
        """Up at every time (the wire may then take its vectorised path)."""

    def next_up(self, t: float) -> tuple[float, float]:
        """Earliest time s >= t inside an up-interval, and that interval's end (inf, inf: never up again)."""


class _AlwaysUp:
    always_up = True

    def next_up(self, t: float) -> tuple[float, float]:
        return t, math.inf

    def __repr__(self) -> str:
        return "ALWAYS_UP"


ALWAYS_UP = _AlwaysUp()


@dataclass(frozen=True)
class Periodic:
    """Up during the first ``fraction`` of every period: ``[k·P, k·P + f·P)`` (``period_s <= 0``: always up). The
    same windows as ``Windows(((0, P·f),), P)`` (tests check they agree), kept as its own arithmetic because it is
    what every existing config runs."""

    period_s: float
    fraction: float

    @property
    def always_up(self) -> bool:
        return self.period_s <= 0

    def next_up(self, t: float) -> tuple[float, float]:
        if self.period_s <= 0:
            return t, math.inf
        P, up = self.period_s, self.period_s * self.fraction
        k = math.floor(t / P)
        end = k * P + up
        if t < end:
            return t, end
        return (k + 1) * P, (k + 1) * P + up


@dataclass(frozen=True)
class Windows:
    """Any list of up-intervals ``[a, b)``: sorted, disjoint (touching ones are merged), within ``[0, cycle_s]`` and
    repeating every ``cycle_s``; ``cycle_s = 0``: absolute times, never up after the last one. No windows: never up."""

    up: tuple[tuple[float, float], ...]
    cycle_s: float = 0.0
    always_up: bool = field(default=False, init=False)
    _ends: tuple[float, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        merged: list[tuple[float, float]] = []
        for a, b in self.up:
            a, b = float(a), float(b)
            if not (math.isfinite(a) and math.isfinite(b) and a < b):
                raise ValueError(f"Windows.up: every window needs finite a < b (got [{a}, {b}))")
            if merged and a < merged[-1][1]:
                raise ValueError(f"Windows.up: windows must be sorted and disjoint ([{a}, {b}) starts before "
                                 f"{merged[-1][1]})")
            if merged and a == merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        if not (math.isfinite(self.cycle_s) and self.cycle_s >= 0):
            raise ValueError(f"Windows.cycle_s: must be a finite number >= 0 (got {self.cycle_s})")
        if self.cycle_s > 0 and merged and (merged[0][0] < 0 or merged[-1][1] > self.cycle_s):
            raise ValueError(f"Windows.up: a repeating schedule's windows lie within [0, cycle_s={self.cycle_s}]")
        object.__setattr__(self, "up", tuple(merged))
        object.__setattr__(self, "_ends", tuple(b for _, b in merged))

    def _first_ending_after(self, t: float, base: float) -> int:
        """Index of the first window whose end (shifted by ``base``) is after ``t``; len(up) if none."""
        i = bisect.bisect_right(self._ends, t - base)
        while i > 0 and base + self._ends[i - 1] > t:  # bisect on t - base, then settled on exact comparisons
            i -= 1
        while i < len(self._ends) and base + self._ends[i] <= t:
            i += 1
        return i

    def next_up(self, t: float) -> tuple[float, float]:
        if not self.up:
            return math.inf, math.inf
        base = 0.0 if self.cycle_s <= 0 else math.floor(t / self.cycle_s) * self.cycle_s
        i = self._first_ending_after(t, base)
        if i == len(self.up):
            if self.cycle_s <= 0:
                return math.inf, math.inf
            base, i = base + self.cycle_s, 0
        a, b = self.up[i]
        return max(t, base + a), base + b


def up_windows(schedule: Schedule, t0: float, t1: float) -> Iterator[tuple[float, float]]:
    """The schedule's up-intervals clipped to [t0, t1), in order (for figures, waiting times and tests)."""
    t = t0
    while t < t1:
        s, e = schedule.next_up(t)
        if s >= t1:
            return
        yield s, min(e, t1)
        t = e


def down_time_s(schedule: Schedule, t0: float, t1: float) -> float:
    """Seconds of [t0, t1) when the link is down: what a transfer posted at t0 can at most spend waiting for a
    window before t1."""
    return (t1 - t0) - sum(b - a for a, b in up_windows(schedule, t0, t1)) if t1 > t0 else 0.0


@dataclass(frozen=True)
class ContactPlan:
    """Every directed link's schedule and rate: ``links[(src, dst)] = (schedule, rate_bps or None)``; a pair not
    listed gets ``default`` at the link's own rate. ``why_down`` names, in an error, why a never-up link is down."""

    default: Schedule
    links: dict[tuple[int, int], tuple[Schedule, float | None]] = field(default_factory=dict)
    why_down: str = ""

    def schedule(self, src: int, dst: int) -> Schedule:
        return self.links.get((src, dst), (self.default, None))[0]

    def rate_bps(self, src: int, dst: int) -> float | None:
        return self.links.get((src, dst), (self.default, None))[1]


NEVER_UP = Windows(())


def contact_plan(cfg: LinkConfig) -> ContactPlan:
    """The plan a link config describes: ``periodic`` — ``Periodic(contact_period_s, contact_fraction)`` for every
    pair (today's rule; always up when the period is 0); ``orbit`` — ``orbital.windows.contact_plan(cfg.orbit)``,
    per link (a pair the orbit does not join is never up)."""
    if cfg.schedule == "periodic":
        return ContactPlan(Periodic(cfg.contact_period_s, cfg.contact_fraction))
    plan = orbit.contact_plan(cfg.orbit)
    links: dict[tuple[int, int], tuple[Schedule, float | None]] = {
        pair: (ALWAYS_UP if c.windows is None else Windows(c.windows, plan.cycle_s), c.rate_bps)
        for pair, c in plan.links.items()}
    G = len(cfg.orbit.stations)
    never = ", ".join(f"{G + k}-{G + j}" for k, j in plan.isl_never)
    why = (f"link.schedule=orbit joins ground stations 0..{G - 1} to satellites {G}..{plan.n_islands - 1} during "
           "passes" + ((" and ring neighbours over inter-satellite links while they see each other" +
                        (f" ({never}: never in sight)" if never else "")) if cfg.orbit.isl else
                       "; satellites talk to each other only with link.orbit.isl=true (ring neighbours)"))
    return ContactPlan(NEVER_UP, links, why)
