"""Seed-scale projection (islands_kit/projection.py): the event-driven schedule against hand-computed timelines, the
Streaming DiLoCo send schedule against sync.diloco's, and the utilisation orderings the projection must show."""
from __future__ import annotations

import pytest

from islands_kit.comm.link import LinkModel, link_config
from islands_kit.projection import (
    Send,
    codec_bytes,
    ddp_sends,
    full_speed_steps,
    ideal_link,
    routing_sends,
    seed_scale_projection,
    simulate_decoupled,
    simulate_schedule,
    streaming_sends,
)
from islands_kit.sync.diloco import streaming_schedule

QUIET = dict(loss_prob=0.0, corrupt_prob=0.0, jitter_sigma=0.0, tail_prob=0.0)


def test_one_blocking_send_idles_the_receiver_by_its_transfer_time() -> None:
    nbytes, c, steps = 500 << 20, 1.0, 5
    d = 0.145 / 2 + nbytes * 8 / 25e9  # closed form of the quiet transpacific link
    link = LinkModel(link_config("transpacific-25g", **QUIET), seed=0)
    r = simulate_schedule([c, c], steps, [Send(0, nbytes, 1, 0, 1)], link)
    assert r.idle_s == [pytest.approx(d, rel=1e-12), pytest.approx(d, rel=1e-12)]  # island 0 ends d before the wall
    assert r.sim_wall_clock_s == pytest.approx(steps * c + d, rel=1e-12)
    assert r.compute_utilization == pytest.approx(2 * steps * c / (2 * (steps * c + d)), rel=1e-12)
    assert r.channels["fragment"]["idle_s"] == pytest.approx(d, rel=1e-12)
    assert r.payload_bytes == nbytes and r.n_transfers == 1
    # the same payload with two steps of slack (deadline 3) costs nothing
    link = LinkModel(link_config("transpacific-25g", **QUIET), seed=0)
    r = simulate_schedule([c, c], steps, [Send(0, nbytes, 3, 0, 1)], link)
    assert r.compute_utilization == 1.0 and r.idle_s == [0.0, 0.0]


def test_schedule_validation() -> None:
    link = LinkModel(ideal_link(), seed=0)
    with pytest.raises(ValueError, match=r"sends\[0\]\.deadline_step: must be > step"):
        simulate_schedule([1.0, 1.0], 4, [Send(2, 10, 2, 0, 1)], link)
    with pytest.raises(ValueError, match=r"sends\[0\]: src and dst"):
        simulate_schedule([1.0, 1.0], 4, [Send(0, 10, 1, 1, 1)], link)
    with pytest.raises(ValueError, match="step_time_s"):
        simulate_schedule([1.0, 0.0], 4, [], link)
    with pytest.raises(ValueError, match="tau"):
        streaming_sends(10, 5, 2, 5, 100, 2)


def test_streaming_sends_follow_the_diloco_schedule() -> None:
    H, P, tau, steps = 50, 16, 2, 120
    sends = streaming_sends(steps, H, P, tau, 1234, 2)
    want = sorted(t - 1 for t, _ in streaming_schedule(H, P, steps))  # sync.diloco's 1-based (step, fragment) pairs
    for a, b in ((0, 1), (1, 0)):  # both directions carry every fragment once
        mine = [m for m in sends if (m.src, m.dst) == (a, b)]
        assert sorted(m.step for m in mine) == want
        assert all(m.deadline_step == m.step + 1 + tau and m.nbytes == 1234 for m in mine)
    assert len(streaming_sends(100, 50, 1, 0, 1, 2)) == 4  # plain DiLoCo: after steps 50 and 100, both directions
    three = ddp_sends(3, 7, 3)
    assert len(three) == 3 * 6 and all(m.deadline_step == m.step + 1 for m in three)
    assert all(m.deadline_step == m.step + 2 for m in routing_sends(4, 8, 2, tau=1))


@pytest.mark.parametrize("routing_tau", [0, 1])
def test_infinite_link_utilization_is_the_compute_balance(routing_tau: int) -> None:
    H, P, steps = 10, 4, 40
    sends = streaming_sends(steps, H, P, 1, 10 << 20, 2) + routing_sends(steps, 4096, 2, routing_tau)
    r = simulate_schedule([0.5, 0.5], steps, sends, LinkModel(ideal_link(), seed=0))
    assert r.compute_utilization == pytest.approx(1.0, abs=1e-9)
    # unequal step times: the faster island idles at deadlines; the slower one never waits
    r = simulate_schedule([0.5, 0.3], steps, sends, LinkModel(ideal_link(), seed=0))
    assert r.compute_utilization == pytest.approx((0.5 + 0.3) / (2 * 0.5), abs=1e-9)
    assert r.idle_s[0] == pytest.approx(0.0, abs=1e-9)


