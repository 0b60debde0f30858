"""``TorchDistTransport``: the ``Transport`` interface on torch.distributed (gloo on CPU, NCCL on GPU), launched by torchrun.

The sync strategies run unchanged: each process holds one island (``local_islands == [my island]``) and calls the same
``all_reduce`` / ``all_gather`` / ``exchange`` / ``all_reduce_tensor`` as in the simulator. The result of an
all-reduce is *defined* as decode-each-payload then ``weighted_mean`` in island-id order, so this transport gives
bit-identical results to ``LocalTransport`` (tested end to end: the whole result.json — final_val_bpb, ledger,
simulated clock — equal to the last bit, wall_time_s aside).

Not supported here: absent (preempted) islands — every island takes part in every operation, so
``faults.preempt_island`` is rejected by ``distributed.make_transport``. Checkpoints are one file per rank (see
``islands_kit/checkpoint.py``); ``state_dict`` / ``load_state_dict`` below carry this transport's part.

Ranks. Two launch shapes, chosen by ``WORLD_SIZE`` (``RankLayout.for_world``):

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
same operation (a desynchronised protocol raises ``DistributedError`` instead of decoding garbage).

Ledger. Each process records the messages it *receives* (its leader's inbound links): ``(channel, src, me, nbytes,
start, end)`` with ``nbytes = payload.data.numel()`` — so an all-gather among n islands counts each payload once per
other island, and an exchange once, exactly like ``LocalTransport``. Senders separately count the payload bytes they
hand to torch.distributed (``sent_bytes``); ``world_view()`` checks the two agree. The full ledger is assembled by the
collective ``world_view()`` (every rank must call it at the same point; run.py does around evaluation records and the
final result).

Simulated clock. The sender's simulated time travels in the header; the receiver computes the arrival with its own
``LinkModel`` for the (src -> me) direction. ``LinkModel`` keeps each direction's wire, connections and random stream
separate (draws seeded by ``(seed, src, dst, k)``, k = the transfer's index in that direction), so the receiver, which
sees every transfer on its inbound directions in posting order, reproduces the simulator's times exactly. To keep that
order, operations complete first-in first-out (waiting on a handle first completes every earlier one). A handle's
``arrival`` holds this island's key from the start (strategies test participation with ``island in handle.arrival``);
its value is final once the first ``wait``/``wait_result`` has completed the operation.

Failures. Every wait is bounded: a dead peer closes its sockets and the survivor's pending operation fails at once; a
peer that stops answering trips the process-group timeout (``ISLANDS_KIT_DIST_TIMEOUT_S``, default 300 s). Either way
the run ends with a ``DistributedError`` that names the rank, island, channel and operation. Fault injection for tests:
``ISLANDS_KIT_TEST_DIE_AT_STEP=k`` makes rank ``ISLANDS_KIT_TEST_DIE_RANK`` (default: the last rank) vanish
silently (exit code 0, like a lost machine) at its k-th step, or with ``ISLANDS_KIT_TEST_DIE_MODE=hang`` stay alive
without ever answering again (the survivors then fail after the timeout).
"""
from __future__ import annotations

import contextlib
import os
import struct
import sys
import time
import zlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Iterator

import torch
import torch.distributed as dist

from islands_kit.comm.codecs import Payload, decode_bytes, encode_bytes, get_codec
from islands_kit.comm.transport import Handle, Ledger, SimClock, Transport, weighted_mean
from islands_kit.config import ConfigError, ExperimentConfig
from islands_kit.device import resolve_device, wire_device

if TYPE_CHECKING:
    from islands_kit.comm.link import LinkModel

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


@dataclass(frozen=True)
class RankLayout:
    """Which global ranks hold which island: island i owns ``ranks_per_island[i]`` contiguous ranks, its first is its
    leader."""

    ranks_per_island: tuple[int, ...]

    @property
    def world_size(self) -> int:
        return sum(self.ranks_per_island)

    def first_rank(self, island: int) -> int:
        return sum(self.ranks_per_island[:island])

    def ranks_of(self, island: int) -> list[int]:
        lo = self.first_rank(island)
        return list(range(lo, lo + self.ranks_per_island[island]))

    def island_of(self, rank: int) -> int:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank: must be in [0, {self.world_size}) (got {rank})")
        for i in range(len(self.ranks_per_island)):
            if rank < self.first_rank(i) + self.ranks_per_island[i]:
                return i
        raise AssertionError("unreachable")

    @property
    def leaders(self) -> list[int]:
        return [self.first_rank(i) for i in range(len(self.ranks_per_island))]

    @classmethod
    def for_world(cls, cfg: ExperimentConfig, world_size: int) -> "RankLayout":
        """One process per island when ``world_size == len(islands)`` (dp_ranks folded into micro-batches), else one
        process per data-parallel rank when ``world_size == sum(dp_ranks)``; anything else is a ConfigError."""
        n = len(cfg.islands)
        per_rank = tuple(isl.dp_ranks for isl in cfg.islands)
        if world_size == n:
            return cls((1,) * n)
        if world_size == sum(per_rank):
            return cls(per_rank)
        raise ConfigError(
            f"islands[*].dp_ranks: WORLD_SIZE must equal len(islands) = {n} (one process per island, dp_ranks folded "
            f"into micro-batches) or sum(islands[*].dp_ranks) = {sum(per_rank)} (one process per data-parallel rank, "
            f"dp_ranks = {list(per_rank)}) (got WORLD_SIZE={world_size})")


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


