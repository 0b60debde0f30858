"""Butterfly mixing of model fragments between 2^k cells, without any all-reduce (Zhao & Canny, 2013).

Schedule. With n = 2^k cells there are R = k rounds; in round r cell i pairs with cell i XOR 2^r (``sync/topology.py``:
``butterfly(n)``, sent as one directed step of the transport per exchange). Each fragment p is
exchanged E = ``sync.butterfly.exchanges_per_window`` times per H-step window, at window positions

    s_{p,j} = (round(j · H / E) + o_p) mod H,  j = 0..E−1,   o_p = round(p · H / (E · P))

(spread evenly, staggered across fragments so their traffic does not coincide); an exchange happens after inner step t
when (t − 1) mod H = s_{p,j}. The c-th exchange of fragment p (c = 0, 1, …, counted over the whole run) uses round
r = c mod R, so with H=50, E=6 and 8 cells every fragment goes through two complete butterflies per window.

Merge rule (exact). At an exchange after step t, cell i sends its fragment θ_i[p](t) (through the codec, with
stochastic rounding and per-(cell, fragment) error feedback when enabled) to its partner j and receives θ_j[p](t).
After step t + d (d = τ = ``sync.tau``, the overlap delay shared with DiLoCo) cell i sets

    θ_i[p] ← ½ · (θ_i[p](t + d) + θ̂_j[p](t))

i.e. the equal-weight mean of its own fragment *at that moment* and the partner's fragment *as sent*. With d = 0 this
is the classic butterfly: after R rounds of instantaneous merges the mixing matrix is exactly uniform (1/n), every
cell's update has reached every cell (``mixing_matrix``; tested). With d > 0 the local steps taken during the delay
(t, t + d] count with weight ½ instead of 1 and the partner contributes its state d steps stale; the cell average is
then no longer exactly preserved — the price of overlapping communication with compute.

Delay-aware merge (``sync.butterfly.merge="delay_aware"``). The partner's fragment is merged against the cell's own
state *as sent*, and the local progress made during the delay is re-applied on top:

    θ_i[p] ← ½ · (θ_i[p](t) + θ̂_j[p](t)) + (θ_i[p](t + d) − θ_i[p](t))  =  θ_i[p](t + d) + ½ · (θ̂_j[p](t) − θ_i[p](t))

so the mixing acts on the snapshot at t exactly as in the delay-0 butterfly and the steps in (t, t + d] keep weight 1.
Mixing matrix: for exchanges of one fragment spaced more than d apart, with x the cells' fragments and u(s) the
local increments of inner step s, x(end) = W(all) x(0) + Σ_s W(≥ s) u(s), where W(≥ s) is the product of the round
matrices (``mixing_matrix``) of the exchanges sent after steps ≥ s, in order (tested against a brute-force simulation
of the merges on scalar models). The cell average is preserved exactly (every W is doubly stochastic).

Exact averages. ``sync.butterfly.exact_average_every`` = K: after every K-th window, a complete butterfly (R rounds,
fp32, merged at once) on a frozen snapshot leaves every cell holding the exact mean; ``sync.butterfly.final_average``
does one at the end of training. Their bytes go into the ledger like every other exchange.

Payloads (``sync.butterfly.payload``). ``weights`` sends θ_i[p](t) itself. ``delta`` sends θ_i[p](t) − ref[p], where
ref is the cells' last common state — the initial weights (every cell starts from the same ones), then the frozen
snapshot left by the latest exact average (every cell holds the same bits: each round's ½(a + b) is computed by both
partners with commutative IEEE additions) — and the receiver rebuilds θ̂_j[p](t) = ref[p] + decoded. A message keeps
the reference it was encoded against (a merge that lands after a newer exact average still adds the older ref). The
codec's block scale then follows the distance from ref, not the weights' own size, so a lossy codec's error shrinks with
it. With fp32 the two payloads merge to the same weights up to the rounding of (θ − ref) + ref (tested). The exact
averages themselves always send fp32 weights: that is what makes them exact and leaves identical bits everywhere.

Error feedback (``sync.error_feedback``, per (cell, fragment), as in DiLoCo). Cell i sends encode(x_i + e_i) and keeps
e_i ← x_i + e_i − decoded, x_i being the weights or the delta. The receiver's error is θ̂_i − θ_i = e_i(before) −
e_i(after) in both payload modes, and a merge adds half of it to the partner, so for merges with delay 0 or
delay-aware ones (doubly stochastic) Σ_i θ_i + ½ Σ_i e_i is conserved exactly (the local steps aside): the residual
is the part of the cell's fragment the other cells have not yet received, and the cell mean drifts by at most half
the current residuals instead of a sum over every exchange (tested). The residual is carried to the *next* partner
(the butterfly changes partner every exchange): what it conserves is the cells' sum, not one receiver's copy. It is
well defined on absolute weights too, and allowed there (``payload=weights``, the default, sends the fragment itself),
but with weights the block scale — hence every exchange's error — is set by the weights' absmax, so lossy
codecs are meant to be used with ``payload=delta``.

Evaluation (``sync.butterfly.eval``): ``cell0`` scores cell 0's replica (what one cell would deploy); ``mean`` scores the
mean of all cells (needs every cell in this process). With ``sync.butterfly.final_average`` the two coincide at the end.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from islands_kit.comm.codecs import ErrorFeedback, get_codec
from islands_kit.comm.transport import Transport
from islands_kit.config import SyncConfig
from islands_kit.sync.base import FragmentView, LockstepStrategy, Pending, PendingQueue
from islands_kit.sync.registry import BuildArgs
from islands_kit.sync.topology import Topology, butterfly, check_power_of_two, partner


def window_positions(H: int, E: int, P: int, p: int) -> list[int]:
    """Positions s_{p,j} in [0, H) of fragment p's E exchanges inside each window."""
    o = round(p * H / (E * P))
    return sorted({(round(j * H / E) + o) % H for j in range(E)})


