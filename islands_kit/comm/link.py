"""Wide-area link model: how long a payload takes to cross a slow, jittery, lossy link between two islands.
(Over 400 lines because the model is stated in full below and its two send paths, naive and chunked with FEC, are
one simulation; the named links are data in ``config.py``.)

(Over 400 lines on purpose: one model whose specification, below, is a fifth of the file; its parts — wire calendar,
slow start, chunked resends, FEC — share state per direction and read best together.)

Model (one ``LinkModel`` per link; all times in seconds on the simulated clock)
-------------------------------------------------------------------------------
* Directions. The link is full duplex: each directed pair (src, dst) has its own *wire* with its own bandwidth, busy
  calendar, connections and random stream. Transfers in the same direction share the wire: bytes are serialised one
  piece at a time into the wire's free time (a calendar of busy intervals), so a transfer posted while another is on
  the wire waits for the gap after it. Rate of the wire: ``rate_bps = min(bandwidth_bps, pacing_bps)`` when
  ``pacing_bps > 0``, else ``bandwidth_bps``. The model has no router queue, so pacing only caps the rate here; the
  losses that pacing avoids in practice are whatever ``loss_prob`` says.
* Latency. A piece of data whose last byte leaves the sender at ``e`` arrives at ``e + L`` with one-way latency
  ``L = rtt/2 · exp(jitter_sigma · |Z|) + T`` (``Z`` standard normal: a log-normal body that never goes below the
  speed-of-light floor rtt/2), plus with probability ``tail_prob`` a Pareto tail ``T = tail_scale_s · U^(-1/tail_alpha)``
  (``U`` uniform in (0, 1], so ``T >= tail_scale_s``), else ``T = 0``.
* Contact windows (intermittent links, e.g. LEO). When ``contact_period_s > 0`` the wire serialises bytes only during
  the first ``contact_fraction`` of each period ``[k·P, k·P + f·P)``; a transfer pauses outside and resumes at the next
  window. Bytes already sent still arrive (propagation is not gated).
* Connections and slow start. A direction holds ``n_connections`` connections with a congestion window each. With
  ``warm=True`` keep-alives hold every window at the bandwidth-delay product (``BDP = rate_bps/8 · rtt_s`` bytes,
  shared among the connections), so a transfer runs at full rate from its first byte. With ``warm=False`` a connection
  never used, or idle for longer than ``idle_timeout_s`` since its last transfer ended, restarts at
  ``init_cwnd_bytes`` (RFC 5681 restart after idle). The window of the connections a transfer uses,
  ``W = sum of their windows``, limits each round trip: round ``j`` may carry ``W·2^j`` bytes and the next round opens
  one RTT after the round's first byte left (slow start doubles the window every RTT); once ``W·2^j >= BDP`` the
  transfer runs at the full rate. So a big cold transfer takes about ``log2(BDP / W)`` RTTs longer than a warm one.
  A single connection is allowed to fill the whole wire (per-flow limits of real TCP are not modelled).
* Randomness. Each transfer draws from its own ``numpy`` Generator seeded with ``(seed, src, dst, k)``, ``k`` the
  transfer's index in its direction (a chunked resend: ``(seed, src, dst, k, chunk, copy)``), so results are
  reproducible and do not depend on how calls to different directions interleave.

Methods (``cfg.method``)
------------------------
* ``naive`` — one connection carries the whole payload as one stream, with one latency draw per attempt. The payload
  is checked in ``chunk_bytes`` chunks: if any chunk is lost (``loss_prob``) or corrupted (``corrupt_prob``), the
  receiver notices at the would-be arrival ``a`` and the sender learns it one-way later, at ``a + rtt/2`` (an
  RTT-scale timeout after the attempt's last byte), and resends the *whole* payload from then.
* ``chunked`` — the payload is cut into ``chunk_bytes`` chunks sent over all ``n_connections`` connections (their
  windows add up), each chunk with its own latency draw, loss and checksum. The receiver declares a chunk missing
  when it is lost, when its checksum fails (at arrival), or when it is later than expected by more than
  ``late_threshold_s = rtt/2 · (exp(3·jitter_sigma) − 1) + rtt/8`` (3 sigma of the jitter body plus the 1/8-RTT
  reordering slack of QUIC's time threshold, RFC 9002) — so a chunk caught in the heavy tail is re-requested like a
  lost one instead of holding the transfer up. The request reaches the sender rtt/2 later; only that chunk is resent.
  The sender's queue is first-in first-out (re-requests join its back) and a re-request is dropped if the sender has
  already heard that the chunk arrived. The first good copy of a chunk is delivered; later copies are discarded. The
  transfer ends when its last chunk is delivered.
* ``chunked`` with forward error correction (``fec_parity = m > 0``) — the data chunks are cut into groups of
  ``fec_group = k`` (the last group may be smaller, k_g chunks); each group is followed on the wire by ``m`` parity
  chunks, each as large as the group's largest data chunk, of a maximum-distance-separable erasure code
  (Reed-Solomon over GF(2^8), hence ``k + m <= 255``): any k_g of the group's k_g + m chunks rebuild it. The
  receiver lets the first ``m`` chunks of a group that it declares missing (lost, corrupt or late, as above, in the
  order it notices them) go unrequested — parity will cover them — and re-requests any further ones; a re-request
  is dropped if the sender has heard that the group was already rebuilt. A data chunk is delivered at its own
  arrival or at its group's rebuild (the k_g-th arrival among the group's chunks), whichever is first. The parity
  costs ``m / k`` more bytes on the wire and buys the removal of most resend round trips from the tail.
  ``fec_parity = 0`` (the default) is exactly the plain chunked method.

Contents (``Transfer.holes``, ``received``)
------------------------------------------
The link carries the payload's bytes, not just its size: a chunk reaches the receiver only as a good copy (first
pass or a resend) or as part of a rebuilt FEC group. ``Transfer.holes`` lists the byte ranges ``[offset, length]`` of
the data chunks that never did; ``received(data, transfer.holes)`` is what the receiver holds: the payload with those
ranges zeroed (a lost chunk never came, a corrupt one failed its checksum and was discarded). The transports decode what
``received`` returns, so a chunk the protocol failed to re-request changes the numbers, not only the clock. With
``LinkModel(..., repair=True)`` (the default, and what every run uses) the resends and FEC leave no holes; with
``repair=False`` the receiver never re-requests (FEC still rebuilds what it can; a naive transfer makes one attempt),
the reference that shows what the repairs are for.

Closed form (tested exactly, both methods)
------------------------------------------
With ``loss_prob = corrupt_prob = jitter_sigma = tail_prob = 0``, warm connections, no contact windows and an idle
wire, a transfer of ``nbytes`` posted at ``start_s`` ends at ``start_s + duration_s`` with::

    duration_s = rtt_s / 2 + nbytes * 8 / rate_bps      # one-way latency + serialisation; rate_bps as above

(``closed_form_time`` returns it.) Both methods give it to the last bit when ``start_s == 0`` and to float rounding
otherwise: the chunked sender keeps its chunks back to back, so the last chunk's last byte leaves at the same time as
the naive stream's. With FEC the parity of every group but the last is serialised before the last group's data, so the
duration is the closed form of ``nbytes + (G - 1) · m · chunk_bytes`` (G groups).
"""
from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from islands_kit.config import LINK_PRESETS, ConfigError, LinkConfig, link_config  # noqa: F401 (re-exported)
from islands_kit.config import MAX_SENDS_PER_CHUNK as _MAX_SENDS_PER_CHUNK  # the bound link.loss_prob is checked against

