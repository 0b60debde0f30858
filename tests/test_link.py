"""The wide-area link model (islands_kit/comm/link.py): presets, closed form, monotonicity, determinism, loss recovery,
slow start, contact windows, and the vectorised path against the one-chunk-at-a-time reference."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from islands_kit.comm.link import LINK_PRESETS, LinkModel, closed_form_time, link_config, one_way_latency, transfer_time_stats
from islands_kit.config import ConfigError, LinkConfig

QUIET = dict(loss_prob=0.0, corrupt_prob=0.0, jitter_sigma=0.0, tail_prob=0.0)  # the closed-form regime


def ideal(bw: float, rtt: float, nbytes: int, pacing: float = 0.0) -> float:
    """The documented closed form, written out independently of the library."""
    rate = min(bw, pacing) if pacing > 0 else bw
    return rtt / 2 + nbytes * 8 / rate


# -- presets and validation ------------------------------------------------------------------------------------------
def test_presets_build_and_default_is_the_seed_link() -> None:
    for name in LINK_PRESETS:
        cfg = link_config(name)
        assert cfg.preset == name
    assert link_config("transpacific-25g") == LinkConfig()
    assert link_config("leo-satellite").contact_period_s > 0
    assert link_config("intra-dc").bandwidth_bps > link_config("transpacific-25g").bandwidth_bps > link_config("consumer-1g").bandwidth_bps


def test_unknown_preset_and_field_are_named() -> None:
    with pytest.raises(ConfigError, match=r"link\.preset.*transpacific-25g.*leo-satellite"):
        link_config("moon-relay")
    with pytest.raises(ConfigError, match=r"link\.bandwith_bps: unknown link field"):
        link_config("intra-dc", bandwith_bps=1e9)


@pytest.mark.parametrize("field,value", [("bandwidth_bps", 0.0), ("bandwidth_bps", -25e9), ("bandwidth_bps", math.inf),
                                         ("loss_prob", 1.0), ("loss_prob", 1.5), ("chunk_bytes", 0),
                                         ("chunk_bytes", -4), ("rtt_s", -0.1), ("contact_fraction", 0.0)])
def test_bad_link_settings_rejected(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"link\.{field}: must"):
        link_config("transpacific-25g", **{field: value})


def test_bad_fec_settings_rejected() -> None:
    with pytest.raises(ConfigError, match=r"link\.fec_parity: needs method=chunked"):
        link_config("transpacific-25g", method="naive", fec_parity=2)
    with pytest.raises(ConfigError, match=r"link\.fec_parity: fec_group \+ fec_parity must be <= 255"):
        link_config("transpacific-25g", fec_group=250, fec_parity=6)
    with pytest.raises(ConfigError, match=r"link\.fec_group: must be >= 1"):
        link_config("transpacific-25g", fec_group=0)
    with pytest.raises(ConfigError, match=r"link\.fec_parity: must be >= 0"):
        link_config("transpacific-25g", fec_parity=-1)


def test_bad_transfer_arguments() -> None:
    m = LinkModel(LinkConfig(), seed=0)
    with pytest.raises(ValueError, match="nbytes"):
        m.transfer(-1, 0.0, 0, 1)
    with pytest.raises(ValueError, match="src, dst"):
        m.transfer(10, 0.0, 1, 1)
    with pytest.raises(ValueError, match="seed"):
        LinkModel(LinkConfig(), seed=-3)


# -- closed form -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["chunked", "naive"])
@pytest.mark.parametrize("pacing", [0.0, 10e9, 40e9])  # below and above the 25 Gbit/s bandwidth
def test_closed_form_exact(method: str, pacing: float) -> None:
    cfg = link_config("transpacific-25g", method=method, pacing_bps=pacing, **QUIET)
    for nbytes in (0, 1, 4 << 20, (4 << 20) * 3 + 12345, 300_000_000):
        tr = LinkModel(cfg, seed=1).transfer(nbytes, 0.0, 0, 1)
        assert tr.duration_s == ideal(25e9, 0.145, nbytes, pacing)  # to the last bit at start 0
        assert tr.duration_s == closed_form_time(cfg, nbytes)
        tr = LinkModel(cfg, seed=1).transfer(nbytes, 1234.5, 1, 0)
        assert tr.duration_s == pytest.approx(ideal(25e9, 0.145, nbytes, pacing), rel=1e-12)
        assert tr.chunks_resent == 0 and tr.bytes_on_wire == nbytes


def test_latency_draws_follow_the_formula() -> None:
    cfg = link_config("transpacific-25g", jitter_sigma=0.5, tail_prob=0.5, tail_alpha=2.0, tail_scale_s=0.3)
    z, ut, up = np.array([0.0, -1.0, 2.0]), np.array([0.9, 0.1, 0.6]), np.array([0.2, 0.75, 0.3])
    want = [0.0725, 0.0725 * math.exp(0.5) + 0.3 * 0.25 ** -0.5, 0.0725 * math.exp(1.0)]
    assert one_way_latency(cfg, z, ut, up) == pytest.approx(want, rel=1e-12)


# -- monotonicity and determinism ------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["chunked", "naive"])
def test_more_bandwidth_is_never_slower(method: str) -> None:
    for seed in range(4):
        for nbytes in (1, 100_000, (1 << 20) * 5 + 3, 64 << 20):
            prev = math.inf
            for bw in (1e8, 1e9, 1e10, 1e11):
                cfg = link_config("transpacific-25g", bandwidth_bps=bw, method=method, loss_prob=0.05,
                                  corrupt_prob=0.02, tail_prob=0.05, chunk_bytes=1 << 20)
                d = LinkModel(cfg, seed).transfer(nbytes, 3.0, 0, 1).duration_s
                assert d <= prev, (seed, nbytes, bw)
                prev = d


def test_same_seed_same_timings_in_any_direction_order() -> None:
    cfg = link_config("consumer-1g")
    a, b = LinkModel(cfg, seed=7), LinkModel(cfg, seed=7)
    ra = [a.transfer(8 << 20, 0.0, 0, 1), a.transfer(8 << 20, 0.0, 1, 0), a.transfer(8 << 20, 5.0, 0, 1)]
    rb1 = b.transfer(8 << 20, 0.0, 1, 0)  # the other direction first
    rb0 = [b.transfer(8 << 20, 0.0, 0, 1), b.transfer(8 << 20, 5.0, 0, 1)]
    assert ra[1] == rb1 and ra[0] == rb0[0] and ra[2] == rb0[1]
    c = LinkModel(cfg, seed=8)
    assert c.transfer(8 << 20, 0.0, 0, 1).duration_s != ra[0].duration_s  # jitter > 0: seeds differ
    quiet = link_config("consumer-1g", **QUIET)  # nothing random left: seeds agree
    assert LinkModel(quiet, 7).transfer(8 << 20, 0.0, 0, 1) == LinkModel(quiet, 8).transfer(8 << 20, 0.0, 0, 1)


def test_vectorised_path_matches_one_chunk_at_a_time_reference() -> None:
    cfg = link_config("transpacific-25g", loss_prob=0.05, corrupt_prob=0.02, chunk_bytes=1 << 20)
    fast, slow = LinkModel(cfg, 3), LinkModel(cfg, 3, vectorise=False)
    for nbytes, start in ((50 << 20, 0.0), (20 << 20, 0.001), (30 << 20, 10.0), (7, 10.0), (40 << 20, 10.5)):
        tf, ts = fast.transfer(nbytes, start, 0, 1), slow.transfer(nbytes, start, 0, 1)
        assert tf == ts
    assert fast.busy_intervals(0, 1) == slow.busy_intervals(0, 1)


# -- loss, corruption, resends ---------------------------------------------------------------------------------------
def test_lost_chunks_delivered_once_none_twice() -> None:
    nbytes, cb = 200 << 20, 1 << 20
    cfg = link_config("transpacific-25g", loss_prob=0.3, corrupt_prob=0.1, jitter_sigma=0.0, tail_prob=0.0, chunk_bytes=cb)
    tr = LinkModel(cfg, seed=0).transfer(nbytes, 0.0, 0, 1)
    assert sorted(tr.delivered) == list(range(200)) and len(tr.delivered) == 200
    assert tr.chunks_lost > 30 and tr.chunks_corrupted > 5
    # no hedging without jitter/tail: each bad copy is resent exactly once more, and every resend is counted on the wire
    assert tr.chunks_resent == tr.chunks_lost + tr.chunks_corrupted
    assert tr.bytes_on_wire == nbytes + tr.chunks_resent * cb
    assert tr.duration_s > ideal(25e9, 0.145, nbytes) + 0.145  # at least one resend round trip
    # with jitter and a heavy tail, late chunks are re-requested too, and duplicates are discarded
    noisy = link_config("consumer-1g", loss_prob=0.3, corrupt_prob=0.1, tail_prob=0.2, chunk_bytes=cb)
    tr = LinkModel(noisy, seed=1).transfer(nbytes + 5, 0.0, 0, 1)
    assert sorted(tr.delivered) == list(range(201))
    assert tr.chunks_resent >= tr.chunks_lost + tr.chunks_corrupted - 201  # a bad copy of an already-delivered chunk may be dropped


@pytest.mark.parametrize("method, fec", [("chunked", 0), ("chunked", 1), ("naive", 0)])
def test_contents_only_what_arrived_or_was_rebuilt(method: str, fec: int) -> None:
    """Without re-requests the receiver holds zeros exactly in the chunks that were lost or corrupted (and not rebuilt
    by FEC); with them it holds the payload intact. Same fates either way: the first pass draws the same numbers."""
    import torch

    from islands_kit.comm.link import received

    cb, nbytes = 1000, 40_500  # 41 chunks, the last one short
    cfg = link_config("transpacific-25g", method=method, loss_prob=0.15, corrupt_prob=0.05, chunk_bytes=cb,
                      fec_group=4, fec_parity=fec)
    data = torch.randint(1, 256, (nbytes,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    fixed = LinkModel(cfg, seed=3).transfer(nbytes, 0.0, 0, 1)
    assert fixed.holes == [] and received(data, fixed.holes) is data
    raw = LinkModel(cfg, seed=3, repair=False).transfer(nbytes, 0.0, 0, 1)
    assert raw.holes and raw.chunks_resent == 0
    if method == "chunked" and not fec:
        assert len(raw.holes) == raw.chunks_lost + raw.chunks_corrupted  # every bad first copy is a hole
    if fec:
        assert len(raw.holes) < raw.chunks_lost + raw.chunks_corrupted  # parity rebuilt some
    got = received(data, raw.holes)
    hole = torch.zeros(nbytes, dtype=torch.bool)
    for off, length in raw.holes:
        assert off % cb == 0 and length == min(cb, nbytes - off)
        hole[off:off + length] = True
    assert torch.equal(got[hole], torch.zeros(int(hole.sum()), dtype=torch.uint8))
    assert torch.equal(got[~hole], data[~hole])
    assert sorted(raw.delivered + [off // cb for off, _ in raw.holes]) == list(range(41))


def test_naive_resends_the_whole_payload() -> None:
    nbytes = 16 << 20
    cfg = link_config("transpacific-25g", method="naive", loss_prob=0.1, jitter_sigma=0.0, tail_prob=0.0, chunk_bytes=1 << 20)
    durs = []
    for seed in range(20):
        tr = LinkModel(cfg, seed).transfer(nbytes, 0.0, 0, 1)
        assert tr.delivered == list(range(16))
        assert tr.bytes_on_wire == tr.attempts * nbytes and tr.chunks_resent == 16 * (tr.attempts - 1)
        # each failed attempt costs its serialisation + one-way latency + the report back (one RTT in all)
        per_attempt = nbytes * 8 / 25e9 + 0.145
        assert tr.duration_s == pytest.approx(ideal(25e9, 0.145, nbytes) + (tr.attempts - 1) * per_attempt, rel=1e-9)
        durs.append(tr.attempts)
    assert max(durs) > 1  # P(clean attempt) = 0.9^16 = 0.19


# -- slow start, idle timeout ----------------------------------------------------------------------------------------
def slow_start_reference(nbytes: int, w0: float, rate_Bps: float, rtt: float) -> float:
    """Plain loop: round j carries w0·2^j bytes and lasts one RTT, until the window reaches the BDP."""
    t, rem, w = 0.0, float(nbytes), w0
    while w < rate_Bps * rtt and rem > w:
        rem -= w
        t += rtt
        w *= 2
    return t + rem / rate_Bps + rtt / 2


@pytest.mark.parametrize("method", ["chunked", "naive"])
def test_cold_connection_slow_start_and_idle_restart(method: str) -> None:
    bw, rtt, nbytes = 1e9, 0.1, 64 << 20
    cfg = link_config("consumer-1g", bandwidth_bps=bw, rtt_s=rtt, warm=False, idle_timeout_s=1.0, method=method, **QUIET)
    n_conn = cfg.n_connections if method == "chunked" else 1
    w0 = n_conn * cfg.init_cwnd_bytes
    bdp = bw / 8 * rtt
    m = LinkModel(cfg, seed=0)
    cold = m.transfer(nbytes, 0.0, 0, 1)
    warm_time = ideal(bw, rtt, nbytes)
    assert cold.duration_s == pytest.approx(slow_start_reference(nbytes, w0, bw / 8, rtt), rel=1e-9)
    extra_rtts = (cold.duration_s - warm_time) / rtt
    assert math.log2(bdp / w0) - 2 <= extra_rtts <= math.log2(bdp / w0) + 1  # slow start converges in ~log2(BDP/W0)
    again = m.transfer(nbytes, cold.end_s + 0.5, 0, 1)  # idle 0.5 s < timeout: still warm
    assert again.duration_s == pytest.approx(warm_time, rel=1e-9)
    after_idle = m.transfer(nbytes, again.end_s + 2.0, 0, 1)  # idle 2 s > timeout: cold again
    assert after_idle.duration_s == pytest.approx(cold.duration_s, rel=1e-9) and after_idle.duration_s > warm_time
    kept_warm = LinkModel(dataclasses.replace(cfg, warm=True), seed=0).transfer(nbytes, 0.0, 0, 1)
    assert kept_warm.duration_s == pytest.approx(warm_time, rel=1e-12)


# -- shared wire, full duplex ----------------------------------------------------------------------------------------
def test_same_direction_serialises_other_direction_does_not() -> None:
    cfg = link_config("transpacific-25g", **QUIET)
    m = LinkModel(cfg, seed=0)
    a = m.transfer(100 << 20, 0.0, 0, 1)
    b = m.transfer(50 << 20, 0.0, 0, 1)  # waits for a's bytes
    c = m.transfer(100 << 20, 0.0, 1, 0)  # the other direction is its own wire
    assert a.duration_s == ideal(25e9, 0.145, 100 << 20) and c.duration_s == a.duration_s
    assert b.end_s == pytest.approx(ideal(25e9, 0.145, 150 << 20), rel=1e-12)
    assert m.busy_intervals(0, 1) == [(0.0, pytest.approx((150 << 20) * 8 / 25e9, rel=1e-12))]


# -- contact windows -------------------------------------------------------------------------------------------------
def contact_reference(nbytes: int, rate_bps: float, period: float, frac: float, t0: float) -> float:
    """When the last byte leaves if bytes only move during [kP, kP + fP): walk the windows."""
    need, t = nbytes * 8 / rate_bps, t0
    while True:
        ws = math.floor(t / period) * period
        we = ws + frac * period
        if t >= we:
            t = ws + period
            continue
        if need <= we - t:
            return t + need
        need -= we - t
        t = ws + period


@pytest.mark.parametrize("method", ["chunked", "naive"])
def test_contact_windows_pause_transfers(method: str) -> None:
    base = link_config("leo-satellite", method=method)
    P, f, rate = base.contact_period_s, base.contact_fraction, base.bandwidth_bps
    nbytes, t0 = 1_200_000_000, 20.0  # 48 s of serialisation from 10 s before a window closes: spans two gaps
    quiet = LinkModel(dataclasses.replace(base, **QUIET), seed=0).transfer(nbytes, t0, 0, 1)
    want_end = contact_reference(nbytes, rate, P, f, t0) + base.rtt_s / 2
    assert quiet.end_s == pytest.approx(want_end, rel=1e-9)
    assert quiet.duration_s == pytest.approx(ideal(rate, base.rtt_s, nbytes) + 2 * P * (1 - f), rel=1e-9)  # two gaps
    m = LinkModel(base, seed=0)  # the preset as is: loss, jitter, tail
    if method == "naive":  # a 1.2 GB stream never gets through 1.5% chunk loss whole; a 20 MB one does
        nbytes, t0 = 20 << 20, 29.9
        want_end = contact_reference(nbytes, rate, P, f, t0) + base.rtt_s / 2
    tr = m.transfer(nbytes, t0, 0, 1)
    assert sorted(tr.delivered) == list(range(tr.n_chunks))
    assert tr.end_s >= want_end > t0 + P * (1 - f)
    for a, b in m.busy_intervals(0, 1):  # no byte ever moves outside a contact window
        k = math.floor(a / P)
        assert k * P <= a and b <= k * P + f * P + 1e-9, (a, b)
    late = LinkModel(dataclasses.replace(base, **QUIET), seed=0).transfer(1000, 45.0, 0, 1)  # posted in a gap
    assert late.end_s == pytest.approx(60.0 + ideal(rate, base.rtt_s, 1000), rel=1e-12)


# -- stats -----------------------------------------------------------------------------------------------------------
def test_transfer_time_stats() -> None:
    st = transfer_time_stats(range(1, 101))
    assert st == {"p50": 50.5, "p99": pytest.approx(99.01), "mean": 50.5, "max": 100.0}
    with pytest.raises(ValueError, match="durations"):
        transfer_time_stats([])


# -- forward error correction ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("nbytes", [1, (4 << 20) * 3 + 5, (4 << 20) * 40 + 77])  # one group; a partial last group
def test_fec_closed_form_counts_the_parity_sent_before_the_last_group(nbytes: int) -> None:
    """Quiet link: the last group is whole when its last data chunk arrives; only the parity of the groups before
    it was serialised ahead of that chunk."""
    k, m, cb = 16, 3, 4 << 20
    cfg = link_config("transpacific-25g", fec_group=k, fec_parity=m, **QUIET)
    tr = LinkModel(cfg, seed=2).transfer(nbytes, 0.0, 0, 1)
    n = -(-nbytes // cb)
    G = -(-n // k)
    assert tr.duration_s == ideal(25e9, 0.145, nbytes + (G - 1) * m * cb)
    assert tr.parity_chunks == G * m and tr.chunks_resent == 0
    sizes = [cb] * (n - 1) + [nbytes - (n - 1) * cb]
    last_group_parity = m * max(sizes[(G - 1) * k:])  # each parity chunk is as large as its group's largest chunk
    assert tr.bytes_on_wire == nbytes + (G - 1) * m * cb + last_group_parity
    assert sorted(tr.delivered) == list(range(n))


def test_fec_rebuilds_groups_without_resends_and_cuts_the_tail() -> None:
    """1 % chunk loss and the seed link's heavy tail on a 1 GB payload: with 4 parity chunks per 32, lost and late
    chunks are rebuilt from parity instead of waiting a round trip for a resend."""
    nbytes = 1 << 30
    plain = link_config("transpacific-25g", loss_prob=0.01)
    fec = link_config("transpacific-25g", loss_prob=0.01, fec_group=32, fec_parity=4)
    a = [LinkModel(plain, seed=s).transfer(nbytes, 0.0, 0, 1) for s in range(200)]
    b = [LinkModel(fec, seed=s).transfer(nbytes, 0.0, 0, 1) for s in range(200)]
    for tr in b:
        assert sorted(tr.delivered) == list(range(256))
    assert sum(t.chunks_resent for t in b) * 20 < sum(t.chunks_resent for t in a)
    sa, sb = transfer_time_stats([t.duration_s for t in a]), transfer_time_stats([t.duration_s for t in b])
    assert sb["p50"] < sa["p50"] and sb["p99"] < sa["p99"]
    assert sb["p99"] / sb["p50"] < sa["p99"] / sa["p50"]
    assert all(t.bytes_on_wire >= nbytes * (1 + 4 / 32) for t in b)  # the price: parity on the wire


def test_fec_group_with_more_losses_than_parity_is_completed_by_resends() -> None:
    cb = 1 << 20
    cfg = link_config("transpacific-25g", loss_prob=0.4, chunk_bytes=cb, fec_group=8, fec_parity=1, **{
        k: v for k, v in QUIET.items() if k != "loss_prob"})
    tr = LinkModel(cfg, seed=4).transfer(64 * cb, 0.0, 0, 1)
    assert sorted(tr.delivered) == list(range(64)) and math.isfinite(tr.end_s)
    assert tr.chunks_resent > 0 and tr.duration_s > ideal(25e9, 0.145, 64 * cb) + 0.145
    # the same draws, one chunk at a time: the vectorised first pass changes nothing
    ref = LinkModel(cfg, seed=4, vectorise=False).transfer(64 * cb, 0.0, 0, 1)
    assert (ref.end_s, ref.delivered, ref.chunks_resent) == (tr.end_s, tr.delivered, tr.chunks_resent)