@dataclass(frozen=True)
class Exchange:
    step: int  # exchange after this inner step (1-based)
    fragment: int
    round: int
    pairs: tuple[tuple[int, int], ...]  # (i, partner) for every cell i


def butterfly_schedule(n_cells: int, H: int, E: int, P: int, steps: int) -> list[Exchange]:
    """Every exchange of a run, in step order then fragment order."""
    R = check_power_of_two(n_cells)
    pos = [set(window_positions(H, E, P, p)) for p in range(P)]
    counter = [0] * P
    out: list[Exchange] = []
    for t in range(1, steps + 1):
        for p in range(P):
            if (t - 1) % H in pos[p]:
                r = counter[p] % R
                counter[p] += 1
                out.append(Exchange(t, p, r, tuple((i, partner(i, r)) for i in range(n_cells))))
    return out


def mixing_matrix(n_cells: int, rounds: list[int], topology: Topology | None = None) -> torch.Tensor:
    """W such that x_after = W @ x_before for instantaneous (delay 0) equal-weight merges in the given rounds of
    ``topology`` (default: the butterfly over ``n_cells``): each cell averages itself with what it received.

    Each round's matrix averages every cell with its source; the butterfly's product over rounds 0..R−1 is the
    uniform matrix."""
    top = topology or butterfly(n_cells)
    W = torch.eye(n_cells, dtype=torch.float64)
    for r in rounds:
        M = torch.zeros(n_cells, n_cells, dtype=torch.float64)
        for i in range(n_cells):
            M[i, i] += 0.5
            M[i, top.source(i, r)] += 0.5
        W = M @ W
    return W


