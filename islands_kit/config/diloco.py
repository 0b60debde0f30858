"""DiLoCo's knobs (``sync.diloco.*``) and decoupled DiLoCo's (``sync.decoupled.*``)."""
from __future__ import annotations

from dataclasses import dataclass

from islands_kit.codec_registry import CODECS
from islands_kit.config.rules import MAX_LR, _check, _check_fields


@dataclass
class DiLoCoConfig:
    """DiLoCo-only knobs (``sync.diloco.*``; Douillard et al. 2023/2025): the outer optimizer, the merge and the
    published improvements. Symbols: alpha = merge weight α, outer_lr = η_out, outer_momentum = μ."""

    alpha: float = 0.0  # α of the merge: θ_local <- α θ_local + (1 − α) θ_global_new
    outer_lr: float = 0.7  # η_out: outer SGD learning rate
    outer_momentum: float = 0.9  # μ: outer SGD momentum
    nesterov: bool = True  # Nesterov outer momentum
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

    def __post_init__(self) -> None:
        p = "sync.diloco."
        _check_fields(self, p)
        _check(0.0 <= self.alpha <= 1.0, p + "alpha", "must be in [0, 1]", self.alpha)
        _check(0 < self.outer_lr <= MAX_LR, p + "outer_lr", f"must be > 0 and <= {MAX_LR:g}", self.outer_lr)
        _check(0 <= self.outer_momentum < 1, p + "outer_momentum", "must be in [0, 1)", self.outer_momentum)
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


@dataclass
class DecoupledConfig:
    """Decoupled-DiLoCo knobs (``sync.decoupled.*``; Douillard et al. 2026, arXiv 2604.21428), used with
    ``sync.mode=decoupled``: how a merge weighs the outer gradients that made it (``sync.diloco.average`` averages them,
    in both modes), and what happens to one
    that arrived after the merge (``sync.quorum`` and ``sync.grace_s`` decide which arrive in time)."""

    weighting: str = "tokens"  # tokens: w = tokens since the island's last contribution | efficiency: w = tokens x
    #   (tokens per inner step / the largest tokens per step among the contributors), the paper's efficiency weighting
    late: str = "carry"  # carry: a late outer gradient joins the fragment's next merge | drop: it is discarded

    def __post_init__(self) -> None:
        p = "sync.decoupled."
        _check_fields(self, p)
        _check(self.weighting in ("tokens", "efficiency"), p + "weighting", "must be one of tokens|efficiency",
               self.weighting)
        _check(self.late in ("carry", "drop"), p + "late", "must be one of carry|drop", self.late)
