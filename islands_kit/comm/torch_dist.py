"""``TorchDistTransport``: the ``Transport`` interface on torch.distributed (gloo on CPU, NCCL on GPU), launched by torchrun.
(Over 400 lines because one class holds the whole wire protocol and this docstring states it; the rank layout and
launch glue live in ``islands_kit/distributed.py``, the control-message format in ``comm/control.py``.)

The sync strategies run unchanged: each process holds one island (``local_islands == [my island]``) and calls the same
``all_reduce`` / ``all_gather`` / ``exchange`` / ``all_reduce_tensor`` as in the simulator. The result of an
all-reduce is *defined* as decode-each-payload then ``weighted_mean`` in island-id order, so this transport gives
bit-identical results to ``LocalTransport`` (tested end to end: the whole result.json — final_val_bpb, ledger,
simulated clock — equal to the last bit, wall_time_s aside).

Not supported here in lock-step mode: absent (preempted) islands — every island takes part in every operation, so
``faults.preempt_island`` is rejected by ``distributed.make_transport`` unless ``sync.mode=decoupled`` (below). Checkpoints are one file per rank (see
``islands_kit/checkpoint.py``); ``state_dict`` / ``load_state_dict`` below carry this transport's part.

Ranks. Two launch shapes, chosen by ``WORLD_SIZE`` (``islands_kit.distributed.RankLayout.for_world``, passed in):

* one process per island (``WORLD_SIZE == len(islands)``): an island's ``dp_ranks`` are folded into its micro-batches
  (run one after another in that process, exactly as the simulator does) — bit-identical to the simulator;
* one process per data-parallel rank (``WORLD_SIZE == sum(islands[*].dp_ranks)``): island ``i`` owns the contiguous
  global ranks ``[sum(dp_ranks[:i]), sum(dp_ranks[:i+1]))``; its first rank is the island's *leader*. Ranks of one
  island share ``island_group`` (gradients summed over it in ``Island.forward_backward``, Shampoo blocks owned across
  it). Bit-identical to the simulator when an island has 2 ranks of one micro-batch each, as in the two_site presets
  (a + b is commutative, so gloo's sum equals the simulator's accumulation; tested, with Shampoo); with more ranks or
  micro-batches per rank the sum is associated differently, and results agree to float rounding only.

  Example: two_site demo has dp_ranks (2, 1): ranks 0, 1 = island 0 (leader 0), rank 2 = island 1 (leader 2).

Groups. ``cross_group`` = the island leaders (the wide-area link); ``island_group`` = the ranks of my island (None for
an island of one process); ``_meta_group`` = all ranks on gloo (ledger/clock merging, barrier), even under NCCL.

Wire. A message is one uint8 tensor: a 40-byte header (``_META``: op sequence number, source and destination island,
CRC-32 of the channel name, the sender's simulated time, the all-reduce weight) followed by ``codecs.encode_bytes``
(24-byte header with codec, numel, block size and CRC-32, then ``payload.data``). all_reduce = ``all_gather`` of the
messages among leaders (async, completed on first ``Handle.wait``; all_gather is the same message flow, returning
every island's decoded payload instead of their mean); exchange = ``batch_isend_irecv`` between partner
leaders; non-leader ranks receive what their leader received by a ``broadcast`` inside ``island_group``. Every island's
payload must have the same byte length in one call (same codec, same fragment: true for every strategy here), because
gloo's all_gather needs equal sizes; a mismatch raises. The header lets the receiver check that both sides are in the
same operation (a desynchronised protocol raises ``DistributedError`` instead of decoding garbage). Every field a peer
sent is read through ``comm/peer.py`` (send time, weight, the payload against this rank's own codec, numel and block
size, its codes and top-k indices) before it is used; a refusal stops every rank with one line naming the island, its
rank and the field.

Ledger. Each process records the messages it *receives* (its leader's inbound links): ``(channel, src, me, nbytes,
start, end)``, priced by the cost model stated in ``comm/transport.py`` exactly like ``LocalTransport``: for an
all_reduce only the ring transfer from its predecessor (``ring_bytes`` of that payload; the wire here really carries
every payload to every leader, which the ring accounting deliberately does not price: it is what a ring implementation
would send), for an all_gather each other island's payload, for an exchange the partner's. Senders separately count
the payload bytes they hand to torch.distributed (``sent_bytes``), priced the same way; ``world_view()`` checks the two
agree. The full ledger is assembled by the collective ``world_view()`` (every rank must call it at the same point;
run.py does around evaluation records and the final result).

Simulated clock. The sender's simulated time travels in the header; the receiver computes the arrival with its own
``LinkModel`` for the (src -> me) direction. ``LinkModel`` keeps each direction's wire, connections and random stream
separate (draws seeded by ``(seed, src, dst, k)``, k = the transfer's index in that direction), so the receiver, which
sees every transfer on its inbound directions in posting order, reproduces the simulator's times exactly. To keep that
order, operations complete first-in first-out (waiting on a handle first completes every earlier one). A handle's
``arrival`` holds this island's key from the start (strategies test participation with ``island in handle.arrival``);
its value is final once the first ``wait``/``wait_result`` has completed the operation.

Failures. Every wait is bounded: a dead peer closes its sockets and the survivor's pending operation fails at once; a
peer that stops answering trips the process-group timeout (``ISLANDS_KIT_DIST_TIMEOUT_S``, default 300 s). Either way
the run ends with a ``DistributedError`` that names the rank, island, channel and operation. (Fault injection for the
tests lives in a test-only subclass, ``tests/faulty_transport.py``.)

Decoupled mode (``sync.mode=decoupled``, ``decoupled=True``; one process per island only). After the rendezvous no
collective, so that a dead island cannot hang anybody: islands and the synchroniser (rank 0, with island 0) exchange
point-to-point messages (``post`` / ``receive``, each pair (island 0, island j) on its own gloo group: gloo closes
every connection of a group whose wait timed out): a control message (``comm/control.py``, checked against the
receiver's schema) and optionally one payload (``codecs.encode_bytes``), sent as a fixed header (int64: sequence
number, CRC-32 of the kind, both lengths) then the body, on tags numbered per (sender, receiver) pair, so a message
can only be read by the receive it was meant for. Every ``receive`` is bounded (``timeout_s``); a peer that died
(closed sockets: at once), stayed silent past the bound or sent a message the wire refuses (``comm/peer.py``: out of
sequence, malformed, off-schema, a payload that is not what this rank expects) is *lost*: ``lost_islands()`` names it, nothing is sent to
or awaited from it again, and the caller goes on without it (or, with ``required=True``, the run ends with a
``DistributedError``). Posting never blocks; a send is completed before the next ``receive`` from the same peer (the
protocol answers only what it has read; gloo completes a send once its receive is posted, so the wait is bounded like
that receive) or at ``finish_messages``. The clock covers every island (the loop mirrors the others' clocks from the
config: in decoupled mode an island's clock does not depend on the wire), and ``world_view`` is local: the
synchroniser prices every transfer of the star itself (``send``: the link model and the ledger, as
``LocalTransport``), so its ledger is the whole world's.

Control messages. Everything that is not a payload (checkpoint steps and errors at resume, the ledger and clocks
merged by ``world_view``) goes through ``gather_control``: versioned, length-limited JSON checked against a schema on
receipt (``comm/control.py``), never a pickle. Lengths are all-gathered first, so an oversized message is refused before
it is read; every rank decodes every message, so a malformed one stops every rank with the same one-line error naming
the peer rank (no rank is left waiting).
"""
from __future__ import annotations

