"""Contact schedules per link (islands_kit/comm/link/contact.py): the periodic rule against its list-of-windows
reference, any list of windows per direction, and the guarantee every run relies on — no byte leaves a wire while
its link is down, so nothing is delivered that could not have been sent (simulator here; torch.distributed in
tests/test_contact_dist.py)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from islands_kit.comm.codecs import fp32_codec
from islands_kit.comm.link import (
    ALWAYS_UP,
    ContactPlan,
    LinkModel,
    Periodic,
    Windows,
    down_time_s,
    link_config,
    up_windows,
)
from islands_kit.comm.transport import LocalTransport
from islands_kit.config import LinkConfig

QUIET = dict(loss_prob=0.0, corrupt_prob=0.0, jitter_sigma=0.0, tail_prob=0.0)


def test_periodic_rule_equals_its_list_of_windows() -> None:
    periodic, listed = Periodic(60.0, 0.5), Windows(((0.0, 30.0),), 60.0)
    for t in np.random.default_rng(0).uniform(-200.0, 5000.0, 2000).tolist() + [0.0, 30.0, 59.999, 60.0, 90.0]:
        assert periodic.next_up(t) == pytest.approx(listed.next_up(t), rel=1e-12, abs=1e-9)
    assert Periodic(0.0, 1.0).always_up and Periodic(0.0, 1.0).next_up(7.5) == (7.5, math.inf)


def test_windows_walk_any_list() -> None:
    once = Windows(((10.0, 20.0), (20.0, 25.0), (40.0, 41.0)))  # absolute; touching windows merge
    assert once.up == ((10.0, 25.0), (40.0, 41.0))
    assert once.next_up(0.0) == (10.0, 25.0) and once.next_up(12.0) == (12.0, 25.0)
    assert once.next_up(25.0) == (40.0, 41.0) and once.next_up(41.0) == (math.inf, math.inf)
    cyc = Windows(((0.0, 5.0), (90.0, 100.0)), 100.0)  # up across the cycle boundary: [90, 105) in effect
    assert cyc.next_up(50.0) == (90.0, 100.0) and cyc.next_up(100.0) == (100.0, 105.0)
    assert cyc.next_up(-7.0) == (-7.0, 0.0) and cyc.next_up(1e6 + 6.0) == (1e6 + 90.0, 1e6 + 100.0)
    assert list(up_windows(cyc, 0.0, 210.0)) == [(0.0, 5.0), (90.0, 100.0), (100.0, 105.0), (190.0, 200.0),
                                                 (200.0, 205.0)]
    assert list(up_windows(ALWAYS_UP, 3.0, 9.0)) == [(3.0, 9.0)]
    assert down_time_s(cyc, 0.0, 210.0) == 210.0 - 35.0 and down_time_s(ALWAYS_UP, 0.0, 5.0) == 0.0
    assert down_time_s(Periodic(60.0, 0.5), 20.0, 200.0) == pytest.approx(180.0 - 10.0 - 30.0 - 30.0 - 20.0)
    assert Windows(()).next_up(0.0) == (math.inf, math.inf)


@pytest.mark.parametrize("up,cycle,match", [(((5.0, 5.0),), 0.0, "a < b"), (((0.0, 9.0), (8.0, 10.0)), 0.0, "disjoint"),
                                            (((0.0, 120.0),), 100.0, "within"), (((0.0, math.inf),), 0.0, "finite"),
                                            (((0.0, 1.0),), -1.0, "cycle_s")])
def test_windows_reject_bad_lists(up: tuple, cycle: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Windows(up, cycle)


def serialised_until(nbytes: int, rate_bps: float, schedule: Windows, t0: float) -> float:
    """When the last byte leaves if bytes move only inside the schedule's windows: walk them."""
    need = nbytes * 8 / rate_bps
    for a, b in up_windows(schedule, t0, math.inf):
        if need <= b - a:
            return a + need
        need -= b - a
    raise AssertionError("never")


# each direction its own windows (a few irregular passes repeating every 500 s), 0 <-> 2 always up
PLAN = ContactPlan(Periodic(0.0, 1.0), {
    (0, 1): (Windows(((10.0, 40.0), (130.0, 135.0), (300.0, 420.0)), 500.0), None),
    (1, 0): (Windows(((50.0, 60.0), (250.0, 251.5)), 500.0), None),
    (1, 2): (Windows(((0.0, 100.0),), 200.0), 50e6),
    (2, 1): (Windows(((100.0, 200.0),), 200.0), 50e6),
})


