"""Projections without training (islands_kit/projection/): the lock-step replay priced exactly as a training run of the
same config, against hand-computed timelines and the ring cost model; the decoupled replay priced exactly as a
training run too, and against hand-computed schedules; the utilisation orderings the seed-scale projection must show."""
from __future__ import annotations

import dataclasses

import pytest

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.link import LinkModel, link_config, transfer_time_stats
from islands_kit.config import SyncConfig, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.model import MoETransformer
from islands_kit.projection import (
    DecoupledPlan,
    LockStepPlan,
    decoupled_plan_for_config,
    ideal_link,
    plan_for_config,
    price_decoupled,
    price_lock_step,
    seed_scale_projection,
    summary,
)
from islands_kit.run import run_experiment
from islands_kit.sync.decoupled_spec import DecoupledConfig
from islands_kit.sync.diloco_spec import DiLoCoConfig
from islands_kit.train.islands import HARDWARE

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
    plan = LockStepPlan([c, c], steps, [nbytes], H=3, tau=0)  # one sync, after step 3
    s = summary(price_lock_step(plan, LinkModel(link_config("transpacific-25g", **QUIET), seed=0)))
    assert s["idle_s"] == [pytest.approx(d, rel=1e-12), pytest.approx(d, rel=1e-12)]  # each waits for the other's half
    assert s["sim_wall_clock_s"] == pytest.approx(steps * c + d, rel=1e-12)
    assert s["compute_utilization"] == pytest.approx(steps * c / (steps * c + d), rel=1e-12)
    assert s["payload_bytes"] == 2 * nbytes and s["channels"]["fragments"]["transfers"] == 2
    # the same payload with two steps of overlap (tau = 2) costs nothing
    late = LockStepPlan([c, c], steps, [nbytes], H=3, tau=2)
    s = summary(price_lock_step(late, LinkModel(link_config("transpacific-25g", **QUIET), seed=0)))
    assert s["compute_utilization"] == 1.0 and s["idle_s"] == [0.0, 0.0]


def test_all_reduce_is_priced_as_the_ledgers_ring() -> None:
    """Three islands: each sync sends 2 (n - 1) S bytes in all, only along the ring k -> k + 1 (an all-gather would
    send n (n - 1) S, to every other island)."""
    S = 3001
    plan = LockStepPlan([1.0, 1.0, 1.0], 4, [S], H=2, tau=1, final_fragment_bytes=[S])  # syncs after steps 2 and 4
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
    with pytest.raises(ValueError, match="H, fragment_bytes: fragments need a window H >= 1"):
        LockStepPlan([1.0, 1.0], 4, [10])
    with pytest.raises(ValueError, match="H, fragment_bytes: fragments need a window H >= 1"):
        LockStepPlan([1.0, 1.0], 4, [10], H=2, gradient_bytes=8)
    with pytest.raises(ValueError, match="final_fragment_bytes: need one size per fragment"):
        LockStepPlan([1.0, 1.0], 4, [10], H=2, final_fragment_bytes=[10, 10])
    cfg = get_preset("eight_cell", "smoke")
    with pytest.raises(ValueError, match="sync.strategy, sync.mode"):
        plan_for_config(cfg, MoETransformer(cfg.model))


def test_plan_follows_the_config() -> None:
    cfg = get_preset("two_site", "smoke")
    plan = plan_for_config(cfg, MoETransformer(cfg.model))
    assert (plan.H, plan.tau, len(plan.fragment_bytes)) == (cfg.sync.H, cfg.sync.tau, cfg.sync.n_fragments)
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


# --- Decoupled DiLoCo: training's own schedule, replayed on stand-in fragments ----------------------------------------


