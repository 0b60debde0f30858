"""The wire between islands: the ``Transport`` interface every sync strategy talks to, and ``LocalTransport``.

Strategies never move bytes themselves (the torchft habit: the algorithm calls ``manager.allreduce``). They hand the
transport *payloads* — already encoded by a codec, so the bytes on the wire are exactly ``payload.nbytes`` — and get
back a ``Handle`` whose result they collect later. That makes overlap (Streaming DiLoCo's tau, the butterfly's merge
delay) an honest asynchronous operation on every transport.

One code path for one process holding every island (the simulator, ``LocalTransport``) and for one process per island
(``TorchDistTransport``): every call takes dicts keyed by the *local* islands' ids and returns dicts keyed the same way.

Simulated clock. Each island has a clock (seconds). ``compute(island, seconds)`` advances it; a payload posted by island
``i`` leaves at ``clock[i]`` and its arrival time at each receiver comes from the link model. ``Handle.wait(island)``
advances the receiver's clock to the arrival if it is not there yet and records the wait as idle time — the only way an
island ever idles. Utilisation = busy / (busy + idle).

The byte ledger and its cost model per collective: ``comm/ledger.py``.
"""
from __future__ import annotations

import abc
import contextlib
import math
import warnings
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import torch

from islands_kit.comm import control, peer
from islands_kit.comm.clock import Handle, SimClock
from islands_kit.comm.codecs import Payload, encode_bytes, fp32_codec, get_codec
from islands_kit.comm.ledger import COST_MODEL, Ledger, LedgerEntry, ring_bytes

__all__ = ["COST_MODEL", "Delivery", "Handle", "Ledger", "LedgerEntry", "LocalTransport", "SimClock", "Transport",
           "check_round", "decode", "read_values", "received_payload", "ring_bytes", "weighted_mean"]

if TYPE_CHECKING:
    from islands_kit.comm.link import LinkModel