@pytest.mark.parametrize("method", ["chunked", "naive"])
def test_a_quiet_transfer_ends_where_its_own_windows_say(method: str) -> None:
    base = link_config("leo-satellite", method=method, contact_period_s=0.0, **QUIET)
    m = LinkModel(base, seed=0, contacts=PLAN)
    for (src, dst), t0, nbytes in [((0, 1), 0.0, 1_500_000_000), ((1, 0), 55.0, 400_000_000), ((1, 2), 90.0, 10 ** 8)]:
        sched, own = PLAN.links[(src, dst)]
        rate = own or base.bandwidth_bps
        tr = m.transfer(nbytes, t0, src, dst)
        assert isinstance(sched, Windows)
        assert tr.end_s == pytest.approx(serialised_until(nbytes, rate, sched, t0) + base.rtt_s / 2, rel=1e-9)
    assert m.transfer(1000, 7.0, 0, 2).end_s == pytest.approx(7.0 + base.rtt_s / 2 + 8000 / base.bandwidth_bps)


def _assert_only_inside_windows(m: LinkModel, src: int, dst: int) -> None:
    """Every interval the src -> dst wire serialised bytes lies inside one up-interval of that direction."""
    sched = m.contacts.schedule(src, dst)
    for a, b in m.busy_intervals(src, dst):
        s, e = sched.next_up(a)
        assert s == a and b <= e + 1e-9 * max(1.0, abs(e)), f"{src}->{dst}: bytes in [{a}, {b}) outside ({s}, {e})"


@pytest.mark.parametrize("overrides", [dict(method="chunked"), dict(method="naive", loss_prob=0.0005),
                                       dict(method="chunked", fec_parity=2, fec_group=8),
                                       dict(method="chunked", warm=False, idle_timeout_s=0.5)])
def test_no_byte_leaves_while_its_link_is_down(overrides: dict) -> None:
    """Random windows per direction, a noisy lossy link, transfers posted at random times (many inside gaps) in
    every direction: every wire's busy calendar lies inside its own windows and every payload arrives whole."""
    rng = np.random.default_rng(1)
    links = {}
    for pair in [(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)]:
        cuts = np.sort(rng.uniform(0.0, 1000.0, 8))
        links[pair] = (Windows(tuple(zip(cuts[0::2].tolist(), cuts[1::2].tolist())), 1000.0), None)
    cfg = link_config("leo-satellite", contact_period_s=0.0, **overrides)
    m = LinkModel(cfg, seed=3, contacts=ContactPlan(Windows(()), links))
    for _ in range(40):
        src, dst = rng.choice(3, size=2, replace=False).tolist()
        tr = m.transfer(int(rng.integers(1, 30 << 20)), float(rng.uniform(0.0, 3000.0)), src, dst)
        assert sorted(tr.delivered) == list(range(tr.n_chunks)) and not tr.holes
    for pair in links:
        _assert_only_inside_windows(m, *pair)


def test_orbit_link_delivers_only_through_passes_and_the_clock_shows_the_wait() -> None:
    """The leo-orbit link (windows from the orbit geometry): a quiet message's last byte leaves inside a pass of its
    own satellite (arrival − rtt/2), and an island that waits for one idles on the simulated clock."""
    cfg = link_config("leo-orbit", **QUIET)
    rtt = cfg.rtt_s
    tr = LocalTransport(5, LinkModel(cfg, seed=0))
    payload = fp32_codec().wrap(torch.arange(250_000, dtype=torch.float32))  # 1 MB
    rng = np.random.default_rng(0)
    for _ in range(30):
        sat = int(rng.integers(1, 5))
        src, dst = (0, sat) if rng.random() < 0.5 else (sat, 0)
        d = tr.send("model", src, dst, payload, float(rng.uniform(0.0, 86400.0)))
        sched = tr.link.contacts.schedule(src, dst)  # type: ignore[union-attr]
        left = d.arrival_s - rtt / 2
        s, e = sched.next_up(left - 1e-6)
        assert s <= left <= e + 1e-6
    for pair in [(0, k) for k in range(1, 5)] + [(k, 0) for k in range(1, 5)]:
        _assert_only_inside_windows(tr.link, *pair)  # type: ignore[arg-type]
    ex = LocalTransport(5, LinkModel(cfg, seed=0))
    h = ex.send_recv("model", {0: payload, 1: payload}, {0: 1, 1: 0, 2: 2, 3: 3, 4: 4})
    for i in (0, 1):
        ex.clock.compute(i, 1.0)
        h.wait(i)
    first_pass = ex.link.contacts.schedule(0, 1).next_up(0.0)[0]  # type: ignore[union-attr]
    assert first_pass > 3600.0 and ex.clock.now[0] > first_pass  # hours of waiting for the first pass
    assert ex.clock.utilization() < 1e-3


def test_every_periodic_config_keeps_todays_rule() -> None:
    for cfg in (LinkConfig(), link_config("leo-satellite")):
        plan = LinkModel(cfg).contacts
        assert plan.links == {} and plan.default == Periodic(cfg.contact_period_s, cfg.contact_fraction)
    quiet = dataclasses.replace(link_config("leo-satellite"), **QUIET)
    assert LinkModel(quiet).transfer(1000, 45.0, 0, 1).end_s == pytest.approx(60.0 + quiet.rtt_s / 2 + 8000 / 200e6)
