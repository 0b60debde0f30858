"""The ``orbital`` experiment's own pieces: eclipse throttling of the satellites' compute and what its run reports
about the contact windows (bytes per link and per window, time spent waiting for a window).

The experiment (its row of ``config/experiment_table.py``, islands from ``settings.py``): a ground station's
island (island 0, where the decoupled synchroniser and the global model sit) and training satellites (islands 1..4)
in a ring of low Earth orbit (``windows.py``), decoupled DiLoCo between them. A satellite's outer gradients reach the
station only during its passes (``link.orbit.isl=false``) or, with ``link.orbit.isl=true``, whenever a satellite
joined to it by inter-satellite links that are up is in a pass (relayed). Both apply whenever
``link.schedule=orbit``, the orbital experiment's link; every other run has no orbit section.

Eclipse. A satellite in the Earth's shadow computes at ``link.orbit.eclipse_throttle`` of its sunlit speed
(``windows.compute_factor``): an inner step that starts in shadow takes ``step / throttle`` on its clock (the
``step_seconds`` hook point, ``attach``), so the satellites run at different paces — what decoupled mode is for. It
applies when the link flies (``link.orbit.eclipse=auto``, the default) or, with ``eclipse=on``, on an always-up ground
link too (the control that separates the eclipse from the passes: ``settings.CONTROLS``).

Equal processed tokens. The decoupled schedule plans ``steps`` ticks; an island computes the inner steps that fit in
them on its own clock, so a throttled satellite processes fewer than the ticks. ``inner_steps`` counts them from the
config alone (the driver's loop on the clock, with this module's eclipse), and ``steps_for_tokens`` finds the fewest
ticks whose processed tokens reach a budget: what a study's ``equal_tokens`` knob plans (protocol/knobs.py).

The design's units (result.json's ``orbit_budget``, for every run that flies or throttles): the orbital time the run
spanned (simulated seconds x ``time_compression``, in days), the bytes that crossed the ground link (station <->
satellite) and the inter-satellite links (a relayed transfer's bytes times the ring links between its satellite and
the one in a pass when its last byte left, ``windows.relay_hops``), and the seconds the ground baseline's hardware
(the reference experiment's islands at this preset, synchronous: its slowest island's step, compute only) takes for
the same tokens.

Waiting for a window. A transfer posted at ``s`` that arrives at ``e`` waited ``down_time_s(schedule, s, e)`` of
that span for its link to come up (the rest is serialisation, latency and resends). Nobody idles for it in
decoupled mode: the island goes on training, and the wait shows as staleness (late or skipped merges) instead.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

from islands_kit.comm.link.contact import ContactPlan, contact_plan, down_time_s, up_windows
from islands_kit.config import ExperimentConfig
from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.config.presets import get_preset
from islands_kit.model.transformer import active_params
from islands_kit.orbital import windows
from islands_kit.sync.hooks import Hooks
from islands_kit.train.drivers import LockstepDriver
from islands_kit.train.islands import step_seconds
from islands_kit.train.strategies import DRIVERS

Transfer = Sequence[Any]  # a ledger timeline row: (start_s, end_s, bytes, src, dst, channel)


def on_orbit(cfg: ExperimentConfig) -> bool:
    """Does this run fly (its link's contact windows come from the orbit model)?"""
    return cfg.link.schedule == "orbit"


def eclipses(cfg: ExperimentConfig) -> bool:
    """Are the satellites' islands throttled in shadow (``link.orbit.eclipse``: auto when the run flies, on, off)?"""
    o = cfg.link.orbit
    return o.eclipse_throttle < 1.0 and (o.eclipse == "on" or (o.eclipse == "auto" and on_orbit(cfg)))


def attach(hooks: Hooks, cfg: ExperimentConfig, local_islands: Sequence[int] = ()) -> None:
    """The orbit on a run's hook points: every satellite island computes slower in eclipse when ``eclipses`` says so
    (``step_seconds``, module doc), and a run that flies gets result.json's ``orbit`` section (``result``)."""
    o = cfg.link.orbit
    G = len(o.stations)

    factors: dict[int, Callable[[float], float]] = {}  # per satellite, its eclipses looked up once (the config is fixed)

    def eclipse(island: int, start_s: float, seconds: float) -> float:
        if not G <= island < G + o.n_satellites:
            return seconds
        if island not in factors:
            factors[island] = windows.compute_factors(o, island - G)
        return seconds / factors[island](start_s)

    if eclipses(cfg):
        hooks.on("step_seconds", eclipse)
    if on_orbit(cfg) or eclipses(cfg):
        hooks.on("result", lambda timeline, span_s: result_fields(cfg, timeline, span_s))


def step_times(cfg: ExperimentConfig) -> tuple[dict[int, float], float]:
    """Every island's step time (its hardware, its straggler factor) and the decoupled schedule's tick (the fastest),
    as ``train/experiment.py`` sets them."""
    active = active_params(cfg.model)
    step_s = {j: (cfg.faults.straggler_factor if cfg.faults.straggler_island == j else 1.0)
              * step_seconds(ic, cfg.model, active) for j, ic in enumerate(cfg.islands)}
    return step_s, min(step_s.values())


def inner_steps(cfg: ExperimentConfig, ticks: int | None = None) -> dict[int, int]:
    """The inner steps each island of a decoupled run computes in ``ticks`` ticks (default ``cfg.steps``): the
    driver's loop (``DecoupledDriver.step``) on each island's clock, a step throttled in eclipse as ``attach`` makes
    it. A lock-step run computes ``ticks`` on every island."""
    ticks = cfg.steps if ticks is None else ticks
    if DRIVERS[cfg.sync.mode] is LockstepDriver:
        return {j: ticks for j in range(len(cfg.islands))}
    hooks = Hooks()
    attach(hooks, cfg)
    step_s, tick_s = step_times(cfg)
    end_s = ticks * tick_s * (1 + 1e-9)
    out = {}
    for j, s in step_s.items():
        now, n = 0.0, 0
        while now + s <= end_s:
            now += hooks.step_seconds(j, now, s)
            n += 1
        out[j] = n
    return out


def processed_tokens(cfg: ExperimentConfig, ticks: int | None = None) -> int:
    """Training tokens the islands process in ``ticks`` ticks (result.json's ``tokens`` for that run)."""
    return sum(n * cfg.islands[j].batch_size * cfg.model.seq_len for j, n in inner_steps(cfg, ticks).items())


def steps_for_tokens(cfg: ExperimentConfig, tokens: int) -> int:
    """The fewest ticks whose processed tokens reach ``tokens`` (one tick past them at most: under 1% from 100
    ticks up); ``cfg.steps`` itself when nothing throttles."""
    if tokens <= 0:
        raise ValueError(f"tokens: must be > 0 (got {tokens})")
    lo, hi = 1, max(1, cfg.steps)
    while processed_tokens(cfg, hi) < tokens:
        lo, hi = hi + 1, 2 * hi
        if hi > 1 << 24:
            raise ValueError(f"tokens: {tokens} are not reached in {hi} ticks (does an island compute at all?)")
    while lo < hi:
        mid = (lo + hi) // 2
        if processed_tokens(cfg, mid) >= tokens:
            hi = mid
        else:
            lo = mid + 1
    return lo


def ground_baseline_s(cfg: ExperimentConfig, tokens: int) -> float:
    """Seconds the ground baseline's hardware takes to train ``tokens``: the reference experiment's islands at
    ``cfg``'s preset, with ``cfg``'s model, in lock step (each step as long as its slowest island's compute)."""
    ref = next(r.name for r in EXPERIMENT_TABLE.values() if r.reference)
    base = get_preset(ref, cfg.preset)
    active = active_params(cfg.model)
    step = max(step_seconds(ic, cfg.model, active) for ic in base.islands)
    per_step = sum(ic.batch_size for ic in base.islands) * cfg.model.seq_len
    return tokens / per_step * step


def budget(cfg: ExperimentConfig, timeline: Iterable[Transfer], span_s: float) -> dict[str, Any]:
    """result.json's ``orbit_budget``: the run in the design's units (module doc)."""
    o = cfg.link.orbit
    G = len(o.stations)
    ground = isl = 0
    for _start, end, nbytes, src, dst, _channel in timeline:
        src, dst, nbytes = int(src), int(dst), int(nbytes)
        if src == dst or (src < G and dst < G):
            continue
        if src >= G and dst >= G:  # between ring neighbours, over their own link
            isl += nbytes
            continue
        ground += nbytes
        if on_orbit(cfg) and o.isl:
            sat, station = (src, dst) if src >= G else (dst, src)
            isl += nbytes * (windows.relay_hops(o, station, sat - G, float(end)) or 0)
    tokens = processed_tokens(cfg)
    orbital_s = span_s * o.time_compression
    return {"time_compression": o.time_compression, "orbital_s": orbital_s, "orbital_days": orbital_s / 86400.0,
            "tokens": tokens, "ground_link_bytes": ground, "isl_bytes": isl,
            "ground_baseline_s": ground_baseline_s(cfg, tokens),
            "ground_baseline_days": ground_baseline_s(cfg, tokens) / 86400.0}


def _window_of(schedule: Any, start: float, end: float) -> tuple[float, float] | None:
    """The contact window a transfer posted at ``start`` and arrived at ``end`` finished in: the last up-interval
    that opened by ``end`` (its last byte left then; the arrival adds half a round trip). None: an always-up link."""
    if schedule.always_up:
        return None
    last = None
    t = start
    while True:
        s, e = schedule.next_up(t)
        if s > end or not math.isfinite(s):
            return last
        last, t = (s, e), e


def contact_report(cfg: ExperimentConfig, timeline: Iterable[Transfer], span_s: float) -> dict[str, Any]:
    """result.json's ``orbit`` section: bytes per directed link and per contact window, time spent waiting for a
    window (total, per link, and the longest), and every satellite's ground windows over the run (for the figure)."""
    plan: ContactPlan = contact_plan(cfg.link)
    n = len(cfg.islands)
    by_link: dict[str, int] = {}
    by_window: dict[tuple[str, float, float], int] = {}
    wait_by_link: dict[str, float] = {}
    longest = 0.0
    for start, end, nbytes, src, dst, _channel in timeline:
        if src == dst:
            continue
        key = f"{src}->{dst}"
        by_link[key] = by_link.get(key, 0) + int(nbytes)
        sched = plan.schedule(int(src), int(dst))
        w = _window_of(sched, float(start), float(end))
        if w is not None:
            by_window[(key, w[0], w[1])] = by_window.get((key, w[0], w[1]), 0) + int(nbytes)
        waited = down_time_s(sched, float(start), float(end))
        wait_by_link[key] = wait_by_link.get(key, 0.0) + waited
        longest = max(longest, waited)
    G = len(cfg.link.orbit.stations)
    ground = {str(i): [[round(a, 9), round(b, 9)] for a, b in up_windows(plan.schedule(i, 0), 0.0, span_s)]
              for i in range(G, n)}
    per_window = [{"link": k, "start_s": round(a, 9), "end_s": round(b, 9), "bytes": v}
                  for (k, a, b), v in sorted(by_window.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
    wait_total = sum(wait_by_link.values())
    return {
        "orbit_period_s": windows.period_s(cfg.link.orbit) / cfg.link.orbit.time_compression,
        "time_compression": cfg.link.orbit.time_compression,
        "eclipse_fraction": windows.eclipse_fraction(cfg.link.orbit),
        "isl": cfg.link.orbit.isl,
        "bytes_per_link": by_link,
        "bytes_per_window": per_window,
        "windows_used": len(per_window),
        "mean_bytes_per_window": (sum(by_window.values()) / len(by_window)) if by_window else 0.0,
        "window_wait_s": wait_total,
        "window_wait_s_per_link": {k: round(v, 9) for k, v in sorted(wait_by_link.items())},
        "longest_window_wait_s": longest,
        "ground_windows": ground,
    }


def result_fields(cfg: ExperimentConfig, timeline: Iterable[Transfer], span_s: float) -> dict[str, Any]:
    """``orbit_budget`` (``budget``) for a run that flies or throttles, and ``orbit`` (``contact_report``) for one
    that flies; nothing for any other run (result.json's keys stay as they were)."""
    timeline = list(timeline)
    out: dict[str, Any] = {}
    if on_orbit(cfg) or eclipses(cfg):
        out["orbit_budget"] = budget(cfg, timeline, span_s)
    if on_orbit(cfg):
        out["orbit"] = contact_report(cfg, timeline, span_s)
    return out


def up_share(wins: Sequence[Sequence[float]], span_s: float) -> float:
    """Share of ``[0, span_s)`` a satellite's ground link is up, from ``contact_report``'s ``ground_windows``."""
    return sum(b - a for a, b in wins) / span_s if span_s > 0 and math.isfinite(span_s) else 0.0


def orbit_summary(result: Mapping[str, Any]) -> str:
    """What an orbital run's ``orbit`` section says, in a few lines (the notebook prints it)."""
    o = result["orbit"]
    span = float(result["sim_wall_clock_s"])
    lines = [f"orbit: period {o['orbit_period_s']:.3g} simulated s (1 s = {o['time_compression']:.3g} orbital s), "
             f"{100 * o['eclipse_fraction']:.0f}% of it in eclipse; inter-satellite links: {o['isl']}",
             f"transfers waited {o['window_wait_s']:.3g} simulated s for a window in all (longest "
             f"{o['longest_window_wait_s']:.3g} s); {o['windows_used']} windows carried bytes, "
             f"{o['mean_bytes_per_window']:,.0f} bytes each on average"]
    steps = {str(k): v for k, v in result["inner_steps"].items()}  # str keys as read back, int as returned
    for sat, wins in sorted(o["ground_windows"].items(), key=lambda kv: int(kv[0])):
        up, down = o["bytes_per_link"].get(f"{sat}->0", 0), o["bytes_per_link"].get(f"0->{sat}", 0)
        lines.append(f"  island {sat}: {len(wins)} windows, link up {100 * up_share(wins, span):.1f}% of the run; "
                     f"{up:,} bytes up, {down:,} down; {steps[sat]} inner steps")
    return "\n".join(lines)