def test_overlap_tau_hides_a_slow_link() -> None:
    H, P, steps, frag = 10, 2, 60, 1_500_000_000  # ~0.5 s of serialisation per fragment at 25 Gbit/s
    utils = {}
    for tau in (0, 2):
        sends = streaming_sends(steps, H, P, tau, frag, 2) + routing_sends(steps, 49152, 2, 1)
        r = simulate_schedule([0.5, 0.5], steps, sends, LinkModel(link_config("transpacific-25g", loss_prob=0.01), 0))
        utils[tau] = r.compute_utilization
        again = simulate_schedule([0.5, 0.5], steps, sends, LinkModel(link_config("transpacific-25g", loss_prob=0.01), 0))
        assert again == r  # deterministic for a seed
    assert utils[0] < 0.95 * utils[2]
    assert utils[0] < 0.9 < utils[2]


def test_seed_scale_projection_streaming_beats_ddp() -> None:
    r = seed_scale_projection(n_windows=1, ddp_steps=2)
    a = r["assumptions"]
    assert r["step_time_s"][0] == pytest.approx(6 * 3e9 * 2.4e6 / (160 * 989e12 * 0.4), rel=1e-12)
    assert r["fragment_bytes"] == 32e9 / 16 * 4 / 8 + 32e9 / 16 / 128 * 2 == codec_bytes(2e9, 4, 128, 16)
    assert r["routing_bytes"] == 48 * 256 * 4 and r["ddp_bytes_per_direction"] == 32e9 * 4
    assert a["batch_share"] == [0.6, 0.4]
    s, d = r["streaming"], r["ddp"]
    assert s["utilization_infinite_link"] == pytest.approx((0.6 + 0.4) / (2 * 0.6), rel=1e-9)  # 3:2 on equal GPUs
    assert d["compute_utilization"] < 0.05 < 0.9 < s["link_efficiency"]
    assert s["compute_utilization"] > 10 * d["compute_utilization"]
    bal = seed_scale_projection(n_windows=1, ddp_steps=1, batch_share="balanced",
                                peak_flops=(989e12, 312e12))
    assert bal["step_time_s"][0] == pytest.approx(bal["step_time_s"][1], rel=1e-12)
    assert bal["streaming"]["utilization_infinite_link"] == pytest.approx(1.0, abs=1e-9)


# --- Decoupled DiLoCo (simulate_decoupled) -------------------------------------------------------------------------


def slow_link(seconds: float, nbytes: int = 1000) -> LinkModel:
    """A quiet link on which one ``nbytes`` payload on an idle wire takes ``seconds``: 0.1 s one way + serialisation."""
    return LinkModel(link_config("transpacific-25g", **QUIET, rtt_s=0.2, bandwidth_bps=nbytes * 8 / (seconds - 0.1)), 0)


def test_decoupled_on_an_ideal_link_never_idles() -> None:
    # H=4, P=2: offsets [2, 0] -> fragment 0 due at schedule steps 2, 6; fragment 1 at 4, 8; T_ref = 1 s, span 8 s
    r = simulate_decoupled([1.0, 2.0], [10, 30], 2, 4, 2, 1000, LinkModel(ideal_link(), 0))
    assert r.span_s == 8.0 and r.inner_steps == [8, 4] and r.tokens_per_island == [80, 120]
    assert r.idle_s == [0.0, 0.0] and r.compute_utilization == 1.0 and r.goodput == 1.0
    got = [(m.fragment, m.k, m.due_s, m.on_time, m.tokens) for m in r.merges]
    assert got == [(0, 1, 2.0, (0, 1), 2 * 10 + 1 * 30),  # island 1's step ending at t=2 counts
                   (1, 1, 4.0, (0, 1), 4 * 10 + 2 * 30),
                   (0, 2, 6.0, (0, 1), 4 * 10 + 2 * 30),
                   (1, 2, 8.0, (0, 1), 4 * 10 + 2 * 30)]
    assert [m.merged_s for m in r.merges] == pytest.approx([2.0, 4.0, 6.0, 8.0], abs=1e-9)  # 1000 B at 1e18 bit/s
    assert r.late_contributions == r.dropped_contributions == 0
    assert r.staleness_slack_s == pytest.approx(6.0 - 2.0, abs=1e-9)  # merge k-1 lands H = 4 steps before k is due
    assert r.payload_bytes == 4 * 2 * 1000 and r.channels["fragment"]["transfers"] == 4 * 2  # 1 upload + 1 broadcast
    three = simulate_decoupled([1.0, 2.0, 3.0], [1, 1, 1], 2, 4, 2, 1000, LinkModel(ideal_link(), 0))
    assert three.payload_bytes == 4 * 2 * (3 - 1) * 1000 and three.inner_steps == [8, 4, 2]  # 2(n-1)S per merge
    assert three.compute_utilization == 1.0 and all(m.on_time == (0, 1, 2) for m in three.merges)


