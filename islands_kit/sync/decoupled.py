"""Decoupled DiLoCo (Douillard et al. 2026, "Decoupled DiLoCo for Resilient Distributed Pre-training",
arXiv 2604.21428): islands step on their own simulated clocks and a synchroniser merges what arrives in time.

Symbols as in :mod:`islands_kit.sync.diloco` (H, P, offset_p, Δ = θ_global − θ_i) plus T_ref, the global schedule's
step (the fastest island's step time), Q = ``sync.quorum`` and g = ``sync.grace_s``.

The schedule. The decoupled driver (``train/drivers.py``) advances simulated time in ticks of T_ref; in tick t every
island takes the inner steps that *end* by t · T_ref on its own clock (its hardware, batch, straggler factor), so a
site half as fast takes a step every other tick. Fragment p's k-th merge is due at schedule time
s = (k H + offset_p) T_ref (``fragments_due``, as lock-step's step t ≡ offset_p mod H).

A merge. At s every island that is up sends Δ_i = b_i − θ_i for fragment p — b_i is the global fragment it last
rebased on, θ_i its replica after its last completed step — through the codec with error feedback, to the
synchroniser co-located with island 0 (``syncer``; its own upload crosses no link). Its weight counts the tokens
(and inner steps) it processed since its previous contribution. The synchroniser waits until Q outer gradients have
arrived (time q), then at most g seconds more: those arrived by min(q + g, the last arrival) merge, at that time;
the rest are *late*. ``sync.decoupled.late``: ``carry`` keeps a late outer gradient for the fragment's next merge
(stale by one round), ``drop`` discards it (its tokens count in ``dropped_tokens`` as a 1/P share: one fragment of
what they trained). With fewer than Q
contributions the merge is skipped and they are carried. Merging (``merge_weights``; ``combine``, the rule shared
with lock-step DiLoCo in ``sync/averaging.py``):

    weighting=tokens:      w_i = c_i^tok
    weighting=efficiency:  w_i = c_i^tok · e_i,  e_i = (c_i^tok / c_i^steps) / max_j (c_j^tok / c_j^steps)
    average=mean:               Δ̄ = Σ w_i Δ_i / Σ w_i
    average=radial_directional: Δ̄ = (Σ w_i ‖Δ_i‖ / Σ w_i) · u / ‖u‖,   u = Σ w_i Δ_i / ‖Δ_i‖

(the efficiency weighting and radial-directional averaging are our reading of the paper's description: tokens
processed times tokens-per-step efficiency; norm and direction averaged separately, so that outer gradients that
disagree in direction do not shrink the step as a plain mean does). The merged Δ̄ goes through the codec once more
(the synchroniser's own error feedback), the outer optimizer steps the global fragment with exactly what was sent,
and the synchroniser sends it to every island that contributed: (n − 1) uploads and (n − 1) downloads per merge,
2 (n − 1) S bytes, the ring's total.

Landing. Island i applies the broadcast at its first step boundary after it arrives — nobody waits for it:
θ_i ← θ_global,new + (θ_i − θ_i^ref), where θ_i^ref is the replica as sent (its progress since sending is kept; what
it sent is now in the global model, carried, or dropped). Bounded staleness: an island whose broadcast for
fragment p has not landed by p's next due time skips that round (``not_ready``); its progress rides in its next
contribution. The clock thus decides the arithmetic: which step an island has reached when a merge lands, and which
contributions make the quorum — a straggler, a lossy link or a preemption changes the numbers.

``finalize`` applies every merge in flight, lands every broadcast (an island sends its last outer gradients once
the broadcasts still on their way to it have arrived), and merges each fragment once more from every island that is
up (no quorum: the end of training waits for everyone), through ``sync.diloco.final_codec``; the run ends at the
last merge (the deployed model is the synchroniser's global one; the final broadcasts are sent and counted).

Under torchrun (``comm/torch_dist.py`` with ``decoupled=True``; one process per island). The simulated clock still
decides everything, so the numbers are the simulator's to the last bit (tested). Rank 0 holds island 0 and the
synchroniser; after the rendezvous no collective is called, only bounded point-to-point messages (``Mailbox``):

* at each due (tick, fragment) every other island sends ``CONTRIBUTION``: its status (fresh, absent, not ready), its
  encoded Δ_i (its own codec, error feedback and random stream, as in the simulator), c^tok, c^steps, its send time
  and inner steps. The synchroniser reads them in island order, prices each upload itself (``Transport.send``: the
  same seeded link model, so arrivals, holes and ledger are the simulator's), decides with the same code
  (``decide`` / ``decide_final``) and tells every island the merge time (``DECISION``);
* when the merge is applied (the first tick at or after merge_s, as in the simulator), it sends every island
  ``APPLY``: the outer gradient as broadcast and, to a contributor, its landing time. Every island takes the same
  outer step on its own copy of the global fragments, so they stay identical, and lands the broadcast at its first
  step boundary after landing_s;
* between due ticks the processes run free (each its own number of inner steps per tick); at a due tick every island
  waits, in wall-clock time only, for the synchroniser's decision, which needs every contribution's simulated
  arrival. Nobody waits in simulated time.

An island whose process dies (its sockets close) or stays silent past ``ISLANDS_KIT_DIST_TIMEOUT_S`` is *lost*: it is
absent from that round and every later one, the run goes on if the quorum holds, and otherwise every later merge is
skipped (its contributions carried) until the final merge, which needs no quorum, with a warning; the report names it
(``lost_islands``) and result.json counts the inner steps it last reported. The synchroniser itself is not
replaceable: islands wait for it at most (n + 1) times the timeout and then stop with a ``DistributedError``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import torch
from torch import nn

from islands_kit.comm import peer
from islands_kit.comm.codecs import Payload
from islands_kit.comm.control import Int, Num, OneOf, Opt
from islands_kit.comm.transport import Transport, decode
from islands_kit.config import SyncConfig
from islands_kit.sync.averaging import combine
from islands_kit.sync.base import ClockedStrategy
from islands_kit.sync.diloco import DiLoCoCore

SYNCER = 0  # the synchroniser sits with island 0


@dataclass
class Contribution:
    """One island's outer gradient of one fragment, as the synchroniser decoded it."""

    island: int
    fragment: int
    round: int
    tokens: int  # c^tok: tokens processed since the island's previous contribution of this fragment
    steps: int  # c^steps: inner steps in that span
    delta: torch.Tensor
    arrival_s: float
    sent_s: float = 0.0  # when it left the island (the due time; at the end, once the island's last merges landed)