LATE_SIGMAS = 3.0  # a chunk later than 3 sigma of the jitter body (plus reordering slack) is declared missing
REORDER_SLACK_RTT = 1.0 / 8.0  # RFC 9002 kTimeThreshold = 9/8: the extra 1/8 RTT


def effective_rate_bps(cfg: LinkConfig) -> float:
    """Rate of one direction's wire: the bandwidth, capped by pacing when pacing is on."""
    return min(cfg.bandwidth_bps, cfg.pacing_bps) if cfg.pacing_bps > 0 else cfg.bandwidth_bps


def closed_form_time(cfg: LinkConfig, nbytes: int) -> float:
    """The documented ideal duration (no loss, no jitter, no tail, warm, always in contact, idle wire)."""
    return cfg.rtt_s / 2 + nbytes * 8 / effective_rate_bps(cfg)


def late_threshold_s(cfg: LinkConfig) -> float:
    """How much later than expected (rtt/2 after its last byte left) a chunk may arrive before it is re-requested."""
    half = cfg.rtt_s / 2
    return half * (math.exp(LATE_SIGMAS * cfg.jitter_sigma) - 1.0) + REORDER_SLACK_RTT * cfg.rtt_s


def one_way_latency(cfg: LinkConfig, z: np.ndarray, u_tail: np.ndarray, u_pareto: np.ndarray) -> np.ndarray:
    """L = rtt/2 · exp(sigma·|z|) + [u_tail < tail_prob] · tail_scale · (1 − u_pareto)^(−1/alpha); arrays of draws."""
    half = cfg.rtt_s / 2
    body = half + half * (np.exp(cfg.jitter_sigma * np.abs(z)) - 1.0)  # == half exactly when sigma == 0
    tail = np.where(u_tail < cfg.tail_prob, cfg.tail_scale_s * (1.0 - u_pareto) ** (-1.0 / cfg.tail_alpha), 0.0)
    return body + tail