class Butterfly(LockstepStrategy):
    name = "butterfly"

    def __init__(self, models: dict[int, nn.Module], transport: Transport, fragments: list[list[str]],
                 cfg: SyncConfig, seed: int) -> None:
        super().__init__(models, transport)
        self.cfg = cfg
        self.n = transport.n_islands
        self.topology = butterfly(self.n)  # round r: cell i with i XOR 2^r
        self.R = len(self.topology)
        self.P = len(fragments)
        self.pos = [set(window_positions(cfg.H, cfg.butterfly.exchanges_per_window, self.P, p)) for p in range(self.P)]
        self.counter = [0] * self.P
        self.views = {i: [FragmentView(m, names) for names in fragments] for i, m in models.items()}
        self.codec = get_codec(cfg.codec, cfg.codec_block_size)
        self.ef = ErrorFeedback(enabled=cfg.error_feedback)
        self.gens = {i: torch.Generator().manual_seed(seed * 1_000_003 + 7919 * i + 29) for i in self.ids}
        self.pending = PendingQueue()
        self.fp32 = get_codec("fp32")
        self.sent: dict[tuple[int, int, int], torch.Tensor] = {}  # (cell, fragment, sent_at) -> own state as sent
        if cfg.butterfly.eval == "mean" and len(self.ids) < self.n:
            raise ValueError("sync.butterfly.eval: 'mean' needs every cell in this process (got "
                             f"{len(self.ids)} of {self.n}); use cell0 with sync.butterfly.final_average=true instead")
        self.deploys_own_replica = cfg.butterfly.eval == "cell0"
        # delta payloads: ref version (the step of the exact average that left it; 0 = the initial weights) -> ref[p]
        self.delta = cfg.butterfly.payload == "delta"
        self.ref_version = 0
        self.refs: dict[int, list[torch.Tensor]] = {}
        if self.delta:
            self.refs[0] = [v.flat() for v in self.views[self.ids[0]]]
            for i in self.ids:
                if not all(torch.equal(v.flat(), r.to(v.device)) for v, r in zip(self.views[i], self.refs[0])):
                    raise ValueError("sync.butterfly.payload: 'delta' needs every cell to start from the same weights "
                                     f"(the shared reference); cell {i} differs from cell {self.ids[0]}")

    def after_inner_step(self, step: int, tokens: dict[int, int]) -> None:
        self._apply_due(step)
        for p in range(self.P):
            if (step - 1) % self.cfg.H in self.pos[p]:
                r = self.counter[p] % self.R
                self.counter[p] += 1
                self._exchange(step, p, r)
        self._apply_due(step)
        K = self.cfg.butterfly.exact_average_every
        if K and step % (K * self.cfg.H) == 0:
            self.exact_average(step)
        self._drop_unused_refs()

    def finalize(self, step: int) -> None:
        for pend in self.pending.drain():
            self._merge(pend)
        if self.cfg.butterfly.final_average:
            self.exact_average(step)
        self._drop_unused_refs()

    @torch.no_grad()
    def exact_average(self, step: int) -> None:
        """A complete butterfly on a frozen snapshot: R rounds of fp32 exchanges, each merged at once, after which
        every cell holds the exact mean of every fragment (the delay-0 mixing matrix is uniform after R rounds).
        With delta payloads that mean becomes the reference of the exchanges sent after ``step``."""
        for p in range(self.P):
            for r in range(self.R):
                payloads = {i: self.fp32.encode(self.views[i][p].flat()) for i in self.ids}
                handle = self.transport.send_recv("fragments", payloads, self.topology.targets(r))
                for i in self.ids:
                    v = self.views[i][p]
                    v.assign(0.5 * (v.flat() + handle.wait(i).to(v.device)))
        if self.delta:
            self.ref_version = step
            self.refs[step] = [v.flat() for v in self.views[self.ids[0]]]

    def _ref_version_of(self, sent_at: int) -> int:
        """The reference a delta sent after step ``sent_at`` was encoded against: the newest one set before it (an
        exact average after step t runs after that step's exchanges)."""
        return max(v for v in self.refs if v < sent_at)

    def _drop_unused_refs(self) -> None:
        if not self.delta:
            return
        keep = {self.ref_version} | {self._ref_version_of(x.sent_at) for x in self.pending}
        self.refs = {v: r for v, r in self.refs.items() if v in keep}

    def _exchange(self, step: int, p: int, r: int) -> None:
        payloads = {}
        keep_sent = self.cfg.butterfly.merge == "delay_aware" and self.cfg.tau > 0
        for i in self.ids:
            snapshot = self.views[i][p].flat()  # a fresh copy, which compress only reads
            x = snapshot - self.refs[self.ref_version][p].to(snapshot.device) if self.delta else snapshot
            payloads[i], _ = self.ef.compress((i, p), x, self.codec,
                                              stochastic=self.cfg.stochastic_rounding, generator=self.gens[i])
            if keep_sent:  # delay-aware merges mix the fragment as it was sent
                self.sent[(i, p, step)] = snapshot
        handle = self.transport.send_recv("fragments", payloads, self.topology.targets(r))
        self.pending.push(step + self.cfg.tau, p, handle, sent_at=step)

    def _apply_due(self, step: int) -> None:
        for pend in self.pending.due(step):
            self._merge(pend)

    @torch.no_grad()
    def _merge(self, pend: Pending) -> None:
        ref = self.refs[self._ref_version_of(pend.sent_at)][pend.fragment] if self.delta else None
        for i in self.ids:
            v = self.views[i][pend.fragment]
            theirs = pend.handle.wait(i).to(v.device)  # (a resumed run's in-flight results load on the CPU)
            if ref is not None:  # delta payload: θ̂_j = ref + decoded
                theirs = ref.to(v.device) + theirs
            mine = self.sent.pop((i, pend.fragment, pend.sent_at), None)
            if mine is not None:  # delay-aware: mix the snapshot as sent, keep the steps taken since
                v.assign(v.flat() + 0.5 * (theirs - mine.to(v.device)))
            else:
                v.assign(0.5 * (v.flat() + theirs))

    def outer_steps_per_fragment(self) -> list[int] | None:
        return list(self.counter)  # exchanges posted per fragment (finalize merges any still in flight)

    def eval_state(self) -> dict[str, torch.Tensor]:
        if self.cfg.butterfly.eval == "mean":
            models = [self.models[i] for i in self.ids]
            named = [dict(m.named_parameters()) for m in models]
            return {n: torch.stack([d[n].detach() for d in named]).mean(0) for n in named[0]}
        return dict(self.models[self.ids[0]].state_dict())

    def state_dict(self) -> dict[str, Any]:
        return {
            "counter": list(self.counter),
            "ef": self.ef.state_dict(),
            "gens": {i: g.get_state() for i, g in self.gens.items()},
            "pending": self.pending.state_dict(),
            "sent": [[i, p, t, x.clone()] for (i, p, t), x in sorted(self.sent.items())],
            "ref_version": self.ref_version,
            "refs": [[v, p, x.clone()] for v, xs in sorted(self.refs.items()) for p, x in enumerate(xs)],
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.counter = list(d["counter"])
        self.ef.load_state_dict(d["ef"])
        for i, s in d["gens"].items():
            self.gens[int(i)].set_state(s)
        self.pending.load_state_dict(d["pending"], self.transport.clock)
        self.sent = {(int(i), int(p), int(t)): x.clone() for i, p, t, x in d["sent"]}
        self.ref_version = int(d.get("ref_version", 0))  # (checkpoints from before delta payloads hold no refs)
        by_version: dict[int, dict[int, torch.Tensor]] = {}
        for v, p, x in d.get("refs", []):
            by_version.setdefault(int(v), {})[int(p)] = x.clone()
        refs = {v: [xs[p] for p in range(self.P)] for v, xs in by_version.items()}
        if self.delta and self.ref_version not in refs:
            raise ValueError("Butterfly.load_state_dict: sync.butterfly.payload='delta' but the checkpoint holds no "
                             f"reference {self.ref_version} (was it written with payload='weights'?)")
        self.refs = refs


def build(a: BuildArgs) -> Butterfly:
    """The strategy of ``sync/butterfly_spec.py``'s spec."""
    return Butterfly(a.models, a.transport, a.fragments, a.cfg.sync, a.cfg.seed)
