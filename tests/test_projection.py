"""Projections without training (islands_kit/projection/): the lock-step replay priced exactly as a training run of the
same config, against hand-computed timelines and the ring cost model; the decoupled event model against hand-computed
schedules; the utilisation orderings the seed-scale projection must show."""
from __future__ import annotations

import pytest

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.link import LinkModel, link_config, transfer_time_stats
from islands_kit.islands import HARDWARE
from islands_kit.model import MoETransformer
from islands_kit.presets import get_preset
from islands_kit.projection import (
    LockStepPlan,
    full_speed_steps,
    ideal_link,
    plan_for_config,
    price_lock_step,
    seed_scale_projection,
    simulate_decoupled,
    summary,
)
from islands_kit.run import run_experiment
from islands_kit.sync.diloco import sync_schedule

QUIET = dict(loss_prob=0.0, corrupt_prob=0.0, jitter_sigma=0.0, tail_prob=0.0)


# --- lock-step: the training loop's clock and wire, replayed with sizes ----------------------------------------------


@pytest.mark.parametrize("experiment, overrides", [
    ("two_site", {}),  # Streaming DiLoCo, P = 2, tau = 1, int4, the jittery heavy-tailed transpacific link
    ("two_site", {"sync": {"n_fragments": 1, "H": 5, "tau": 0, "codec": "int8"}, "link": {"loss_prob": 0.02}}),
    ("baseline", {}),  # DDP: the fp32 gradient all-reduced and waited for every step
])
def test_projection_prices_a_training_run_exactly(experiment: str, overrides: dict) -> None:
    """Same plan, same clock, same ledger, same link draws: a smoke training run and its projection agree on every
    byte per channel and per directed link, on every island's busy and idle seconds (hence the simulated wall clock
    and the utilisation) and on the fragment transfer times, to the last bit."""
    d = get_preset(experiment, "smoke").to_dict()
    for section, kv in overrides.items():
        d[section].update(kv)
    cfg = type(get_preset(experiment, "smoke")).from_dict(d)
    res = run_experiment(cfg)
    tr = price_lock_step(plan_for_config(cfg, MoETransformer(cfg.model)), LinkModel(cfg.link, seed=cfg.seed))
    got = summary(tr)
    assert tr.ledger.to_dict() == res.ledger
    assert got["sim_wall_clock_s"] == res.sim_wall_clock_s and got["compute_utilization"] == res.compute_utilization
    assert got["busy_s"] == [res.island_busy_s[i] for i in range(2)]
    assert got["idle_s"] == [res.island_idle_s[i] for i in range(2)]
    assert got["peak_link_bytes_per_s"] == res.peak_link_bytes_per_s
    if experiment == "two_site":
        assert transfer_time_stats(tr.ledger.durations("fragments")) == res.transfer_time_s
        assert max(got["idle_s"]) > 0  # the link cost something: the agreement is not between two idle clocks


def test_one_blocking_sync_idles_both_islands_by_its_transfer_time() -> None:
    nbytes, c, steps = 500 << 20, 1.0, 5
    d = 0.145 / 2 + nbytes * 8 / 25e9  # closed form of the quiet transpacific link
    plan = LockStepPlan([c, c], steps, [nbytes], [(1, 0)], tau=0)
    s = summary(price_lock_step(plan, LinkModel(link_config("transpacific-25g", **QUIET), seed=0)))
    assert s["idle_s"] == [pytest.approx(d, rel=1e-12), pytest.approx(d, rel=1e-12)]  # each waits for the other's half
    assert s["sim_wall_clock_s"] == pytest.approx(steps * c + d, rel=1e-12)
    assert s["compute_utilization"] == pytest.approx(steps * c / (steps * c + d), rel=1e-12)
    assert s["payload_bytes"] == 2 * nbytes and s["channels"]["fragments"]["transfers"] == 2
    # the same payload with two steps of overlap (tau = 2) costs nothing
    late = LockStepPlan([c, c], steps, [nbytes], [(1, 0)], tau=2)
    s = summary(price_lock_step(late, LinkModel(link_config("transpacific-25g", **QUIET), seed=0)))
    assert s["compute_utilization"] == 1.0 and s["idle_s"] == [0.0, 0.0]


def test_all_reduce_is_priced_as_the_ledgers_ring() -> None:
    """Three islands: each sync sends 2 (n - 1) S bytes in all, only along the ring k -> k + 1 (an all-gather would
    send n (n - 1) S, to every other island)."""
    S = 3001
    plan = LockStepPlan([1.0, 1.0, 1.0], 4, [S], [(2, 0), (4, 0)], tau=1, final_fragment_bytes=[S])
    led = price_lock_step(plan, LinkModel(ideal_link(), 0)).ledger
    assert led.bytes("fragments") == 2 * 2 * (3 - 1) * S  # the final sync is skipped: fragment 0 synced at the last step
    assert sorted(led.links) == [(0, 1), (1, 2), (2, 0)]


