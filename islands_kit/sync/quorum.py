"""The synchroniser's merge rule of decoupled DiLoCo (``sync/decoupled.py``): which outer gradients of a round make
the merge (quorum Q, grace g, late ones carried or dropped), how they are weighed and averaged. Pure bookkeeping on
contributions already decoded and timed by the wire; the choreography around it (who sends what, when it lands)
is ``sync/decoupled.py``'s.

    weighting=tokens:      w_i = c_i^tok
    weighting=efficiency:  w_i = c_i^tok · e_i,  e_i = (c_i^tok / c_i^steps) / max_j (c_j^tok / c_j^steps)
    average=mean:               Δ̄ = Σ w_i Δ_i / Σ w_i
    average=radial_directional: Δ̄ = (Σ w_i ‖Δ_i‖ / Σ w_i) · u / ‖u‖,   u = Σ w_i Δ_i / ‖Δ_i‖

(the efficiency weighting and radial-directional averaging are our reading of the paper's description: tokens
processed times tokens-per-step efficiency; norm and direction averaged separately, so that outer gradients that
disagree in direction do not shrink the step as a plain mean does; ``combine`` in ``sync/averaging.py`` is the rule
lock-step DiLoCo shares.)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import torch

from islands_kit.config import SyncConfig
from islands_kit.sync.averaging import combine


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
class Merge:
    """A merge decided at ``merge_s``: the outer step on fragment ``fragment`` with ``delta`` (None: quorum not met,
    the global fragment stays) and the islands it answers."""

    merge_s: float
    fragment: int
    round: int
    delta: torch.Tensor | None
    recipients: list[int]
    record: dict[str, Any] = field(default_factory=dict)


@dataclass
class Broadcast:
    """A merged global fragment on its way to island ``island``; it lands at the island's first step boundary at or
    after ``arrival_s``."""

    island: int
    fragment: int
    round: int
    arrival_s: float
    global_flat: torch.Tensor


class Screen(Protocol):
    """The synchroniser's value checks of contributions, as ``(island, weight, Δ)`` (the run's ``sync/hooks.py``
    points, where a defence registers): each returns ({island: why it is dropped from the run}, {island: why its
    contribution is held}), one line each."""

    def screen(self, step: int, fragment: int, fresh: Sequence[tuple[int, float, torch.Tensor]]
               ) -> tuple[dict[int, str], dict[int, str]]:
        ...

    def rescreen(self, step: int, fragment: int, held: tuple[int, float, torch.Tensor]
                 ) -> tuple[dict[int, str], dict[int, str]]:
        ...

    def not_merged(self, step: int, fragment: int, held: tuple[int, float, torch.Tensor]) -> None:
        ...


def _as_screened(c: Contribution) -> tuple[int, float, torch.Tensor]:
    return c.island, float(c.tokens), c.delta


def merge_weights(contribs: Sequence[Contribution], weighting: str) -> list[float]:
    """w_i of each contribution (module doc): its tokens, times its relative tokens-per-step with ``efficiency``."""
    if weighting == "tokens":
        return [float(c.tokens) for c in contribs]
    if weighting == "efficiency":
        rate = [c.tokens / max(1, c.steps) for c in contribs]
        top = max(rate) if rate else 1.0
        return [float(c.tokens) * (r / top if top > 0 else 1.0) for c, r in zip(contribs, rate)]
    raise ValueError(f"sync.decoupled.weighting: must be one of tokens|efficiency (got {weighting!r})")


class QuorumRule:
    """The synchroniser's decisions and what they leave behind: contributions carried to a later round, late and
    dropped counts, the tokens dropped (as 1/P shares: a fragment is one P-th of what its tokens trained)."""

    def __init__(self, cfg: SyncConfig, n_fragments: int) -> None:
        self.cfg = cfg
        self.dcfg = cfg.decoupled
        self.P = n_fragments
        self.carry: list[Contribution] = []
        self.held: list[Contribution] = []  # contributions the screen held: nothing trusted to judge them by yet
        self.late = 0
        self.dropped = 0
        self.dropped_tokens = 0.0

    def _combine(self, merged: list[Contribution]) -> torch.Tensor:
        return combine([c.delta for c in merged], merge_weights(merged, self.dcfg.weighting), self.cfg.diloco.average)

    def screen(self, screen: Screen, tick: int, p: int, fresh: list[Contribution], lost: set[int], final: bool
               ) -> tuple[list[Contribution], dict[int, str], list[int]]:
        """The screen's verdicts on a round of fragment p: (the fresh contributions kept, {island: why dropped}, the
        islands whose fresh contribution was held). A held contribution waits here and is judged again at p's later
        rounds, after that round's fresh ones (which may have made p a trusted round): once it passes it is carried
        into the merge (as a late one is); one still held when p's final round ends is reported and its tokens
        counted as dropped. Its island is told of the round's merge like any contributor, so the replica it lands
        keeps only its progress since sending (what it sent waits here). ``lost``: islands already dropped."""
        drop, hold = screen.screen(tick, p, [_as_screened(c) for c in fresh])
        earlier = [c for c in self.held if c.fragment == p]
        self.held = [c for c in self.held if c.fragment != p] + [c for c in fresh if c.island in hold]
        for c in earlier:
            if c.island in lost or c.island in drop:
                continue
            gone, still = screen.rescreen(tick, p, _as_screened(c))
            drop.update(gone)
            if c.island in still:
                self.held.append(c)
            elif c.island not in gone:
                self.carry.append(c)
        if final:
            for c in [c for c in self.held if c.fragment == p]:
                screen.not_merged(tick, p, _as_screened(c))
                self.dropped_tokens += c.tokens / self.P
            self.held = [c for c in self.held if c.fragment != p]
        kept = [c for c in fresh if c.island not in drop and c.island not in hold]
        return kept, drop, [c.island for c in fresh if c.island in hold]

    def decide(self, tick: int, p: int, k: int, now: float, fresh: list[Contribution], absent: list[int],
               not_ready: list[int], island_steps: dict[int, int], held: Sequence[int] = ()) -> Merge:
        """Round k of fragment p at schedule time ``now`` from the fresh contributions: the synchroniser waits
        until Q have arrived (time q), then at most g seconds more; those arrived by min(q + g, the last arrival)
        merge, at that time, with the carried ones that arrived by then; the rest are late (carried or dropped,
        ``sync.decoupled.late``). With fewer than Q nothing merges and they are carried. The islands whose
        contribution the screen ``held`` are told of the merge too (``screen``)."""
        fresh.sort(key=lambda c: (c.arrival_s, c.island))
        Q = self.cfg.quorum
        rec: dict[str, Any] = {"step": tick, "fragment": p, "round": k, "sent_s": now, "absent": absent,
                               "not_ready": not_ready, "island_steps": dict(island_steps),
                               "arrival_s": {c.island: c.arrival_s for c in fresh}, **({"held": list(held)} if held else {})}
        told = [c.island for c in fresh] + list(held)
        if len(fresh) < Q:  # no quorum: nothing merges; the contributions wait for the next round
            merge_s = max([c.arrival_s for c in fresh], default=now)
            self.carry.extend(fresh)
            rec.update(merge_s=merge_s, quorum_met=False, on_time=[], late=[c.island for c in fresh], carried_in=[])
            return Merge(merge_s, p, k, None, told, rec)
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
                self.dropped_tokens += c.tokens / self.P
        merged = on_time + carried
        rec.update(merge_s=merge_s, quorum_met=True, on_time=[c.island for c in on_time],
                   late=[c.island for c in late], carried_in=[c.island for c in carried],
                   tokens=sum(c.tokens for c in merged))
        return Merge(merge_s, p, k, self._combine(merged), told, rec)

    def decide_final(self, step: int, p: int, k: int, now: float, fresh: list[Contribution],
                     island_steps: dict[int, int]) -> Merge | None:
        """Fragment p's last merge: every fresh contribution and everything carried, no quorum; None when there is
        nothing to merge."""
        carried = [c for c in self.carry if c.fragment == p]
        merged = fresh + carried
        if not merged:
            return None
        self.carry = [c for c in self.carry if c.fragment != p]
        merge_s = max(c.arrival_s for c in merged)
        rec = {"step": step, "fragment": p, "round": k, "sent_s": min([c.sent_s for c in fresh], default=now),
               "merge_s": merge_s, "quorum_met": True, "on_time": [c.island for c in fresh], "late": [],
               "carried_in": [c.island for c in carried], "absent": [], "not_ready": [], "final": True,
               "tokens": sum(c.tokens for c in merged), "island_steps": dict(island_steps),
               "arrival_s": {c.island: c.arrival_s for c in fresh}}
        return Merge(merge_s, p, k, self._combine(merged), [c.island for c in fresh], rec)
