"""Streaming DiLoCo's home beside its algorithm (``sync/diloco.py``): its settings ``sync.diloco.*``
(``DiLoCoConfig``), the rules they obey, the strategy's traits and its spec. Torch-free, so that validation
knows them without the wire (``sync/registry.py``); decoupled DiLoCo shares the section (``sync/decoupled_spec.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from islands_kit.config.codec_registry import CODECS
from islands_kit.config.model import check_outer_optimizer
from islands_kit.config.strategies import StrategyTraits
from islands_kit.config.sync import Section
from islands_kit.rules import MAX_LR, _check, _check_fields
from islands_kit.sync.registry import StrategySpec


@dataclass
class DiLoCoConfig:
    """DiLoCo-only knobs (``sync.diloco.*``; Douillard et al. 2023/2025): the outer optimizer, the merge and the
    published improvements. Symbols: alpha = merge weight α, outer_lr = η_out, outer_momentum = μ (Adam's β1 with
    ``outer_optimizer=adam``)."""

    alpha: float = 0.0  # α of the merge: θ_local <- α θ_local + (1 − α) θ_global_new
    outer_lr: float = 0.7  # η_out: the outer optimizer's learning rate
    outer_momentum: float = 0.9  # μ: the outer optimizer's momentum (Adam: β1)
    nesterov: bool = True  # Nesterov outer momentum
    outer_optimizer: str = "sgd"  # the outer step's optimizer (config/model.py OUTER_OPTIMIZERS: sgd | adam, or one registered)
    # published improvements, each off by default
    merge: str = "alpha"  # alpha: θ_i ← α θ_i + (1−α) θ_g | keep_local: θ_i ← θ_g + (θ_i − θ_i as sent), keeps the τ steps
    final_codec: str = ""  # codec of the final flush sync ("" = sync.codec); fp32 makes the last sync lossless
    warm_start_steps: int = 0  # post-local SGD (Lin et al. 2020): every fragment averaged every step for this many steps
    outer_momentum_warmup: int = 0  # outer steps over which the outer momentum ramps linearly from 0 to outer_momentum
    eager: bool = False  # eager updates (Kale et al. 2025): with sync.tau >= 1 apply an estimated outer step at send time
    # qsr, the quadratic synchronisation rule (Gu et al. 2023): the window starting at step s is
    # H_s = max(sync.H, floor((qsr_alpha / η_s)^2)) steps, η_s the inner lr then (the warm-up read as the peak)
    h_schedule: str = "constant"  # constant: every window sync.H steps | qsr: longer windows as the lr decays
    qsr_alpha: float = 0.0  # α of the quadratic synchronisation rule (same units as optim.lr); > 0 with h_schedule=qsr
    average: str = "mean"  # how a sync merges the outer gradients: mean (token-weighted, all-reduced) | radial_directional
    #   (mean norm x mean direction, sync/averaging.py; it needs every outer gradient, so the islands all-gather)
    # SparseLoCo (Sarfi et al. 2025): e ← β e + Δ before compressing, so the error-feedback buffer is a decayed sum of
    # outer gradients; with outer_momentum 0 it replaces the outer momentum (presets.SPARSELOCO: the paper's settings)
    error_feedback_decay: float = 1.0  # β: the residual carried into the next sync is β e (1 = plain error feedback)

    @property
    def outer_step(self) -> str:
        """The outer step in words, read from the fields (the run summary and the tour print it, so their words cannot
        drift from the config): ``outer SGD lr 1, no momentum``, ``outer SGD lr 0.7, Nesterov momentum 0.9``, ``outer
        adam lr 0.001, momentum (beta1) 0.9``."""
        ramp = f" (ramped in over {self.outer_momentum_warmup} outer steps)" if self.outer_momentum_warmup else ""
        if self.outer_optimizer != "sgd":  # another optimizer: its own name, μ as its momentum term (Adam's β1)
            return f"outer {self.outer_optimizer} lr {self.outer_lr:g}, momentum (beta1) {self.outer_momentum:g}{ramp}"
        if self.outer_momentum == 0:
            return f"outer SGD lr {self.outer_lr:g}, no momentum"
        kind = "Nesterov" if self.nesterov else "heavy-ball"
        return f"outer SGD lr {self.outer_lr:g}, {kind} momentum {self.outer_momentum:g}{ramp}"

    @property
    def merge_words(self) -> str:
        """How a sync merges the islands' outer gradients, in words (``average``)."""
        return {"mean": "their token-weighted mean",
                "radial_directional": "radial-directional averaging (their mean norm along their mean direction)",
                }[self.average]

    def __post_init__(self) -> None:
        p = "sync.diloco."
        _check_fields(self, p)
        _check(0.0 <= self.alpha <= 1.0, p + "alpha", "must be in [0, 1]", self.alpha)
        _check(0 < self.outer_lr <= MAX_LR, p + "outer_lr", f"must be > 0 and <= {MAX_LR:g}", self.outer_lr)
        _check(0 <= self.outer_momentum < 1, p + "outer_momentum", "must be in [0, 1)", self.outer_momentum)
        check_outer_optimizer(self.outer_optimizer, p + "outer_optimizer")
        _check(self.merge in ("alpha", "keep_local"), p + "merge", "must be one of alpha|keep_local", self.merge)
        _check(self.merge == "alpha" or self.alpha == 0.0, p + "alpha",
               "must be 0 with sync.diloco.merge=keep_local (alpha blends only in the alpha merge)", self.alpha)
        _check(self.final_codec == "" or self.final_codec in CODECS, p + "final_codec",
               "must be empty (= sync.codec) or one of " + "|".join(CODECS), self.final_codec)
        _check(self.warm_start_steps >= 0, p + "warm_start_steps", "must be >= 0 (0 = no warm start)", self.warm_start_steps)
        _check(self.outer_momentum_warmup >= 0, p + "outer_momentum_warmup", "must be >= 0 (0 = none)",
               self.outer_momentum_warmup)
        _check(self.h_schedule in ("constant", "qsr"), p + "h_schedule", "must be one of constant|qsr", self.h_schedule)
        _check(self.h_schedule != "qsr" or self.qsr_alpha > 0, p + "qsr_alpha", "must be > 0 with h_schedule=qsr",
               self.qsr_alpha)
        _check(self.qsr_alpha <= MAX_LR, p + "qsr_alpha", f"must be <= {MAX_LR:g} (lr units; (α/η)^2 of 1e300 overflows)",
               self.qsr_alpha)
        _check(self.average in ("mean", "radial_directional"), p + "average", "must be one of mean|radial_directional",
               self.average)
        _check(0.0 <= self.error_feedback_decay <= 1.0, p + "error_feedback_decay", "must be in [0, 1]",
               self.error_feedback_decay)