def test_routing_one_step_late_idles_only_the_faster_island() -> None:
    # island 0 (0.3 s) waits after step t for the loads island 1 (0.5 s) posted after step t - 1: its clock reads
    # (t - 1) * 0.5 from step 2 on; island 1 never waits
    ca, cb, steps = 0.3, 0.5, 12
    plan = LockStepPlan([ca, cb], steps, routing_bytes=4096, routing_delay=1)
    s = summary(price_lock_step(plan, LinkModel(ideal_link(), seed=0)))
    assert s["idle_s"] == [pytest.approx((steps - 1) * cb - steps * ca, abs=1e-9), 0.0]
    assert s["compute_utilization"] == pytest.approx(steps * (ca + cb) / ((steps - 1) * cb + steps * cb), abs=1e-9)


def test_plan_validation() -> None:
    with pytest.raises(ValueError, match="step_s: need one step time > 0"):
        LockStepPlan([1.0, 0.0], 4)
    with pytest.raises(ValueError, match=r"schedule: \(step, fragment\) pairs"):
        LockStepPlan([1.0, 1.0], 4, [10], [(5, 0)])
    with pytest.raises(ValueError, match="final_fragment_bytes: need one size per fragment"):
        LockStepPlan([1.0, 1.0], 4, [10], [(2, 0)], final_fragment_bytes=[10, 10])
    cfg = get_preset("eight_cell", "smoke")
    with pytest.raises(ValueError, match="sync.strategy, sync.mode"):
        plan_for_config(cfg, MoETransformer(cfg.model))


def test_plan_follows_the_config() -> None:
    cfg = get_preset("two_site", "smoke")
    plan = plan_for_config(cfg, MoETransformer(cfg.model))
    assert plan.schedule == sync_schedule(cfg.sync.H, cfg.sync.n_fragments, cfg.steps) and plan.tau == cfg.sync.tau
    assert plan.routing_bytes == 4 * cfg.model.n_layers * cfg.model.n_experts
    d = cfg.to_dict()
    d["sync"]["codec"] = "fp32"
    model = MoETransformer(cfg.model)
    fp32 = plan_for_config(type(cfg).from_dict(d), model)
    assert sum(fp32.fragment_bytes) == 4 * model.num_params()  # every parameter in exactly one fragment


def test_seed_scale_projection_streaming_beats_ddp() -> None:
    r = seed_scale_projection(n_windows=1, ddp_steps=2)
    a, h100 = r["assumptions"], HARDWARE["h100"]
    flops_per_token = 6 * 3e9 + 12 * 48 * 2048 * 4096  # islands.step_flops: with attention
    assert r["step_time_s"][0] == pytest.approx(flops_per_token * 2.4e6 / (160 * h100.peak_flops * h100.mfu), rel=1e-12)
    # int4 with a float32 scale per block of 128, as the codec encodes it
    assert r["fragment_bytes"] == 2e9 * 4 / 8 + 2e9 / 128 * 4 == get_codec("int4", 128).nbytes(2_000_000_000)
    assert r["routing_bytes"] == 48 * 256 * 4 and r["ddp_bytes_per_direction"] == 32e9 * 4
    assert a["batch_share"] == [0.6, 0.4]
    s, d = r["streaming"], r["ddp"]
    assert s["channels"]["fragments"]["bytes"] == 16 * 2 * r["fragment_bytes"]  # one window: each fragment once each way
    assert d["compute_utilization"] < 0.05 < 0.9 < s["link_efficiency"]
    assert s["compute_utilization"] > 10 * d["compute_utilization"]
    # 3:2 on equal GPUs: the faster site idles about a third of every step (less its last step, which waits for no one)
    assert s["utilization_infinite_link"] == pytest.approx((0.6 + 0.4) / (2 * 0.6), rel=0.02)
    bal = seed_scale_projection(n_windows=1, ddp_steps=1, batch_share="balanced", hardware=("h100", "a100"))
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
    assert r.payload_bytes == 4 * 2 * 1000 and r.channels["fragments"]["transfers"] == 4 * 2  # 1 upload + 1 broadcast
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
    for kw in ({}, dict(hardware=("h100", "a100"))):  # 3:2 on equal GPUs, 3:2 H100 + A100
        r = seed_scale_projection(n_windows=1, schedules=("streaming", "decoupled"), **kw)
        s, dec = r["streaming"], r["decoupled"]
        assert dec["compute_utilization"] > s["compute_utilization"] and dec["utilization_infinite_link"] == 1.0
        steps = [full_speed_steps(dec["span_s"], c) for c in r["step_time_s"]]
        assert dec["inner_steps"] == steps and max(steps) == r["assumptions"]["H"]  # each at its own pace
    # on a 1 Gbit/s link the fragments queue and bounded staleness holds the islands back (from the second window)
    slow = seed_scale_projection(n_windows=2, link_preset="consumer-1g", batch_share="balanced", schedules=("decoupled",))
    assert slow["decoupled"]["compute_utilization"] < 0.9 and slow["decoupled"]["goodput"] < 0.9
