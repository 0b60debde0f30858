"""``TorchDistTransport``: the collectives over torch.distributed, the rank-order control gather, the world's ledger
and clock, checkpoints; how the point-to-point messages' bytes travel comes from ``PairMailbox``."""
from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any, Iterator

import torch
import torch.distributed as dist

from islands_kit.comm import control, peer
from islands_kit.comm.codecs import Payload, encode_bytes, get_codec
from islands_kit.comm.layout import RankLayout
from islands_kit.comm.link import LinkModel
from islands_kit.comm.torch_dist.errors import DistributedError, dist_timeout_s
from islands_kit.comm.torch_dist.frames import META, META_BYTES, WORLD_SCHEMA, Op, channel_id
from islands_kit.comm.torch_dist.mailbox import PairMailbox
from islands_kit.comm.torch_dist.world import WorldRules, merge_world, share_limit
from islands_kit.comm.transport import (
    Delivery,
    Handle,
    Ledger,
    SimClock,
    Transport,
    check_round,
    decode,
    received_payload,
    ring_bytes,
    weighted_mean,
)
from islands_kit.config import ConfigError


class TorchDistTransport(PairMailbox, Transport):
    """``Transport`` over torch.distributed; one island per process (see the module docstring for layout and wire)."""

    def __init__(self, layout: RankLayout, link: LinkModel | None, decoupled: bool = False) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise DistributedError("TorchDistTransport: torch.distributed is not initialised; call "
                                   "islands_kit.comm.distributed.init_from_env() (or launch with torchrun) first")
        self.rank = dist.get_rank()
        self.world_size = world = dist.get_world_size()
        self.layout = layout
        if self.layout.world_size != world:
            raise ConfigError(f"islands[*].dp_ranks: the rank layout needs {self.layout.world_size} processes "
                              f"(got WORLD_SIZE={world})")
        self.n_islands = len(layout.ranks_per_island)
        self.island = self.layout.island_of(self.rank)
        self.local_islands = [self.island]
        self.leader = self.layout.first_rank(self.island)
        self.is_leader = self.rank == self.leader
        self.is_writer = self.rank == 0  # the one process that writes result.json
        self.decoupled = decoupled  # one process per island: distributed.make_transport checks the layout
        self.ledger = Ledger()
        # decoupled: every island's clock, the others' mirrored by the loop from the config (module docstring)
        self.clock = SimClock(list(range(self.n_islands)) if decoupled else self.local_islands)
        self.link = link
        self.timeout_s = dist_timeout_s()
        self.lost: dict[int, str] = {}  # decoupled: islands whose process is gone -> why
        self._out_seq = [0] * self.n_islands  # decoupled: messages posted to / received from each island
        self._in_seq = [0] * self.n_islands
        self._outbox: dict[int, list[tuple[list[Any], list[torch.Tensor]]]] = {}  # sends not yet completed
        self.sent_bytes: dict[str, int] = {}  # payload bytes handed to torch.distributed, per channel (leaders)
        self._order: list[tuple[int, int, int]] = []  # (seq, src, dst) of each ledger record: LocalTransport's order
        self._widest: dict[str, int] = {}  # channel -> largest payload posted on it (bounds what peers may report)
        self._inflight: list[Op] = []
        self._seq = 0
        self.device = (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl"
                       else torch.device("cpu"))
        # every rank creates every group, in the same order (a torch.distributed rule)
        self._guard("creating process groups", lambda: self._make_groups())

    def _make_groups(self) -> None:
        # new_group does not inherit init_process_group's timeout (it would fall back to 30 min): pass it explicitly
        t = timedelta(seconds=self.timeout_s)
        self._meta_group = dist.new_group(backend="gloo", timeout=t)
        self.cross_group = dist.new_group(ranks=self.layout.leaders, timeout=t)
        self.island_group = None
        for i, k in enumerate(self.layout.ranks_per_island):
            if k > 1:
                g = dist.new_group(ranks=self.layout.ranks_of(i), timeout=t)
                if i == self.island:
                    self.island_group = g
        # decoupled: one gloo group per (island 0, island j) pair — gloo closes every connection of a group whose
        # wait timed out, so a silent island must not share one with the others
        self._pair_groups: dict[int, Any] = {}
        if self.decoupled:
            for j in range(1, self.n_islands):
                g = dist.new_group(ranks=[0, self.layout.first_rank(j)], backend="gloo", timeout=t)
                if self.island == 0:
                    self._pair_groups[j] = g
                elif self.island == j:
                    self._pair_groups[0] = g

    # -- errors ---------------------------------------------------------------------------------------------------
    def _guard(self, what: str, fn: Any) -> Any:
        try:
            return fn()
        except DistributedError:
            raise
        except Exception as e:  # gloo/NCCL raise RuntimeError or DistBackendError subclasses
            raise self._error(what, e) from e

    # -- wire format ----------------------------------------------------------------------------------------------
    def _agree_on_length(self, what: str, wire: torch.Tensor, peers: tuple[int, int] | None) -> None:
        """Leaders: the length of every frame of this operation (every island's, or, in a directed step to and from
        ``peers`` = (target, source), the source's), exchanged and checked before a frame is: gloo aborts the process
        (SIGABRT, no error) on a frame of another size than the buffer posted for it. Honest frames have one size
        (same codec, same fragment)."""
        mine = torch.tensor([wire.numel()], dtype=torch.int64, device=wire.device)
        if peers is None:
            got = [torch.zeros_like(mine) for _ in range(self.n_islands)]
            self._guard(what + " (frame lengths)", lambda: dist.all_gather(got, mine, group=self.cross_group))
            islands = list(range(self.n_islands))
        else:
            got, (dst, src) = [torch.zeros_like(mine)], peers
            ops = [dist.P2POp(dist.isend, mine, self.layout.first_rank(dst), self.cross_group),
                   dist.P2POp(dist.irecv, got[0], self.layout.first_rank(src), self.cross_group)]
            self._guard(what + " (frame lengths)", lambda: [w.wait() for w in dist.batch_isend_irecv(ops)])
            islands = [src]
        for j, n in zip(islands, got):
            if int(n) != wire.numel():
                raise DistributedError(f"islands_kit.comm.distributed: {what}: island {j} (rank {self.layout.first_rank(j)}) "
                                       f"announced a frame of {int(n)} bytes where this operation's are {wire.numel()}; "
                                       "refused before it is received")

    def _pack(self, seq: int, dst: int, channel: str, weight: float, p: Payload) -> torch.Tensor:
        head = META.pack(seq, self.island, dst, channel_id(channel), 0, self.clock.now[self.island], weight)
        return torch.frombuffer(bytearray(head + encode_bytes(p)), dtype=torch.uint8)

    def _unpack(self, op: Op, msg: torch.Tensor, src: int, dst: int) -> tuple[float, float, Payload]:
        """(sent_at, weight, payload) of island ``src``'s message, every field read through ``comm.peer``; a message
        from another operation is a desync, anything else a peer got wrong a ``PayloadError`` turned into a
        ``DistributedError`` naming the island, its rank and the field (lock-step: every rank stops)."""
        b = msg.cpu().numpy().tobytes()
        seq, s, d, ch, reserved, sent_at, weight = META.unpack_from(b)
        if (seq, s, d, ch) != (op.seq, src, dst, channel_id(op.channel)):
            raise DistributedError(
                f"islands_kit.comm.distributed: protocol desync on rank {self.rank} (island {self.island}): expected "
                f"{op.kind} #{op.seq} on {op.channel!r} from island {src} to {dst}, got #{seq} from {s} to {d} "
                "(every process must post the same operations in the same order)")
        rank = self.layout.first_rank(src)
        who = f"island {src}'s {op.kind} #{op.seq} on {op.channel!r}"
        try:
            if reserved != 0:
                raise peer.PayloadError(f"{who} from rank {rank}: reserved: must be 0 (got {reserved})", rank, "reserved")
            peer.read_clock(sent_at, self.clock.now[self.island], rank, "sent_at", who, self.horizon_s)
            peer.read_weight(weight, rank, "weight", who)
            p = peer.read_payload(b[META_BYTES:], peer.PayloadSpec.of(op.mine), rank, who)
        except peer.PeerError as e:
            raise DistributedError(f"islands_kit.comm.distributed: on rank {self.rank}: {e}") from None
        return sent_at, weight, p

    # -- Transport ------------------------------------------------------------------------------------------------
    def _mine(self, what: str, channel: str, payloads: dict[int, Any]) -> Any:
        if sorted(payloads) != self.local_islands:
            raise ValueError(f"{what} on {channel!r}: this process holds island {self.island} and must pass exactly its "
                             f"payload, got islands {sorted(payloads)}: under torch.distributed every island takes part "
                             "in every operation (absent / preempted islands are simulated by LocalTransport only)")
        return payloads[self.island]

    def all_reduce(self, channel: str, payloads: dict[int, Payload], weights: dict[int, float]) -> Handle:
        return self._all_gather("all_reduce", channel, payloads, weights)

    def all_gather(self, channel: str, payloads: dict[int, Payload], weights: dict[int, float]) -> Handle:
        """Every island's (island, weight, decoded tensor) in island-id order; same wire and ledger as all_reduce."""
        return self._all_gather("all_gather", channel, payloads, weights)

    def _all_gather(self, kind: str, channel: str, payloads: dict[int, Payload], weights: dict[int, float]) -> Handle:
        p = self._mine(kind, channel, payloads)
        msg = self._pack(self._seq, -1, channel, float(weights[self.island]), p)
        op = Op(self._seq, kind, channel, self.clock.now[self.island], p, -1, [], [], msg.numel())
        self._seq += 1
        self._widest[channel] = max(self._widest.get(channel, 0), p.nbytes)
        if self.is_leader:
            n = self.n_islands  # priced as comm/transport.py states: ring all-reduce, direct all-gather
            sent = ring_bytes(p.nbytes, n, self.island) if kind == "all_reduce" else p.nbytes * (n - 1)
            wire = msg.to(self.device)
            self._agree_on_length(f"{kind} #{op.seq} on {channel!r}", wire, None)
            self.sent_bytes[channel] = self.sent_bytes.get(channel, 0) + sent
            op.recv = [torch.empty_like(wire) for _ in range(self.n_islands)]
            op.works = [self._guard(f"{kind} #{op.seq} on {channel!r}",
                                    lambda: dist.all_gather(op.recv, wire, group=self.cross_group, async_op=True))]
        return self._post(op)

    def send_recv(self, channel: str, payloads: dict[int, Payload], targets: dict[int, int]) -> Handle:
        p = self._mine("send_recv", channel, payloads)
        check_round(channel, targets, self.n_islands)
        dst, src = targets[self.island], next(i for i, t in targets.items() if t == self.island)
        msg = self._pack(self._seq, dst, channel, 0.0, p)
        op = Op(self._seq, "send_recv", channel, self.clock.now[self.island], p, src, [], [], msg.numel())
        self._seq += 1
        self._widest[channel] = max(self._widest.get(channel, 0), p.nbytes)
        if self.is_leader and dst != self.island:  # an island that targets itself sits the round out
            wire = msg.to(self.device)
            what = f"send_recv #{op.seq} on {channel!r} to island {dst}, from island {src}"
            self._agree_on_length(what, wire, (dst, src))
            self.sent_bytes[channel] = self.sent_bytes.get(channel, 0) + p.nbytes
            op.recv = [torch.empty_like(wire)]  # the source's message has our length (checked just above)
            ops = [dist.P2POp(dist.isend, wire, self.layout.first_rank(dst), self.cross_group),
                   dist.P2POp(dist.irecv, op.recv[0], self.layout.first_rank(src), self.cross_group)]
            op.works = self._guard(what, lambda: dist.batch_isend_irecv(ops))
        return self._post(op)

    def _post(self, op: Op) -> Handle:
        # strategies test ``island in handle.arrival`` for participation before waiting: the key exists from the
        # start; its value (a placeholder until then) is final once the first wait / wait_result completes the op
        op.arrival[self.island] = op.posted_at
        self._inflight.append(op)
        return Handle(op.results, op.arrival, self.clock, finish=lambda: self._complete_through(op))

    def _complete_through(self, op: Op) -> None:
        """Complete every operation posted up to and including ``op``, oldest first (keeps the link model's
        per-direction order equal to the simulator's)."""
        while not op.done:
            self._finish(self._inflight.pop(0))

    def drain(self) -> None:
        """Complete every operation in flight (results are kept for their handles; no clock moves)."""
        while self._inflight:
            self._finish(self._inflight.pop(0))

    def _finish(self, op: Op) -> None:
        what = f"{op.kind} #{op.seq} on {op.channel!r}" + (f" with island {op.peer}" if op.peer >= 0 else "")
        if self.is_leader:
            self._guard(what, lambda: [w.wait() for w in op.works])
        msgs = self._share_in_island(op, what)
        me = self.island
        if op.kind in ("all_reduce", "all_gather"):
            decoded, weights = [], []
            arrival = op.posted_at
            n = self.n_islands
            pred = (me - 1) % n  # the ring predecessor (all_reduce)
            for src in range(n):
                sent_at, w, p = self._unpack(op, msgs[src], src, -1)
                weights.append(w)
                if src == me:
                    decoded.append(get_codec(op.mine.codec, op.mine.block_size).decode(op.mine))
                    continue
                holes: list[list[int]] = []
                if op.kind == "all_gather":
                    end, holes = self._transfer(op, src, me, p.nbytes, sent_at)
                    arrival = max(arrival, end)
                else:  # ring: the transfer from the predecessor, and no result before every member has posted
                    arrival = max(arrival, sent_at)
                    if src == pred:
                        end, holes = self._transfer(op, src, me, ring_bytes(p.nbytes, n, src), sent_at)
                        arrival = max(arrival, end)
                decoded.append(decode(received_payload(p, holes)).to(op.mine.data.device))
            if op.kind == "all_reduce":
                op.results[me] = weighted_mean(decoded, weights)
            else:
                op.results[me] = [(i, w, x) for i, (w, x) in enumerate(zip(weights, decoded))]
            op.arrival[me] = arrival
        elif op.peer == me:  # sat the round out
            op.arrival[me], op.results[me] = op.posted_at, decode(op.mine)
        else:
            sent_at, _, p = self._unpack(op, msgs[0], op.peer, me)
            op.arrival[me], holes = self._transfer(op, op.peer, me, p.nbytes, sent_at)
            op.results[me] = decode(received_payload(p, holes)).to(op.mine.data.device)
        op.recv, op.works = [], []
        op.done = True

    def _share_in_island(self, op: Op, what: str) -> list[torch.Tensor]:
        """The messages the leader received, on every rank of the island (one broadcast of their concatenation)."""
        k = 1 if op.kind == "send_recv" else self.n_islands
        if self.island_group is None or (op.kind == "send_recv" and op.peer == self.island):
            return op.recv
        flat = torch.cat(op.recv) if self.is_leader else torch.empty(k * op.msg_len, dtype=torch.uint8, device=self.device)
        self._guard(what + " (island broadcast)", lambda: dist.broadcast(flat, src=self.leader, group=self.island_group))
        return list(flat.view(k, op.msg_len).unbind(0))  # (k, msg_len) -> k messages

    def _transfer(self, op: Op, src: int, dst: int, nbytes: int, start: float) -> tuple[float, list[list[int]]]:
        """Arrival of src's message at dst (simulated) and the byte ranges the link left missing (as
        ``LocalTransport._send``), recorded in the ledger by the receiving island's leader."""
        end, holes = self._link_transfer(nbytes, start, src, dst)
        if self.is_leader:
            self.ledger.record(op.channel, src, dst, nbytes, start, end)
            self._order.append((op.seq, src, dst))
        return end, holes

    # -- decoupled mode: point-to-point messages, no collective (module docstring) ---------------------------------
    def send(self, channel: str, src: int, dst: int, payload: Payload, start_s: float) -> Delivery:
        """``LocalTransport.send``'s account of one transfer src -> dst, made by the process that prices it (the
        decoupled synchroniser, for every transfer of its star): arrival from the link model, the ledger record and
        the payload as the link delivered it. The bytes themselves travel with ``post`` / ``receive``."""
        if not self.decoupled:
            raise NotImplementedError("TorchDistTransport.send: point-to-point transfers are priced in decoupled mode only")
        return self._deliver(channel, src, dst, payload, start_s)

    def barrier(self) -> None:
        self._guard("barrier", lambda: dist.barrier(group=self._meta_group))

    # -- control messages -----------------------------------------------------------------------------------------
    def gather_control(self, kind: str, body: Any, schema: Any) -> list[Any]:
        """Collective: every rank's ``body`` in rank order, sent as a ``comm.control`` JSON message and checked
        against ``schema`` on receipt. A bad message from any rank raises the same ``DistributedError`` on every
        rank."""
        limit = control.limit(kind, schema)
        return self._decode_all(kind, schema, self._gather_bytes(kind, control.encode(kind, body), limit), limit)

    def _decode_all(self, kind: str, schema: Any, raws: list[bytes], limit: int) -> list[Any]:
        out = []
        for r, raw in enumerate(raws):
            try:
                out.append(peer.read_control(raw, kind, schema, r, limit))
            except peer.ControlError as e:
                raise DistributedError(f"islands_kit.comm.distributed: {e}") from None
        return out

    def _gather_bytes(self, kind: str, raw: bytes, limit: int) -> list[bytes]:
        """Every rank's ``raw`` bytes, in rank order: the lengths first (int64), each checked against ``limit`` before
        a byte of the messages is received, then the messages padded to the longest (uint8), on the gloo meta group."""
        what = f"control message {kind!r}"
        n = torch.tensor([len(raw)], dtype=torch.int64)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        self._guard(what + " (lengths)", lambda: dist.all_gather(sizes, n, group=self._meta_group))
        lens = [int(x) for x in sizes]
        for r, length in enumerate(lens):
            if not 0 < length <= limit:
                raise DistributedError(f"islands_kit.comm.distributed: {what} from rank {r}: announced {length} bytes, "
                                       f"outside (0, {limit}]; refused before reading it")
        width = max(lens)
        mine = torch.zeros(width, dtype=torch.uint8)
        mine[:len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        bufs = [torch.empty(width, dtype=torch.uint8) for _ in range(self.world_size)]
        self._guard(what, lambda: dist.all_gather(bufs, mine, group=self._meta_group))
        return [b[:length].numpy().tobytes() for b, length in zip(bufs, lens)]

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's transport state for a checkpoint (plain data). Collective: completes every operation in flight
        first (as ``world_view`` does at every evaluation; results wait in their handles and no clock moves), so what
        the strategies hold in flight is plain data."""
        self.drain()
        return {**super().state_dict(), "seq": self._seq, "order": [list(o) for o in self._order],
                "sent_bytes": dict(self.sent_bytes), "widest": dict(self._widest)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        super().load_state_dict(d)
        self._seq = int(d["seq"])
        self._order = [(int(a), int(b), int(c)) for a, b, c in d["order"]]
        self.sent_bytes = {str(k): int(v) for k, v in d["sent_bytes"].items()}
        self._widest = {str(k): int(v) for k, v in d.get("widest", {}).items()}
        for _, _, nbytes, _, _, ch in self.ledger.timeline:  # a checkpoint written before "widest" was kept
            self._widest[ch] = max(self._widest.get(ch, 0), nbytes)

    # -- the whole world's ledger and clock -----------------------------------------------------------------------
    def gather_world(self) -> tuple[Ledger, SimClock]:
        """Collective (every rank, same point): the merged ledger (records sorted into LocalTransport's order) and a
        clock over all islands (each island's leader's clock). Completes every operation in flight first, so the
        ledger holds everything posted so far, as the simulator's does."""
        self.drain()
        mine = {"island": self.island, "leader": self.is_leader, "sent": dict(self.sent_bytes),
                "records": [[list(o), list(t)] for o, t in zip(self._order, self.ledger.timeline)],
                "clock": self.clock.state_dict()}
        channels = sorted(self._widest)
        limit = share_limit(self._seq, self.n_islands, channels)  # the same on every rank: refused before received
        objs = self._decode_all("ledger", WORLD_SCHEMA, self._gather_bytes("ledger", control.encode("ledger", mine), limit),
                                limit)
        rules = WorldRules(self.layout, self._seq, dict(self._widest), self.clock.now[self.island], self.horizon_s)
        try:  # a rank describes only itself, within what this run allows (comm/torch_dist/world.py)
            ledger, clock, sent = merge_world(objs, rules)
        except peer.PeerError as e:
            raise DistributedError(f"islands_kit.comm.distributed: {e}") from None
        got = {ch: e.bytes for ch, e in ledger.channels.items()}
        if {k: v for k, v in sent.items() if v} != {k: v for k, v in got.items() if v}:
            raise DistributedError(f"islands_kit.comm.distributed: ledger mismatch: bytes sent {sent} != bytes received {got}")
        return ledger, clock

    @contextlib.contextmanager
    def world_view(self) -> Iterator["TorchDistTransport"]:
        """Collective: inside the block ``ledger`` and ``clock`` are the whole world's (see ``gather_world``). In
        decoupled mode local: this process's ledger and mirrored clocks (the synchroniser's ledger is the world's)."""
        if self.decoupled:
            yield self
            return
        merged = self.gather_world()
        saved = self.ledger, self.clock
        self.ledger, self.clock = merged
        try:
            yield self
        finally:
            self.ledger, self.clock = saved