def weighted_mean(decoded: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    """sum_i w_i x_i / sum_i w_i, accumulated in float32 in the given (island-id) order: the order is part of the
    contract so that every transport produces bit-identical results."""
    total = float(sum(weights))
    out = torch.zeros_like(decoded[0], dtype=torch.float32)
    for x, w in zip(decoded, weights):
        out.add_(x.float(), alpha=w / total)
    return out


class Transport(abc.ABC):
    """What a sync strategy and the run loop may do with the wire. Dicts are keyed by the ids of the islands this
    process holds.

    Besides the collectives, the interface carries everything the loop and the checkpoints need, with the one-process
    answers as defaults (a transport spanning several processes overrides them): ``rank`` / ``world_size`` of this
    process, ``is_writer`` (the one process that writes result.json), ``island_group`` (the process group of this
    island's data-parallel ranks; None when the island lives in one process), ``gather_control`` (pickle-free control
    messages, see ``comm/control.py``), ``barrier``, ``world_view`` (the whole world's ledger and clock),
    ``transfer_stats`` and ``state_dict`` / ``load_state_dict`` (plain data, for checkpoints).

    Point-to-point messages (decoupled mode, ``comm/messages.py``): ``post`` / ``receive`` carry a control message
    plus an optional payload between two islands, encoded to bytes by the sender and decoded and checked by the
    receiver (``comm.peer``) on every transport; a transport supplies only how the bytes travel (``_post_bytes`` /
    ``_next_bytes``). A peer that sends what the wire refuses, dies or stays silent is *lost* (``lost_islands``,
    ``drop``): nothing goes to or is awaited from it again."""

    n_islands: int
    local_islands: list[int]
    ledger: Ledger
    clock: SimClock
    link: "LinkModel | None" = None
    rank: int = 0
    world_size: int = 1
    is_writer: bool = True
    island_group: Any = None
    timeout_s: float = 0.0  # the bound on one ``receive`` (in one process a message is there or never will be)
    horizon_s: float = math.inf  # no peer's clock may pass it (``peer.clock_horizon``; set by the experiment)
    lost: dict[int, str]  # island -> why it is lost (one line)

    @abc.abstractmethod
    def all_reduce(self, channel: str, payloads: dict[int, Payload], weights: dict[int, float]) -> Handle:
        """Weighted mean over *all* islands of the decoded payloads; every local island gets the same tensor."""

    def all_gather(self, channel: str, payloads: dict[int, Payload], weights: dict[int, float]) -> Handle:
        """Every island's decoded payload and weight, as a list of (island, weight, tensor) in island-id order, for
        strategies that aggregate robustly instead of averaging. Priced as direct sends (module docstring)."""
        raise NotImplementedError(f"{type(self).__name__} has no all_gather")

    @abc.abstractmethod
    def send_recv(self, channel: str, payloads: dict[int, Payload], targets: dict[int, int]) -> Handle:
        """One directed step: island i sends ``payloads[i]`` to ``targets[i]`` and receives (decoded) the payload of
        the island that targets it. ``targets`` is the whole round, a permutation of every island (a round of
        ``sync/topology.py``): a symmetric one is a pairwise exchange; an island that targets itself sends nothing
        and gets its own payload back. Priced per direction: each payload's bytes from its sender to its target."""

    def send(self, channel: str, src: int, dst: int, payload: Payload, start_s: float) -> "Delivery":
        """Point to point, off the islands' clocks: ``payload`` leaves island ``src`` at simulated time ``start_s`` (a
        decoupled island's contribution leaves on the global schedule, whatever its own clock reads) and the result
        says when it arrives at ``dst`` and what ``dst`` decodes. ``src == dst`` costs no bytes and no time. Nobody's
        clock moves: the caller decides who waits (``sync.decoupled``)."""
        raise NotImplementedError(f"{type(self).__name__} has no point-to-point send")

    def _link_transfer(self, nbytes: int, start: float, src: int, dst: int) -> tuple[float, list[list[int]]]:
        """When a message of ``nbytes`` posted at ``start`` reaches dst (simulated seconds; at once without a link
        model) and the byte ranges the link failed to deliver (``Transfer.holes``: none unless the link model runs
        with ``repair=False``). Nothing is recorded: the caller keeps the ledger."""
        if self.link is None:
            return start, []
        tr = self.link.transfer(nbytes, start, src, dst)
        return tr.end_s, tr.holes

    def wire_nbytes(self, channel: str, payload: Payload) -> int:
        """The bytes ``payload`` costs on the wire: its own size (the projection's stand-ins are priced at the real
        tensor's, ``projection/standin.py``)."""
        return payload.nbytes

    def _deliver(self, channel: str, src: int, dst: int, payload: Payload, start_s: float) -> "Delivery":
        """``send``'s account of one transfer, made by the process that prices it: the arrival from the link model,
        the ledger record and the payload as the link delivered it (``src == dst``: no bytes, no time)."""
        if src == dst:
            return Delivery(start_s, decode(payload))
        nbytes = self.wire_nbytes(channel, payload)
        end, holes = self._link_transfer(nbytes, start_s, src, dst)
        self.ledger.record(channel, src, dst, nbytes, start_s, end)
        return Delivery(end, decode(received_payload(payload, holes)))

    def all_reduce_tensor(self, channel: str, tensors: dict[int, torch.Tensor], weights: dict[int, float]) -> Handle:
        """Convenience: fp32 all-reduce of plain tensors (routing statistics, DDP gradients). The tensors are sent as
        they are, not copied (``Fp32Codec.wrap``): they must not change until every result has been waited for."""
        codec = fp32_codec()
        return self.all_reduce(channel, {i: codec.wrap(t.detach().reshape(-1).to(torch.float32).contiguous())
                                         for i, t in tensors.items()}, weights)

    # -- point-to-point messages ------------------------------------------------------------------------------------
    def post(self, src: int, dst: int, kind: str, body: Any, payload: Payload | None = None) -> None:
        """Send island ``dst`` a control message of ``kind`` from the local island ``src``, plus ``payload``, without
        waiting; nothing goes to a lost island."""
        self._check_local(src, kind)
        if dst in self.lost:
            return
        self._post_bytes(src, dst, kind, control.encode(kind, body),
                         encode_bytes(payload) if payload is not None else b"")

    def receive(self, dst: int, src: int, kind: str, schema: Any, expect: "peer.PayloadSpec | None" = None,
                timeout_s: float | None = None, required: bool = False) -> tuple[Any, Payload | None] | None:
        """The next message from island ``src`` to the local island ``dst``: (control body checked against
        ``schema``, payload or None; a payload must match ``expect``, and none may come without it). Waits at most
        ``timeout_s`` (default ``timeout_s``). A peer that died, stayed silent or sent what the wire refuses
        (another kind, out of sequence, malformed: ``comm.peer``) is lost and None comes back; with ``required``
        the run ends instead, with an error naming the peer and the field."""
        self._check_local(dst, kind)
        if src in self.lost:
            if required:
                raise self._wire_error(self.lost[src])
            return None
        wait = self.timeout_s if timeout_s is None else timeout_s
        got = self._next_bytes(dst, src, kind, wait, required, peer.message_limits(kind, schema, expect))
        if got is None:
            return None
        raw, data, sender = got
        try:
            return peer.read_message(raw, data, kind, schema, expect, sender, f"message {kind!r} from island {src}")
        except peer.PeerError as e:
            self._refused(src, self._on_this_side(str(e)), required)
            return None

    def lost_islands(self) -> set[int]:
        """Islands whose messages the wire refused, or whose process died or stopped answering."""
        return set(self.lost)

    def drop(self, island: int, why: str) -> None:
        """Go on without ``island``; ``why`` says why, in one line. Nothing is sent to or read from it again."""
        if island not in self.lost:
            self.lost[island] = why
            warnings.warn(f"islands_kit: island {island} is lost, the run goes on without it ({why})",
                          RuntimeWarning, stacklevel=3)

    def finish_messages(self) -> None:
        """Complete every send still in flight (bounded; a peer that fails them is lost)."""

    def _check_local(self, island: int, kind: str) -> None:
        if island not in self.local_islands:
            raise ValueError(f"message {kind!r}: island {island} is not held by this process "
                             f"(local islands {self.local_islands})")

    def _post_bytes(self, src: int, dst: int, kind: str, raw: bytes, data: bytes) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no point-to-point messages")

    def _next_bytes(self, dst: int, src: int, kind: str, timeout_s: float, required: bool,
                    limits: tuple[int, int]) -> tuple[bytes, bytes, int] | None:
        """The next message's (control bytes, payload bytes, sender id for errors) from ``src``; None when
        ``src`` was lost on the way (already dropped, or raised when ``required``). ``limits``: the most bytes each
        part may have (``peer.message_limits``): a transport that learns the lengths first refuses more unread."""
        raise NotImplementedError(f"{type(self).__name__} has no point-to-point messages")

    def _wire_error(self, why: str) -> Exception:
        return peer.PeerError(why, -1, "message")

    def _on_this_side(self, why: str) -> str:
        return why

    def _refused(self, src: int, why: str, required: bool) -> None:
        """A message from ``src`` the wire refused: the run ends (``required``) or ``src`` is dropped."""
        if required:
            raise self._wire_error(why)
        self.drop(src, why)

    def compute(self, island: int, seconds: float) -> None:
        self.clock.compute(island, seconds)

    def barrier(self) -> None:
        """Make sure every island has reached this point (no-op in process)."""

    def gather_control(self, kind: str, body: Any, schema: Any) -> list[Any]:
        """Collective: every rank's ``body`` in rank order, as a ``comm.control`` message of ``kind`` checked against
        ``schema`` on receipt (never pickled). One process: its own body, through the same encode/decode."""
        return [control.decode(control.encode(kind, body), kind, schema, self.rank)]

    @contextlib.contextmanager
    def world_view(self) -> Iterator["Transport"]:
        """Collective: inside the block ``ledger`` and ``clock`` cover every island (one process: they already do)."""
        yield self

    def transfer_stats(self, channel: str | None = None) -> dict[str, float]:
        """p50/p99/mean/max transfer time of the ledger's transfers on ``channel`` (all channels when None); empty
        without a link model (transfers then take no time)."""
        from islands_kit.comm.link import transfer_time_stats

        durs = self.ledger.durations(channel)
        return transfer_time_stats(durs) if (durs and self.link is not None) else {}

    def state_dict(self) -> dict[str, Any]:
        """This process's share of the wire for a checkpoint, as plain data (no tensors, nothing pickled): the clock,
        the ledger and the link model's state (the link itself is rebuilt from the config)."""
        return {"rank": self.rank, "world_size": self.world_size, "clock": self.clock.state_dict(),
                "ledger": self.ledger.state_dict(), "link": self.link.state_dict() if self.link is not None else None}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if (int(d["rank"]), int(d["world_size"])) != (self.rank, self.world_size):
            raise ValueError(f"checkpoint of rank {d['rank']} of {d['world_size']} processes loaded by rank "
                             f"{self.rank} of {self.world_size}")
        self.clock.load_state_dict(d["clock"])
        self.ledger = Ledger.from_state(d["ledger"])
        if self.link is not None and d["link"] is not None:
            self.link.load_state_dict(d["link"])


class LocalTransport(Transport):
    """All islands in one process; transfers timed by a seeded ``LinkModel`` (the simulated WAN)."""

    def __init__(self, n_islands: int, link: "LinkModel | None" = None) -> None:
        self.n_islands = n_islands
        self.local_islands = list(range(n_islands))
        self.ledger = Ledger()
        self.clock = SimClock(self.local_islands)
        self.link = link
        self.lost = {}
        self._mail: dict[tuple[int, int], deque[tuple[bytes, bytes]]] = {}  # (src, dst) -> messages in order

    def _send(self, channel: str, src: int, dst: int, nbytes: int,
              start: float | None = None) -> tuple[float, list[list[int]]]:
        """Account one message src -> dst posted at src's clock (or at ``start``); return its arrival time and the
        byte ranges the link failed to deliver (``Transfer.holes``: none unless the link model runs with
        ``repair=False``)."""
        start = self.clock.now[src] if start is None else start
        end, holes = self._link_transfer(nbytes, start, src, dst)
        self.ledger.record(channel, src, dst, nbytes, start, end)
        return end, holes

    def _members(self, channel: str, payloads: dict[int, Payload]) -> list[int]:
        """The islands taking part: those that sent a payload (absent, e.g. preempted, islands take no part)."""
        ids = sorted(payloads)
        unknown = [i for i in ids if i not in self.clock.now]
        if unknown:
            raise ValueError(f"{channel!r}: payload from unknown island(s) {unknown}")
        return ids

    def price_all_reduce(self, channel: str, nbytes: dict[int, int]) -> tuple[dict[int, float], dict[int, list[list[int]]]]:
        """The wire's side of a ring all-reduce (``comm/ledger.py``) of payloads of ``nbytes[i]`` bytes posted by the
        member islands at their clocks: every ring transfer goes through the link model into the ledger; returns when
        each member's result is ready and the byte ranges the link left out of what it received from its predecessor.
        Sizes are all it needs, so a projection without tensors prices a collective exactly as training does."""
        ids = sorted(nbytes)
        n = len(ids)
        arrival = {i: self.clock.now[i] for i in ids}
        last_post = max(arrival.values())
        holes: dict[int, list[list[int]]] = {}
        for k, src in enumerate(ids if n > 1 else []):
            dst = ids[(k + 1) % n]
            end, holes[dst] = self._send(channel, src, dst, ring_bytes(nbytes[src], n, k))
            arrival[dst] = max(arrival[dst], end, last_post)
        return arrival, holes

    def all_reduce(self, channel: str, payloads: dict[int, Payload], weights: dict[int, float]) -> Handle:
        """Priced as a ring all-reduce (see the module docstring); computed as the mean of every decoded payload (with
        the predecessor's payload as the link delivered it, which differs only where the link left holes)."""
        ids = self._members(channel, payloads)
        arrival, holes = self.price_all_reduce(channel, {i: self.wire_nbytes(channel, payloads[i]) for i in ids})
        w = [weights[i] for i in ids]
        mean = weighted_mean([read_values(payloads[i]) for i in ids], w)
        results = {i: mean for i in ids}
        for k, dst in enumerate(ids):
            if holes.get(dst):  # dst decodes its ring predecessor's payload as it arrived
                pred = ids[k - 1]
                results[dst] = weighted_mean([decode(received_payload(payloads[i], holes[dst]) if i == pred
                                                     else payloads[i]) for i in ids], w)
        return Handle(results, arrival, self.clock)

    def all_gather(self, channel: str, payloads: dict[int, Payload], weights: dict[int, float]) -> Handle:
        ids = self._members(channel, payloads)
        arrival = {i: self.clock.now[i] for i in ids}
        holes: dict[tuple[int, int], list[list[int]]] = {}
        for src in ids:
            for dst in ids:
                if src != dst:
                    end, holes[(src, dst)] = self._send(channel, src, dst, self.wire_nbytes(channel, payloads[src]))
                    arrival[dst] = max(arrival[dst], end)
        gathered = [(i, float(weights[i]), decode(payloads[i])) for i in ids]
        results = {}
        for dst in ids:
            if any(holes.get((src, dst)) for src in ids):
                results[dst] = [(i, w, decode(received_payload(payloads[i], holes[(i, dst)])) if i != dst else x)
                                for i, w, x in gathered]
            else:
                results[dst] = gathered
        return Handle(results, arrival, self.clock)

    def send_recv(self, channel: str, payloads: dict[int, Payload], targets: dict[int, int]) -> Handle:
        check_round(channel, targets, self.n_islands)
        arrival: dict[int, float] = {}
        results: dict[int, torch.Tensor] = {}
        for src in sorted(payloads):
            dst = targets[src]
            if dst == src:  # sits this round out: nothing sent, its own payload back
                arrival[src], results[src] = self.clock.now[src], decode(payloads[src])
                continue
            arrival[dst], holes = self._send(channel, src, dst, self.wire_nbytes(channel, payloads[src]))
            results[dst] = decode(received_payload(payloads[src], holes))
        return Handle(results, arrival, self.clock)

    def _post_bytes(self, src: int, dst: int, kind: str, raw: bytes, data: bytes) -> None:
        self.post_bytes(src, dst, kind, raw, data)

    def post_bytes(self, src: int, dst: int, kind: str, raw: bytes, data: bytes) -> None:
        """Queue a message exactly as bytes from ``src`` to ``dst`` (what ``post`` sends; tests put a hostile peer's
        bytes here)."""
        self._mail.setdefault((src, dst), deque()).append((raw, data))

    def _next_bytes(self, dst: int, src: int, kind: str, timeout_s: float, required: bool,
                    limits: tuple[int, int]) -> tuple[bytes, bytes, int] | None:
        queue = self._mail.get((src, dst))
        if not queue:  # in one process a message not yet posted never will be: the schedule is out of step
            self._refused(src, f"islands_kit: expected message {kind!r} from island {src} to island {dst}: none "
                               "was posted", required)
            return None
        raw, data = queue.popleft()
        return raw, data, src

    def send(self, channel: str, src: int, dst: int, payload: Payload, start_s: float) -> "Delivery":
        for i in (src, dst):
            if i not in self.clock.now:
                raise ValueError(f"{channel!r}: unknown island {i}")
        return self._deliver(channel, src, dst, payload, start_s)


@dataclass
class Delivery:
    """A point-to-point message as its receiver gets it: when it arrives (simulated seconds) and what it decodes to."""

    arrival_s: float
    tensor: torch.Tensor


def check_round(channel: str, targets: dict[int, int], n_islands: int) -> None:
    """``targets`` must send each of the ``n_islands`` islands to a different island (``Transport.send_recv``)."""
    if sorted(targets) != list(range(n_islands)) or sorted(targets.values()) != list(range(n_islands)):
        raise ValueError(f"send_recv on {channel!r}: targets must map each of the {n_islands} islands to a different "
                         f"island (a permutation; got {targets})")


def decode(p: Payload) -> torch.Tensor:
    """The tensor a payload carries (its codec's decode)."""
    return get_codec(p.codec, p.block_size).decode(p)


def read_values(p: Payload) -> torch.Tensor:
    """What ``decode`` returns, for reading only (``Codec.read_values``: an fp32 payload is read in place, not copied)."""
    return get_codec(p.codec, p.block_size).read_values(p)


def received_payload(p: Payload, holes: list[list[int]]) -> Payload:
    """``p`` as the receiver holds it after a transfer that left ``holes`` (``comm.link.received``)."""
    if not holes:
        return p
    from islands_kit.comm.link import received

    return Payload(p.codec, p.numel, p.block_size, received(p.data, holes))