@dataclass
class Transfer:
    """One payload's trip across the link. ``delivered`` lists chunk ids in the order they were delivered."""

    start_s: float
    end_s: float
    duration_s: float
    nbytes: int
    n_chunks: int
    chunks_lost: int
    chunks_corrupted: int
    chunks_resent: int
    bytes_on_wire: int
    delivered: list[int] = field(default_factory=list)
    src: int = 0
    dst: int = 0
    attempts: int = 1  # naive: whole-payload attempts; chunked: 1
    parity_chunks: int = 0  # FEC parity chunks sent in the first pass (counted in bytes_on_wire)
    holes: list[list[int]] = field(default_factory=list)  # [offset, length] of data chunks never delivered nor rebuilt


def received(data: "torch.Tensor", holes: list[list[int]]) -> "torch.Tensor":
    """What the receiver of a transfer with ``holes`` (``Transfer.holes``) holds of the 1-D uint8 ``data``: ``data``
    itself when nothing is missing, else a copy with the holes zeroed. Hole offsets beyond ``data`` wrap around it (a
    ring all-reduce transfer is priced at more bytes than one payload; see comm/transport.py)."""
    if not holes:
        return data
    out = data.clone()
    idx = torch.cat([torch.arange(off, off + length) for off, length in holes]) % out.numel()
    out[idx] = 0
    return out


def transfer_time_stats(durations: Sequence[float]) -> dict[str, float]:
    """p50, p99 (linear interpolation), mean and max of transfer durations."""
    d = np.asarray(list(durations), dtype=np.float64)
    if d.size == 0:
        raise ValueError("durations: need at least one transfer duration")
    return {"p50": float(np.percentile(d, 50)), "p99": float(np.percentile(d, 99)),
            "mean": float(d.mean()), "max": float(d.max())}


class _Wire:
    """One direction's serialiser: sorted, disjoint busy intervals plus the contact-window calendar."""

    def __init__(self, rate_bps: float, period_s: float, fraction: float) -> None:
        self.rate_bps = rate_bps
        self.period_s = period_s
        self.fraction = fraction
        self.starts: list[float] = []
        self.ends: list[float] = []

    def last_end(self) -> float:
        return self.ends[-1] if self.ends else -math.inf

    def _in_contact(self, t: float) -> tuple[float, float]:
        """Earliest time >= t inside a contact window, and that window's end."""
        if self.period_s <= 0:
            return t, math.inf
        P, up = self.period_s, self.period_s * self.fraction
        k = math.floor(t / P)
        end = k * P + up
        if t < end:
            return t, end
        return (k + 1) * P, (k + 1) * P + up

    def free_span(self, t: float) -> tuple[float, float]:
        """Earliest time s >= t when the wire is free and in contact, and when that free span ends."""
        while True:
            t, contact_end = self._in_contact(t)
            i = bisect.bisect_right(self.starts, t) - 1  # the busy interval starting at or before t, if any
            if i >= 0 and self.ends[i] > t:
                t = self.ends[i]
                continue
            nxt = self.starts[i + 1] if i + 1 < len(self.starts) else math.inf
            return t, min(contact_end, nxt)

    def reserve(self, a: float, b: float) -> None:
        """Mark [a, b) busy; callers only reserve free time, so neighbours can only touch, not overlap."""
        if b <= a:
            return
        i = bisect.bisect_left(self.starts, a)
        merge_prev = i > 0 and self.ends[i - 1] == a
        merge_next = i < len(self.starts) and self.starts[i] == b
        if merge_prev and merge_next:
            self.ends[i - 1] = self.ends[i]
            del self.starts[i], self.ends[i]
        elif merge_prev:
            self.ends[i - 1] = b
        elif merge_next:
            self.starts[i] = a
        else:
            self.starts.insert(i, a)
            self.ends.insert(i, b)