def _channel_id(channel: str) -> int:
    return zlib.crc32(channel.encode())


class TorchDistTransport(Transport):
    """``Transport`` over torch.distributed; one island per process (see the module docstring for layout and wire)."""

    def __init__(self, cfg: ExperimentConfig, link: "LinkModel | None", layout: RankLayout | None = None) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise DistributedError("TorchDistTransport: torch.distributed is not initialised; call "
                                   "islands_kit.distributed.init_from_env() (or launch with torchrun) first")
        self.rank = dist.get_rank()
        world = dist.get_world_size()
        self.layout = layout or RankLayout.for_world(cfg, world)
        if self.layout.world_size != world:
            raise ConfigError(f"islands[*].dp_ranks: the rank layout needs {self.layout.world_size} processes "
                              f"(got WORLD_SIZE={world})")
        self.n_islands = len(cfg.islands)
        self.island = self.layout.island_of(self.rank)
        self.local_islands = [self.island]
        self.leader = self.layout.first_rank(self.island)
        self.is_leader = self.rank == self.leader
        self.is_writer = self.rank == 0  # the one process that writes result.json
        self.ledger = Ledger()
        self.clock = SimClock(self.local_islands)
        self.link = link
        self.timeout_s = dist_timeout_s()
        self.sent_bytes: dict[str, int] = {}  # payload bytes handed to torch.distributed, per channel (leaders)
        self._order: list[tuple[int, int, int]] = []  # (seq, src, dst) of each ledger record: LocalTransport's order
        self._inflight: list[_Op] = []
        self._seq = 0
        self.steps = 0  # compute() calls: the island's inner steps
        self.device = wire_device(resolve_device(cfg.device), dist.get_backend())  # messages' device (NCCL or gloo)
        # every rank creates every group, in the same order (a torch.distributed rule)
        self._guard("creating process groups", lambda: self._make_groups())
        die = os.environ.get("ISLANDS_KIT_TEST_DIE_AT_STEP", "")
        self._die_at = int(die) if die else 0
        self._die_rank = int(os.environ.get("ISLANDS_KIT_TEST_DIE_RANK", str(world - 1)))
        self._die_mode = os.environ.get("ISLANDS_KIT_TEST_DIE_MODE", "exit")
        if self._die_mode not in ("exit", "hang"):
            raise ConfigError(f"ISLANDS_KIT_TEST_DIE_MODE: must be exit or hang (got {self._die_mode!r})")

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
        b = msg.cpu().numpy().tobytes()
        seq, s, d, ch, _, sent_at, weight = _META.unpack_from(b)
        if (seq, s, d, ch) != (op.seq, src, dst, _channel_id(op.channel)):
            raise DistributedError(
                f"islands_kit.distributed: protocol desync on rank {self.rank} (island {self.island}): expected "
                f"{op.kind} #{op.seq} on {op.channel!r} from island {src} to {dst}, got #{seq} from {s} to {d} "
                "(every process must post the same operations in the same order)")
        try:
            p = decode_bytes(b[META_BYTES:])
        except ValueError as e:
            raise DistributedError(f"islands_kit.distributed: corrupt message from island {src} on {op.channel!r}: {e}") from e
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
            self.sent_bytes[channel] = self.sent_bytes.get(channel, 0) + p.nbytes * (self.n_islands - 1)
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
            peer = self.layout.first_rank(j)
            ops = [dist.P2POp(dist.isend, wire, peer, self.cross_group), dist.P2POp(dist.irecv, op.recv[0], peer, self.cross_group)]
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
            for src in range(self.n_islands):
                sent_at, w, p = self._unpack(op, msgs[src], src, -1)
                weights.append(w)
                if src == me:
                    decoded.append(get_codec(op.mine.codec, op.mine.block_size).decode(op.mine))
                    continue
                if (p.codec, p.numel, p.block_size) != (op.mine.codec, op.mine.numel, op.mine.block_size):
                    raise DistributedError(f"islands_kit.distributed: {what}: island {src} sent {p.codec} numel={p.numel}, "
                                           f"island {me} sent {op.mine.codec} numel={op.mine.numel}")
                decoded.append(get_codec(p.codec, p.block_size).decode(p).to(op.mine.data.device))
                arrival = max(arrival, self._transfer(op, src, me, p.nbytes, sent_at))
            if op.kind == "all_reduce":
                op.results[me] = weighted_mean(decoded, weights)
            else:
                op.results[me] = [(i, w, x) for i, (w, x) in enumerate(zip(weights, decoded))]
            op.arrival[me] = arrival
        else:
            sent_at, _, p = self._unpack(op, msgs[0], op.peer, me)
            op.results[me] = get_codec(p.codec, p.block_size).decode(p).to(op.mine.data.device)
            op.arrival[me] = self._transfer(op, op.peer, me, p.nbytes, sent_at)
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

    def _transfer(self, op: _Op, src: int, dst: int, nbytes: int, start: float) -> float:
        """Arrival of src's message at dst (simulated), recorded in the ledger by the receiving island's leader."""
        end = start if self.link is None else self.link.transfer(nbytes, start, src, dst).end_s
        if self.is_leader:
            self.ledger.record(op.channel, src, dst, nbytes, start, end)
            self._order.append((op.seq, src, dst))
        return end

    def compute(self, island: int, seconds: float) -> None:
        super().compute(island, seconds)
        self.steps += 1
        if self._die_at and self.steps == self._die_at and self.rank == self._die_rank:
            verb = "vanishes" if self._die_mode == "exit" else "hangs"
            sys.stderr.write(f"islands_kit: fault injection: rank {self.rank} {verb} at step {self.steps}\n")
            sys.stderr.flush()
            if self._die_mode == "hang":  # alive, sockets open, never answering: only the timeout can catch it
                while True:
                    time.sleep(3600)
            os._exit(0)  # silently, like a machine that drops off the network: no error, no goodbye

    def barrier(self) -> None:
        self._guard("barrier", lambda: dist.barrier(group=self._meta_group))

    def gather_objects(self, obj: Any, what: str = "gathering objects") -> list[Any]:
        """Collective: every rank's ``obj``, in rank order (pickled, on the gloo meta group)."""
        objs: list[Any] = [None] * dist.get_world_size()
        self._guard(what, lambda: dist.all_gather_object(objs, obj, group=self._meta_group))
        return objs

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's transport state for a checkpoint. Collective: completes every operation in flight first (as
        ``world_view`` does at every evaluation; results wait in their handles and no clock moves), so what the
        strategies hold in flight is plain data."""
        self.drain()
        return {"rank": self.rank, "world_size": dist.get_world_size(), "seq": self._seq, "steps": self.steps,
                "order": list(self._order), "sent_bytes": dict(self.sent_bytes)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if (d["rank"], d["world_size"]) != (self.rank, dist.get_world_size()):
            raise ConfigError(f"--resume: checkpoint shard of rank {d['rank']} of {d['world_size']} loaded by rank "
                              f"{self.rank} of {dist.get_world_size()}")
        self._seq, self.steps = int(d["seq"]), int(d["steps"])
        self._order = [tuple(o) for o in d["order"]]
        self.sent_bytes = dict(d["sent_bytes"])

    # -- the whole world's ledger and clock -----------------------------------------------------------------------
    def gather_world(self) -> tuple[Ledger, SimClock]:
        """Collective (every rank, same point): the merged ledger (records sorted into LocalTransport's order) and a
        clock over all islands (each island's leader's clock). Completes every operation in flight first, so the
        ledger holds everything posted so far, as the simulator's does."""
        self.drain()
        mine = {"island": self.island, "leader": self.is_leader, "sent": dict(self.sent_bytes),
                "records": list(zip(self._order, self.ledger.timeline)), "clock": self.clock.state_dict()}
        objs = self.gather_objects(mine, "gathering the ledger")
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
        waits = []
        for o in sorted((o for o in objs if o["leader"]), key=lambda o: o["island"]):
            i, c = o["island"], o["clock"]
            clock.now[i], clock.busy[i], clock.idle[i] = c["now"][i], c["busy"][i], c["idle"][i]
            waits.extend(c["waits"])
        clock.waits = sorted(waits, key=lambda w: (w[1], w[0]))
        return ledger, clock

    @contextlib.contextmanager
    def world_view(self) -> Iterator["TorchDistTransport"]:
        """Collective: inside the block ``ledger`` and ``clock`` are the whole world's (see ``gather_world``)."""
        merged = self.gather_world()
        saved = self.ledger, self.clock
        self.ledger, self.clock = merged
        try:
            yield self
        finally:
            self.ledger, self.clock = saved

    def transfer_stats(self, channel: str | None = None) -> dict[str, float]:
        """Transfer-time percentiles of the ledger's transfers (inside ``world_view``: all of them), like
        ``LocalTransport.transfer_stats``; empty without a link model."""
        from islands_kit.comm.link import transfer_time_stats

        durs = self.ledger.durations(channel)
        return transfer_time_stats(durs) if (durs and self.link is not None) else {}
