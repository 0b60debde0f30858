"""The defences of the aggregation against a compromised island: checks, quarantine, and a robust rule
(``faults/robust.py``) over the updates kept.

:class:`Defense` attaches through ``faults.attach`` (``train/features.py``) on ``sync/hooks.py``'s points: ``aggregate``
on ``merge`` (in place of the lock-step mean; the transport then all-gathers the decoded updates), ``screen`` and its
kin on the decoupled synchroniser's. Each sync of fragment p, for every island i present, in this order:

1. integrity: any non-finite value → flag ``non_finite`` (value = how many).
2. replay: the exact bytes (a BLAKE2 digest) of an update island i already sent for fragment p, its direction
   a cosine > 0.9999 with its previous update of p, or its direction within the same tolerance of any earlier one
   (a CountSketch of each update's unit vector is kept, 2 KB, and compared: an older update re-sent × (1 + 1e-6)
   has other bytes and need not be the last) → ``replay``. A zero update is never called a replay.
3. norm: ‖Δ_i‖ > ``norm_ratio`` · reference → ``norm_vs_others`` (reference below) or ``norm_vs_history``
   (reference = median of i's last ``history`` *accepted* norms of fragment p; needs one accepted sync of p).
4. direction: cos(Δ_i, r_i) < ``min_cosine`` → ``direction``, where r_i = unit(reference direction below) +
   unit(island i's own last accepted update of p) (the first term alone until i has one). Both are trusted evidence
   and both are needed: later in training the islands' updates turn orthogonal, then anti-correlated (each replica
   keeps half of its drift from the global model at the merge α = 0.5, and two replicas drift from their mean in
   opposite directions), while an island's consecutive updates grow more correlated; with two sites the other
   island's direction alone would let a sign flip through and flag the honest site (measured on demo two_site:
   benchmarks/RESULTS.md, "A compromised island").

Steps 3-4 judge island i against the islands not flagged so far (the *pool*), so one attacker cannot drag the
reference:
  * majority (≥ 3 islands in the pool): norm reference = median of the others' norms, direction = token-weighted mean
    of the others' updates (step 4 runs after step 3 has taken the norm outliers out of the pool);
  * fewer (two sites): nobody is a majority, so a site judges the other against *itself*: the ``observer`` (the island
    whose view this process keeps; under torch.distributed its own island) is the reference and is checked for
    integrity and replay only. The simulator holds every island and reports one global model: :func:`install` makes
    the first island that is not the attacker the observer (the attacker's own view of training is of no interest).
  * fewer, and the observer not among them (decoupled mode: the synchroniser's island straggled past the round;
    lock-step: the observer's own update failed integrity or replay): a contribution is never its own referee, so
    the reference is the *trusted history* of fragment p: norm = median of the last ``history`` trusted rounds'
    norms (``norm_vs_trusted``), direction = unit(last trusted round) + unit(island i's own last accepted update),
    where a trusted round is the token-weighted mean of what a sync accepted (every accepted update was judged
    against the observer, a majority or this history). Before fragment p has a trusted round there is nothing to
    judge against: the update is *held* (``no_reference``): lock-step leaves it out of that sync; decoupled mode
    keeps it aside and judges it again at p's next rounds (:meth:`Defense.rescreen`), merging it once it passes.

Actions. An island flagged by any check is quarantined: excluded from every fragment's syncs for the next
``quarantine_windows`` windows of H steps (a new flag restarts the quarantine). Its update in a quarantined sync is
logged as ``quarantined`` and dropped; in the sync where it is flagged it is dropped too, except under the ``clip``
rule when all its flags are norm flags and it was not already quarantined: then it is clipped to its *trusted norm*
(median of its own accepted history of p, else the reference norm) and kept. The updates kept are aggregated by:

  * ``none``          the token-weighted mean of all updates, no checks (bit-identical to the transport's all_reduce);
  * ``clip``          the checks and actions above, then the token-weighted mean of what is kept;
  * ``trimmed_mean``  the checks (flagged = dropped), then per coordinate the token-weighted mean after removing the
                      ``b`` lowest and ``b`` highest values, b = max(1, ceil(0.2 n)) ≤ (n − 1) / 2 (n ≥ 3 kept; else
                      the weighted mean);
  * ``median``        the checks, then the coordinate-wise token-weighted median (n ≥ 3 kept; else the weighted mean);
  * ``auto``          ``trimmed_mean`` for ≥ 3 islands, ``clip`` for two.
If nothing is kept the update is zero (that fragment's outer step sees a zero gradient; its momentum still moves it).

Every flag goes to a :class:`FlagReport`: ``defense.report()`` is a JSON-ready list of ``{step, fragment, island,
reason, value, threshold, action}`` that ``run.py`` writes into result.json as ``faults_report``.

Limits: one attacker; statistics of the updates only (no probe of the loss). Noise whose norm stays under
``norm_ratio`` × the trusted norm (σ ≲ √(norm_ratio² − 1) · RMS ≈ 2.8 · RMS at the default 3) and whose direction
stays above ``min_cosine`` goes through (its harm is bounded by that norm). A sign flip is caught while the honest
update agrees with r_i by more than −min_cosine; a weaker agreement would need a loss probe on the observer's own
data (Zeno, Xie et al. 2019). The butterfly strategy (pairwise exchanges, no aggregation step) has no hooks and is out
of scope.
"""
from __future__ import annotations