@pytest.mark.parametrize("sets", [
    {},  # two sites at equal speed on the jittery transpacific link, int4, P = 2
    {"faults.straggler_island": 1, "faults.straggler_factor": 2.0, "sync.quorum": 1, "sync.grace_s": 0.0},
    {"link.loss_prob": 0.05, "sync.quorum": 1, "sync.grace_s": 0.0, "sync.decoupled.late": "drop", "sync.H": 4},
])
def test_decoupled_projection_prices_a_training_run_exactly(sets: dict) -> None:
    """The projection runs training's DecoupledDiLoCo and driver loop on stand-ins: a smoke decoupled run and its
    projection agree on the ledger, every merge (times, who was on time, late, carried, not ready), every island's
    steps, busy and idle seconds and the goodput, to the last bit."""
    cfg = apply_overrides(get_preset("two_site", "smoke"), {"threads": 1, "progress": False, "sync.mode": "decoupled",
                                                            **sets})
    res = run_experiment(cfg)
    got = price_decoupled(decoupled_plan_for_config(cfg, MoETransformer(cfg.model)), LinkModel(cfg.link, seed=cfg.seed))
    assert got.ledger.to_dict() == res.ledger
    assert got.merges == res["decoupled"]["merges"] and len(got.merges) > 4
    assert {i: k for i, k in enumerate(got.inner_steps)} == res["inner_steps"]
    assert got.busy_s == [res.island_busy_s[i] for i in range(2)] and got.idle_s == [res.island_idle_s[i] for i in range(2)]
    assert got.sim_wall_clock_s == res.sim_wall_clock_s and got.compute_utilization == res.compute_utilization
    assert got.goodput == res["goodput"] and got.not_ready_rounds == res["decoupled"]["not_ready_rounds"]


def _plan(step_s: list[float], steps: int, H: int, P: int, **sync: object) -> DecoupledPlan:
    s = SyncConfig(strategy="diloco", mode="decoupled", H=H, n_fragments=P, codec="fp32", routing_sync=False,
                   quorum=len(step_s), grace_s=0.0, diloco=DiLoCoConfig(final_codec=""))
    return DecoupledPlan(step_s, [10, 30][:len(step_s)], steps, [1000] * P, dataclasses.replace(s, **sync))


def slow_link(seconds: float, nbytes: int = 4000) -> LinkModel:
    """A quiet link on which one ``nbytes`` payload on an idle wire takes ``seconds``: 0.1 s one way + serialisation."""
    return LinkModel(link_config("transpacific-25g", **QUIET, rtt_s=0.2, bandwidth_bps=nbytes * 8 / (seconds - 0.1)), 0)


def test_decoupled_on_an_ideal_link_never_waits() -> None:
    # H=4, P=2: fragment 0 due at ticks 2, 6; fragment 1 at 4, 8 (T_ref = 1 s); island 1 steps every other tick.
    # The steady state: the round due at tick 8 merges after it, so three merges are applied
    r = price_decoupled(_plan([1.0, 2.0], 8, 4, 2), LinkModel(ideal_link(), 0), final=False)
    assert r.inner_steps == [8, 4] and r.tokens_per_island == [80, 120] and r.span_s == 8.0
    assert r.idle_s == [0.0, 0.0] and r.compute_utilization == 1.0 and r.not_ready_rounds == 0
    assert [(m["fragment"], m["step"], m["on_time"], m["tokens"]) for m in r.merges] == [
        (0, 2, [0, 1], 2 * 10 + 1 * 30), (1, 4, [0, 1], 4 * 10 + 2 * 30), (0, 6, [0, 1], 4 * 10 + 2 * 30)]
    # island 1's 4 uploads and the 3 broadcasts to it, each a fragment of 1000 fp32 values; island 0 shares the
    # synchroniser's process, so nothing of its crosses the link
    assert r.payload_bytes == 7 * 4000 and r.channels["fragments"]["transfers"] == 7
    # with the closing merges: the round due at tick 8 lands, then fragment 0 (steps since tick 6) merges once more;
    # fragment 1, merged at tick 8, has nothing new
    closed = price_decoupled(_plan([1.0, 2.0], 8, 4, 2), LinkModel(ideal_link(), 0))
    assert [(m["fragment"], m.get("final", False)) for m in closed.merges] == [(0, False), (1, False), (0, False),
                                                                               (1, False), (0, True)]


def test_a_slow_link_skips_rounds_instead_of_idling() -> None:
    # one fragment (H=2) due at ticks 2, 4, 6, 8; every payload takes 2.3 s. Round 0 merges when island 1's upload
    # arrives (4.3); island 0 lands it at its step boundary 5, island 1 at 7 (broadcast at 6.6). So at tick 4 neither
    # is ready (round 1 skipped, logged first: merges apply in time order), at 6 island 1 is not (quorum 2 missed:
    # island 0's part carried, and it hears so at once); at 8 both send again and that merge comes after the window.
    # Nobody idles: an island that is not ready skips a round and its progress rides in its next contribution.
    r = price_decoupled(_plan([1.0, 1.0], 8, 2, 1), slow_link(2.3), final=False)
    assert r.inner_steps == [8, 8] and r.idle_s == [0.0, 0.0] and r.compute_utilization == 1.0
    assert r.not_ready_rounds == 2 + 1
    assert [(m["round"], m["quorum_met"], m["not_ready"], m["late"]) for m in r.merges] == [
        (1, False, [0, 1], []), (0, True, [], []), (2, False, [1], [0])]
    assert r.merges[1]["merge_s"] == pytest.approx(4.3, rel=1e-9) and r.merges[1]["on_time"] == [0, 1]
    assert r.payload_bytes == 3 * 4000  # island 1's uploads at 2 and 8, the broadcast to it of round 0


