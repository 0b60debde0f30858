"""Typed experiment configuration: dataclasses, eager validation, named presets, dotted overrides.

(Over 400 lines on purpose: every config dataclass sits beside its validation rules and the dotted-override code that
builds and checks them, so a field's type, default and rule are read in one place.)

Every field is validated in ``__post_init__`` (or ``ExperimentConfig.validate``) so a bad value fails before any
work starts, with a message that names the field and the rule it broke (``ConfigError``).
"""
from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from islands_kit.codec_registry import CODECS


class ConfigError(ValueError):
    """A configuration value broke a rule; the message names the field and the rule."""


def _check(cond: bool, field_name: str, rule: str, value: Any) -> None:
    if not cond:
        raise ConfigError(f"{field_name}: {rule} (got {value!r})")


@dataclass
class ModelConfig:
    """Byte-level decoder-only MoE transformer (vocabulary 256)."""

    vocab_size: int = 256  # bytes: always 256
    seq_len: int = 128  # bytes per training sequence (context length)
    d_model: int = 128  # residual stream width
    n_layers: int = 4  # transformer blocks
    n_heads: int = 4  # attention heads
    n_experts: int = 16  # 1 = dense control (a plain MLP)
    top_k: int = 2  # experts each token is routed to
    d_expert: int = 256  # hidden width of one expert
    n_shared_experts: int = 0  # always-on experts added to the routed output
    aux_loss_coef: float = 0.01  # Switch-style load-balancing loss
    z_loss_coef: float = 1e-3  # router z-loss (ST-MoE)
    bias_balancing: bool = True  # aux-loss-free balancing bias, used for expert *selection* only
    bias_update_rate: float = 1e-3  # u: step of the aux-loss-free bias per training step
    rope_theta: float = 10000.0  # RoPE base frequency
    init_std: float = 0.02  # std of the normal weight initialisation
    dispatch: str = "grouped"  # grouped | loop (the plain per-expert reference)
    mxfp8: bool = False  # MXFP8 quantise-dequantise emulation on the expert matmuls
    kernels: str = "auto"  # auto | torch | triton
    compile: bool = False  # torch.compile every replica in place (Module.compile); off by default

    def __post_init__(self) -> None:
        p = "model."
        _check(self.vocab_size == 256, p + "vocab_size", "must be 256 for a byte-level model", self.vocab_size)
        for name in ("seq_len", "d_model", "n_layers", "n_heads", "n_experts", "top_k", "d_expert"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 1, p + name, "must be an integer >= 1", v)
        _check(self.d_model % self.n_heads == 0, p + "d_model", f"must be divisible by model.n_heads={self.n_heads}", self.d_model)
        _check((self.d_model // self.n_heads) % 2 == 0, p + "d_model", "d_model/n_heads must be even for RoPE", self.d_model)
        _check(self.top_k <= self.n_experts, p + "top_k", f"must be <= model.n_experts={self.n_experts}", self.top_k)
        _check(self.n_shared_experts >= 0, p + "n_shared_experts", "must be >= 0", self.n_shared_experts)
        for name in ("aux_loss_coef", "z_loss_coef", "bias_update_rate"):
            _check(getattr(self, name) >= 0, p + name, "must be >= 0", getattr(self, name))
        _check(self.dispatch in ("grouped", "loop"), p + "dispatch", "must be one of grouped|loop", self.dispatch)
        _check(self.kernels in ("auto", "torch", "triton"), p + "kernels", "must be one of auto|torch|triton", self.kernels)


@dataclass
class OptimConfig:
    """Inner optimizer (per island) and its schedule: linear warm-up then cosine decay to min_lr_ratio * lr."""

    name: str = "adamw"  # adamw | shampoo | sgd (plain SGD: the reference for equivalence tests)
    lr: float = 2e-3  # peak inner learning rate
    min_lr_ratio: float = 0.1  # cosine decay ends at min_lr_ratio * lr
    warmup_steps: int = 50  # linear warm-up steps
    weight_decay: float = 0.1  # decoupled weight decay
    beta1: float = 0.9  # first-moment decay (Adam)
    beta2: float = 0.95  # second-moment decay (Adam)
    eps: float = 1e-8  # Adam epsilon
    grad_clip: float = 1.0  # 0 disables clipping
    # Shampoo (Distributed Shampoo variant; see islands_kit/optim/shampoo.py)
    precondition_frequency: int = 10  # Shampoo: recompute the inverse roots every N steps
    start_preconditioning_step: int = 50  # Shampoo: grafted steps before preconditioning starts
    max_preconditioner_dim: int = 1024  # Shampoo: larger dimensions are split into blocks
    shampoo_epsilon: float = 1e-12  # Shampoo: added to the factors' eigenvalues before the inverse root
    shampoo_beta2: float = 1.0  # 1.0 = plain sums of G G^T (original Shampoo)
    grafting: str = "adam"  # adam | adagrad | rmsprop | sgd

    def __post_init__(self) -> None:
        p = "optim."
        _check(self.name in ("adamw", "shampoo", "sgd"), p + "name", "must be one of adamw|shampoo|sgd", self.name)
        _check(self.lr > 0, p + "lr", "must be > 0", self.lr)
        _check(0 <= self.min_lr_ratio <= 1, p + "min_lr_ratio", "must be in [0, 1]", self.min_lr_ratio)
        _check(self.warmup_steps >= 0, p + "warmup_steps", "must be >= 0", self.warmup_steps)
        _check(self.weight_decay >= 0, p + "weight_decay", "must be >= 0", self.weight_decay)
        _check(0 <= self.beta1 < 1, p + "beta1", "must be in [0, 1)", self.beta1)
        _check(0 <= self.beta2 < 1, p + "beta2", "must be in [0, 1)", self.beta2)
        _check(self.eps > 0, p + "eps", "must be > 0", self.eps)
        _check(self.grad_clip >= 0, p + "grad_clip", "must be >= 0 (0 disables)", self.grad_clip)
        _check(self.precondition_frequency >= 1, p + "precondition_frequency", "must be >= 1", self.precondition_frequency)
        _check(self.start_preconditioning_step >= 0, p + "start_preconditioning_step", "must be >= 0", self.start_preconditioning_step)
        _check(self.max_preconditioner_dim >= 1, p + "max_preconditioner_dim", "must be >= 1", self.max_preconditioner_dim)
        _check(self.shampoo_epsilon > 0, p + "shampoo_epsilon", "must be > 0", self.shampoo_epsilon)
        _check(0 < self.shampoo_beta2 <= 1, p + "shampoo_beta2", "must be in (0, 1]", self.shampoo_beta2)
        _check(self.grafting in ("adam", "adagrad", "rmsprop", "sgd"), p + "grafting", "must be one of adam|adagrad|rmsprop|sgd", self.grafting)




@dataclass
class DiLoCoConfig:
    """DiLoCo-only knobs (``sync.diloco.*``; Douillard et al. 2023/2025): the outer optimizer, the merge and the
    published improvements. Symbols: alpha = merge weight α, outer_lr = η_out, outer_momentum = μ."""

    alpha: float = 0.0  # α of the merge: θ_local <- α θ_local + (1 − α) θ_global_new
    outer_lr: float = 0.7  # η_out: outer SGD learning rate
    outer_momentum: float = 0.9  # μ: outer SGD momentum
    nesterov: bool = True  # Nesterov outer momentum
    # published improvements (each off by default: today's behaviour bit for bit)
    merge: str = "alpha"  # alpha: θ_i ← α θ_i + (1−α) θ_g | keep_local: θ_i ← θ_g + (θ_i − θ_i as sent), keeps the τ steps
    final_codec: str = ""  # codec of the final flush sync ("" = sync.codec); fp32 makes the last sync lossless
    warm_start_steps: int = 0  # post-local SGD (Lin et al. 2020): every fragment averaged every step for this many steps
    outer_momentum_warmup: int = 0  # outer steps over which the outer momentum ramps linearly from 0 to outer_momentum
    eager: bool = False  # eager updates (Kale et al. 2025): with sync.tau >= 1 apply an estimated outer step at send time
    # qsr, the quadratic synchronisation rule (Gu et al. 2023): the window starting at step s is
    # H_s = max(sync.H, floor((qsr_alpha / η_s)^2)) steps, η_s the inner lr then (the warm-up read as the peak)
    h_schedule: str = "constant"  # constant: every window sync.H steps | qsr: longer windows as the lr decays
    qsr_alpha: float = 0.0  # α of the quadratic synchronisation rule (same units as optim.lr); > 0 with h_schedule=qsr

    def __post_init__(self) -> None:
        p = "sync.diloco."
        _check(0.0 <= self.alpha <= 1.0, p + "alpha", "must be in [0, 1]", self.alpha)
        _check(self.outer_lr > 0, p + "outer_lr", "must be > 0", self.outer_lr)
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


@dataclass
class ButterflyConfig:
    """Butterfly-only knobs (``sync.butterfly.*``; Zhao & Canny 2013): E = exchanges_per_window, the merge rule, the
    exact averages and what is evaluated. The merge delay is ``sync.tau`` (shared with DiLoCo)."""

    exchanges_per_window: int = 6  # E: how many times each fragment is exchanged per H-step window
    merge: str = "mean"  # mean: θ_i ← ½(θ_i(t+τ) + θ̂_j(t)) | delay_aware: θ_i ← θ_i(t+τ) + ½(θ̂_j(t) − θ_i(t))
    exact_average_every: int = 0  # every K windows a complete butterfly on a frozen snapshot (exact mean); 0 = never
    final_average: bool = False  # a complete butterfly at the end, so every cell (and the deployed model) is the mean
    eval: str = "cell0"  # cell0: score cell 0's replica | mean: score the mean of all cells (one process)
    payload: str = "weights"  # weights: send θ_i[p] | delta: θ_i[p] − ref[p] against the last common state (init, exact average)

    def __post_init__(self) -> None:
        p = "sync.butterfly."
        _check(self.exchanges_per_window >= 1, p + "exchanges_per_window", "must be >= 1", self.exchanges_per_window)
        _check(self.merge in ("mean", "delay_aware"), p + "merge", "must be one of mean|delay_aware", self.merge)
        _check(self.exact_average_every >= 0, p + "exact_average_every", "must be >= 0 (0 = never)",
               self.exact_average_every)
        _check(self.eval in ("cell0", "mean"), p + "eval", "must be one of cell0|mean", self.eval)
        _check(self.payload in ("weights", "delta"), p + "payload", "must be one of weights|delta", self.payload)


@dataclass
class DecoupledConfig:
    """Decoupled-DiLoCo knobs (``sync.decoupled.*``; Douillard et al. 2026, arXiv 2604.21428), used with
    ``sync.mode=decoupled``: how a merge weighs and averages the outer gradients that made it, and what happens to one
    that arrived after the merge (``sync.quorum`` and ``sync.grace_s`` decide which arrive in time)."""

    weighting: str = "tokens"  # tokens: w = tokens since the island's last contribution | efficiency: w = tokens x
    #   (tokens per inner step / the largest tokens per step among the contributors), the paper's efficiency weighting
    average: str = "mean"  # mean: sum w_i Δ_i / sum w_i | radial_directional: the weighted mean of the norms times the
    #   direction of the weighted mean of unit vectors (disagreeing directions no longer shrink the step)
    late: str = "carry"  # carry: a late outer gradient joins the fragment's next merge | drop: it is discarded

    def __post_init__(self) -> None:
        p = "sync.decoupled."
        _check(self.weighting in ("tokens", "efficiency"), p + "weighting", "must be one of tokens|efficiency",
               self.weighting)
        _check(self.average in ("mean", "radial_directional"), p + "average", "must be one of mean|radial_directional",
               self.average)
        _check(self.late in ("carry", "drop"), p + "late", "must be one of carry|drop", self.late)


@dataclass
class SyncConfig:
    """How islands synchronise. Symbols follow Streaming DiLoCo (Douillard et al. 2025) and butterfly mixing
    (Zhao & Canny 2013): H inner steps per window, P = n_fragments, τ = tau, the overlap delay of both strategies.
    The knobs of one strategy live in its sub-config: ``sync.diloco.*`` (DiLoCoConfig), ``sync.butterfly.*``
    (ButterflyConfig)."""

    strategy: str = "ddp"  # ddp | diloco | butterfly
    H: int = 50  # inner steps per window
    n_fragments: int = 1  # P; 1 = plain (non-streaming) DiLoCo
    tau: int = 0  # τ: what is sent after step t is merged after step t + tau (DiLoCo outer result, butterfly fragment)
    codec: str = "fp32"  # wire format of outer gradients / fragments (codec_registry.CODECS; top*: top-k sparsified)
    codec_block_size: int = 128  # elements sharing one quantisation scale
    stochastic_rounding: bool = True  # unbiased rounding to the codec grid
    error_feedback: bool = True  # carry each island's quantisation error into its next payload
    routing_sync: bool = True  # sync expert loads every step on their own channel
    routing_sync_mode: str = "all_reduce"  # all_reduce (every island) | butterfly (pairwise with the round's partner)
    diloco: DiLoCoConfig = field(default_factory=DiLoCoConfig)  # DiLoCo-only knobs (outer optimizer, merge, improvements)
    butterfly: ButterflyConfig = field(default_factory=ButterflyConfig)  # butterfly-only knobs (exchanges, merge, eval)
    # decoupled: each island steps on its own simulated clock and a synchroniser merges each fragment every H steps of
    # the global schedule from the islands that arrive in time (sync.tau is ignored: the clock decides when one lands)
    mode: str = "lockstep"  # lockstep (every island takes inner step t together) | decoupled (own clocks, quorum)
    quorum: int = 1  # decoupled: a merge waits for at least this many islands' outer gradients
    grace_s: float = 1.0  # decoupled: and then at most this many simulated seconds more for the others
    decoupled: DecoupledConfig = field(default_factory=DecoupledConfig)  # decoupled-only knobs (weighting, averaging)

    def __post_init__(self) -> None:
        p = "sync."
        _check(self.strategy in ("ddp", "diloco", "butterfly"), p + "strategy", "must be one of ddp|diloco|butterfly", self.strategy)
        _check(self.H >= 1, p + "H", "must be >= 1", self.H)
        _check(self.n_fragments >= 1, p + "n_fragments", "must be >= 1", self.n_fragments)
        _check(self.H >= self.n_fragments, p + "H", f"must be >= sync.n_fragments={self.n_fragments} so every fragment gets its own offset", self.H)
        _check(0 <= self.tau < self.H, p + "tau", f"must satisfy 0 <= tau < sync.H={self.H}", self.tau)
        _check(self.codec in CODECS, p + "codec", "must be one of " + "|".join(CODECS), self.codec)
        _check(self.codec_block_size >= 1, p + "codec_block_size", "must be >= 1", self.codec_block_size)
        _check(not self.codec.startswith("top") or self.codec_block_size <= 256, p + "codec_block_size",
               f"must be <= 256 with the top-k codec {self.codec} (one-byte in-block indices)", self.codec_block_size)
        _check(self.routing_sync_mode in ("all_reduce", "butterfly"), p + "routing_sync_mode",
               "must be one of all_reduce|butterfly", self.routing_sync_mode)
        _check(not self.diloco.eager or self.tau >= 1, p + "diloco.eager",
               "needs sync.tau >= 1 (with tau = 0 nothing overlaps)", self.diloco.eager)
        _check(self.mode in ("lockstep", "decoupled"), p + "mode", "must be one of lockstep|decoupled", self.mode)
        _check(isinstance(self.quorum, int) and self.quorum >= 1, p + "quorum", "must be an integer >= 1", self.quorum)
        _check(self.grace_s >= 0, p + "grace_s", "must be >= 0 (seconds)", self.grace_s)
        if self.mode == "decoupled":
            _check(self.strategy == "diloco", p + "mode", "decoupled needs sync.strategy=diloco (a synchroniser "
                   "merging outer gradients)", self.mode)
            _check(not self.diloco.eager and self.diloco.warm_start_steps == 0, p + "diloco",
                   "eager updates and the warm start are lock-step schedules: not with sync.mode=decoupled",
                   "eager" if self.diloco.eager else "warm_start_steps")


@dataclass
class LinkConfig:
    """Wide-area link between islands; see islands_kit/comm/link.py for the model and ``LINK_PRESETS`` below for the
    named links."""

    preset: str = "transpacific-25g"  # named link (comm/link.py); setting it sets every link field
    bandwidth_bps: float = 25e9  # bits per second
    rtt_s: float = 0.145  # base round-trip time
    jitter_sigma: float = 0.25  # log-normal body of the per-transfer extra latency (relative to rtt)
    tail_prob: float = 0.01  # probability that a chunk/transfer hits the heavy (Pareto) tail
    tail_alpha: float = 1.5  # Pareto shape of the tail
    tail_scale_s: float = 0.2  # Pareto scale (seconds)
    loss_prob: float = 0.0  # per-chunk loss probability
    corrupt_prob: float = 0.0  # per-chunk corruption probability (detected by checksum)
    n_connections: int = 8  # parallel connections a chunked transfer spreads over
    warm: bool = True  # keep connections warm (no slow start)
    idle_timeout_s: float = 1.0  # an idle connection falls back to cold after this long
    init_cwnd_bytes: int = 14600  # TCP initial window (10 MSS)
    pacing_bps: float = 0.0  # 0 = no pacing cap
    chunk_bytes: int = 4 << 20  # chunk size of a chunked transfer
    method: str = "chunked"  # chunked | naive
    contact_period_s: float = 0.0  # >0: intermittent contact (LEO); link up for contact_fraction of each period
    contact_fraction: float = 1.0  # share of each contact period the link is up
    fec_group: int = 16  # chunked + FEC: data chunks per erasure-coded group
    fec_parity: int = 0  # parity chunks per group (any fec_group of the group's chunks rebuild it); 0 = no FEC

    def __post_init__(self) -> None:
        p = "link."
        _check(self.bandwidth_bps > 0 and math.isfinite(self.bandwidth_bps), p + "bandwidth_bps", "must be a finite number > 0", self.bandwidth_bps)
        _check(self.rtt_s >= 0, p + "rtt_s", "must be >= 0", self.rtt_s)
        _check(self.jitter_sigma >= 0, p + "jitter_sigma", "must be >= 0", self.jitter_sigma)
        _check(0 <= self.tail_prob <= 1, p + "tail_prob", "must be in [0, 1]", self.tail_prob)
        _check(self.tail_alpha > 0, p + "tail_alpha", "must be > 0", self.tail_alpha)
        _check(self.tail_scale_s >= 0, p + "tail_scale_s", "must be >= 0", self.tail_scale_s)
        _check(0 <= self.loss_prob < 1, p + "loss_prob", "must be in [0, 1)", self.loss_prob)
        _check(0 <= self.corrupt_prob < 1, p + "corrupt_prob", "must be in [0, 1)", self.corrupt_prob)
        _check(self.loss_prob + self.corrupt_prob < 1, p + "loss_prob", "loss_prob + corrupt_prob must be < 1", self.loss_prob + self.corrupt_prob)
        _check(self.n_connections >= 1, p + "n_connections", "must be >= 1", self.n_connections)
        _check(self.idle_timeout_s >= 0, p + "idle_timeout_s", "must be >= 0", self.idle_timeout_s)
        _check(self.init_cwnd_bytes >= 1, p + "init_cwnd_bytes", "must be >= 1", self.init_cwnd_bytes)
        _check(self.pacing_bps >= 0, p + "pacing_bps", "must be >= 0 (0 = no cap)", self.pacing_bps)
        _check(self.chunk_bytes >= 1, p + "chunk_bytes", "must be >= 1", self.chunk_bytes)
        _check(self.method in ("chunked", "naive"), p + "method", "must be one of chunked|naive", self.method)
        _check(self.contact_period_s >= 0, p + "contact_period_s", "must be >= 0", self.contact_period_s)
        _check(0 < self.contact_fraction <= 1, p + "contact_fraction", "must be in (0, 1]", self.contact_fraction)
        _check(self.fec_group >= 1, p + "fec_group", "must be >= 1", self.fec_group)
        _check(self.fec_parity >= 0, p + "fec_parity", "must be >= 0 (0 = no FEC)", self.fec_parity)
        _check(self.fec_group + self.fec_parity <= 255, p + "fec_parity",
               "fec_group + fec_parity must be <= 255 (a Reed-Solomon code over GF(2^8))", self.fec_group + self.fec_parity)
        _check(self.fec_parity == 0 or self.method == "chunked", p + "fec_parity", "needs method=chunked",
               self.fec_parity)


# Field overrides of LinkConfig per named link. The figures are round, plausible numbers, not measurements.
LINK_PRESETS: dict[str, dict[str, Any]] = {
    # The seed's link: 25 Gbit/s across ~14,500 km of fibre, 145 ms round trip at best; moderate jitter, a heavy tail.
    # Identical to the LinkConfig defaults, so LinkConfig() is this link.
    "transpacific-25g": dict(bandwidth_bps=25e9, rtt_s=0.145, jitter_sigma=0.25, tail_prob=0.01, tail_alpha=1.5,
                             tail_scale_s=0.2, loss_prob=0.0, corrupt_prob=0.0, n_connections=8, chunk_bytes=4 << 20,
                             contact_period_s=0.0, contact_fraction=1.0),
    # Inside one data centre: 400 Gbit/s, 50 us round trip, tiny jitter, rare millisecond stalls.
    "intra-dc": dict(bandwidth_bps=400e9, rtt_s=50e-6, jitter_sigma=0.1, tail_prob=1e-4, tail_alpha=2.0,
                     tail_scale_s=1e-3, loss_prob=0.0, corrupt_prob=0.0, n_connections=8, chunk_bytes=16 << 20,
                     contact_period_s=0.0, contact_fraction=1.0),
    # A home / small-office line: 1 Gbit/s, 30 ms, noisy, some loss.
    "consumer-1g": dict(bandwidth_bps=1e9, rtt_s=0.030, jitter_sigma=0.5, tail_prob=0.02, tail_alpha=1.5,
                        tail_scale_s=0.1, loss_prob=0.005, corrupt_prob=1e-4, n_connections=4, chunk_bytes=1 << 20,
                        contact_period_s=0.0, contact_fraction=1.0),
    # An intermittent low-earth-orbit link (illustrative): 200 Mbit/s, 40 ms, noisy, 1.5% chunk loss, and contact
    # only during the first half of every minute (think of passes over a ground station, compressed in time).
    "leo-satellite": dict(bandwidth_bps=200e6, rtt_s=0.040, jitter_sigma=0.4, tail_prob=0.02, tail_alpha=1.5,
                          tail_scale_s=0.1, loss_prob=0.015, corrupt_prob=0.001, n_connections=4, chunk_bytes=1 << 20,
                          contact_period_s=60.0, contact_fraction=0.5),
}


def link_config(preset: str, **overrides: Any) -> LinkConfig:
    """A validated ``LinkConfig`` for a named link (``LINK_PRESETS``) with field overrides; errors name the field."""
    _check(preset in LINK_PRESETS, "link.preset", "must be one of " + "|".join(LINK_PRESETS), preset)
    names = sorted(f.name for f in fields(LinkConfig) if f.name != "preset")
    for key in overrides:
        _check(key in names, f"link.{key}", "unknown link field (valid: " + ", ".join(names) + ")", key)
    return LinkConfig(preset=preset, **{**LINK_PRESETS[preset], **overrides})


@dataclass
class IslandConfig:
    """One island: its batch, how it splits the batch (dp_ranks x micro-batches) and its hardware profile."""

    name: str = "island"  # label in results and plots
    batch_size: int = 32  # sequences per inner step
    micro_batch_size: int = 32  # sequences per forward/backward on one rank
    dp_ranks: int = 1  # data-parallel ranks inside the island
    hardware: str = "h100"  # profile name from islands_kit.islands.HARDWARE
    n_accelerators: int = 1  # accelerators per island used by the simulated clock

    def validate(self, where: str) -> None:
        _check(isinstance(self.batch_size, int) and self.batch_size >= 1, where + ".batch_size", "must be an integer >= 1", self.batch_size)
        _check(self.micro_batch_size >= 1, where + ".micro_batch_size", "must be >= 1", self.micro_batch_size)
        _check(self.dp_ranks >= 1, where + ".dp_ranks", "must be >= 1", self.dp_ranks)
        _check(self.batch_size % (self.dp_ranks * self.micro_batch_size) == 0, where + ".batch_size",
               f"must split into dp_ranks x micro_batch_size = {self.dp_ranks}x{self.micro_batch_size} "
               "(gradient accumulation needs a whole number of micro-batches)", self.batch_size)
        _check(self.n_accelerators >= 1, where + ".n_accelerators", "must be >= 1", self.n_accelerators)


ATTACKS = ("none", "sign_flip", "scale", "nan", "noise", "replay")
DEFENSES = ("none", "auto", "trimmed_mean", "median", "clip")


@dataclass
class FaultConfig:
    """Injected faults and an adversarial island (seeded, deterministic), and the defences against them.

    Link-level faults (lost / corrupted chunks) live in LinkConfig (loss_prob, corrupt_prob): they cost time only."""

    preempt_island: int = -1  # -1 = nobody is preempted
    preempt_start: int = 0  # first inner step the island misses
    preempt_steps: int = 0  # how many steps it is away; it rejoins from the current global state
    straggler_island: int = -1  # -1 = no straggler, else the slow island's index
    straggler_factor: float = 1.0  # compute time multiplier of the straggling island
    attack: str = "none"  # none | sign_flip | scale | nan | noise | replay
    attack_island: int = 1  # the adversarial island's index (when attack is not none)
    attack_start: int = 0  # first step from which the attacker corrupts what it sends
    attack_scale: float = 100.0  # for "scale"
    attack_noise_std: float = 1.0  # for "noise": std of the added noise relative to the honest update's RMS
    defense: str = "none"  # none | auto | trimmed_mean | median | clip
    norm_ratio: float = 3.0  # flag an update whose norm exceeds norm_ratio x the trusted reference norm
    min_cosine: float = -0.2  # flag an update whose direction disagrees with the reference (cosine below this)
    history: int = 5  # syncs of an island's own history used as its reference

    def __post_init__(self) -> None:
        p = "faults."
        _check(self.preempt_start >= 0, p + "preempt_start", "must be >= 0", self.preempt_start)
        _check(self.preempt_steps >= 0, p + "preempt_steps", "must be >= 0", self.preempt_steps)
        _check(self.straggler_factor >= 1.0, p + "straggler_factor", "must be >= 1", self.straggler_factor)
        _check(self.attack in ATTACKS, p + "attack", "must be one of " + "|".join(ATTACKS), self.attack)
        _check(self.attack_start >= 0, p + "attack_start", "must be >= 0", self.attack_start)
        _check(self.attack_scale > 0, p + "attack_scale", "must be > 0", self.attack_scale)
        _check(self.attack_noise_std >= 0, p + "attack_noise_std", "must be >= 0", self.attack_noise_std)
        _check(self.defense in DEFENSES, p + "defense", "must be one of " + "|".join(DEFENSES), self.defense)
        _check(self.norm_ratio > 1.0, p + "norm_ratio", "must be > 1", self.norm_ratio)
        _check(-1.0 <= self.min_cosine <= 1.0, p + "min_cosine", "must be in [-1, 1]", self.min_cosine)
        _check(self.history >= 1, p + "history", "must be >= 1", self.history)


@dataclass
class DataConfig:
    corpus: str = "shakespeare"  # shakespeare | enwiki | hub:<name>[:config] | path to .txt/.parquet files
    val_fraction: float = 0.05  # the last val_fraction of the bytes are validation
    eval_bytes: int = 65536  # validation bytes scored at each evaluation (a fixed, evenly spaced sample); 0 = all
    final_eval_bytes: int = 0  # validation bytes scored for final_val_bpb; 0 = all of them (demo, gpu)
    text_field: str = "text"  # the text column of a hub: or .parquet corpus (e.g. content)
    split: str = "train"  # hub: the split to read (train, validation, train[:10%], ...)
    revision: str = ""  # hub: the dataset revision to pin (commit sha, tag or branch); "" = the default branch
    streaming: bool = False  # hub: stream the rows instead of downloading the dataset; needs max_bytes
    max_bytes: int = 0  # use only the first max_bytes bytes of the corpus (0 = all)
    # the tuning split: held out of training; hyperparameters are chosen on its score (final_tune_bpb) when a tuner
    # (benchmarks/protocol.py) asks for it with score_tune; otherwise the final evaluation spares that pass
    tune_fraction: float = 0.0  # fraction of the bytes just before the validation tail held out for tuning (0 = none)
    score_tune: bool = False  # score the tuning split at the end (final_tune_bpb); off: held out, never scored

    def __post_init__(self) -> None:
        _check(0.05 <= self.val_fraction < 0.5, "data.val_fraction", "must be in [0.05, 0.5)", self.val_fraction)
        _check(self.eval_bytes >= 0, "data.eval_bytes", "must be >= 0 (0 = all validation bytes)", self.eval_bytes)
        _check(0.0 <= self.tune_fraction < 0.5, "data.tune_fraction", "must be in [0, 0.5)", self.tune_fraction)
        _check(not self.score_tune or self.tune_fraction > 0, "data.score_tune",
               "needs a tuning split to score (data.tune_fraction > 0)", self.score_tune)
        _check(self.final_eval_bytes >= 0, "data.final_eval_bytes", "must be >= 0 (0 = all validation bytes)", self.final_eval_bytes)
        hub = isinstance(self.corpus, str) and self.corpus.startswith("hub:")
        _check(isinstance(self.text_field, str) and self.text_field.strip() != "", "data.text_field",
               "must name a column", self.text_field)
        _check(isinstance(self.split, str) and self.split.strip() != "", "data.split", "must name a split", self.split)
        _check(hub or self.split == "train", "data.split", "only a hub: corpus has splits (local files and the "
               "registered corpora are one train split)", self.split)
        _check(hub or self.revision == "", "data.revision", "only a hub: corpus has revisions", self.revision)
        _check(self.max_bytes >= 0, "data.max_bytes", "must be >= 0 (0 = all)", self.max_bytes)
        _check(not self.streaming or hub, "data.streaming", "only a hub: corpus can be streamed", self.streaming)
        _check(not self.streaming or self.max_bytes > 0, "data.streaming",
               "needs data.max_bytes > 0 (how much of the stream to read)", self.max_bytes)


@dataclass
class ExperimentConfig:
    experiment: str = "baseline"  # baseline | two_site | eight_cell
    preset: str = "smoke"  # the preset this config started from (islands_kit.presets: smoke | demo | gpu)
    seed: int = 0  # one seed for weights, data order, stochastic rounding and the link's draws
    device: str = "auto"  # auto | cpu | cuda | cuda:N (auto: the local GPU if there is one; see islands_kit/device.py)
    precision: str = "fp32"  # fp32 | bf16 (bf16 autocast for forward/backward; fp32 weights, optimizer and sync state)
    steps: int = 100  # inner steps per island (lock-step); decoupled: length of the global schedule (fastest island)
    eval_every: int = 50  # evaluate on the validation windows every N steps (and at the end)
    data: DataConfig = field(default_factory=DataConfig)  # corpus, validation split and evaluation bytes
    model: ModelConfig = field(default_factory=ModelConfig)  # the byte-level MoE transformer
    optim: OptimConfig = field(default_factory=OptimConfig)  # the inner optimizer of every island
    sync: SyncConfig = field(default_factory=SyncConfig)  # how the islands synchronise
    link: LinkConfig = field(default_factory=LinkConfig)  # the wide-area link between islands (simulated clock)
    islands: list[IslandConfig] = field(default_factory=lambda: [IslandConfig()])  # one entry per island
    faults: FaultConfig = field(default_factory=FaultConfig)  # injected faults, an adversarial island and the defences
    threads: int = 0  # torch intra-op threads for this run (0 = torch's default); 1 is best on a shared machine
    checkpoint_every: int = 0  # write DIR/checkpoint.pt every N steps (0 = never); resume with --resume DIR
    wandb_mode: str = "offline"  # offline | online | disabled
    wandb_project: str = "islands_kit"  # wandb project name
    wandb_group: str = ""  # wandb group; the runs of one comparison share one
    progress: bool = True  # live progress lines (step, tokens, tokens/s, ETA, eval bpb); false = quiet
    log_every: int = 10  # train loss, throughput, link bytes and routing balance to wandb every N inner steps

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        _check(self.experiment in EXPERIMENTS, "experiment", "must be one of " + "|".join(EXPERIMENTS), self.experiment)
        _check(isinstance(self.seed, int) and self.seed >= 0, "seed", "must be an integer >= 0", self.seed)
        check_device_spelling(self.device)
        _check(self.precision in PRECISIONS, "precision", "must be one of " + "|".join(PRECISIONS), self.precision)
        _check(isinstance(self.steps, int) and self.steps >= 1, "steps", "must be an integer >= 1", self.steps)
        _check(isinstance(self.eval_every, int) and self.eval_every >= 1, "eval_every", "must be an integer >= 1", self.eval_every)
        _check(len(self.islands) >= 1, "islands", "must list at least one island", self.islands)
        for i, isl in enumerate(self.islands):
            isl.validate(f"islands[{i}]")
        _check(self.wandb_mode in ("offline", "online", "disabled"), "wandb_mode", "must be one of offline|online|disabled", self.wandb_mode)
        n = len(self.islands)
        if self.sync.strategy == "butterfly" or self.sync.routing_sync_mode == "butterfly":
            _check(n >= 2 and (n & (n - 1)) == 0, "islands", "butterfly mixing needs a power-of-two number of cells >= 2", n)
        _check(self.threads >= 0, "threads", "must be >= 0 (0 = torch default)", self.threads)
        _check(isinstance(self.log_every, int) and self.log_every >= 1, "log_every", "must be an integer >= 1",
               self.log_every)
        _check(self.checkpoint_every >= 0, "checkpoint_every", "must be >= 0 (0 = never)", self.checkpoint_every)
        f = self.faults
        for name in ("preempt_island", "straggler_island"):
            v = getattr(f, name)
            _check(v == -1 or 0 <= v < n, "faults." + name, f"must be -1 (none) or an island index < {n}", v)
        if f.attack != "none":
            _check(0 <= f.attack_island < n, "faults.attack_island", f"must be an island index < {n}", f.attack_island)
        if f.attack != "none" or f.defense != "none":
            _check(self.sync.strategy == "diloco", "faults.attack" if f.attack != "none" else "faults.defense",
                   "attacks and defences need sync.strategy=diloco (the only strategy with an aggregation step)",
                   f.attack if f.attack != "none" else f.defense)
        if f.preempt_island >= 0 and f.preempt_steps > 0:
            _check(self.sync.strategy in ("diloco", "ddp"), "faults.preempt_island",
                   "preemption needs the diloco strategy (butterfly cells have no global state to rejoin from) or ddp "
                   "(the synchronous job stalls until the island is back)", f.preempt_island)
        if self.sync.mode == "decoupled":
            _check(self.sync.quorum <= n, "sync.quorum", f"must be <= the number of islands ({n})", self.sync.quorum)
            _check(f.attack == "none" and f.defense == "none", "faults.attack",
                   "attacks and defences run in lock-step mode only (the synchroniser merges with sync.decoupled.*)",
                   f.attack if f.attack != "none" else f.defense)
            _check(self.checkpoint_every == 0, "checkpoint_every",
                   "must be 0 with sync.mode=decoupled (its in-flight merges are not checkpointed yet)",
                   self.checkpoint_every)
        if self.experiment == "baseline":
            _check(self.sync.strategy == "ddp", "sync.strategy", "the baseline experiment is synchronous: must be ddp", self.sync.strategy)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ExperimentConfig":
        return _build(cls, d, "")


EXPERIMENTS = ("baseline", "two_site", "eight_cell")
PRECISIONS = ("fp32", "bf16")
_DEVICE_RE = re.compile(r"(auto|cpu|cuda|cuda:\d+)")


def check_device_spelling(spec: Any) -> None:
    """``device`` must read auto, cpu, cuda or cuda:N. Whether that device exists is checked by
    ``islands_kit.device.resolve_device`` when the run starts (it needs torch.cuda; this module stays torch-free)."""
    _check(isinstance(spec, str) and _DEVICE_RE.fullmatch(spec) is not None, "device",
           "must be auto, cpu, cuda or cuda:N", spec)


def _coerce(tp: Any, value: Any, path: str) -> Any:
    """Coerce ``value`` to the annotated type ``tp`` (bool/int/float/str, lists of dataclasses) or raise ConfigError."""
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        _check(isinstance(value, dict), path, f"must be a mapping of {tp.__name__} fields", value)
        return _build(tp, value, path + ".")
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        _check(isinstance(value, (list, tuple)), path, "must be a list", value)
        return [_coerce(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        _check(isinstance(value, bool), path, "must be a boolean (true/false)", value)
        return value
    if tp is int:
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(f"{path}: must be an integer (got {value!r})") from None
        _check(isinstance(value, int) and not isinstance(value, bool), path, "must be an integer", value)
        return value
    if tp is float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{path}: must be a number (got {value!r})") from None
        _check(isinstance(value, (int, float)) and not isinstance(value, bool), path, "must be a number", value)
        value = float(value)
        _check(not math.isnan(value), path, "must not be NaN", value)
        return value
    if tp is str:
        _check(isinstance(value, str), path, "must be a string", value)
        return value
    return value


def _build(cls: type, d: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls) if f.init}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown key{_nearest(unknown[0], names, prefix)} "
                          f"(valid keys: {', '.join(sorted(names))})")
    kwargs = {k: _coerce(hints[k], v, prefix + k) for k, v in d.items()}
    return cls(**kwargs)


def apply_overrides(cfg: ExperimentConfig, overrides: dict[str, Any]) -> ExperimentConfig:
    """Apply dotted-path overrides such as ``{"sync.H": "100"}`` and re-validate; unknown keys and bad types raise."""
    d = cfg.to_dict()
    if "link.preset" in overrides:  # a named link first sets every link field; explicit link.* overrides then apply
        d["link"] = asdict(link_config(str(overrides["link.preset"])))
        overrides = {k: v for k, v in overrides.items() if k != "link.preset"}
    for key, value in overrides.items():
        node: Any = d
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            if isinstance(node, list):
                _check(part.isdigit() and int(part) < len(node), ".".join(parts[: i + 1]), "must index an existing list item", part)
                node = node[int(part)]
            else:
                if not (isinstance(node, dict) and part in node):
                    raise ConfigError(f"{key}: unknown key{_nearest(key, _dotted_keys(d))}")
                node = node[part]
        last = parts[-1]
        if isinstance(node, list):
            _check(last.isdigit() and int(last) < len(node), key, "must index an existing list item", last)
            node[int(last)] = value
        else:
            if not (isinstance(node, dict) and last in node):
                raise ConfigError(f"{key}: unknown key{_nearest(key, _dotted_keys(d))}")
            node[last] = value
    return ExperimentConfig.from_dict(d)


def _dotted_keys(d: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a config dict, sections included (``sync``, ``sync.H``, ``islands.0.batch_size``)."""
    items = d.items() if isinstance(d, dict) else enumerate(d) if isinstance(d, list) else ()
    out = []
    for k, v in items:
        out.append(f"{prefix}{k}")
        out.extend(_dotted_keys(v, f"{prefix}{k}."))
    return out


# Keys of the flat SyncConfig before the per-strategy sub-configs (issue 19) -> where each lives now.
MOVED_KEYS: dict[str, str] = {
    **{f"sync.{k}": f"sync.diloco.{k}" for k in ("alpha", "outer_lr", "outer_momentum", "nesterov", "merge", "final_codec",
                                                 "warm_start_steps", "outer_momentum_warmup", "eager")},
    **{f"sync.{k}": f"sync.butterfly.{k}" for k in ("exchanges_per_window", "exact_average_every", "final_average")},
    "sync.butterfly_merge": "sync.butterfly.merge", "sync.butterfly_eval": "sync.butterfly.eval", "sync.delay": "sync.tau",
}


def _nearest(key: str, valid: typing.Iterable[str], prefix: str = "") -> str:
    """' (did you mean X?)' for the valid keys closest to a mistyped one (difflib), else ''; a key that moved
    (``MOVED_KEYS``) names its new place."""
    import difflib

    if prefix + key in MOVED_KEYS:
        return f" (did you mean {MOVED_KEYS[prefix + key]}? the key moved there)"
    same_depth = [v for v in valid if v.count(".") == key.count(".")]
    near = difflib.get_close_matches(key, same_depth, n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(prefix + n for n in near)}?)" if near else ""


def parse_set(items: list[str]) -> dict[str, str]:
    """Parse CLI ``--set key=value`` items."""
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: must have the form key=value (e.g. sync.H=100)")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out
