"""DiLoCo and Streaming DiLoCo: local inner steps, fragment-wise outer steps on a global copy.

DiLoCo (Douillard et al., 2023): every island trains its replica for H inner steps; the outer gradient
Δ_i = θ_global − θ_i is averaged across islands (weighted by tokens processed) and applied to θ_global by an outer
optimizer (SGD with Nesterov momentum, lr 0.7, momentum 0.9); replicas restart from θ_global.

Streaming DiLoCo (Douillard et al., 2025) — symbols as in the paper:
  * P = ``sync.n_fragments``: the blocks are split into P fragments with *strided* assignment (block l → fragment l mod P;
    token embedding with fragment 0, final norm + head with fragment P−1, see ``sync.base.strided_fragments``).
  * Fragment p syncs after inner steps t ≡ offset_p (mod H), offsets spread evenly across the window:
    offset_p = round((p + 1) · H / P) mod H, so with P=1 the single fragment syncs at t = H, 2H, … (plain DiLoCo).
  * τ = ``sync.tau``: the outer result of a sync posted after step t lands after step t + τ (the transfer overlaps τ inner
    steps of compute); then the replica merges: θ_i ← α · θ_i + (1 − α) · θ_global (α = ``sync.diloco.alpha``).
  * Outer gradients cross the wire through a codec (e.g. 4-bit) with stochastic rounding and per-fragment error
    feedback: the quantisation residual of fragment p on island i is added to that fragment's next outer gradient.
  * Evaluation uses the global (outer) parameters — what a site would deploy. Until fragment p's first outer step
    its global copy is still the initial weights, so the deployed model carries the first local island's own copy of
    that fragment instead. ``finalize`` completes every transfer in flight and then syncs every fragment once more
    (through ``sync.diloco.final_codec``, lossless with fp32), so the final model holds every island's last steps (bytes counted).

Published improvements, each off by default (off, the arithmetic is exactly the one above):
  * ``sync.diloco.merge="keep_local"``: when an outer result lands τ steps after it was sent, θ_i ← θ_global + (θ_i − θ_i^sent):
    the replica keeps the τ inner steps it took during the transfer instead of α-blending half of its offset away.
  * ``sync.diloco.eager`` (Kale et al. 2025, "Eager updates for overlapped communication and computation in DiLoCo"): at send
    time each replica restarts from an estimated outer step, θ_i ← θ_global − η_out · Δ̂_i with
    Δ̂_i = (w_i Δ_i + (W − w_i) Δ̄_prev) / W: its own fresh outer gradient mixed with the previous (delayed) average
    standing in for the others'; the global copy still takes the exact outer step when the average lands, and the
    replica then re-bases its progress since the eager step on it (as keep_local).
  * ``sync.diloco.warm_start_steps`` (post-local SGD, Lin et al. 2020): for the first N inner steps every fragment is plainly
    averaged every step (θ_global ← θ_global − Δ̄, replicas ← θ_global; the outer optimizer is not stepped), then
    the streaming schedule takes over. Every byte goes into the ledger.
  * ``sync.diloco.h_schedule="qsr"`` (Gu et al. 2023): windows of H_k = max(H, ⌊(α / η_k)²⌋) steps, η_k the inner lr
    when window k starts (``sync/schedule.py``: ``qsr_windows``, ``sync_schedule``): syncs are frequent while the lr is high and thin out as
    it decays; each window places the fragments at their offsets as the constant schedule does.
  * ``sync.diloco.outer_momentum_warmup`` K: the outer momentum of fragment p's k-th outer step (k = 0, 1, …) is
    μ · min(1, k / K), so the first outer steps are not amplified by a momentum buffer holding one noisy direction.
  * ``sync.diloco.average="radial_directional"`` (Decoupled DiLoCo's rule, ``sync/averaging.py``): Δ̄ is the weighted
    mean of the ‖Δ_i‖ along the weighted mean of the unit vectors Δ_i / ‖Δ_i‖. It needs every island's Δ_i, not their
    sum, so the transport all-gathers: n (n − 1) S bytes per sync, the ring's 2 (n − 1) S for two islands.

SparseLoCo (Sarfi et al. 2025, "Communication Efficient LLM Pre-training with SparseLoCo", Algorithm 1) is this loop with
three settings, symbols as in the paper (``presets.SPARSELOCO`` holds its values):
  * the error-feedback buffer e_r of each island (per fragment here) decays: e_r ← β e_r + Δ_r
    (β = ``sync.diloco.error_feedback_decay``; ``comm.codecs.ErrorFeedback``);
  * Δ̂_r = Q(TopK(e_r)) is sent and e_r ← e_r − Δ̂_r: TopK per chunk of the flattened fragment, Q the 2-bit grid with
    one scale per chunk (``sync.codec=ctop64_int2`` etc., chunk = ``sync.codec_block_size``, ``comm.codecs.TopKCodec``);
  * θ ← θ − α Δ with Δ the (token-weighted) mean of the Δ̂_r and no outer momentum (``outer_momentum=0``, α =
    ``outer_lr``): the decayed buffer e_r plays the momentum's part.
With Streaming DiLoCo's fragments each fragment has its own buffer and its own staggered sync. The wire is priced as
for any codec (a ring all-reduce); for two islands that is each payload sent once each way, exactly what an
all-gather of the sparse payloads costs; with more islands sparse payloads cannot be ring-reduced at their size.

Islands absent from a sync (preempted) simply do not contribute; the token-weighted average uses those present.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from islands_kit.comm.codecs import ErrorFeedback, get_codec
from islands_kit.comm.transport import Transport
from islands_kit.config import ExperimentConfig, SyncConfig
from islands_kit.optim.outer import OuterFactory, OuterStep, outer_factory
from islands_kit.sync.averaging import combine
from islands_kit.sync.base import FragmentView, LockstepStrategy, Pending, PendingQueue, SyncStrategy
from islands_kit.sync.hooks import Hooks
from islands_kit.sync.registry import BuildArgs
from islands_kit.sync.schedule import diloco_schedule, fragment_offsets


def diloco_outer(cfg: SyncConfig) -> OuterFactory:
    """The outer optimizer ``sync.diloco`` names (``outer_optimizer``; SGD by default) at outer_lr, outer_momentum."""
    c = cfg.diloco
    return outer_factory(c.outer_optimizer, c.outer_lr, c.outer_momentum, c.nesterov)


class DiLoCoCore(SyncStrategy):
    """What lock-step DiLoCo and Decoupled DiLoCo (``sync/decoupled.py``) share: the global fragments and their outer
    optimizer, the codec with per-fragment error feedback, each island's random stream and token counts since its
    last sync, the schedule (``fragments_due``), the outer step, the deployed model and a returning island's rejoin."""

    deploys_own_replica = False  # the global (outer) model

    def __init__(self, models: dict[int, nn.Module], transport: Transport, fragments: list[list[str]],
                 cfg: SyncConfig, seed: int, schedule: list[tuple[int, int]] | None = None,
                 outer_optimizer: OuterFactory | None = None, hooks: Hooks | None = None) -> None:
        """``schedule``: the (step, fragment) syncs when they do not follow the constant H (``sync_schedule`` with
        the QSR windows); None = fragment p syncs after every step t ≡ offset_p (mod H). ``outer_optimizer`` builds
        each global fragment's outer optimizer (torchft's shape: the optimizer is handed in); None = the one
        ``sync.diloco`` names (``diloco_outer``). ``hooks``: the run's hook points around a merge (``outgoing``,
        ``outgoing_payload``, ``merge``, ``screen``: ``sync/hooks.py``), where faults and defences attach."""
        super().__init__(models, transport)
        self.hooks = hooks or Hooks()
        if len(fragments) != cfg.n_fragments:
            raise ValueError(f"sync.n_fragments: got {cfg.n_fragments} but {len(fragments)} fragment name lists")
        self.cfg = cfg
        self.P = cfg.n_fragments
        self.offsets = fragment_offsets(cfg.H, self.P)
        self.due: dict[int, list[int]] | None = None
        if schedule is not None:
            self.due = {}
            for t, p in schedule:
                self.due.setdefault(t, []).append(p)
        self.views = {i: [FragmentView(m, names) for names in fragments] for i, m in models.items()}
        first = self.views[self.ids[0]]
        # the global (outer) parameters, one flat fp32 vector per fragment, identical on every process
        self.global_params = [nn.Parameter(v.flat().clone()) for v in first]
        factory = outer_optimizer or diloco_outer(cfg)
        self.outer = [OuterStep([g], factory, cfg.diloco.outer_momentum_warmup) for g in self.global_params]
        self.outer_log: list[dict[str, Any]] = []  # one record per outer step: step, fragment, OuterRecord fields
        self.now_step = 0  # the inner step of the schedule the strategy last saw (stamps outer_log)
        self.codec = get_codec(cfg.codec, cfg.codec_block_size)
        self.ef = ErrorFeedback(enabled=cfg.error_feedback, decay=cfg.diloco.error_feedback_decay)
        self.gens = {i: torch.Generator().manual_seed(seed * 1_000_003 + 7919 * i + 17) for i in self.ids}
        self.tokens_since = {i: [0] * self.P for i in self.ids}
        self.names = fragments
        self.final_codec = get_codec(cfg.diloco.final_codec, cfg.codec_block_size) if cfg.diloco.final_codec else self.codec
        self.synced = [False] * self.P  # has fragment p's global copy ever been updated from the islands?
        self.sent: dict[tuple[int, int], torch.Tensor] = {}  # (island, p) -> replica as sent (keep_local, eager, decoupled)

    # -- the schedule ---------------------------------------------------------------------------------------------
    def fragments_due(self, step: int) -> list[int]:
        if self.due is not None:
            return sorted(self.due.get(step, []))
        return [p for p in range(self.P) if step % self.cfg.H == self.offsets[p]]

    @torch.no_grad()
    def _outer_step(self, p: int, mean_delta: torch.Tensor) -> None:
        """The outer optimizer's step on global fragment p with the averaged outer gradient (its momentum ramped over
        ``outer_momentum_warmup`` outer steps); fragment p is then synced."""
        rec = self.outer[p].step([mean_delta])  # (a resumed run's in-flight results load on the CPU: moved there)
        self.outer_log.append({"step": self.now_step, "fragment": p, **rec.as_dict()})
        self.synced[p] = True

    @property
    def n_outer(self) -> list[int]:
        """Outer steps taken per fragment (the momentum ramp counts them)."""
        return [o.n for o in self.outer]

    def outer_steps_per_fragment(self) -> list[int] | None:
        return self.n_outer  # the warm start's plain averages are not outer steps

    def outer_records(self) -> list[dict[str, Any]]:
        """Every outer step: the inner step it landed at, the fragment, ‖Δ̄‖/‖θ‖, cos with the fragment's previous
        Δ̄, ‖θ‖ after it and the applied step over ‖Δ̄‖ (``optim.outer.OuterRecord``)."""
        return self.outer_log

    # -- evaluation, presence, checkpoints ------------------------------------------------------------------------
    def eval_state(self) -> dict[str, torch.Tensor]:
        state: dict[str, torch.Tensor] = {}
        for p, names in enumerate(self.names):
            # before its first outer step a fragment's global copy is the initial weights: deploy the local replica's
            flat = self.global_params[p].detach() if self.synced[p] else self.views[self.ids[0]][p].flat()
            off = 0
            for n, prm in zip(names, self.views[self.ids[0]][p].params):
                state[n] = flat[off:off + prm.numel()].view_as(prm).clone()
                off += prm.numel()
        return state

    @torch.no_grad()
    def rejoin(self, island: int) -> None:
        """A returning (preempted) island takes the current global state before it trains again."""
        for p in range(self.P):
            self.views[island][p].assign(self.global_params[p].detach())
            self.tokens_since[island][p] = 0
            self.sent.pop((island, p), None)
        self.present[island] = True