import contextlib
import os
import struct
import warnings
import zlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Iterator

import torch
import torch.distributed as dist

from islands_kit.comm import control, peer
from islands_kit.comm.codecs import Payload, encode_bytes, get_codec
from islands_kit.comm.control import Int, MapOf, Num
from islands_kit.comm.transport import Delivery, Handle, Ledger, SimClock, Transport, decode, received_payload, ring_bytes, weighted_mean
from islands_kit.config import ConfigError

if TYPE_CHECKING:
    from islands_kit.comm.link import LinkModel
    from islands_kit.distributed import RankLayout

DEFAULT_TIMEOUT_S = 300.0
_META = struct.Struct("<qiiIIdd")  # seq, src island, dst island (-1: all), crc32(channel), reserved, sent_at, weight
META_BYTES = _META.size  # 40


class DistributedError(RuntimeError):
    """A peer died, never arrived, stopped answering within the timeout, or the protocol went out of step."""


def dist_timeout_s() -> float:
    """Bound on any one collective / rendezvous wait: ``$ISLANDS_KIT_DIST_TIMEOUT_S`` seconds (default 300)."""
    raw = os.environ.get("ISLANDS_KIT_DIST_TIMEOUT_S", "")
    try:
        t = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ConfigError(f"ISLANDS_KIT_DIST_TIMEOUT_S: must be a number of seconds > 0 (got {raw!r})") from None
    if not t > 0:
        raise ConfigError(f"ISLANDS_KIT_DIST_TIMEOUT_S: must be a number of seconds > 0 (got {raw!r})")
    return t