def test_bounded_staleness_idles_an_island_on_a_slow_link() -> None:
    # one fragment (H=2, P=1) due at t = 2, 4, 6, 8; every payload takes d = 2.3 s, longer than the 2 s between merges.
    # merge 1 waits for island 1's upload (2 + d); its broadcast reaches island 1 at 2 + 2d = 6.6, so island 1, which
    # owes contribution 2 from t=4, finishes step 5 and idles from 5 on; island 0 applies merge 1 at 5, sends 2 at once,
    # and idles from 7 (contribution 3, due at 6, waits for merge 2 = island 1's contribution 2 sent at 6.6 + d).
    d = 2.3
    r = simulate_decoupled([1.0, 1.0], [10, 30], 4, 2, 1, 1000, slow_link(d))
    assert [m.merged_s for m in r.merges] == pytest.approx([2 + d, 2 + 3 * d, 2 + 5 * d, 2 + 7 * d], rel=1e-9)
    assert all(m.on_time == (0, 1) for m in r.merges)
    assert r.idle_s == pytest.approx([8 - 7, 8 - 5], rel=1e-9) and r.inner_steps == [7, 5]
    assert r.compute_utilization == pytest.approx((7 + 5) / 16, rel=1e-9)
    assert r.goodput == pytest.approx((7 * 10 + 5 * 30) / (8 * 10 + 8 * 30), rel=1e-9)
    assert r.staleness_slack_s == pytest.approx(8 - (2 + 6 * d), rel=1e-9)  # merge 3 reaches island 1 at 2 + 6d
    # a round trip (2d) shorter than the 2 s between merges never holds anyone back; one a little longer does
    fast = simulate_decoupled([1.0, 1.0], [10, 30], 4, 2, 1, 1000, slow_link(0.9))
    assert fast.idle_s == [0.0, 0.0] and fast.goodput == 1.0
    # d = 1.1: merge 2 waits for island 1's contribution 2, sent at step boundary 5 (merge 1 reached it at 2 + 2d =
    # 4.2, mid-step), so merge 2's broadcast reaches it at 5 + 2d = 7.2, after it finished step 7: idle 0.2 s
    edge = simulate_decoupled([1.0, 1.0], [10, 30], 4, 2, 1, 1000, slow_link(1.1))
    assert edge.idle_s == pytest.approx([0.0, 0.2], rel=1e-9) and edge.inner_steps == [8, 7]


def test_quorum_and_grace_decide_who_is_late() -> None:
    # one fragment due at t = 2, 4; island 1's upload takes 0.3 s, island 0's none
    r = simulate_decoupled([1.0, 1.0], [1, 1], 2, 2, 1, 1000, slow_link(0.3), quorum=1, grace_s=0.0)
    assert [(m.merged_s, m.on_time, m.late_in) for m in r.merges] == [(2.0, (0,), ()), (4.0, (0,), ((1, 1),))]
    assert (r.late_contributions, r.late_merged, r.dropped_contributions) == (2, 1, 1)  # the last one has no next merge
    assert r.compute_utilization == 1.0 and r.goodput == pytest.approx((4 + 2) / 8, rel=1e-12)
    r = simulate_decoupled([1.0, 1.0], [1, 1], 2, 2, 1, 1000, slow_link(0.3), quorum=1, grace_s=1.0)
    assert [m.on_time for m in r.merges] == [(0, 1), (0, 1)] and r.late_contributions == 0 and r.goodput == 1.0
    assert [m.merged_s for m in r.merges] == pytest.approx([2.3, 4.3], rel=1e-9)  # everyone in: no need to wait on
    with pytest.raises(ValueError, match="quorum: must be an integer in"):
        simulate_decoupled([1.0, 1.0], [1, 1], 2, 2, 1, 1000, slow_link(0.3), quorum=3)
    with pytest.raises(ValueError, match="grace_s: must be >= 0"):
        simulate_decoupled([1.0, 1.0], [1, 1], 2, 2, 1, 1000, slow_link(0.3), grace_s=-1.0)


def test_seed_scale_decoupled_beside_lock_step() -> None:
    for kw in ({}, dict(peak_flops=(989e12, 312e12))):  # 3:2 on equal GPUs, 3:2 H100 + A100
        r = seed_scale_projection(n_windows=1, schedules=("streaming", "decoupled"), **kw)
        s, dec = r["streaming"], r["decoupled"]
        assert dec["compute_utilization"] > s["compute_utilization"] and dec["utilization_infinite_link"] == 1.0
        steps = [full_speed_steps(dec["span_s"], c) for c in r["step_time_s"]]
        assert dec["inner_steps"] == steps and max(steps) == r["assumptions"]["H"]  # each at its own pace
    # on a 1 Gbit/s link the fragments queue and bounded staleness holds the islands back (from the second window)
    slow = seed_scale_projection(n_windows=2, link_preset="consumer-1g", batch_share="balanced", schedules=("decoupled",))
    assert slow["decoupled"]["compute_utilization"] < 0.9 and slow["decoupled"]["goodput"] < 0.9