import hashlib
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from islands_kit.comm.transport import weighted_mean
from islands_kit.config import ConfigError, FaultConfig
from islands_kit.faults.robust import default_trim, trimmed_mean, weighted_median

REPLAY_COSINE = 0.9999  # cosine with the previous update of the same island above which it is a replay
REPLAY_DISTANCE = (2 * (1 - REPLAY_COSINE)) ** 0.5  # the same tolerance as a distance between unit vectors
SKETCH = 256  # CountSketch buckets: distances between sketches match the vectors' within a few per cent
QUARANTINE_WINDOWS = 3  # H-step windows an island flagged stays excluded
DETECTORS = ("non_finite", "replay", "norm_vs_others", "norm_vs_history", "norm_vs_trusted", "direction")
NO_REFERENCE = "no_reference"  # nothing trusted to judge an update against: it is held, not merged


@dataclass
class FlagReport:
    """Every flag raised: records ``{step, fragment, island, reason, value, threshold, action}`` (JSON-ready)."""

    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, step: int, fragment: int, island: int, reason: str, value: float, threshold: float,
            action: str) -> None:
        self.records.append(dict(step=int(step), fragment=int(fragment), island=int(island), reason=reason,
                                 value=float(value), threshold=float(threshold), action=action))

    def to_list(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.records]


def _digest(x: torch.Tensor) -> str:
    return hashlib.blake2b(x.detach().float().contiguous().cpu().numpy().tobytes(), digest_size=16).hexdigest()


def _sketch(x: torch.Tensor) -> torch.Tensor:
    """A CountSketch of ``x``'s direction (SKETCH,) float64: every coordinate of x / ‖x‖ added, with a random sign, to
    a random bucket (seeded by the size, so every process and every resume draws the same). Distances between sketches
    estimate distances between the unit vectors (Charikar et al. 2002), so a re-sent update, rescaled or not, lands
    next to its first sketch while honest updates, far less aligned than REPLAY_COSINE, stay far apart."""
    u = x.detach().double().reshape(-1).cpu()
    g = torch.Generator().manual_seed(u.numel())
    bucket = torch.randint(0, SKETCH, (u.numel(),), generator=g)
    sign = torch.randint(0, 2, (u.numel(),), generator=g).to(torch.float64) * 2 - 1
    return torch.zeros(SKETCH, dtype=torch.float64).index_add_(0, bucket, u * sign / u.norm())


def _unit(x: torch.Tensor) -> torch.Tensor:
    n = float(x.double().norm())
    return x / n if n > 0 else x


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float | None:
    na, nb = float(a.double().norm()), float(b.double().norm())
    if na == 0.0 or nb == 0.0:
        return None
    return float(torch.dot(a.double().reshape(-1), b.double().reshape(-1).to(a.device))) / (na * nb)


