"""Decoupled DiLoCo (Douillard et al. 2026, "Decoupled DiLoCo for Resilient Distributed Pre-training",
arXiv 2604.21428): islands step on their own simulated clocks and a synchroniser merges what arrives in time.

Symbols as in :mod:`islands_kit.sync.diloco` (H, P, offset_p, Δ = θ_global − θ_i) plus T_ref, the global schedule's
step (the fastest island's step time), Q = ``sync.quorum`` and g = ``sync.grace_s``.

The schedule. The run loop (``run.Experiment.train_tick``) advances simulated time in ticks of T_ref; in tick t every
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
contributions the merge is skipped and they are carried. Merging (``merge_weights``, ``combine``):

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
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import nn

from islands_kit.comm.transport import Transport
from islands_kit.config import SyncConfig
from islands_kit.sync.diloco import DiLoCo

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


def combine(deltas: Sequence[torch.Tensor], weights: Sequence[float], average: str) -> torch.Tensor:
    """The merged outer gradient Δ̄ of the module doc, accumulated in float32 in the given order. Weights must be
    >= 0 with a positive sum; a zero Δ_i counts in the norm average and has no direction."""
    total = float(sum(weights))
    if not deltas or total <= 0:
        raise ValueError("combine: needs at least one outer gradient with a positive weight")
    if average == "mean":
        out = torch.zeros_like(deltas[0], dtype=torch.float32)
        for d, w in zip(deltas, weights):
            out.add_(d.float(), alpha=w / total)
        return out
    if average == "radial_directional":
        radius = 0.0
        u = torch.zeros_like(deltas[0], dtype=torch.float32)
        for d, w in zip(deltas, weights):
            n = float(d.float().norm())
            radius += w * n / total
            if n > 0:
                u.add_(d.float(), alpha=w / (total * n))
        un = float(u.norm())
        return u * (radius / un) if un > 0 else u
    raise ValueError(f"sync.decoupled.average: must be one of mean|radial_directional (got {average!r})")


class DecoupledDiLoCo(DiLoCo):
    """Streaming DiLoCo on the decoupled schedule of the module doc. The run loop calls ``land(i, now)`` before each
    of island i's inner steps, ``island_step_done(i, tokens)`` after it, and ``after_tick(t)`` at the end of every
    tick; ``after_inner_step`` (the lock-step hook) is not used. One process holds every island (LocalTransport)."""

    def __init__(self, models: dict[int, nn.Module], transport: Transport, fragments: list[list[str]],
                 cfg: SyncConfig, seed: int, tick_s: float, schedule: list[tuple[int, int]] | None = None) -> None:
        super().__init__(models, transport, fragments, cfg, seed, schedule)
        if set(self.ids) != set(range(transport.n_islands)):
            raise ValueError("sync.mode=decoupled: runs with every island in one process (the simulator)")
        if not tick_s > 0:
            raise ValueError(f"tick_s: must be > 0 (got {tick_s})")
        self.tick_s = tick_s
        self.dcfg = cfg.decoupled
        self.base = {i: [g.detach().clone() for g in self.global_params] for i in self.ids}
        self.steps_since = {i: [0] * self.P for i in self.ids}
        self.round = [0] * self.P
        self.awaiting: dict[tuple[int, int], int] = {}  # (island, p) -> round whose broadcast has not landed yet
        self.inbox: list[Broadcast] = []
        self.in_flight: list[Merge] = []
        self.carry: list[Contribution] = []
        self.merge_log: list[dict[str, Any]] = []
        self.inner_steps = {i: 0 for i in self.ids}
        self.tokens = {i: 0 for i in self.ids}
        self.late = 0
        self.dropped = 0
        self.dropped_tokens = 0.0
        self.not_ready = 0
        self.last_merge_s = 0.0

    # -- the islands' side ----------------------------------------------------------------------------------------
    def island_step_done(self, island: int, tokens: int) -> None:
        self.inner_steps[island] += 1
        self.tokens[island] += tokens
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

    def after_inner_step(self, step: int, tokens: dict[int, int]) -> None:
        raise RuntimeError("sync.mode=decoupled: the loop drives island_step_done / after_tick, not after_inner_step")

    # -- the synchroniser's side ----------------------------------------------------------------------------------
    def after_tick(self, tick: int) -> None:
        now = tick * self.tick_s
        for p in self.fragments_due(tick):
            self._post_round(tick, p, now)
        self._apply_merges(until_s=now)

    def _contribute(self, island: int, p: int, k: int, start_s: float, codec: Any) -> Contribution:
        delta = self.base[island][p] - self.views[island][p].flat()
        payload, _ = self.ef.compress((island, p), delta, codec, stochastic=self.cfg.stochastic_rounding,
                                      generator=self.gens[island])
        d = self.transport.send("fragments", island, SYNCER, payload, start_s)
        c = Contribution(island, p, k, self.tokens_since[island][p], self.steps_since[island][p], d.tensor,
                         d.arrival_s)
        self.sent[(island, p)] = self.views[island][p].flat()
        self.awaiting[(island, p)] = k
        self.tokens_since[island][p] = 0
        self.steps_since[island][p] = 0
        return c

    def _post_round(self, tick: int, p: int, now: float) -> None:
        k = self.round[p]
        self.round[p] += 1
        fresh: list[Contribution] = []
        absent, not_ready = [], []
        for i in self.ids:
            if not self.present[i] or self.tokens_since[i][p] == 0:
                absent.append(i)
            elif (i, p) in self.awaiting:
                not_ready.append(i)
                self.not_ready += 1
            else:
                fresh.append(self._contribute(i, p, k, now, self.codec))
        fresh.sort(key=lambda c: (c.arrival_s, c.island))
        Q = self.cfg.quorum
        rec: dict[str, Any] = {"step": tick, "fragment": p, "round": k, "sent_s": now, "absent": absent,
                               "not_ready": not_ready, "island_steps": dict(self.inner_steps),
                               "arrival_s": {c.island: c.arrival_s for c in fresh}}
        if len(fresh) < Q:  # no quorum: nothing merges; the contributions wait for the next round
            merge_s = max([c.arrival_s for c in fresh], default=now)
            self.carry.extend(fresh)
            rec.update(merge_s=merge_s, quorum_met=False, on_time=[], late=[c.island for c in fresh], carried_in=[])
            self.in_flight.append(Merge(merge_s, p, k, None, [c.island for c in fresh], rec))
            return
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
        self.in_flight.append(Merge(merge_s, p, k, delta, [c.island for c in fresh], rec))

    @torch.no_grad()
    def _apply_merges(self, until_s: float | None, codec: Any = None) -> None:
        """Apply, in time order, every merge decided by ``until_s`` (all of them when None): the outer step with the
        merged outer gradient as broadcast, then the broadcast to each contributor over the link."""
        due = sorted((m for m in self.in_flight if until_s is None or m.merge_s <= until_s),
                     key=lambda m: (m.merge_s, m.fragment, m.round))
        self.in_flight = [m for m in self.in_flight if not (until_s is None or m.merge_s <= until_s)]
        for m in due:
            p = m.fragment
            g = self.global_params[p]
            payload = None
            if m.delta is not None:
                payload, sent = self.ef.compress(("syncer", p), m.delta, codec or self.codec, stochastic=False)
                g.grad = sent.view_as(g).to(g.device, copy=True)
                K = self.cfg.diloco.outer_momentum_warmup
                if K > 0:
                    self.outer_opts[p].param_groups[0]["momentum"] = (self.cfg.diloco.outer_momentum
                                                                     * min(1.0, self.n_outer[p] / K))
                self.outer_opts[p].step()
                g.grad = None
                self.n_outer[p] += 1
                self.synced[p] = True
            else:  # no merge: the contributors learn so (a message of the global fragment's codec size)
                payload = (codec or self.codec).encode(torch.zeros_like(g.detach()))
            flat = g.detach().clone()
            m.record["landing_s"] = {}
            for j in m.recipients:
                d = self.transport.send("fragments", SYNCER, j, payload, m.merge_s)
                self.inbox.append(Broadcast(j, p, m.round, d.arrival_s, flat))
                m.record["landing_s"][j] = d.arrival_s  # it lands at j's first step boundary from then on
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
            fresh = [self._contribute(i, p, self.round[p], ready[i], self.final_codec) for i in self.ids
                     if self.present[i] and self.tokens_since[i][p] > 0]
            carried = [c for c in self.carry if c.fragment == p]
            merged = fresh + carried
            self.round[p] += 1
            if not merged:
                continue
            self.carry = [c for c in self.carry if c.fragment != p]
            merge_s = max(c.arrival_s for c in merged)
            delta = combine([c.delta for c in merged], merge_weights(merged, self.dcfg.weighting), self.dcfg.average)
            rec = {"step": step, "fragment": p, "round": self.round[p] - 1,
                   "sent_s": min([ready[c.island] for c in fresh], default=now), "merge_s": merge_s,
                   "quorum_met": True, "on_time": [c.island for c in fresh], "late": [],
                   "carried_in": [c.island for c in carried], "absent": [], "not_ready": [], "final": True,
                   "tokens": sum(c.tokens for c in merged), "island_steps": dict(self.inner_steps),
                   "arrival_s": {c.island: c.arrival_s for c in fresh}}
            self.in_flight.append(Merge(merge_s, p, self.round[p] - 1, delta, [c.island for c in fresh], rec))
        self._apply_merges(until_s=None, codec=self.final_codec)
        for i in self.ids:
            self.transport.clock.wait_until(i, max(self.transport.clock.now[i], self.last_merge_s))
        self.awaiting.clear()
        self.inbox.clear()

    @torch.no_grad()
    def rejoin(self, island: int) -> None:
        super().rejoin(island)
        for p in range(self.P):
            self.base[island][p] = self.global_params[p].detach().clone()
            self.steps_since[island][p] = 0
            self.awaiting.pop((island, p), None)
        self.inbox = [b for b in self.inbox if b.island != island]

    def report(self) -> dict[str, Any]:
        """What result.json records of the decoupled schedule (``run.Experiment.result``)."""
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
        }

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError("sync.mode=decoupled: checkpoints are not supported (config refuses checkpoint_every)")
