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
(and inner steps) it processed since its previous contribution. The synchroniser decides the merge from what
has arrived (``sync/quorum.py``: the quorum, the grace window, late outer gradients carried or dropped, the weights
and the average). The merged Δ̄ goes through the codec once more (the synchroniser's own error feedback), the outer
optimizer steps the global fragment with exactly what was sent, and the synchroniser sends it to every island that
contributed: (n − 1) uploads and (n − 1) downloads per merge, 2 (n − 1) S bytes, the ring's total.

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

The wire. Every island but the synchroniser's own talks to it through ``Transport.post`` / ``receive`` with the
messages of ``comm/messages.py`` (``CONTRIBUTION``, ``DECISION``, ``APPLY``), in one process (the simulator's
in-process queue) as across processes (torchrun, one process per island): the same code and the same bytes, so the
numbers are the simulator's to the last bit (tested). The synchroniser prices every upload and broadcast itself
(``Transport.send``: the seeded link model and the ledger). Between due ticks the processes run free; at a due tick
every island waits, in wall-clock time only, for the synchroniser's decision. Nobody waits in simulated time.
An island lost on the wire (``comm/messages.py``) is absent from that round and every later one.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import nn

from islands_kit.comm import peer
from islands_kit.comm.codecs import Payload
from islands_kit.comm.messages import (
    ABSENT,
    APPLY,
    CONTRIBUTION,
    DECISION,
    FRESH,
    NOT_READY,
    SYNCER,
    read_apply,
    read_contribution,
    read_decision,
)
from islands_kit.comm.transport import Transport, decode
from islands_kit.config import SyncConfig
from islands_kit.sync.base import ClockedStrategy
from islands_kit.sync.diloco import DiLoCoCore, custom_schedule
from islands_kit.sync.hooks import Hooks
from islands_kit.sync.quorum import Broadcast, Contribution, Merge, QuorumRule
from islands_kit.sync.registry import BuildArgs


class DecoupledDiLoCo(DiLoCoCore, ClockedStrategy):
    """Streaming DiLoCo on the decoupled schedule of the module doc. The decoupled driver calls ``land(i, now)``
    before each of island i's inner steps, ``island_step_done(i, tokens)`` after it, and ``after_tick(t)`` at the end
    of every tick. One process holds every island (the simulator), or each process one island with the synchroniser
    on island 0's (torch.distributed); the code is the same. Its in-flight merges are not checkpointed."""

    def __init__(self, models: dict[int, nn.Module], transport: Transport, fragments: list[list[str]],
                 cfg: SyncConfig, seed: int, tick_s: float, schedule: list[tuple[int, int]] | None = None,
                 hooks: Hooks | None = None) -> None:
        super().__init__(models, transport, fragments, cfg, seed, schedule, hooks=hooks)
        n = transport.n_islands
        self.all_ids = list(range(n))
        if len(self.ids) not in (1, n):
            raise ValueError("sync.mode=decoupled: runs with every island in one process (the simulator) or one "
                             "island per process (torch.distributed)")
        self.others = [i for i in self.all_ids if i != SYNCER]  # the islands that message the synchroniser
        self.senders = [i for i in self.ids if i != SYNCER]  # ... those this process holds
        self.is_syncer = SYNCER in self.ids
        if not tick_s > 0:
            raise ValueError(f"tick_s: must be > 0 (got {tick_s})")
        self.tick_s = tick_s
        self.rule = QuorumRule(cfg, self.P)
        self.base = {i: [g.detach().clone() for g in self.global_params] for i in self.ids}
        self.steps_since = {i: [0] * self.P for i in self.ids}
        self.round = [0] * self.P
        self.awaiting: dict[tuple[int, int], int] = {}  # (island, p) -> round whose broadcast has not landed yet
        self.inbox: list[Broadcast] = []
        self.in_flight: list[Merge] = []  # the synchroniser's decided merges, not yet applied
        self.announced: dict[int, list[tuple[float, int, int]]] = {i: [] for i in self.senders}  # (merge_s, p, k)
        self.merge_log: list[dict[str, Any]] = []
        self.inner_steps = {i: 0 for i in self.all_ids}  # other processes' islands: as last reported
        self.not_ready = 0
        self.last_merge_s = 0.0
        self.lost_at: dict[int, int] = {}  # island -> the step (tick) at whose end the synchroniser knew it lost
        self.landings: dict[int, float] = {}  # island -> the latest landing of a merge the synchroniser sent it

    def lost_islands(self) -> set[int]:
        """Islands whose messages the wire refused, or whose process died or stopped answering: absent from every
        later merge."""
        return self.transport.lost_islands()

    def _live_others(self) -> list[int]:
        lost = self.lost_islands()
        return [j for j in self.others if j not in lost]

    def _live_senders(self) -> list[int]:
        lost = self.lost_islands()
        return [i for i in self.senders if i not in lost]

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
            return NOT_READY
        return FRESH

    def _encode(self, island: int, tick: int, p: int, k: int, codec: Any) -> tuple[Payload, int, int]:
        """Island's outer gradient of fragment p through the codec with error feedback, as sent in round k at
        ``tick``; returns (payload, c^tok, c^steps) and starts its next span."""
        delta = self.hooks.outgoing(tick, island, p, self.base[island][p] - self.views[island][p].flat())
        payload, _ = self.ef.compress((island, p), delta, codec, stochastic=self.cfg.stochastic_rounding,
                                      generator=self.gens[island])
        payload = self.hooks.outgoing_payload(tick, island, p, payload)  # (an attack on the wire acts here)
        tokens, steps = self.tokens_since[island][p], self.steps_since[island][p]
        self.sent[(island, p)] = self.views[island][p].flat()
        self.awaiting[(island, p)] = k
        self.tokens_since[island][p] = 0
        self.steps_since[island][p] = 0
        return payload, tokens, steps

    def _contribute(self, i: int, tick: int, p: int, k: int, sent_s: float, codec: Any, final: bool) -> None:
        """Island i (not the synchroniser's) sends its part of round k of fragment p, leaving at ``sent_s``."""
        status = self._status(i, p, final)
        payload, tokens, steps = self._encode(i, tick, p, k, codec) if status == FRESH else (None, 0, 0)
        self.transport.post(i, SYNCER, CONTRIBUTION, {"tick": tick, "fragment": p, "round": k, "status": status,
                                                      "sent_s": sent_s, "tokens": tokens, "steps": steps,
                                                      "inner_steps": self.inner_steps[i]}, payload)

    def _decision(self, i: int, p: int, k: int, final: bool) -> float | None:
        """The merge time the synchroniser decided for round k of fragment p (``DECISION``; None: no merge)."""
        return read_decision(self.transport, i, (p, k), final)

    @torch.no_grad()
    def _take_apply(self, i: int, codec: Any) -> None:
        """Island i's next announced merge as the synchroniser applied it (``APPLY``): the same outer step on this
        process's copy of the global fragment (the synchroniser's process shares its copy, already stepped) and, if
        the island contributed, the broadcast that lands at its landing time."""
        self.announced[i].sort()
        merge_s, p, k = self.announced[i].pop(0)
        expect = peer.PayloadSpec(codec.name, self.global_params[p].numel(), codec.block_size)
        payload, landing_s = read_apply(self.transport, i, (merge_s, p, k), expect)
        if payload is not None and not self.is_syncer:
            self._outer_step(p, decode(payload))
        if landing_s is not None:
            self.inbox.append(Broadcast(i, p, k, landing_s, self.global_params[p].detach().clone()))
        self.last_merge_s = max(self.last_merge_s, merge_s)

    # -- the synchroniser's side ----------------------------------------------------------------------------------
    def after_tick(self, tick: int) -> None:
        self.now_step = tick
        now = tick * self.tick_s
        for p in self.fragments_due(tick):
            k = self.round[p]
            self.round[p] += 1
            self._round(tick, p, k, {i: now for i in self.all_ids}, self.codec, final=False)
        self._apply_merges(until_s=now)
        self._note_losses(tick)

    def _round(self, tick: int, p: int, k: int, sent_s: dict[int, float], codec: Any, final: bool) -> None:
        """Round k of fragment p: this process's islands send their parts, the synchroniser (if here) gathers and
        decides and tells every other island when the merge happens, and they take note. An island this process
        has dropped (its own, in the simulator) takes no further part."""
        for i in self._live_senders():
            self._contribute(i, tick, p, k, sent_s[i], codec, final)
        if self.is_syncer:
            now = tick * self.tick_s
            fresh, absent, not_ready, held = self._gather(tick, p, k, sent_s, codec, final)
            m = (self.rule.decide_final(tick, p, k, now, fresh, self.inner_steps) if final else
                 self.rule.decide(tick, p, k, now, fresh, absent, not_ready, self.inner_steps, held))
            if m is not None:
                self.in_flight.append(m)
            for j in self._live_others():
                self.transport.post(SYNCER, j, DECISION, {"fragment": p, "round": k,
                                                          "merge_s": None if m is None else m.merge_s})
        for i in self._live_senders():
            merge_s = self._decision(i, p, k, final)
            if merge_s is not None:
                self.announced[i].append((merge_s, p, k))

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

    def _gather(self, tick: int, p: int, k: int, sent_s: dict[int, float], codec: Any,
                final: bool) -> tuple[list[Contribution], list[int], list[int], list[int]]:
        """The synchroniser's view of round k of fragment p: (fresh contributions in island order, absent islands,
        islands not ready, islands whose contribution the screen held). Its own island is read here, leaving at
        ``sent_s``; every other island's part comes as a ``CONTRIBUTION`` with its send time, and one that is lost
        counts as absent."""
        fresh: list[Contribution] = []
        absent, not_ready = [], []
        for i in self.all_ids:
            payload: Payload | None = None
            if i == SYNCER:
                status, t = self._status(i, p, final), sent_s[i]
                if status == FRESH:
                    payload, tokens, steps = self._encode(i, tick, p, k, codec)
            else:
                expect = peer.PayloadSpec(codec.name, self.global_params[p].numel(), codec.block_size)
                got = read_contribution(self.transport, i, (tick, p, k), tick * self.tick_s, final, expect,
                                        self.landings.get(i, 0.0))
                if got is None:  # lost: its process died, stopped answering, or sent what the wire refused

                    absent.append(i)
                    continue
                body, payload = got
                status, tokens, steps, t = body["status"], body["tokens"], body["steps"], float(body["sent_s"])
                self.inner_steps[i] = body["inner_steps"]
            if status == ABSENT:
                absent.append(i)
            elif status == NOT_READY:
                not_ready.append(i)
                self.not_ready += 1
            else:
                assert payload is not None
                d = self.transport.send("fragments", i, SYNCER, payload, t)
                delta = d.tensor.to(self.global_params[p].device)  # a received payload decodes on the CPU
                fresh.append(Contribution(i, p, k, tokens, steps, delta, d.arrival_s, t))
        held: list[int] = []
        if self.hooks.has("screen"):
            fresh, drop, held = self.rule.screen(self.hooks, tick, p, fresh, self.lost_islands(), final)
            for j, why in drop.items():
                self.transport.drop(j, why)  # named in lost_islands; absent from this round and every later one
                absent += [j] if j not in absent else []
        return [c for c in fresh if c.island not in self.lost_islands()], sorted(absent), not_ready, held

    @torch.no_grad()
    def _apply_merges(self, until_s: float | None, codec: Any = None) -> None:
        """Apply, in time order, every merge decided by ``until_s`` (all of them when None). On the synchroniser:
        the outer step with the merged outer gradient as broadcast, the broadcast to each contributor over the link
        and ``APPLY`` to every other island (its own process's islands read it at once); elsewhere: the announced
        merges, as ``APPLY`` brings them."""
        codec = codec or self.codec
        if not self.is_syncer:
            for i in self.senders:
                while any(until_s is None or m[0] <= until_s for m in self.announced[i]):
                    self._take_apply(i, codec)
            return
        due = sorted((m for m in self.in_flight if until_s is None or m.merge_s <= until_s),
                     key=lambda m: (m.merge_s, m.fragment, m.round))
        self.in_flight = [m for m in self.in_flight if not (until_s is None or m.merge_s <= until_s)]
        for m in due:
            self._apply(m, codec)
            for i in self._live_senders():
                self._take_apply(i, codec)

    @torch.no_grad()
    def _apply(self, m: Merge, codec: Any) -> None:
        """The synchroniser applies merge ``m`` (``_apply_merges``)."""
        p = m.fragment
        g = self.global_params[p]
        if m.delta is not None:
            payload, sent = self.ef.compress(("syncer", p), m.delta, codec, stochastic=False)
            self._outer_step(p, sent)
        else:  # no merge: the contributors learn so (a message of the global fragment's codec size)
            payload = codec.encode(torch.zeros_like(g.detach()))
        m.record["landing_s"] = {}
        for j in m.recipients:
            d = self.transport.send("fragments", SYNCER, j, payload, m.merge_s)
            if j == SYNCER:
                self.inbox.append(Broadcast(j, p, m.round, d.arrival_s, g.detach().clone()))
            m.record["landing_s"][j] = d.arrival_s  # it lands at j's first step boundary from then on
            self.landings[j] = max(self.landings.get(j, 0.0), d.arrival_s)
        for j in self._live_others():
            self.transport.post(SYNCER, j, APPLY, {"fragment": p, "round": m.round, "merge_s": m.merge_s,
                                                   "outer_step": m.delta is not None,
                                                   "landing_s": m.record["landing_s"].get(j)},
                                payload if m.delta is not None else None)
        self.last_merge_s = max(self.last_merge_s, m.merge_s)
        self.merge_log.append(m.record)

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
            self._round(step, p, k, {i: ready.get(i, now) for i in self.all_ids}, self.final_codec, final=True)
        self._apply_merges(until_s=None, codec=self.final_codec)
        for i in self.all_ids:  # a lost island too: it idles to the end of the run (utilisation counts the loss)
            self.transport.clock.wait_until(i, max(self.transport.clock.now[i], self.last_merge_s))
        self.awaiting.clear()
        self.inbox.clear()
        self.transport.finish_messages()
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
            "late_contributions": self.rule.late,
            "dropped_contributions": self.rule.dropped,
            "dropped_tokens": self.rule.dropped_tokens,
            "not_ready_rounds": self.not_ready,
            "skipped_merges": sum(1 for r in self.merge_log if not r["quorum_met"]),
            "last_merge_s": self.last_merge_s,
            # when an island was lost (its process died, stopped answering or sent what the wire refused): when the
            # synchroniser knew, and the inner steps it had last reported (its figures in result.json)
            **({"lost_islands": {j: {"step": t, "last_reported_steps": self.inner_steps[j]}
                                 for j, t in sorted(self.lost_at.items())}} if self.lost_at else {}),
        }

    def lost(self) -> dict[int, int]:
        return {j: self.inner_steps[j] for j in self.lost_islands()}

    def unmerged_tokens(self) -> float:
        return self.rule.dropped_tokens

    def result_fields(self) -> dict[str, Any]:
        return {"decoupled": self.report()}


def build(a: BuildArgs) -> DecoupledDiLoCo:
    """The strategy of ``sync/decoupled_spec.py``'s spec."""
    return DecoupledDiLoCo(a.models, a.transport, a.fragments, a.cfg.sync, a.cfg.seed, a.tick_s, custom_schedule(a.cfg),
                           a.hooks)