def test_quorum_and_grace_decide_who_is_late() -> None:
    # one fragment due at ticks 2, 4; island 1's upload takes 0.3 s, island 0's none. Quorum 1, no grace: island 0
    # merges alone at 2.0, island 1's part is late and carried into the next merge (at 4.0), where it is late again
    r = price_decoupled(_plan([1.0, 1.0], 4, 2, 1, quorum=1), slow_link(0.3), final=False)
    assert [(m["merge_s"], m["on_time"], m["late"], m["carried_in"]) for m in r.merges] == [
        (2.0, [0], [1], []), (4.0, [0], [1], [1])]
    assert r.late_contributions == 2 and r.dropped_contributions == 0 and r.goodput == 1.0
    drop = price_decoupled(_plan([1.0, 1.0], 4, 2, 1, quorum=1, decoupled=DecoupledConfig(late="drop")),
                           slow_link(0.3), final=False)
    assert drop.dropped_contributions == 2 and drop.dropped_tokens == 2 * 2 * 30 and drop.goodput < 1.0
    # a grace of 1 s takes everyone in (with the closing merges: the round due at 4 merges after the window, and
    # nothing is left for a final one)
    waits = price_decoupled(_plan([1.0, 1.0], 4, 2, 1, quorum=1, grace_s=1.0), slow_link(0.3))
    assert [m["on_time"] for m in waits.merges] == [[0, 1], [0, 1]] and waits.late_contributions == 0
    assert [m["merge_s"] for m in waits.merges] == pytest.approx([2.3, 4.3], rel=1e-9)
    with pytest.raises(ValueError, match="sync.quorum: must be in"):
        _plan([1.0, 1.0], 4, 2, 1, quorum=3)
    with pytest.raises(ValueError, match="sync: the plan prices decoupled diloco"):
        _plan([1.0, 1.0], 4, 2, 1, mode="lockstep")


def test_seed_scale_decoupled_beside_lock_step() -> None:
    for kw in ({}, dict(hardware=("h100", "a100"))):  # 3:2 on equal GPUs, 3:2 H100 + A100
        r = seed_scale_projection(n_windows=1, schedules=("streaming", "decoupled"), **kw)
        s, dec = r["streaming"], r["decoupled"]
        assert dec["compute_utilization"] == 1.0 > s["compute_utilization"]  # decoupled islands never wait
        steps = [int(dec["span_s"] / c + 1e-9) for c in r["step_time_s"]]
        assert dec["inner_steps"] == steps and max(steps) == r["assumptions"]["H"]  # each at its own pace
    # on a 1 Gbit/s link the fragments queue: islands are not ready for their rounds (none on an infinite link)
    slow = seed_scale_projection(n_windows=2, link_preset="consumer-1g", batch_share="balanced", schedules=("decoupled",))
    assert slow["decoupled"]["not_ready_rounds"] > 0 == slow["decoupled"]["not_ready_rounds_infinite_link"]


def test_the_projection_holds_no_copy_of_the_drivers_schedule() -> None:
    """The projection runs training's drivers (train/drivers.py) on stand-ins: none of its modules steps a clock,
    waits for a transfer or calls a strategy's per-step hooks itself."""
    from pathlib import Path

    import islands_kit.projection as projection

    hooks = (".compute(", ".wait(", ".land(", ".island_step_done(", ".after_tick(", ".after_inner_step(",
             ".reduce_gradients(", "price_all_reduce(")
    # published.py prices the papers' own schedule (reductions overlapped with the backward pass, which no driver of
    # the kit runs) on the kit's wire; with overlap off it equals the lock-step replay (tests/test_published.py)
    for f in sorted(p for p in Path(projection.__file__).parent.glob("*.py") if p.name != "published.py"):
        found = [h for h in hooks if h in f.read_text()]
        assert not found, f"{f.name} steps the schedule itself: {found}"
