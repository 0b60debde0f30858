"""What a lock-step peer reports at the end of a run (its share of the world's ledger and clock) costs the receiver
what its size allows and describes only the sender: identity, links, channels, times and counts are checked against
the receiver's own topology and schedule (``comm/torch_dist/world.py``), without torch.distributed."""
from __future__ import annotations

import random
import time

from islands_kit.comm.ledger import Ledger


def _peak_reference(led: Ledger, window_s: float = 1.0) -> float:
    """The plain reference: every window scans every transfer on its link (quadratic)."""
    best = 0.0
    by_link: dict = {}
    for s, e, b, src, dst, _ in led.timeline:
        by_link.setdefault((src, dst), []).append((s, e, b))
    for items in by_link.values():
        items.sort()
        for w0 in [s for s, _, _ in items]:
            w1 = w0 + window_s
            tot = 0.0
            for s, e, b in items:
                if s >= w1:
                    break
                if e <= w0:
                    continue
                tot += b * (min(e, w1) - max(s, w0)) / max(e - s, 1e-12)
            best = max(best, tot / window_s)
    return best


def test_peak_rate_equals_the_reference_to_the_bit():
    rng = random.Random(0)
    for _ in range(30):
        led = Ledger()
        for _ in range(rng.randint(1, 120)):
            s = rng.choice([0.0, 0.5, 1.0, rng.uniform(0, 20)])
            led.record(rng.choice(["a", "b"]), rng.randint(0, 2), rng.randint(0, 2), rng.choice([0, 1, 1000, rng.randint(0, 10**6)]),
                       s, s + rng.choice([0.0, 1e-9, rng.uniform(0, 3)]))
        for w in (1.0, 0.25):
            assert led.peak_link_bytes_per_s(w) == _peak_reference(led, w)


def test_zero_byte_records_do_not_make_the_peak_quadratic():
    """8,000 zero-byte records took the old sweep 2.1 s (quadratic), 30,000 about 30 s; now well under a second."""
    led = Ledger()
    led.record("fragments", 0, 1, 1000, 0.0, 2.0)
    for i in range(30_000):
        led.record("fragments", 0, 1, 0, 0.0, 1e6 * (i % 3))
    t0 = time.perf_counter()
    assert led.peak_link_bytes_per_s() == 500.0
    assert time.perf_counter() - t0 < 1.0


# -- a rank's share of the world's ledger and clock (lock-step) -------------------------------------------------------

import pytest  # noqa: E402

from islands_kit.comm import control  # noqa: E402
from islands_kit.comm.control import PeerError  # noqa: E402
from islands_kit.comm.layout import RankLayout  # noqa: E402
from islands_kit.comm.torch_dist.frames import WORLD_SCHEMA  # noqa: E402
from islands_kit.comm.torch_dist.world import WorldRules, merge_world, share_limit  # noqa: E402

RULES = WorldRules(RankLayout((1, 2)), ops=4, widest={"fragments": 100, "routing": 8}, now=10.0, horizon=1e4)


def _shares() -> list[dict]:
    """Honest shares of a 2-island run, island 1 on ranks 1 and 2 (rank 2 leads nothing)."""
    def clock(i, t):
        return {"now": {str(i): t}, "busy": {str(i): t / 2}, "idle": {str(i): t / 2}}

    return [{"island": 0, "leader": True, "sent": {"fragments": 200},
             "records": [[[0, 1, 0], [1.0, 2.0, 100, 1, 0, "fragments"]], [[2, 1, 0], [3.0, 3.5, 100, 1, 0, "fragments"]]],
             "clock": clock(0, 9.0)},
            {"island": 1, "leader": True, "sent": {"fragments": 200},
             "records": [[[0, 0, 1], [1.0, 2.5, 100, 0, 1, "fragments"]], [[2, 0, 1], [3.0, 3.2, 100, 0, 1, "fragments"]]],
             "clock": clock(1, 12.0)},
            {"island": 1, "leader": False, "sent": {}, "records": [], "clock": clock(1, 12.0)}]