class _Sender:
    """Puts one transfer's bytes on a wire in FIFO order, under its congestion window and the contact windows.

    Inside a run of back-to-back bytes (a *segment*) the end of each piece is ``seg_t0 + bits_so_far / rate``, not a
    running sum of durations, so long transfers carry no accumulated rounding and ``send_many`` (vectorised) and
    ``send`` (one piece at a time) give identical times."""

    def __init__(self, wire: _Wire, rtt_s: float, window_bytes: float, bdp_bytes: float) -> None:
        self.wire = wire
        self.rate = wire.rate_bps
        self.rtt = rtt_s
        self.window = window_bytes
        self.bdp = bdp_bytes
        self.full = window_bytes >= bdp_bytes
        self.round_start: float | None = None
        self.round_sent = 0.0  # bytes sent in the current slow-start round
        self.free_at = -math.inf  # when this sender's previous piece left
        self.seg_t0 = math.nan
        self.seg_bits = 0.0
        self.seg_end = math.nan

    def send(self, nbytes: int, ready: float) -> float:
        """Serialise ``nbytes`` no earlier than ``ready``; return when the last byte leaves."""
        t = max(ready, self.free_at)
        remaining = float(nbytes) * 8.0
        if remaining == 0.0:
            t, _ = self.wire.free_span(t)
            self.free_at = t
            return t
        while remaining > 1e-6:
            piece = remaining
            if not self.full:
                cap = (self.window - self.round_sent) * 8.0
                if cap <= 1e-6:  # window used up: the next round opens one RTT after this round's first byte
                    t = max(t, (self.round_start if self.round_start is not None else t) + self.rtt)
                    self.window *= 2.0
                    self.round_sent = 0.0
                    self.round_start = None
                    self.full = self.window >= self.bdp
                    continue
                piece = min(remaining, cap)
            s, span_end = self.wire.free_span(t)
            if s != self.seg_end:
                self.seg_t0, self.seg_bits = s, 0.0
            end = self.seg_t0 + (self.seg_bits + piece) / self.rate
            if end > span_end:  # the piece does not fit before a busy interval or the end of contact
                end = span_end
                piece = min(piece, max((span_end - self.seg_t0) * self.rate - self.seg_bits, 0.0))
            if not self.full and self.round_start is None:
                self.round_start = s
            self.wire.reserve(s, end)
            self.seg_bits += piece
            self.seg_end = end
            self.round_sent += piece / 8.0
            remaining -= piece
            t = end
        self.free_at = t
        return t

    def can_vectorise(self, ready: float) -> bool:
        return self.full and self.wire.period_s <= 0 and ready >= self.wire.last_end() and ready >= self.free_at

    def send_many(self, sizes: np.ndarray, ready: float) -> np.ndarray:
        """Back-to-back chunks on a free, full-window, always-in-contact wire: last-byte times in one cumsum.
        The plain reference is ``[self.send(b, ready) for b in sizes]`` (tests check they agree)."""
        assert self.can_vectorise(ready)
        ends = ready + np.cumsum(sizes.astype(np.float64) * 8.0) / self.rate
        self.seg_t0, self.seg_bits = ready, float(sizes.sum()) * 8.0
        self.seg_end = float(ends[-1])
        self.wire.reserve(ready, self.seg_end)
        self.free_at = self.seg_end
        return ends


@dataclass
class _Direction:
    wire: _Wire
    cwnd: list[float]  # per connection, bytes (inf = full)
    last_use: list[float]
    count: int = 0