@dataclass
class Broadcast:
    """A merged global fragment on its way to island ``island``; it lands at the island's first step boundary at or
    after ``arrival_s``."""

    island: int
    fragment: int
    round: int
    arrival_s: float
    global_flat: torch.Tensor


@dataclass
class Merge:
    """A merge decided at ``merge_s``: the outer step on fragment ``fragment`` with ``delta`` (None: quorum not met,
    the global fragment stays) and the islands it answers."""

    merge_s: float
    fragment: int
    round: int
    delta: torch.Tensor | None
    recipients: list[int]
    record: dict[str, Any] = field(default_factory=dict)


def merge_weights(contribs: Sequence[Contribution], weighting: str) -> list[float]:
    """w_i of each contribution (module doc): its tokens, times its relative tokens-per-step with ``efficiency``."""
    if weighting == "tokens":
        return [float(c.tokens) for c in contribs]
    if weighting == "efficiency":
        rate = [c.tokens / max(1, c.steps) for c in contribs]
        top = max(rate) if rate else 1.0
        return [float(c.tokens) * (r / top if top > 0 else 1.0) for c, r in zip(contribs, rate)]
    raise ValueError(f"sync.decoupled.weighting: must be one of tokens|efficiency (got {weighting!r})")


@runtime_checkable
class Mailbox(Protocol):
    """What the decoupled schedule needs of a wire that spans processes (``comm.torch_dist.TorchDistTransport`` with
    ``decoupled=True``): bounded point-to-point control messages with an optional payload, and the islands lost."""

    def post(self, dst: int, kind: str, body: Any, payload: Payload | None = None) -> None: ...

    def receive(self, src: int, kind: str, schema: Any, expect: peer.PayloadSpec | None = None,
                timeout_s: float | None = None, required: bool = False) -> tuple[Any, Payload | None] | None: ...

    def lost_islands(self) -> set[int]: ...

    def drop(self, island: int, why: str) -> None: ...

    def finish_messages(self) -> None: ...

    timeout_s: float  # the bound on one receive