class Defense:
    """Checks every island's update of a fragment sync and aggregates the ones it keeps (module docstring).

    ``aggregate(step, fragment, gathered)`` is the ``merge`` hook (``sync/hooks.py``): ``gathered`` is the
    transport's all-gather, ``[(island, tokens, Δ_island (d,))]`` in island order; it returns the (d,) update the outer
    optimizer applies. ``window`` = H (quarantine length unit), ``observer`` = the island this process trusts when
    two islands sync (see the module docstring). Memory: the last update received and the last accepted from every
    island and fragment (references to the decoded tensors: up to two model-sized vectors per island), and each
    fragment's last trusted round (one more)."""

    def __init__(self, cfg: FaultConfig, n_islands: int, *, window: int = 1, observer: int = 0,
                 quarantine_windows: int = QUARANTINE_WINDOWS) -> None:
        if n_islands < 1:
            raise ConfigError(f"islands: a defence needs at least one island (got {n_islands})")
        if window < 1 or quarantine_windows < 0:
            raise ConfigError(f"sync.H: the window must be >= 1 and quarantine_windows >= 0 "
                              f"(got {window}, {quarantine_windows})")
        self.cfg = cfg
        self.rule = cfg.defense if cfg.defense != "auto" else ("trimmed_mean" if n_islands >= 3 else "clip")
        self.observer = observer
        self.quarantine_steps = quarantine_windows * window
        self.flags = FlagReport()
        self._norms: dict[tuple[int, int], deque[float]] = {}  # (island, fragment) -> accepted norms
        self._seen: dict[tuple[int, int], set[str]] = {}  # (island, fragment) -> digests of updates received
        self._sketches: dict[tuple[int, int], torch.Tensor] = {}  # (island, fragment) -> (m, SKETCH) of updates received
        self._last: dict[tuple[int, int], torch.Tensor] = {}  # (island, fragment) -> previous update received
        self._accepted: dict[tuple[int, int], torch.Tensor] = {}  # (island, fragment) -> last update accepted
        self._until: dict[int, int] = {}  # island -> first step it is no longer quarantined
        self._round_norms: dict[int, deque[float]] = {}  # fragment -> norms of its last trusted rounds
        self._round_last: dict[int, torch.Tensor] = {}  # fragment -> its last trusted round (accepted, weighted mean)

    def report(self) -> list[dict[str, Any]]:
        return self.flags.to_list()

    # -- the checks ---------------------------------------------------------------------------------------------
    def _referee(self, pool: list[int]) -> int | None:
        """With fewer than three islands in the pool: the island the others are judged against — the observer, never
        one of the judged themselves (None: the trusted history is the reference)."""
        return self.observer if self.observer in pool else None

    def _others(self, i: int, pool: list[int]) -> list[int]:
        """The islands i is judged against: the rest of a majority pool, else the referee (none for the referee, or
        without one)."""
        if len(pool) >= 3:
            return [j for j in pool if j != i]
        ref = self._referee(pool)
        return [ref] if ref is not None and ref != i else []

    def _intact(self, p: int, ids: list[int], xs: dict[int, torch.Tensor]
                ) -> tuple[dict[int, list[tuple[str, float, float]]], dict[int, float]]:
        """Checks 1-2 (integrity, replay) of each update; they record what they saw, so each update passes them once."""
        flags: dict[int, list[tuple[str, float, float]]] = {i: [] for i in ids}
        norms: dict[int, float] = {}
        for i in ids:
            x, key = xs[i], (i, p)
            bad = int((~torch.isfinite(x)).sum())
            if bad:
                flags[i].append(("non_finite", bad, 0.0))
                continue
            norms[i] = float(x.double().norm())
            h, seen = _digest(x), self._seen.setdefault(key, set())
            cos_prev = _cosine(x, self._last[key]) if key in self._last else None
            near = self._nearest(key, x) if norms[i] > 0 else None
            if norms[i] > 0 and h in seen:
                flags[i].append(("replay", 1.0, 1.0))
            elif norms[i] > 0 and cos_prev is not None and cos_prev > REPLAY_COSINE:
                flags[i].append(("replay", cos_prev, REPLAY_COSINE))
            elif near is not None and near <= REPLAY_DISTANCE:  # an older update, rescaled or nudged
                flags[i].append(("replay", near, REPLAY_DISTANCE))
            seen.add(h)
            self._last[key] = x
        return flags, norms

    def _compare(self, p: int, pool: list[int], ws: dict[int, float], xs: dict[int, torch.Tensor],
                 norms: dict[int, float], flags: dict[int, list[tuple[str, float, float]]]) -> dict[int, float]:
        """Checks 3-4 (norm, direction) of the updates in ``pool`` (adds to ``flags``); returns the norm each was
        judged against. Without a majority or the observer the reference is p's trusted history; an island with
        neither is flagged ``no_reference``."""
        c = self.cfg
        ref_norm: dict[int, float] = {}
        trusted = self._referee(pool) if len(pool) < 3 else None  # without a majority the referee trusts itself
        rounds = self._round_norms.get(p)  # p's trusted rounds: their norms, and the last one (self._round_last)
        for i in [i for i in pool if i != trusted]:  # 3. norm
            others = self._others(i, pool)
            if not others and not rounds:
                flags[i].append((NO_REFERENCE, 0.0, 0.0))
                continue
            hist = self._norms.get((i, p))
            if hist and statistics.median(hist) > 0 and norms[i] > c.norm_ratio * statistics.median(hist):
                flags[i].append(("norm_vs_history", norms[i] / statistics.median(hist), c.norm_ratio))
            if others:
                ref_norm[i] = statistics.median(norms[j] for j in others)
                reason = "norm_vs_others"
            else:
                ref_norm[i] = statistics.median(rounds or [0.0])
                reason = "norm_vs_trusted"
            if ref_norm[i] > 0 and norms[i] > c.norm_ratio * ref_norm[i]:
                flags[i].append((reason, norms[i] / ref_norm[i], c.norm_ratio))
        pool = [i for i in pool if not flags[i]]
        trusted = self._referee(pool) if len(pool) < 3 else None
        for i in [i for i in pool if i != trusted]:  # 4. direction
            others = self._others(i, pool)
            if others:
                reference = weighted_mean([xs[j] for j in others], [ws[j] for j in others])
            elif rounds:
                reference = self._round_last[p].to(xs[i].device)
            else:
                continue
            prev = self._accepted.get((i, p))
            if prev is not None:  # and i's own last accepted update: both trusted directions, as unit vectors
                reference = _unit(reference) + _unit(prev.to(reference.device))  # (a resumed run's loads on the CPU)
            cos = _cosine(xs[i], reference)
            if cos is not None and cos < c.min_cosine:
                flags[i].append(("direction", cos, c.min_cosine))
        return ref_norm

    def _judge(self, p: int, ids: list[int], ws: dict[int, float], xs: dict[int, torch.Tensor]
               ) -> tuple[dict[int, list[tuple[str, float, float]]], dict[int, float], dict[int, float]]:
        """Flags per island [(reason, value, threshold)], the norms, and the norm each was judged against."""
        flags, norms = self._intact(p, ids, xs)
        ref_norm = self._compare(p, [i for i in ids if not flags[i]], ws, xs, norms, flags)
        return flags, norms, ref_norm

    def _trust(self, p: int, kept: list[int], ws: dict[int, float], xs: dict[int, torch.Tensor],
               new_round: bool = True) -> None:
        """Record a round of fragment p: what it accepted enters each island's history, and (``new_round``) their
        token-weighted mean becomes p's latest trusted round."""
        for i in kept:
            self._norms.setdefault((i, p), deque(maxlen=self.cfg.history)).append(float(xs[i].double().norm()))
            self._accepted[(i, p)] = xs[i]
        if kept and new_round:
            mean = weighted_mean([xs[i] for i in kept], [ws[i] for i in kept]).detach().float()
            self._round_norms.setdefault(p, deque(maxlen=self.cfg.history)).append(float(mean.double().norm()))
            self._round_last[p] = mean

    def _nearest(self, key: tuple[int, int], x: torch.Tensor) -> float | None:
        """The distance from x's sketch to the nearest sketch of an earlier update of ``key`` (None: the first); x's
        sketch is kept."""
        sk = _sketch(x)
        past = self._sketches.get(key)
        self._sketches[key] = sk[None] if past is None else torch.cat([past, sk[None]])
        return None if past is None else float((past - sk).norm(dim=1).min())

    # -- the aggregator -----------------------------------------------------------------------------------------
    def aggregate(self, step: int, fragment: int, gathered: list[tuple[int, float, torch.Tensor]]) -> torch.Tensor:
        if not gathered:
            raise ValueError("Defense.aggregate: gathered must hold at least one (island, weight, delta)")
        ids = [i for i, _, _ in gathered]
        ws = {i: float(w) for i, w, _ in gathered}
        xs = {i: x for i, _, x in gathered}
        if self.rule == "none":
            return weighted_mean([xs[i] for i in ids], [ws[i] for i in ids])
        p = fragment
        flags, norms, ref_norm = self._judge(p, ids, ws, xs)
        kept: list[int] = []
        scaled: dict[int, torch.Tensor] = {}
        for i in ids:
            quarantined = step < self._until.get(i, -1)
            if flags[i] == [(NO_REFERENCE, 0.0, 0.0)]:  # nothing to judge it by: left out, not held against it
                self.flags.add(step, p, i, NO_REFERENCE, 0.0, 0.0, "held")
            elif flags[i]:
                norm_only = all(r.startswith("norm") for r, _, _ in flags[i])
                if self.rule == "clip" and norm_only and not quarantined:
                    hist = self._norms.get((i, p))
                    trusted = statistics.median(hist) if hist else ref_norm.get(i, 0.0)
                    scaled[i] = xs[i] * (trusted / norms[i]) if norms[i] > 0 else xs[i]
                    kept.append(i)
                    action = "clipped"
                else:
                    action = "dropped"
                for reason, value, thr in flags[i]:
                    self.flags.add(step, p, i, reason, value, thr, action)
                self._until[i] = step + self.quarantine_steps + 1
            elif quarantined:
                self.flags.add(step, p, i, "quarantined", self._until[i] - step - 1, 0.0, "dropped")
            else:
                kept.append(i)
        self._trust(p, [i for i in kept if i not in scaled], ws, xs)
        if not kept:
            self.flags.add(step, p, -1, "no_update", 0.0, 0.0, "zero")
            return torch.zeros_like(xs[ids[0]], dtype=torch.float32)
        vals = [scaled.get(i, xs[i]) for i in kept]
        if self.rule in ("trimmed_mean", "median") and len(kept) >= 3:
            stack = torch.stack([v.float().reshape(-1) for v in vals])  # (n_kept, d)
            w = torch.tensor([ws[i] for i in kept], dtype=torch.float64)
            if self.rule == "trimmed_mean":
                return trimmed_mean(stack, w, default_trim(len(kept))).view_as(xs[ids[0]])
            return weighted_median(stack, w).view_as(xs[ids[0]])
        return weighted_mean(vals, [ws[i] for i in kept])

    # -- decoupled mode -----------------------------------------------------------------------------------------
    def screen(self, step: int, fragment: int, fresh: Sequence[tuple[int, float, torch.Tensor]]
               ) -> tuple[dict[int, str], dict[int, str]]:
        """Decoupled mode, on the synchroniser: checks 1-4 on a round's fresh contributions ``[(island, tokens, Δ)]``,
        with the pool and references of lock-step. An island flagged is dropped from the run (a contribution is a
        message from another process: the wire's policy for what it refuses), reported with the action
        ``island_dropped``; the ``observer`` (the synchroniser's island, trusted by construction) never is. A
        contribution with nothing trusted to judge it by is held (``no_reference``, action ``held``): the caller
        keeps it aside and brings it to :meth:`rescreen`. Returns ({island: why dropped}, {island: why held}), one
        line each; the contributions kept enter the norm and direction history and make p's latest trusted round."""
        if self.rule == "none" or not fresh:
            return {}, {}
        ids = [i for i, _, _ in fresh]
        ws = {i: float(w) for i, w, _ in fresh}
        xs = {i: x for i, _, x in fresh}
        flags, _, _ = self._judge(fragment, ids, ws, xs)
        return self._verdicts(step, fragment, ids, ws, xs, flags)

    def rescreen(self, step: int, fragment: int, held: tuple[int, float, torch.Tensor]
                 ) -> tuple[dict[int, str], dict[int, str]]:
        """A contribution :meth:`screen` held, judged again (checks 3-4 only: it passed integrity and replay when it
        arrived) against what fragment p has trusted since; the same verdicts as ``screen``."""
        i, w, x = held
        ws, xs = {i: float(w)}, {i: x}
        flags: dict[int, list[tuple[str, float, float]]] = {i: []}
        self._compare(fragment, [i], ws, xs, {i: float(x.double().norm())}, flags)
        if flags[i] == [(NO_REFERENCE, 0.0, 0.0)]:  # still nothing to judge it by: it stays held, unreported
            return {}, {i: self._why(i, fragment, step, NO_REFERENCE, 0.0, 0.0)}
        return self._verdicts(step, fragment, [i], ws, xs, flags, new_round=False)

    def _verdicts(self, step: int, p: int, ids: list[int], ws: dict[int, float], xs: dict[int, torch.Tensor],
                  flags: dict[int, list[tuple[str, float, float]]], new_round: bool = True
                  ) -> tuple[dict[int, str], dict[int, str]]:
        drop: dict[int, str] = {}
        hold: dict[int, str] = {}
        for i in ids:
            if flags[i] == [(NO_REFERENCE, 0.0, 0.0)]:
                self.flags.add(step, p, i, NO_REFERENCE, 0.0, 0.0, "held")
                hold[i] = self._why(i, p, step, NO_REFERENCE, 0.0, 0.0)
            elif flags[i] and i != self.observer:
                for reason, value, thr in flags[i]:
                    self.flags.add(step, p, i, reason, value, thr, "island_dropped")
                drop[i] = self._why(i, p, step, *flags[i][0])
        self._trust(p, [i for i in ids if not flags[i]], ws, xs, new_round)
        return drop, hold

    @staticmethod
    def _why(i: int, p: int, step: int, reason: str, value: float, thr: float) -> str:
        if reason == NO_REFERENCE:
            return (f"faults.defense: island {i}'s outer gradient of fragment {p} at step {step} is held: nothing "
                    "trusted to judge it by yet (the synchroniser's island sent none, and no round of this fragment "
                    "was trusted)")
        return (f"faults.defense: island {i}'s outer gradient of fragment {p} at step {step} is refused: {reason} "
                f"{value:.4g} (threshold {thr:.4g})")

    def not_merged(self, step: int, fragment: int, held: tuple[int, float, torch.Tensor]) -> None:
        """A held contribution ``(island, tokens, Δ)`` the run ended without ever merging (reported with the action
        ``not_merged``, its tokens as the value)."""
        self.flags.add(step, fragment, held[0], NO_REFERENCE, held[1], 0.0, "not_merged")

    # -- checkpoints --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"norms": {k: list(v) for k, v in self._norms.items()},
                "seen": {k: sorted(v) for k, v in self._seen.items()},
                "sketches": {k: v.clone() for k, v in self._sketches.items()},
                "last": {k: v.clone() for k, v in self._last.items()},
                "accepted": {k: v.clone() for k, v in self._accepted.items()},
                "until": dict(self._until), "records": self.flags.to_list(),
                "round_norms": {k: list(v) for k, v in self._round_norms.items()},
                "round_last": {k: v.clone() for k, v in self._round_last.items()}}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self._norms = {tuple(k): deque(v, maxlen=self.cfg.history) for k, v in d["norms"].items()}
        self._seen = {tuple(k): set(v) for k, v in d["seen"].items()}
        self._sketches = {tuple(k): v.clone() for k, v in d.get("sketches", {}).items()}
        self._last = {tuple(k): v.clone() for k, v in d["last"].items()}
        self._accepted = {tuple(k): v.clone() for k, v in d["accepted"].items()}
        self._until = {int(k): int(v) for k, v in d["until"].items()}
        self.flags = FlagReport([dict(r) for r in d["records"]])
        self._round_norms = {int(k): deque(v, maxlen=self.cfg.history) for k, v in d.get("round_norms", {}).items()}
        self._round_last = {int(k): v.clone() for k, v in d.get("round_last", {}).items()}