class DiLoCo(DiLoCoCore, LockstepStrategy):
    """Streaming DiLoCo; with ``n_fragments=1`` and ``tau=0`` it is plain DiLoCo."""

    name = "diloco"

    def __init__(self, models: dict[int, nn.Module], transport: Transport, fragments: list[list[str]],
                 cfg: SyncConfig, seed: int, schedule: list[tuple[int, int]] | None = None,
                 outer_optimizer: OuterFactory | None = None, hooks: Hooks | None = None) -> None:
        super().__init__(models, transport, fragments, cfg, seed, schedule, outer_optimizer, hooks)
        self.pending = PendingQueue()
        self.keep_local = cfg.diloco.merge == "keep_local" or cfg.diloco.eager
        self.last_mean: list[torch.Tensor | None] = [None] * self.P  # previous averaged outer gradient (eager)

    def after_inner_step(self, step: int, tokens: dict[int, int]) -> None:
        self.now_step = step
        for i in self.ids:
            for p in range(self.P):
                self.tokens_since[i][p] += tokens.get(i, 0)
        self._apply_due(step)
        if step <= self.cfg.diloco.warm_start_steps:
            for p in range(self.P):
                self._average_now(step, p)
            return
        for p in self.fragments_due(step):
            self._send(step, p)
        self._apply_due(step)  # tau = 0: the outer result lands in the same step

    def finalize(self, step: int) -> None:
        for pend in self.pending.drain():
            self._apply(pend)
        for p in range(self.P):  # one last full sync so the final global model holds every island's last steps
            if any(self.tokens_since[i][p] for i in self.ids):
                self._send(step, p, apply_at=step, codec=self.final_codec)
        self._apply_due(step)

    # -- one fragment sync ----------------------------------------------------------------------------------------
    def outer_gradient(self, island: int, p: int) -> torch.Tensor:
        """Δ_i = θ_global − θ_i for fragment p (the direction the outer optimizer descends)."""
        return self.global_params[p].detach() - self.views[island][p].flat()

    def _post(self, step: int, p: int, codec: Any) -> tuple[Any, dict[int, torch.Tensor], dict[int, float]]:
        """Encode every present island's outer gradient of fragment p and post the collective."""
        payloads, weights, deltas = {}, {}, {}
        for i in self.ids:
            if not self.present[i]:
                continue
            delta = self.hooks.outgoing(step, i, p, self.outer_gradient(i, p))  # (an attack acts here)
            deltas[i] = delta
            payload, _ = self.ef.compress((i, p), delta, codec, stochastic=self.cfg.stochastic_rounding,
                                          generator=self.gens[i])
            payloads[i] = self.hooks.outgoing_payload(step, i, p, payload)
            weights[i] = float(self.tokens_since[i][p])
            self.tokens_since[i][p] = 0
        if not self.hooks.has("merge") and self.cfg.diloco.average == "mean":
            handle = self.transport.all_reduce("fragments", payloads, weights)
        else:  # a robust rule or a non-linear average needs every outer gradient, not their sum
            handle = self.transport.all_gather("fragments", payloads, weights)
        return handle, deltas, weights

    def _merged(self, sent_at: int, p: int, got: Any) -> torch.Tensor:
        """Δ̄ from the collective's result: the all-reduced token-weighted mean as it is, else (gathered
        ``(island, weight, Δ_i)``) the ``merge`` hook (a fault defence's robust rule) or ``sync.diloco.average``."""
        if self.hooks.has("merge"):
            return self.hooks.merge(sent_at, p, got)
        if self.cfg.diloco.average == "mean":
            return got
        return combine([d for _, _, d in got], [w for _, w, _ in got], self.cfg.diloco.average)

    def _send(self, step: int, p: int, apply_at: int | None = None, codec: Any = None) -> None:
        handle, deltas, weights = self._post(step, p, codec or self.codec)
        lands_at = step + self.cfg.tau if apply_at is None else apply_at
        if self.cfg.diloco.eager and lands_at > step:
            self._eager_step(p, deltas, weights)
        if self.keep_local:
            for i in deltas:
                self.sent[(i, p)] = self.views[i][p].flat()
        self.pending.push(lands_at, p, handle, sent_at=step)

    @torch.no_grad()
    def _eager_step(self, p: int, deltas: dict[int, torch.Tensor], weights: dict[int, float]) -> None:
        """Restart each replica from θ_global − η_out · Δ̂_i, Δ̂_i = (w_i Δ_i + (W − w_i) Δ̄_prev) / W (module doc).
        Before any average exists (the first sync of a fragment) Δ̄_prev is taken as zero."""
        W = sum(weights.values())
        prev = self.last_mean[p]
        g = self.global_params[p].detach()
        for i, d in deltas.items():
            w = weights[i] / W if W > 0 else 1.0 / len(deltas)
            est = w * d if prev is None else w * d + (1.0 - w) * prev.to(d.device)
            self.views[i][p].assign(g - self.cfg.diloco.outer_lr * est)

    @torch.no_grad()
    def _average_now(self, step: int, p: int) -> None:
        """Post-local SGD's warm start: average fragment p across the islands now (τ = 0, no outer optimizer)."""
        handle, deltas, _ = self._post(step, p, self.codec)
        got = self._collect(handle)
        if got is None:
            return
        g = self.global_params[p]
        g.sub_(self._merged(step, p, got).view_as(g).to(g.device))
        self.synced[p] = True
        for i in deltas:
            self.views[i][p].assign(g.detach())

    def _collect(self, handle: Any) -> Any:
        """The collective's result (identical on every island), waited for by every local island that took part
        (waiting advances each one's clock); None when none of them did."""
        got = None
        for i in self.ids:
            if i in handle.arrival:
                got = handle.wait(i)
        return got

    def _apply_due(self, step: int) -> None:
        for pend in self.pending.due(step):
            self._apply(pend)

    @torch.no_grad()
    def _apply(self, pend: Pending) -> None:
        p = pend.fragment
        got = self._collect(pend.handle)
        if got is None:  # every local island was absent when this sync was posted
            return
        mean_delta = self._merged(pend.sent_at, p, got)
        self._outer_step(p, mean_delta)
        g = self.global_params[p]
        if self.cfg.diloco.eager:
            self.last_mean[p] = mean_delta.detach().reshape(-1).to(g.device, copy=True)
        a = self.cfg.diloco.alpha
        for i in self.ids:
            if not self.present[i]:
                continue
            v = self.views[i][p]
            sent = self.sent.pop((i, p), None)
            if sent is not None:
                v.assign(g.detach() + (v.flat() - sent.to(v.device)))  # keep the steps taken since sending
            else:
                v.assign(a * v.flat() + (1.0 - a) * g.detach() if a > 0 else g.detach())

    # -- checkpoints -------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "global_params": [g.detach().clone() for g in self.global_params],
            "outer": [o.state_dict() for o in self.outer], "outer_log": list(self.outer_log),
            "ef": self.ef.state_dict(),
            "gens": {i: g.get_state() for i, g in self.gens.items()},
            "tokens_since": {i: list(v) for i, v in self.tokens_since.items()},
            "pending": self.pending.state_dict(),
            "present": dict(self.present),
            "synced": list(self.synced),
            "sent": [[i, p, t.clone()] for (i, p), t in sorted(self.sent.items())],
            "last_mean": [t.clone() if t is not None else None for t in self.last_mean],
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        with torch.no_grad():
            for g, v in zip(self.global_params, d["global_params"]):
                g.copy_(v)
        for o, s in zip(self.outer, d["outer"]):
            o.load_state_dict(s)
        self.outer_log = list(d["outer_log"])
        self.ef.load_state_dict(d["ef"])
        for i, s in d["gens"].items():
            self.gens[int(i)].set_state(s)
        self.tokens_since = {int(i): list(v) for i, v in d["tokens_since"].items()}
        self.pending.load_state_dict(d["pending"], self.transport.clock)
        self.present = {int(i): bool(v) for i, v in d["present"].items()}
        self.synced = [bool(b) for b in d["synced"]]
        self.sent = {(int(i), int(p)): t.clone() for i, p, t in d["sent"]}
        self.last_mean = [t.clone() if t is not None else None for t in d["last_mean"]]


def custom_schedule(cfg: ExperimentConfig) -> list[tuple[int, int]] | None:
    """The run's (step, fragment) syncs when they do not follow the constant H (None when they do)."""
    return diloco_schedule(cfg) if cfg.sync.diloco.h_schedule != "constant" else None


def build(a: BuildArgs) -> DiLoCo:
    """The strategy of ``sync/diloco_spec.py``'s spec."""
    return DiLoCo(a.models, a.transport, a.fragments, a.cfg.sync, a.cfg.seed, custom_schedule(a.cfg), hooks=a.hooks)