@dataclass
class _Op:
    """One posted operation; ``results``/``arrival`` are the dicts its Handle reads, filled on completion."""

    seq: int
    kind: str  # "all_reduce" | "all_gather" | "exchange"
    channel: str
    posted_at: float  # my simulated clock when posted
    mine: Payload
    peer: int  # exchange partner island (-1 for all_reduce)
    works: list[Any]
    recv: list[torch.Tensor]  # leader: received messages (all_reduce: one per island in id order; exchange: one)
    msg_len: int
    results: dict[int, Any] = field(default_factory=dict)
    arrival: dict[int, float] = field(default_factory=dict)
    done: bool = False


# what each rank sends to ``gather_world``: its island, its inbound ledger records ((seq, src, dst), (start, end,
# bytes, src, dst, channel)), the payload bytes it handed over per channel, and its clock
_RECORD = ((Int(0), Int(0), Int(0)), (Num(0), Num(0), Int(0), Int(0), Int(0), str))
_WORLD_SCHEMA = {"island": Int(0), "leader": bool, "sent": MapOf(Int(0)), "records": [_RECORD],
                 "clock": {"now": MapOf(Num(0)), "busy": MapOf(Num(0)), "idle": MapOf(Num(0))}}


def _channel_id(channel: str) -> int:
    return zlib.crc32(channel.encode())


def _irecv(t: torch.Tensor, src_rank: int, group: Any, tag: int) -> Any:
    work = dist.irecv(t, src_rank, group=group, tag=tag)
    assert work is not None  # None only for a rank outside ``group``
    return work