# the messages of the decoupled schedule across processes (checked on receipt, comm/control.py)
CONTRIBUTION = "decoupled.contribution"  # island -> synchroniser, at every due (tick, fragment) and at the end
FRESH, ABSENT, NOT_READY = "fresh", "absent", "not_ready"
CONTRIBUTION_SCHEMA = {"tick": Int(0), "fragment": Int(0), "round": Int(0), "status": OneOf(FRESH, ABSENT, NOT_READY),
                       "sent_s": Num(0), "tokens": Int(0), "steps": Int(0), "inner_steps": Int(0)}
DECISION = "decoupled.decision"  # synchroniser -> every island: when the round's merge is decided (None: no merge)
DECISION_SCHEMA = {"fragment": Int(0), "round": Int(0), "merge_s": Opt(Num(0))}
APPLY = "decoupled.apply"  # synchroniser -> every island, when the merge is applied: the outer step and the landing
APPLY_SCHEMA = {"fragment": Int(0), "round": Int(0), "merge_s": Num(0), "outer_step": bool, "landing_s": Opt(Num(0))}


class DecoupledDiLoCo(DiLoCoCore, ClockedStrategy):
    """Streaming DiLoCo on the decoupled schedule of the module doc. The decoupled driver calls ``land(i, now)``
    before each of island i's inner steps, ``island_step_done(i, tokens)`` after it, and ``after_tick(t)`` at the end
    of every tick. One process holds every island (the simulator), or each process one island with the synchroniser
    on island 0's (torch.distributed, module doc). Its in-flight merges are not checkpointed (config.py refuses
    ``checkpoint_every`` in this mode)."""

    def __init__(self, models: dict[int, nn.Module], transport: Transport, fragments: list[list[str]],
                 cfg: SyncConfig, seed: int, tick_s: float, schedule: list[tuple[int, int]] | None = None) -> None:
        super().__init__(models, transport, fragments, cfg, seed, schedule)
        n = transport.n_islands
        self.all_ids = list(range(n))
        self.remote = [i for i in self.all_ids if i not in self.ids]  # islands held by other processes
        self.mail: Mailbox | None = None
        if self.remote:
            if not (len(self.ids) == 1 and isinstance(transport, Mailbox)):
                raise ValueError("sync.mode=decoupled: runs with every island in one process (the simulator) or one "
                                 "island per process on a transport with point-to-point messages (torch.distributed)")
            self.mail = transport
        self.is_syncer = SYNCER in self.ids
        if not tick_s > 0:
            raise ValueError(f"tick_s: must be > 0 (got {tick_s})")
        self.tick_s = tick_s
        self.dcfg = cfg.decoupled
        self.base = {i: [g.detach().clone() for g in self.global_params] for i in self.ids}
        self.steps_since = {i: [0] * self.P for i in self.ids}
        self.round = [0] * self.P
        self.awaiting: dict[tuple[int, int], int] = {}  # (island, p) -> round whose broadcast has not landed yet
        self.inbox: list[Broadcast] = []
        self.in_flight: list[Merge] = []  # off the synchroniser: (merge_s, fragment, round) of each decided merge
        self.carry: list[Contribution] = []
        self.merge_log: list[dict[str, Any]] = []
        self.inner_steps = {i: 0 for i in self.all_ids}  # other processes' islands: as last reported
        self.late = 0
        self.dropped = 0
        self.dropped_tokens = 0.0
        self.not_ready = 0
        self.last_merge_s = 0.0
        self.lost_at: dict[int, int] = {}  # island -> the step (tick) at whose end the synchroniser knew it lost

    def lost_islands(self) -> set[int]:
        """Islands whose process died or stopped answering (torch.distributed): absent from every later merge."""
        return self.mail.lost_islands() if self.mail is not None else set()

    def _live_remote(self) -> list[int]:
        lost = self.lost_islands()
        return [j for j in self.remote if j not in lost]

    # -- the islands' side ----------------------------------------------------------------------------------------
    def island_step_done(self, island: int, tokens: int) -> None:
        self.inner_steps[island] += 1
        for p in range(self.P):
            self.tokens_since[island][p] += tokens
            self.steps_since[island][p] += 1

    @torch.no_grad()
    def land(self, island: int, now_s: float) -> None:
        """Apply, in arrival order, every broadcast to ``island`` that has arrived by ``now_s`` (to within a
        millionth of a tick: an island's clock is a sum of step times, the schedule a product)."""
        now_s += 1e-6 * self.tick_s
        due = sorted((b for b in self.inbox if b.island == island and b.arrival_s <= now_s),
                     key=lambda b: (b.arrival_s, b.round, b.fragment))
        if not due:
            return
        self.inbox = [b for b in self.inbox if not (b.island == island and b.arrival_s <= now_s)]
        for b in due:
            v = self.views[island][b.fragment]
            ref = self.sent.pop((island, b.fragment), None)
            if ref is None:  # nothing of this island's is in that merge: keep all its progress since its base
                ref = self.base[island][b.fragment]
            v.assign(b.global_flat.to(v.device) + (v.flat() - ref.to(v.device)))
            self.base[island][b.fragment] = b.global_flat.clone()
            if self.awaiting.get((island, b.fragment)) == b.round:
                del self.awaiting[(island, b.fragment)]

    def _status(self, island: int, p: int, final: bool = False) -> str:
        """What a local island brings to fragment p's round: absent (away, or nothing trained since its last
        contribution), not ready (its last broadcast of p has not landed; never at the end) or a fresh contribution."""
        if not self.present[island] or self.tokens_since[island][p] == 0:
            return ABSENT
        if not final and (island, p) in self.awaiting:
            self.not_ready += 1
            return NOT_READY
        return FRESH

    def _encode(self, island: int, p: int, k: int, codec: Any) -> tuple[Payload, int, int]:
        """Island's outer gradient of fragment p through the codec with error feedback, as sent in round k; returns
        (payload, c^tok, c^steps) and starts its next span."""
        delta = self.base[island][p] - self.views[island][p].flat()
        payload, _ = self.ef.compress((island, p), delta, codec, stochastic=self.cfg.stochastic_rounding,
                                      generator=self.gens[island])
        tokens, steps = self.tokens_since[island][p], self.steps_since[island][p]
        self.sent[(island, p)] = self.views[island][p].flat()
        self.awaiting[(island, p)] = k
        self.tokens_since[island][p] = 0
        self.steps_since[island][p] = 0
        return payload, tokens, steps

    # -- the synchroniser's side ----------------------------------------------------------------------------------
    def after_tick(self, tick: int) -> None:
        now = tick * self.tick_s
        for p in self.fragments_due(tick):
            self._post_round(tick, p, now)
        self._apply_merges(until_s=now)
        self._note_losses(tick)

    def _note_losses(self, tick: int) -> None:
        """Record the islands lost by the end of ``tick``; warn once the live ones can no longer make the quorum."""
        new = sorted(self.lost_islands() - set(self.lost_at))
        for j in new:
            self.lost_at[j] = tick
        left = len(self.all_ids) - len(self.lost_at)
        if new and self.is_syncer and left < self.cfg.quorum:
            warnings.warn(f"sync.quorum={self.cfg.quorum} can no longer be met after step {tick}: {left} island(s) "
                          "left; every merge is skipped (its contributions carried) until the final merge, which "
                          "needs no quorum", RuntimeWarning, stacklevel=3)

    def _gather(self, tick: int, p: int, k: int, start: float | dict[int, float], codec: Any,
                final: bool = False) -> tuple[list[Contribution], list[int], list[int]]:
        """The synchroniser's view of round k of fragment p: (fresh contributions in island order, absent islands,
        islands not ready). Its own process's islands are read here, their outer gradients leaving at ``start`` (per
        island at the end); another process's island sends its part with its send time (``CONTRIBUTION``), and one
        that is lost counts as absent."""
        fresh: list[Contribution] = []
        absent, not_ready = [], []
        for i in self.all_ids:
            payload: Payload | None = None
            if i in self.ids:
                status = self._status(i, p, final)
                sent_s = start if isinstance(start, float) else start.get(i, 0.0)
                if status == FRESH:
                    payload, tokens, steps = self._encode(i, p, k, codec)
            else:
                body, payload = self._contribution(i, tick, p, k, tick * self.tick_s, codec, final)
                if body is None:  # lost: its process died, stopped answering, or sent what the wire refused
                    absent.append(i)
                    continue
                status, tokens, steps, sent_s = body["status"], body["tokens"], body["steps"], float(body["sent_s"])
                self.inner_steps[i] = body["inner_steps"]
                if status == NOT_READY:
                    self.not_ready += 1
            if status == ABSENT:
                absent.append(i)
            elif status == NOT_READY:
                not_ready.append(i)
            else:
                assert payload is not None
                d = self.transport.send("fragments", i, SYNCER, payload, sent_s)
                delta = d.tensor.to(self.global_params[p].device)  # another process's payload decodes on the CPU
                fresh.append(Contribution(i, p, k, tokens, steps, delta, d.arrival_s, sent_s))
        return fresh, absent, not_ready

    def _contribution(self, i: int, tick: int, p: int, k: int, now: float, codec: Any,
                      final: bool) -> tuple[dict[str, Any] | None, Payload | None]:
        """Island i's ``CONTRIBUTION`` to round k of fragment p, read through the wire's checks (``comm.peer``: its
        payload must be this fragment in ``codec``) and then the protocol's: the round it names, a payload exactly
        when fresh, no ``not_ready`` at the end, a send time that is a time of this round (the schedule's ``now`` in
        a regular round; at the end, a time the wire's clock bound allows, no earlier than ``now``). An island that
        breaks one is dropped, like a dead one: (None, None)."""
        assert self.mail is not None
        expect = peer.PayloadSpec(codec.name, self.global_params[p].numel(), codec.block_size)
        got = self.mail.receive(i, CONTRIBUTION, CONTRIBUTION_SCHEMA, expect)
        if got is None:
            return None, None
        body, payload = got
        where = f"sync.mode=decoupled: island {i}'s {CONTRIBUTION} for tick {tick}, fragment {p}, round {k}"
        try:  # the wire's bound first: finite, >= 0, not far ahead of the schedule
            peer.read_clock(float(body["sent_s"]), now, i, "sent_s", where)
        except peer.PeerError as e:
            self.mail.drop(i, str(e))
            return None, None
        if (body["tick"], body["fragment"], body["round"]) != (tick, p, k):
            why = f"round: names tick {body['tick']}, fragment {body['fragment']}, round {body['round']}"
        elif (body["status"] == FRESH) != (payload is not None):
            why = f"status: {body['status']} with{'' if payload is not None else 'out'} a payload"
        elif final and body["status"] == NOT_READY:
            why = "status: not_ready in the final merge"
        elif not (body["sent_s"] == now or (final and body["sent_s"] > now)):
            why = f"sent_s: {body['sent_s']!r} is not a send time of this round (due at {now!r})"
        else:
            return body, payload
        self.mail.drop(i, f"{where}: {why}")
        return None, None

    def _report(self, tick: int, p: int, k: int, sent_s: float, codec: Any, final: bool = False) -> float | None:
        """An island off the synchroniser's process: send its part of round k of fragment p, leaving at ``sent_s``
        (``CONTRIBUTION``), and return the merge time the synchroniser decided (``DECISION``; None: no merge)."""
        assert self.mail is not None
        i = self.ids[0]
        status = self._status(i, p, final)
        payload, tokens, steps = self._encode(i, p, k, codec) if status == FRESH else (None, 0, 0)
        self.mail.post(SYNCER, CONTRIBUTION, {"tick": tick, "fragment": p, "round": k, "status": status,
                                              "sent_s": sent_s, "tokens": tokens, "steps": steps,
                                              "inner_steps": self.inner_steps[i]}, payload)
        got = self.mail.receive(SYNCER, DECISION, DECISION_SCHEMA, timeout_s=self._syncer_timeout(), required=True)
        assert got is not None
        body, _ = got
        if (body["fragment"], body["round"]) != (p, k):
            raise self._refuse(DECISION, "round", f"decided fragment {body['fragment']}, round {body['round']} "
                                                  f"where fragment {p}, round {k} was due: the processes are out of step")
        if body["merge_s"] is None:
            return None
        return self._syncer_clock(float(body["merge_s"]), DECISION, "merge_s")

    def _refuse(self, kind: str, field: str, why: str) -> peer.ControlError:
        """An island's refusal of what the synchroniser (rank 0) sent: the run cannot go on without it."""
        return peer.ControlError(f"sync.mode=decoupled: control message {kind!r} from rank {SYNCER} (the "
                                 f"synchroniser): {field}: {why}", SYNCER, field)

    def _syncer_clock(self, t: float, kind: str, field: str) -> float:
        """A time the synchroniser sent, held to the wire's clock bound against this island's clock."""
        return peer.read_clock(t, self.transport.clock.now[self.ids[0]], SYNCER, field, f"control message {kind!r}")

    def _syncer_timeout(self) -> float:
        """An island waits for the synchroniser longer than the synchroniser waits for all the others together."""
        assert self.mail is not None
        return self.mail.timeout_s * (len(self.all_ids) + 1)

    def _announce(self, p: int, k: int, merge_s: float | None) -> None:
        for j in self._live_remote():
            assert self.mail is not None
            self.mail.post(j, DECISION, {"fragment": p, "round": k, "merge_s": merge_s})

    def _post_round(self, tick: int, p: int, now: float) -> None:
        k = self.round[p]
        self.round[p] += 1
        if not self.is_syncer:
            merge_s = self._report(tick, p, k, now, self.codec)
            assert merge_s is not None  # a regular round always decides (a skipped merge is a merge without delta)
            self.in_flight.append(Merge(merge_s, p, k, None, []))
            return
        fresh, absent, not_ready = self._gather(tick, p, k, now, self.codec)
        m = self.decide(tick, p, k, now, fresh, absent, not_ready)
        self.in_flight.append(m)
        self._announce(p, k, m.merge_s)

    def decide(self, tick: int, p: int, k: int, now: float, fresh: list[Contribution], absent: list[int],
               not_ready: list[int]) -> Merge:
        """Round k of fragment p at schedule time ``now`` from the fresh contributions (module doc): the quorum,
        the grace window, late ones carried or dropped, carried ones merged, the weighted average."""
        fresh.sort(key=lambda c: (c.arrival_s, c.island))
        Q = self.cfg.quorum
        rec: dict[str, Any] = {"step": tick, "fragment": p, "round": k, "sent_s": now, "absent": absent,
                               "not_ready": not_ready, "island_steps": dict(self.inner_steps),
                               "arrival_s": {c.island: c.arrival_s for c in fresh}}
        if len(fresh) < Q:  # no quorum: nothing merges; the contributions wait for the next round
            merge_s = max([c.arrival_s for c in fresh], default=now)
            self.carry.extend(fresh)
            rec.update(merge_s=merge_s, quorum_met=False, on_time=[], late=[c.island for c in fresh], carried_in=[])
            return Merge(merge_s, p, k, None, [c.island for c in fresh], rec)
        deadline = fresh[Q - 1].arrival_s + self.cfg.grace_s
        on_time = [c for c in fresh if c.arrival_s <= deadline]
        late = [c for c in fresh if c.arrival_s > deadline]
        merge_s = deadline if late else max(c.arrival_s for c in on_time)
        carried = [c for c in self.carry if c.fragment == p and c.arrival_s <= merge_s]
        self.carry = [c for c in self.carry if not (c.fragment == p and c.arrival_s <= merge_s)]
        for c in late:
            if self.dcfg.late == "carry":
                self.carry.append(c)
                self.late += 1
            else:
                self.dropped += 1
                self.dropped_tokens += c.tokens / self.P  # a fragment is a 1/P share of what those tokens trained
        merged = on_time + carried
        delta = combine([c.delta for c in merged], merge_weights(merged, self.dcfg.weighting), self.dcfg.average)
        rec.update(merge_s=merge_s, quorum_met=True, on_time=[c.island for c in on_time],
                   late=[c.island for c in late], carried_in=[c.island for c in carried],
                   tokens=sum(c.tokens for c in merged))
        return Merge(merge_s, p, k, delta, [c.island for c in fresh], rec)

    def decide_final(self, step: int, p: int, k: int, now: float, fresh: list[Contribution]) -> Merge | None:
        """Fragment p's last merge (``finalize``): every fresh contribution and everything carried, no quorum;
        None when there is nothing to merge."""
        carried = [c for c in self.carry if c.fragment == p]
        merged = fresh + carried
        if not merged:
            return None
        self.carry = [c for c in self.carry if c.fragment != p]
        merge_s = max(c.arrival_s for c in merged)
        delta = combine([c.delta for c in merged], merge_weights(merged, self.dcfg.weighting), self.dcfg.average)
        rec = {"step": step, "fragment": p, "round": k, "sent_s": min([c.sent_s for c in fresh], default=now),
               "merge_s": merge_s, "quorum_met": True, "on_time": [c.island for c in fresh], "late": [],
               "carried_in": [c.island for c in carried], "absent": [], "not_ready": [], "final": True,
               "tokens": sum(c.tokens for c in merged), "island_steps": dict(self.inner_steps),
               "arrival_s": {c.island: c.arrival_s for c in fresh}}
        return Merge(merge_s, p, k, delta, [c.island for c in fresh], rec)

    @torch.no_grad()
    def _apply_merges(self, until_s: float | None, codec: Any = None) -> None:
        """Apply, in time order, every merge decided by ``until_s`` (all of them when None): the outer step with the
        merged outer gradient as broadcast, then the broadcast to each contributor over the link. Across processes
        the synchroniser sends every island the outer step (``APPLY``), so every copy of the global fragments stays
        identical, and each contributor its landing time."""
        due = sorted((m for m in self.in_flight if until_s is None or m.merge_s <= until_s),
                     key=lambda m: (m.merge_s, m.fragment, m.round))
        self.in_flight = [m for m in self.in_flight if not (until_s is None or m.merge_s <= until_s)]
        for m in due:
            if not self.is_syncer:
                self._receive_merge(m, codec or self.codec)
                continue
            p = m.fragment
            g = self.global_params[p]
            payload = None
            if m.delta is not None:
                payload, sent = self.ef.compress(("syncer", p), m.delta, codec or self.codec, stochastic=False)
                self._outer_step(p, sent)
            else:  # no merge: the contributors learn so (a message of the global fragment's codec size)
                payload = (codec or self.codec).encode(torch.zeros_like(g.detach()))
            flat = g.detach().clone()
            m.record["landing_s"] = {}
            for j in m.recipients:
                d = self.transport.send("fragments", SYNCER, j, payload, m.merge_s)
                if j in self.ids:
                    self.inbox.append(Broadcast(j, p, m.round, d.arrival_s, flat))
                m.record["landing_s"][j] = d.arrival_s  # it lands at j's first step boundary from then on
            for j in self._live_remote():
                assert self.mail is not None
                self.mail.post(j, APPLY, {"fragment": p, "round": m.round, "merge_s": m.merge_s,
                                          "outer_step": m.delta is not None,
                                          "landing_s": m.record["landing_s"].get(j)},
                               payload if m.delta is not None else None)
            self.last_merge_s = max(self.last_merge_s, m.merge_s)
            self.merge_log.append(m.record)

    def _receive_merge(self, m: Merge, codec: Any) -> None:
        """Off the synchroniser: merge ``m`` as applied there — the same outer step on this process's copy of the
        global fragment and, if this island contributed, the broadcast that lands at its ``landing_s``."""
        assert self.mail is not None
        expect = peer.PayloadSpec(codec.name, self.global_params[m.fragment].numel(), codec.block_size)
        got = self.mail.receive(SYNCER, APPLY, APPLY_SCHEMA, expect, timeout_s=self._syncer_timeout(), required=True)
        assert got is not None
        body, payload = got
        if (body["fragment"], body["round"], float(body["merge_s"])) != (m.fragment, m.round, m.merge_s):
            raise self._refuse(APPLY, "round", f"applied fragment {body['fragment']}, round {body['round']} at "
                                               f"{body['merge_s']} where fragment {m.fragment}, round {m.round} at "
                                               f"{m.merge_s} was next: the processes are out of step")
        if body["outer_step"] != (payload is not None):
            raise self._refuse(APPLY, "outer_step", f"{body['outer_step']} with"
                                                    f"{'' if payload is not None else 'out'} a payload")
        if payload is not None:
            self._outer_step(m.fragment, decode(payload))
        if body["landing_s"] is not None:
            landing = self._syncer_clock(float(body["landing_s"]), APPLY, "landing_s")
            self.inbox.append(Broadcast(self.ids[0], m.fragment, m.round, landing,
                                        self.global_params[m.fragment].detach().clone()))
        self.last_merge_s = max(self.last_merge_s, m.merge_s)

    def finalize(self, step: int) -> None:
        self._apply_merges(until_s=None)
        now = step * self.tick_s
        ready = {}  # an island sends its last outer gradients once every merge still on its way has landed on it
        for i in self.ids:
            if self.present[i]:
                ready[i] = max([now] + [b.arrival_s for b in self.inbox if b.island == i])
                self.land(i, math.inf)
        for p in range(self.P):
            k = self.round[p]
            self.round[p] += 1
            if not self.is_syncer:
                i = self.ids[0]
                merge_s = self._report(step, p, k, ready.get(i, now), self.final_codec, final=True)
                if merge_s is not None:
                    self.in_flight.append(Merge(merge_s, p, k, None, []))
                continue
            fresh, _, _ = self._gather(step, p, k, ready, self.final_codec, final=True)
            m = self.decide_final(step, p, k, now, fresh)
            self._announce(p, k, None if m is None else m.merge_s)
            if m is not None:
                self.in_flight.append(m)
        self._apply_merges(until_s=None, codec=self.final_codec)
        for i in self.all_ids:  # a lost island too: it idles to the end of the run (utilisation counts the loss)
            self.transport.clock.wait_until(i, max(self.transport.clock.now[i], self.last_merge_s))
        self.awaiting.clear()
        self.inbox.clear()
        if self.mail is not None:
            self.mail.finish_messages()
            self._note_losses(step)

    @torch.no_grad()
    def rejoin(self, island: int) -> None:
        super().rejoin(island)
        for p in range(self.P):
            self.base[island][p] = self.global_params[p].detach().clone()
            self.steps_since[island][p] = 0
            self.awaiting.pop((island, p), None)
        self.inbox = [b for b in self.inbox if b.island != island]

    def report(self) -> dict[str, Any]:
        """What result.json records of the decoupled schedule (under ``decoupled``)."""
        sizes = [len(r["on_time"]) + len(r["carried_in"]) for r in self.merge_log if not r.get("final")]
        return {
            "merges": self.merge_log,
            "quorum_sizes": sizes,
            "late_contributions": self.late,
            "dropped_contributions": self.dropped,
            "dropped_tokens": self.dropped_tokens,
            "not_ready_rounds": self.not_ready,
            "skipped_merges": sum(1 for r in self.merge_log if not r["quorum_met"]),
            "last_merge_s": self.last_merge_s,
            # torch.distributed only, when an island's process died or stopped answering: when the synchroniser
            # knew, and the inner steps it had last reported (its figures in result.json)
            **({"lost_islands": {j: {"step": t, "last_reported_steps": self.inner_steps[j]}
                                 for j, t in sorted(self.lost_at.items())}} if self.lost_at else {}),
        }

    def lost(self) -> dict[int, int]:
        return {j: self.inner_steps[j] for j in self.lost_islands()}

    def unmerged_tokens(self) -> float:
        return self.dropped_tokens

    def result_fields(self) -> dict[str, Any]:
        return {"decoupled": self.report()}