class LinkModel:
    """Seeded simulator of one wide-area link (see the module docstring for the model)."""

    def __init__(self, cfg: LinkConfig, seed: int = 0, vectorise: bool = True, repair: bool = True) -> None:
        if not isinstance(cfg, LinkConfig):
            raise TypeError(f"cfg: must be a LinkConfig (got {type(cfg).__name__})")
        if not (isinstance(seed, (int, np.integer)) and seed >= 0):
            raise ValueError(f"seed: must be an integer >= 0 (got {seed!r})")
        self.cfg = cfg
        self.seed = int(seed)
        self.vectorise = vectorise  # False forces the one-chunk-at-a-time reference path
        self.repair = repair  # False: the receiver never re-requests (see "Contents" above)
        self.rate_bps = effective_rate_bps(cfg)
        self.bdp_bytes = self.rate_bps / 8.0 * cfg.rtt_s
        self._dirs: dict[tuple[int, int], _Direction] = {}

    def _direction(self, src: int, dst: int) -> _Direction:
        d = self._dirs.get((src, dst))
        if d is None:
            c = self.cfg
            n = c.n_connections
            d = _Direction(_Wire(self.rate_bps, c.contact_period_s, c.contact_fraction),
                           [float(c.init_cwnd_bytes)] * n, [-math.inf] * n)
            self._dirs[(src, dst)] = d
        return d

    def state_dict(self) -> list[list[Any]]:
        """The per-direction state (busy calendar, connection windows and idle clocks, transfer count) as plain
        lists, for a checkpoint (``torch.load(weights_only=True)`` reads it back); the rest comes from the config."""
        return [[src, dst, list(d.wire.starts), list(d.wire.ends), list(d.cwnd), list(d.last_use), d.count]
                for (src, dst), d in sorted(self._dirs.items())]

    def load_state_dict(self, rows: list[list[Any]]) -> None:
        self._dirs = {}
        for src, dst, starts, ends, cwnd, last_use, count in rows:
            d = self._direction(int(src), int(dst))
            d.wire.starts, d.wire.ends = [float(x) for x in starts], [float(x) for x in ends]
            d.cwnd, d.last_use, d.count = [float(x) for x in cwnd], [float(x) for x in last_use], int(count)

    def busy_intervals(self, src: int, dst: int) -> list[tuple[float, float]]:
        """When the src -> dst wire was serialising bytes (merged intervals)."""
        d = self._dirs.get((src, dst))
        return list(zip(d.wire.starts, d.wire.ends)) if d else []

    def _open_window(self, d: _Direction, conns: list[int], start_s: float) -> float:
        """Sum of the windows of ``conns`` at ``start_s`` (restart after idle when not kept warm)."""
        if self.cfg.warm:
            return math.inf
        share = self.bdp_bytes / len(conns)
        total = 0.0
        for i in conns:
            if start_s - d.last_use[i] > self.cfg.idle_timeout_s:
                d.cwnd[i] = float(self.cfg.init_cwnd_bytes)
            total += min(d.cwnd[i], share)
        return total

    def transfer(self, nbytes: int, start_s: float, src: int, dst: int) -> Transfer:
        """Send ``nbytes`` from island ``src`` to island ``dst``, posted at ``start_s``; returns its timing."""
        if not (isinstance(nbytes, (int, np.integer)) and not isinstance(nbytes, bool) and nbytes >= 0):
            raise ValueError(f"nbytes: must be an integer >= 0 (got {nbytes!r})")
        if not math.isfinite(start_s):
            raise ValueError(f"start_s: must be a finite time (got {start_s!r})")
        for name, v in (("src", src), ("dst", dst)):
            if not (isinstance(v, (int, np.integer)) and v >= 0):
                raise ValueError(f"{name}: must be an island id >= 0 (got {v!r})")
        if src == dst:
            raise ValueError(f"src, dst: a transfer needs two different islands (got {src} -> {dst})")
        nbytes, src, dst, start_s = int(nbytes), int(src), int(dst), float(start_s)
        d = self._direction(src, dst)
        key = [self.seed, src, dst, d.count]
        rng = np.random.default_rng(key)
        d.count += 1
        conns = list(range(self.cfg.n_connections)) if self.cfg.method == "chunked" else [0]
        sender = _Sender(d.wire, self.cfg.rtt_s, self._open_window(d, conns, start_s), self.bdp_bytes)
        if self.cfg.method == "chunked":
            tr = self._chunked(nbytes, start_s, sender, rng, key)
        else:
            tr = self._naive(nbytes, start_s, sender, rng)
        tr.src, tr.dst = src, dst
        for i in conns:  # the window the transfer ended with, shared back among its connections
            d.cwnd[i] = math.inf if sender.full else sender.window / len(conns)
            d.last_use[i] = max(d.last_use[i], tr.end_s)
        return tr

    def _chunk_sizes(self, nbytes: int) -> np.ndarray:
        cb = self.cfg.chunk_bytes
        n = max(1, -(-nbytes // cb))
        sizes = np.full(n, cb, dtype=np.int64)
        sizes[-1] = nbytes - (n - 1) * cb
        return sizes

    def _fates(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lost = u < self.cfg.loss_prob
        corrupt = (~lost) & (u < self.cfg.loss_prob + self.cfg.corrupt_prob)
        return lost, corrupt

    def _naive(self, nbytes: int, start_s: float, sender: _Sender, rng: np.random.Generator) -> Transfer:
        half = self.cfg.rtt_s / 2
        n = len(self._chunk_sizes(nbytes))
        t, attempts, n_lost, n_corrupt = start_s, 0, 0, 0
        while True:
            attempts += 1
            if attempts > _MAX_SENDS_PER_CHUNK:
                p_clean = (1.0 - self.cfg.loss_prob - self.cfg.corrupt_prob) ** n
                raise RuntimeError(f"naive transfer of {nbytes} bytes: no clean attempt in {attempts - 1} tries "
                                   f"(P(clean) = (1 - loss_prob - corrupt_prob)^n_chunks = {p_clean:.3g}); "
                                   "use method='chunked' or smaller payloads")
            u_chunk = rng.random(n)
            u = rng.random(2)
            z = rng.standard_normal(1)
            lat = float(one_way_latency(self.cfg, z, u[:1], u[1:])[0])
            arrive = sender.send(nbytes, t) + lat
            lost, corrupt = self._fates(u_chunk)
            n_lost += int(lost.sum())
            n_corrupt += int(corrupt.sum())
            if not (lost.any() or corrupt.any()) or not self.repair:
                break
            t = arrive + half  # the failure report reaches the sender; the whole payload goes again
        bad = np.flatnonzero(lost | corrupt)
        cb = self.cfg.chunk_bytes
        holes = [[int(c) * cb, int(min(cb, nbytes - c * cb))] for c in bad]
        return Transfer(start_s, arrive, arrive - start_s, nbytes, n, n_lost, n_corrupt, n * (attempts - 1),
                        nbytes * attempts, [c for c in range(n) if c not in set(bad.tolist())], attempts=attempts,
                        holes=holes)

    def _chunked(self, nbytes: int, start_s: float, sender: _Sender, rng: np.random.Generator,
                 key: list[int]) -> Transfer:
        cfg = self.cfg
        half = cfg.rtt_s / 2
        late = late_threshold_s(cfg)
        data_sizes = self._chunk_sizes(nbytes)
        n = len(data_sizes)
        # symbols: the n data chunks, then (FEC) fec_parity parity chunks per group of fec_group data chunks, each
        # as large as its group's largest data chunk; a group is rebuilt from any k_g of its k_g + m symbols
        k, m = cfg.fec_group, cfg.fec_parity
        G = -(-n // k)
        group = np.concatenate([np.arange(n) // k, np.repeat(np.arange(G), m)])  # symbol -> group
        sizes = np.concatenate([data_sizes, np.repeat(np.maximum.reduceat(data_sizes, np.arange(0, n, k)), m)])
        N = len(sizes)
        need_k = np.bincount(group[:n], minlength=G)  # data chunks per group: what decoding needs
        # send order: each group's data chunks, then its parity, group by group (parity of early groups arrives early)
        send_order = np.concatenate([np.r_[g * k:min((g + 1) * k, n), n + g * m + np.arange(m)] for g in range(G)]) \
            if m else np.arange(n)
        # first pass: every symbol once, back to back; draws: (fate, tail, pareto) uniforms and one normal per symbol
        u = rng.random((N, 3))
        z = rng.standard_normal(N)
        lat = one_way_latency(cfg, z, u[:, 1], u[:, 2])
        ends = np.empty(N, dtype=np.float64)
        if self.vectorise and sender.can_vectorise(start_s):
            ends[send_order] = sender.send_many(sizes[send_order], start_s)
        else:
            ends[send_order] = [sender.send(int(sizes[c]), start_s) for c in send_order]
        arrive = ends + lat
        lost, corrupt = self._fates(u[:, 0])
        ok = ~(lost | corrupt)
        delivered_at = np.where(ok, arrive, math.inf)
        missing_at = ends + half + late  # declared missing if nothing good has arrived by then
        noticed = np.where(corrupt, np.minimum(arrive, missing_at), missing_at)  # checksum fails at arrival
        need = ~ok | (arrive > missing_at)
        if m:  # parity covers the first m symbols of each group noticed missing; only the rest are re-requested
            # the symbols of each group (data, then parity), without a pass over all symbols per group
            members = np.split(np.argsort(group, kind="stable"), np.cumsum(need_k + m)[:-1])
            for g in np.unique(group[need]):
                miss = members[g][need[members[g]]]
                need[miss[np.argsort(noticed[miss], kind="stable")[:m]]] = False

        def decoded_at(g: int) -> float:  # when group g is complete: its need_k[g]-th symbol delivered
            if not m:
                return math.inf
            return float(np.partition(delivered_at[members[g]], need_k[g] - 1)[need_k[g] - 1])

        queue: list[tuple[float, int, int]] = []  # (when the request reaches the sender, seq, symbol)
        seq = 0
        for c0 in np.flatnonzero(need) if self.repair else []:
            heapq.heappush(queue, (float(noticed[c0]) + half, seq, int(c0)))
            seq += 1
        n_lost, n_corrupt = int(lost.sum()), int(corrupt.sum())
        copies = np.ones(N, dtype=np.int64)
        resent, wire_bytes = 0, int(sizes.sum())
        while queue:
            ready, _, c = heapq.heappop(queue)
            heard = max(ready, sender.free_at) - half  # what the sender has heard of by now
            if delivered_at[c] <= heard or decoded_at(int(group[c])) <= heard:
                continue  # the sender already heard the chunk arrived (or that its group was rebuilt)
            resent += 1
            if resent > _MAX_SENDS_PER_CHUNK * N:
                raise RuntimeError("chunked transfer: too many resends; loss_prob + corrupt_prob is too close to 1")
            # each copy draws from its own stream keyed by (chunk, copy number), so a copy's fate does not depend
            # on the order in which re-requests happen to be served (keeps "more bandwidth is never slower")
            copies[c] += 1
            g = np.random.default_rng([*key, c, int(copies[c])])
            u1 = g.random(3)
            z1 = g.standard_normal(1)
            e = sender.send(int(sizes[c]), ready)
            a = e + float(one_way_latency(cfg, z1, u1[1:2], u1[2:3])[0])
            wire_bytes += int(sizes[c])
            l1, c1 = self._fates(u1[:1])
            mt = e + half + late
            if l1[0]:
                n_lost += 1
                heapq.heappush(queue, (mt + half, seq, c))
            elif c1[0]:
                n_corrupt += 1
                heapq.heappush(queue, (min(a, mt) + half, seq, c))
            else:
                delivered_at[c] = min(delivered_at[c], a)
                if a > mt:
                    heapq.heappush(queue, (mt + half, seq, c))
            seq += 1
        # a data chunk is available when it arrives or when its group is rebuilt, whichever is first
        avail = delivered_at[:n]
        if m:
            avail = np.minimum(avail, np.array([decoded_at(g) for g in range(G)])[group[:n]])
        got = np.isfinite(avail)
        order = np.lexsort((np.arange(n), avail))[: int(got.sum())]  # by delivery time, ties by chunk id
        # the transfer ends with its last delivery, or (holes) when the receiver has noticed the last missing chunk
        end = float(np.where(got, avail, noticed[:n]).max())
        offsets = np.concatenate([[0], np.cumsum(data_sizes)[:-1]])
        holes = [[int(offsets[c]), int(data_sizes[c])] for c in np.flatnonzero(~got)]
        return Transfer(start_s, end, end - start_s, nbytes, n, n_lost, n_corrupt, resent, wire_bytes,
                        order.tolist(), parity_chunks=G * m, holes=holes)


__all__ = ["LINK_PRESETS", "LinkModel", "Transfer", "closed_form_time", "effective_rate_bps", "late_threshold_s",
           "received", "link_config", "one_way_latency", "transfer_time_stats", "ConfigError"]