def test_honest_shares_merge():
    ledger, clock, sent = merge_world(_shares(), RULES)
    assert [t[:5] for t in ledger.timeline] == [(1.0, 2.5, 100, 0, 1), (1.0, 2.0, 100, 1, 0), (3.0, 3.2, 100, 0, 1),
                                                (3.0, 3.5, 100, 1, 0)]  # LocalTransport's order: (seq, src, dst)
    assert clock.now == {0: 9.0, 1: 12.0} and sent == {"fragments": 400}


def _record(**kw):
    (seq, src, dst), (start, end, nbytes, _, _, ch) = [0, 0, 1], [1.0, 2.5, 100, 0, 1, "fragments"]
    v = {"seq": seq, "src": src, "dst": dst, "start": start, "end": end, "nbytes": nbytes, "ch": ch, **kw}
    return [[v["seq"], v["src"], v["dst"]], [v["start"], v["end"], v["nbytes"], v["src"], v["dst"], v["ch"]]]


@pytest.mark.parametrize("rank, edit, match", [
    (2, lambda o: o.update(island=0), r"rank 2: island: claims island 0; the run's layout puts rank 2 in island 1"),
    (2, lambda o: o.update(leader=True), r"rank 2: leader: claims to lead island 1; its leader is rank 1"),
    (1, lambda o: o["clock"]["now"].update({"0": 1.0}), r"rank 1: clock.now: names islands \['0', '1'\]"),
    (2, lambda o: o["records"].append(_record()), r"rank 2: records: 1 records; .* a rank that does not lead none 0"),
    (1, lambda o: o["records"].extend([_record(seq=s % 4, start=float(s)) for s in range(9)]), r"rank 1: records: 11 records"),
    (1, lambda o: o["records"].append(_record(seq=4)), r"rank 1: records\[2\]: operation #4 was never posted"),
    (1, lambda o: o["records"].append(_record(seq=1, src=5)), r"rank 1: records\[2\]: link 5->1 .* is not a link into island 1"),
    (1, lambda o: o["records"].append(_record(seq=1, src=1)), r"link 1->1"),
    (1, lambda o: o["records"].append(_record(seq=1, dst=0)), r"link 0->0"),
    (1, lambda o: o["records"].append(_record(seq=1, ch="x" * 100)), r"channel 'xxx.* is not one this run posted on"),
    (1, lambda o: o["records"].append(_record(seq=1, nbytes=201)), r"201 bytes on 'fragments', over twice its largest"),
    (1, lambda o: o["records"].append(_record()), r"operation #0 on link 0->1 recorded twice"),
    (1, lambda o: o["records"].append(_record(seq=1, end=1e300)), r"records\[2\].end: simulated time 1e\+300"),
    (1, lambda o: o["records"].append(_record(seq=1, end=0.5)), r"ends at 0.5 s before it starts"),
    (1, lambda o: o["clock"]["now"].update({"1": 2e4}), r"clock.now: simulated time 20000.0 .*the run's horizon"),
    (0, lambda o: o["sent"].update({"evil": 1}), r"rank 0: sent\['evil'\]"),
])
def test_a_rank_describes_only_itself_within_the_run(rank, edit, match):
    shares = _shares()
    edit(shares[rank])
    with pytest.raises(PeerError, match=match) as e:
        merge_world(shares, RULES)
    assert e.value.peer == rank and "\n" not in str(e.value)


def test_the_share_limit_holds_the_largest_honest_share():
    """Every record at its widest (int64 counters, floats of 24 characters): still under the limit the receiver
    computes before a byte arrives, and the limit is within half as much again of it."""
    big, t = 2 ** 63 - 1, 1.2345678901234567e+300
    n, ops, channels = 3, 50, ["fragments", "routing"]
    share = {"island": 2, "leader": True, "sent": {c: big for c in channels},
             "records": [[[big, big, big], [t, t, big, big, big, "fragments"]]] * (ops * (n - 1)),
             "clock": {f: {"2": t} for f in ("now", "busy", "idle")}}
    raw = control.encode("ledger", share)
    assert len(raw) <= share_limit(ops, n, channels) < 1.5 * len(raw)
    assert control.decode(raw, "ledger", WORLD_SCHEMA, 2, share_limit(ops, n, channels))["island"] == 2