def check_sync(sync: Any) -> None:
    """The rules between ``sync.diloco`` and the shared sync fields (``sync`` a SyncConfig)."""
    d = sync.diloco
    _check(sync.error_feedback or d.error_feedback_decay == 1.0, "sync.diloco.error_feedback_decay",
           "needs sync.error_feedback=true (it decays the error-feedback buffer)", d.error_feedback_decay)
    _check(not d.eager or sync.tau >= 1, "sync.diloco.eager", "needs sync.tau >= 1 (with tau = 0 nothing overlaps)",
           d.eager)
    if sync.traits.own_clocks:
        _check(not d.eager and d.warm_start_steps == 0, "sync.diloco",
               f"eager updates and the warm start are lock-step schedules: not with sync.mode={sync.mode}",
               "eager" if d.eager else "warm_start_steps")


def check_run(cfg: Any) -> None:
    """A defence's robust rule replaces the lock-step merge's mean (``cfg`` an ExperimentConfig; on the islands' own
    clocks the defence only checks, and the quorum merges)."""
    if cfg.faults.defense != "none" and not cfg.sync.traits.own_clocks:
        _check(cfg.sync.diloco.average == "mean", "sync.diloco.average",
               "must be mean with faults.defense (the defence's robust rule replaces the mean)", cfg.sync.diloco.average)


SECTION = Section(
    "diloco", DiLoCoConfig, "DiLoCo-only knobs (outer optimizer, merge, improvements)", check_sync, check_run,
    # the flat SyncConfig's keys before the per-strategy sections
    moved={f"sync.{k}": f"sync.diloco.{k}" for k in ("alpha", "outer_lr", "outer_momentum", "nesterov", "merge",
                                                      "final_codec", "warm_start_steps", "outer_momentum_warmup",
                                                      "eager")})

SUMMARY = ("H={s.H}, P={s.n_fragments} fragments, tau={s.tau}, codec {s.codec}, routing sync {s.routing_sync}; "
           "outer gradients merged by {s.diloco.merge_words}, then {s.diloco.outer_step}")
TRAITS = StrategyTraits("diloco", "diloco", "lockstep", "streaming DiLoCo (fragments synced every H steps, outer step)",
                        takes_faults=True, global_state=True, projection="fragments",
                        summary="streaming DiLoCo " + SUMMARY)
SPEC = StrategySpec(TRAITS, "islands_kit.sync.diloco:build", (SECTION,))