class TorchDistTransport(Transport):
    """``Transport`` over torch.distributed; one island per process (see the module docstring for layout and wire)."""

    def __init__(self, layout: "RankLayout", link: "LinkModel | None", decoupled: bool = False) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise DistributedError("TorchDistTransport: torch.distributed is not initialised; call "
                                   "islands_kit.distributed.init_from_env() (or launch with torchrun) first")
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
        self._inflight: list[_Op] = []
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
    def _error(self, what: str, e: BaseException) -> DistributedError:
        cause = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return DistributedError(
            f"islands_kit.distributed: {what} failed on rank {self.rank} (island {self.island}): a peer process "
            f"exited, never arrived or stopped answering (timeout {self.timeout_s:g} s, ISLANDS_KIT_DIST_TIMEOUT_S). "
            f"Cause: {type(e).__name__}: {cause}")

    def _guard(self, what: str, fn: Any) -> Any:
        try:
            return fn()
        except DistributedError:
            raise
        except Exception as e:  # gloo/NCCL raise RuntimeError or DistBackendError subclasses
            raise self._error(what, e) from e

    # -- wire format ----------------------------------------------------------------------------------------------
    def _pack(self, seq: int, dst: int, channel: str, weight: float, p: Payload) -> torch.Tensor:
        head = _META.pack(seq, self.island, dst, _channel_id(channel), 0, self.clock.now[self.island], weight)
        return torch.frombuffer(bytearray(head + encode_bytes(p)), dtype=torch.uint8)

    def _unpack(self, op: _Op, msg: torch.Tensor, src: int, dst: int) -> tuple[float, float, Payload]:
        """(sent_at, weight, payload) of island ``src``'s message, every field read through ``comm.peer``; a message
        from another operation is a desync, anything else a peer got wrong a ``PayloadError`` turned into a
        ``DistributedError`` naming the island, its rank and the field (lock-step: every rank stops)."""
        b = msg.cpu().numpy().tobytes()
        seq, s, d, ch, reserved, sent_at, weight = _META.unpack_from(b)
        if (seq, s, d, ch) != (op.seq, src, dst, _channel_id(op.channel)):
            raise DistributedError(
                f"islands_kit.distributed: protocol desync on rank {self.rank} (island {self.island}): expected "
                f"{op.kind} #{op.seq} on {op.channel!r} from island {src} to {dst}, got #{seq} from {s} to {d} "
                "(every process must post the same operations in the same order)")
        rank = self.layout.first_rank(src)
        who = f"island {src}'s {op.kind} #{op.seq} on {op.channel!r}"
        try:
            if reserved != 0:
                raise peer.PayloadError(f"{who} from rank {rank}: reserved: must be 0 (got {reserved})", rank, "reserved")
            peer.read_clock(sent_at, self.clock.now[self.island], rank, "sent_at", who)
            peer.read_weight(weight, rank, "weight", who)
            p = peer.read_payload(b[META_BYTES:], peer.PayloadSpec.of(op.mine), rank, who)
        except peer.PeerError as e:
            raise DistributedError(f"islands_kit.distributed: on rank {self.rank}: {e}") from None
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
        op = _Op(self._seq, kind, channel, self.clock.now[self.island], p, -1, [], [], msg.numel())
        self._seq += 1
        if self.is_leader:
            n = self.n_islands  # priced as comm/transport.py states: ring all-reduce, direct all-gather
            sent = ring_bytes(p.nbytes, n, self.island) if kind == "all_reduce" else p.nbytes * (n - 1)
            self.sent_bytes[channel] = self.sent_bytes.get(channel, 0) + sent
            wire = msg.to(self.device)
            op.recv = [torch.empty_like(wire) for _ in range(self.n_islands)]
            op.works = [self._guard(f"{kind} #{op.seq} on {channel!r}",
                                    lambda: dist.all_gather(op.recv, wire, group=self.cross_group, async_op=True))]
        return self._post(op)

    def exchange(self, channel: str, payloads: dict[int, Payload], partner: dict[int, int]) -> Handle:
        p = self._mine("exchange", channel, payloads)
        j = partner[self.island]
        if not (0 <= j < self.n_islands) or j == self.island:
            raise ValueError(f"exchange on {channel!r}: island {self.island}'s partner must be another island in "
                             f"[0, {self.n_islands}) (got {j})")
        msg = self._pack(self._seq, j, channel, 0.0, p)
        op = _Op(self._seq, "exchange", channel, self.clock.now[self.island], p, j, [], [], msg.numel())
        self._seq += 1
        if self.is_leader:
            self.sent_bytes[channel] = self.sent_bytes.get(channel, 0) + p.nbytes
            wire = msg.to(self.device)
            op.recv = [torch.empty_like(wire)]  # the partner's message has our length (same codec and fragment)
            rank = self.layout.first_rank(j)
            ops = [dist.P2POp(dist.isend, wire, rank, self.cross_group), dist.P2POp(dist.irecv, op.recv[0], rank, self.cross_group)]
            op.works = self._guard(f"exchange #{op.seq} on {channel!r} with island {j}", lambda: dist.batch_isend_irecv(ops))
        return self._post(op)

    def _post(self, op: _Op) -> Handle:
        # strategies test ``island in handle.arrival`` for participation before waiting: the key exists from the
        # start; its value (a placeholder until then) is final once the first wait / wait_result completes the op
        op.arrival[self.island] = op.posted_at
        self._inflight.append(op)
        return Handle(op.results, op.arrival, self.clock, finish=lambda: self._complete_through(op))

    def _complete_through(self, op: _Op) -> None:
        """Complete every operation posted up to and including ``op``, oldest first (keeps the link model's
        per-direction order equal to the simulator's)."""
        while not op.done:
            self._finish(self._inflight.pop(0))

    def drain(self) -> None:
        """Complete every operation in flight (results are kept for their handles; no clock moves)."""
        while self._inflight:
            self._finish(self._inflight.pop(0))

    def _finish(self, op: _Op) -> None:
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
        else:
            sent_at, _, p = self._unpack(op, msgs[0], op.peer, me)
            op.arrival[me], holes = self._transfer(op, op.peer, me, p.nbytes, sent_at)
            op.results[me] = decode(received_payload(p, holes)).to(op.mine.data.device)
        op.recv, op.works = [], []
        op.done = True

    def _share_in_island(self, op: _Op, what: str) -> list[torch.Tensor]:
        """The messages the leader received, on every rank of the island (one broadcast of their concatenation)."""
        k = 1 if op.kind == "exchange" else self.n_islands
        if self.island_group is None:
            return op.recv
        flat = torch.cat(op.recv) if self.is_leader else torch.empty(k * op.msg_len, dtype=torch.uint8, device=self.device)
        self._guard(what + " (island broadcast)", lambda: dist.broadcast(flat, src=self.leader, group=self.island_group))
        return list(flat.view(k, op.msg_len).unbind(0))  # (k, msg_len) -> k messages

    def _transfer(self, op: _Op, src: int, dst: int, nbytes: int, start: float) -> tuple[float, list[list[int]]]:
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

    def lost_islands(self) -> set[int]:
        """Islands whose process died or stopped answering (decoupled mode): never awaited again."""
        return set(self.lost)

    def _lose(self, island: int, what: str, e: BaseException, required: bool) -> None:
        err = self._error(what, e)
        if required:
            raise err from e
        self.drop(island, str(err))

    def drop(self, island: int, why: str) -> None:
        """Go on without ``island`` (decoupled mode): its process died, stopped answering, or sent something the
        wire refused (``comm.peer``); ``why`` says which, in one line. Nothing is sent to or read from it again."""
        if island not in self.lost:
            self.lost[island] = why
            warnings.warn(f"islands_kit.distributed: island {island} is lost, the run goes on without it ({why})",
                          RuntimeWarning, stacklevel=3)

    def post(self, dst: int, kind: str, body: Any, payload: Payload | None = None) -> None:
        """Send island ``dst`` a control message of ``kind`` (plus ``payload``) without waiting; nothing to a lost
        island. A send that fails loses ``dst``."""
        if dst in self.lost:
            return
        group = self._pair_group(dst)
        raw = control.encode(kind, body)
        data = encode_bytes(payload) if payload is not None else b""
        seq = self._out_seq[dst]
        self._out_seq[dst] += 1
        head = torch.tensor([seq, _channel_id(kind), len(raw), len(data)], dtype=torch.int64)
        msg = torch.frombuffer(bytearray(raw + data), dtype=torch.uint8)
        rank = self.layout.first_rank(dst)
        try:
            works = [dist.isend(head, rank, group=group, tag=2 * seq),
                     dist.isend(msg, rank, group=group, tag=2 * seq + 1)]
        except Exception as e:  # a peer whose sockets closed
            self._lose(dst, f"message {kind!r} #{seq} to island {dst}", e, required=False)
            return
        self._outbox.setdefault(dst, []).append((works, [head, msg]))

    def _pair_group(self, island: int) -> Any:
        if island not in self._pair_groups:
            raise ValueError(f"decoupled messages run between island 0 (the synchroniser) and each other island, "
                             f"in decoupled mode only: island {self.island} cannot message island {island}")
        return self._pair_groups[island]

    def _finish_sends(self, island: int, required: bool, wait: timedelta) -> None:
        """Complete the sends to ``island`` (gloo completes a send once the receiver has posted its receive)."""
        for works, _ in self._outbox.pop(island, []):
            try:
                for w in works:
                    w.wait(wait)
            except Exception as e:
                self._lose(island, f"message to island {island}", e, required)
                return

    def finish_messages(self) -> None:
        """Complete every send still in flight (bounded; a peer that fails them is lost)."""
        for island in list(self._outbox):
            self._finish_sends(island, required=False, wait=timedelta(seconds=self.timeout_s))

    def receive(self, src: int, kind: str, schema: Any, expect: "peer.PayloadSpec | None" = None,
                timeout_s: float | None = None, required: bool = False) -> tuple[Any, Payload | None] | None:
        """The next message from island ``src``: (control body checked against ``schema``, payload or None; a
        payload must match ``expect``, and none may come without it). Waits at most ``timeout_s`` (default
        ``ISLANDS_KIT_DIST_TIMEOUT_S``). A peer that died, stayed silent, or sent a message the wire refuses
        (another kind, out of sequence, malformed: ``comm.peer``) is lost and None comes back; with ``required`` the
        run ends instead with a ``DistributedError`` naming the peer and the field."""
        if src in self.lost:
            if required:  # a post to it failed earlier
                raise DistributedError(self.lost[src])
            return None
        group = self._pair_group(src)
        wait = timedelta(seconds=self.timeout_s if timeout_s is None else timeout_s)
        self._finish_sends(src, required, wait)  # everything we said before: src reads it before answering
        if src in self.lost:
            return None
        seq = self._in_seq[src]
        self._in_seq[src] += 1
        what = f"message {kind!r} #{seq} from island {src}"
        rank = self.layout.first_rank(src)
        head = torch.zeros(4, dtype=torch.int64)
        try:
            _irecv(head, rank, group, 2 * seq).wait(wait)
        except Exception as e:
            self._lose(src, what, e, required)
            return None
        got_seq, kind_id, n_raw, n_data = (int(x) for x in head)
        if (got_seq, kind_id) != (seq, _channel_id(kind)) or not (0 < n_raw <= control.MAX_BYTES and
                                                                    0 <= n_data <= control.MAX_BYTES):
            self._refused(src, f"islands_kit.distributed: protocol desync on rank {self.rank} (island "
                                      f"{self.island}): expected {what} (rank {rank}), got header "
                                      f"{[got_seq, kind_id, n_raw, n_data]}", required)
            return None
        msg = torch.empty(n_raw + n_data, dtype=torch.uint8)
        try:
            _irecv(msg, rank, group, 2 * seq + 1).wait(wait)
        except Exception as e:
            self._lose(src, what, e, required)
            return None
        b = msg.numpy().tobytes()
        try:
            body, payload = peer.read_message(b[:n_raw], b[n_raw:], kind, schema, expect, rank, what)
        except peer.PeerError as e:
            self._refused(src, f"islands_kit.distributed: on rank {self.rank}: {e}", required)
            return None
        return body, payload

    def _refused(self, src: int, why: str, required: bool) -> None:
        """A message from ``src`` the wire refused: the run ends (``required``: the synchroniser) or ``src`` is
        dropped."""
        if required:
            raise DistributedError(why)
        self.drop(src, why)

    def barrier(self) -> None:
        self._guard("barrier", lambda: dist.barrier(group=self._meta_group))

    # -- control messages -----------------------------------------------------------------------------------------
    def gather_control(self, kind: str, body: Any, schema: Any) -> list[Any]:
        """Collective: every rank's ``body`` in rank order, sent as a ``comm.control`` JSON message and checked
        against ``schema`` on receipt. A bad message from any rank raises the same ``DistributedError`` on every
        rank."""
        return self._decode_all(kind, schema, self._gather_bytes(kind, control.encode(kind, body)))

    def _decode_all(self, kind: str, schema: Any, raws: list[bytes]) -> list[Any]:
        out = []
        for r, raw in enumerate(raws):
            try:
                out.append(peer.read_control(raw, kind, schema, r))
            except peer.ControlError as e:
                raise DistributedError(f"islands_kit.distributed: {e}") from None
        return out

    def _gather_bytes(self, kind: str, raw: bytes) -> list[bytes]:
        """Every rank's ``raw`` bytes, in rank order: the lengths first (int64), each checked against the limit before
        a byte of the messages is received, then the messages padded to the longest (uint8), on the gloo meta group."""
        what = f"control message {kind!r}"
        n = torch.tensor([len(raw)], dtype=torch.int64)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        self._guard(what + " (lengths)", lambda: dist.all_gather(sizes, n, group=self._meta_group))
        lens = [int(x) for x in sizes]
        for r, length in enumerate(lens):
            if not 0 < length <= control.MAX_BYTES:
                raise DistributedError(f"islands_kit.distributed: {what} from rank {r}: announced {length} bytes, "
                                       f"outside (0, {control.MAX_BYTES}]; refused before reading it")
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
                "sent_bytes": dict(self.sent_bytes)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        super().load_state_dict(d)
        self._seq = int(d["seq"])
        self._order = [(int(a), int(b), int(c)) for a, b, c in d["order"]]
        self.sent_bytes = {str(k): int(v) for k, v in d["sent_bytes"].items()}

    # -- the whole world's ledger and clock -----------------------------------------------------------------------
    def gather_world(self) -> tuple[Ledger, SimClock]:
        """Collective (every rank, same point): the merged ledger (records sorted into LocalTransport's order) and a
        clock over all islands (each island's leader's clock). Completes every operation in flight first, so the
        ledger holds everything posted so far, as the simulator's does."""
        self.drain()
        mine = {"island": self.island, "leader": self.is_leader, "sent": dict(self.sent_bytes),
                "records": [[list(o), list(t)] for o, t in zip(self._order, self.ledger.timeline)],
                "clock": self.clock.state_dict()}
        objs = self.gather_control("ledger", mine, _WORLD_SCHEMA)
        ledger = Ledger()
        for _, (start, end, nbytes, src, dst, channel) in sorted(r for o in objs for r in o["records"]):
            ledger.record(channel, src, dst, nbytes, start, end)
        sent: dict[str, int] = {}
        for o in objs:
            for ch, b in o["sent"].items():
                sent[ch] = sent.get(ch, 0) + b
        got = {ch: e.bytes for ch, e in ledger.channels.items()}
        if {k: v for k, v in sent.items() if v} != {k: v for k, v in got.items() if v}:
            raise DistributedError(f"islands_kit.distributed: ledger mismatch: bytes sent {sent} != bytes received {got}")
        clock = SimClock(list(range(self.n_islands)))
        for o in sorted((o for o in objs if o["leader"]), key=lambda o: o["island"]):
            i, c = o["island"], o["clock"]
            k = str(i)  # JSON object keys are strings
            if not (0 <= i < self.n_islands and k in c["now"] and k in c["busy"] and k in c["idle"]):
                raise DistributedError(f"islands_kit.distributed: control message 'ledger': island {i}'s leader sent "
                                       "no clock for its island")
            try:  # a peer's clock is held to the same bound as a payload's send time (comm/peer.py)
                now, busy, idle = (peer.read_clock(float(c[f][k]), self.clock.now[self.island], self.layout.first_rank(i),
                                                   f"clock.{f}", "control message 'ledger'") for f in ("now", "busy", "idle"))
            except peer.PeerError as e:
                raise DistributedError(f"islands_kit.distributed: {e}") from None
            clock.now[i], clock.busy[i], clock.idle[i] = now, busy, idle
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
