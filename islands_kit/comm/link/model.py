"""``LinkModel``: the seeded simulator of one link, its naive and chunked (with FEC) send paths; the model is stated in
``islands_kit.comm.link``'s docstring."""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from islands_kit.comm.link.contact import ContactPlan, contact_plan
from islands_kit.comm.link.latency import effective_rate_bps, late_threshold_s, one_way_latency
from islands_kit.comm.link.transfer import Transfer
from islands_kit.comm.link.wire import Sender, Wire
from islands_kit.config import MAX_SENDS_PER_CHUNK as _MAX_SENDS_PER_CHUNK  # the bound link.loss_prob is checked against
from islands_kit.config import LinkConfig


@dataclass
class _Direction:
    wire: Wire
    bdp_bytes: float  # this direction's bandwidth-delay product (its rate may be the contact plan's)
    cwnd: list[float]  # per connection, bytes (inf = full)
    last_use: list[float]
    count: int = 0


class LinkModel:
    """Seeded simulator of one wide-area link (see the module docstring for the model)."""

    def __init__(self, cfg: LinkConfig, seed: int = 0, vectorise: bool = True, repair: bool = True,
                 contacts: ContactPlan | None = None) -> None:
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
        # when each direction may send and at what rate; by default what the config says (``contact_plan``), so
        # every LinkModel made from one config -- the simulator's and each torch.distributed rank's -- agrees
        self.contacts = contact_plan(cfg) if contacts is None else contacts
        self._dirs: dict[tuple[int, int], _Direction] = {}

    def _direction(self, src: int, dst: int) -> _Direction:
        d = self._dirs.get((src, dst))
        if d is None:
            c, plan = self.cfg, self.contacts
            n = c.n_connections
            own = plan.rate_bps(src, dst)
            rate = self.rate_bps if own is None else (min(own, c.pacing_bps) if c.pacing_bps > 0 else own)
            wire = Wire(rate, plan.schedule(src, dst), f"{src} -> {dst}; {plan.why_down}" if plan.why_down else "")
            d = _Direction(wire, rate / 8.0 * c.rtt_s, [float(c.init_cwnd_bytes)] * n, [-math.inf] * n)
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
        share = d.bdp_bytes / len(conns)
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
        sender = Sender(d.wire, self.cfg.rtt_s, self._open_window(d, conns, start_s), d.bdp_bytes)
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

    def _naive(self, nbytes: int, start_s: float, sender: Sender, rng: np.random.Generator) -> Transfer:
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

    def _chunked(self, nbytes: int, start_s: float, sender: Sender, rng: np.random.Generator,
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
