"""The model and inner-optimizer sections (``model.*``, ``optim.*``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from islands_kit.rules import MAX_LR, _check, _check_fields


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
        _check_fields(self, p)
        _check(self.vocab_size == 256, p + "vocab_size", "must be 256 for a byte-level model", self.vocab_size)
        for name in ("seq_len", "d_model", "n_layers", "n_heads", "n_experts", "top_k", "d_expert"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 1, p + name, "must be an integer >= 1", v)
        # a model file claims these: 10**12 positions sized an 8 TB table, 10**5 layers took minutes to describe
        _check(self.seq_len <= 1 << 20, p + "seq_len", "must be <= 1048576 bytes of context", self.seq_len)
        _check(self.n_layers <= 1024, p + "n_layers", "must be <= 1024", self.n_layers)
        _check(self.d_model % self.n_heads == 0, p + "d_model", f"must be divisible by model.n_heads={self.n_heads}", self.d_model)
        _check((self.d_model // self.n_heads) % 2 == 0, p + "d_model", "d_model/n_heads must be even for RoPE", self.d_model)
        _check(self.top_k <= self.n_experts, p + "top_k", f"must be <= model.n_experts={self.n_experts}", self.top_k)
        _check(self.n_shared_experts >= 0, p + "n_shared_experts", "must be >= 0", self.n_shared_experts)
        for name in ("aux_loss_coef", "z_loss_coef", "bias_update_rate"):
            _check(getattr(self, name) >= 0, p + name, "must be >= 0", getattr(self, name))
        _check(self.rope_theta > 0, p + "rope_theta", "must be > 0 (the base of the rotary frequencies)", self.rope_theta)
        _check(self.init_std > 0, p + "init_std", "must be > 0 (the std of the normal initialisation)", self.init_std)
        _check(self.dispatch in ("grouped", "loop"), p + "dispatch", "must be one of grouped|loop", self.dispatch)
        _check(self.kernels in ("auto", "torch", "triton"), p + "kernels", "must be one of auto|torch|triton", self.kernels)


SNOO_PARAMS = ("all", "matrices", "hidden", "dense")
# the outer optimizers a config may name (sync.diloco.outer_optimizer, optim.snoo.outer_optimizer), one line each; each
# is built from (lr, momentum, nesterov) by optim/outer.py, where register_outer_optimizer adds one (to both tables)
OUTER_OPTIMIZERS: dict[str, str] = {
    "sgd": "SGD at lr with momentum (Nesterov or heavy ball): DiLoCo's and SNOO's; momentum 0, lr 1 = plain averaging",
    "adam": "Adam at lr, momentum = beta1 (beta2 0.999); the nesterov flag is not read",
}


def check_outer_optimizer(name: str, field_name: str) -> None:
    _check(name in OUTER_OPTIMIZERS, field_name, "must be one of " + "|".join(OUTER_OPTIMIZERS), name)


@dataclass
class SnooConfig:
    """SNOO (``optim.snoo.*``; Kallusky et al. 2025, ``optim/outer.py``): every ``k`` inner steps the slow weights take
    a Nesterov step η = ``lr``, μ = ``momentum`` on the pseudo-gradient of those k steps and the island restarts from
    them. Off with k = 0. Any experiment can use it (the baseline included: one model, data-parallel, plus SNOO is
    DiLoCo with M = 1 on the baseline's own data)."""

    k: int = 0  # K: inner steps per outer step (0 = off)
    lr: float = 0.5  # η: outer learning rate
    momentum: float = 0.5  # μ: outer momentum
    nesterov: bool = True  # Nesterov (SNOO) or heavy-ball outer momentum
    outer_optimizer: str = "sgd"  # the outer step's optimizer (OUTER_OPTIMIZERS: sgd | adam, or one registered)
    momentum_warmup: int = 0  # outer steps over which μ ramps linearly from 0 (0 = none)
    weight_decay: float = 0.0  # decoupled decay of the slow weights at each outer step: w <- w (1 - lr x weight_decay)
    params: str = "all"  # which parameters take the outer step: all | matrices (not the norms' gains) | hidden (the
    #   blocks' matrices except the routers: embeddings, head, norms and routers follow the inner optimizer alone) |
    #   dense (all but the routed experts' matrices, which follow the inner optimizer alone)
    fragments: int = 1  # P: the parameters split as Streaming DiLoCo's strided fragments, fragment p stepping after
    #   inner steps t ≡ round((p + 1) K / P) mod K (DiLoCo M = 1 with staggered fragments on this run's own data)
    merges: str = "keep"  # a sync strategy's merge landing on the island (SNOO inside each site / cell): keep (the
    #   slow weights move with it, so the outer step smooths the island's own progress and the merge passes whole) |
    #   smooth (the merge is part of the pseudo-gradient: Nesterov on each island's merged trajectory)
    final: str = "outer"  # the run's last inner step: outer (an outer step like any other, its extrapolation scored)
    #   | fast (none: the slow weights become the fast ones, so the scored model is the inner optimizer's last iterate)

    def __post_init__(self) -> None:
        p = "optim.snoo."
        _check_fields(self, p)
        _check(isinstance(self.k, int) and 0 <= self.k <= 1_000_000, p + "k", "must be an integer in [0, 1e6] (0 = off)",
               self.k)
        _check(0 < self.lr <= 10, p + "lr", "must be > 0 and <= 10", self.lr)
        _check(0 <= self.momentum < 1, p + "momentum", "must be in [0, 1)", self.momentum)
        check_outer_optimizer(self.outer_optimizer, p + "outer_optimizer")
        _check(isinstance(self.momentum_warmup, int) and 0 <= self.momentum_warmup <= 1_000_000, p + "momentum_warmup",
               "must be an integer in [0, 1e6] (0 = none)", self.momentum_warmup)
        _check(0 <= self.weight_decay and self.lr * self.weight_decay < 1, p + "weight_decay",
               f"must be >= 0 with optim.snoo.lr x weight_decay < 1 (optim.snoo.lr={self.lr})", self.weight_decay)
        _check(self.params in SNOO_PARAMS, p + "params", "must be one of " + "|".join(SNOO_PARAMS), self.params)
        _check(self.final in ("outer", "fast"), p + "final", "must be one of outer|fast", self.final)
        _check(self.merges in ("keep", "smooth"), p + "merges", "must be one of keep|smooth", self.merges)
        _check(isinstance(self.fragments, int) and 1 <= self.fragments <= self.k + (self.k == 0),
               p + "fragments", f"must be an integer in [1, optim.snoo.k={self.k}]", self.fragments)


MUON_ADJUST_LR = ("original", "match_rms_adamw")  # torch.optim.Muon's adjust_lr_fn values


@dataclass
class MuonConfig:
    """Muon's knobs (``optim.muon.*``, read with ``optim.name=muon``; Jordan et al. 2024, ``optim/muon.py``): the
    hidden matrices (attention projections, dense and expert MLP weights; 3-D expert weights one matrix per expert)
    take momentum, Newton-Schulz orthogonalisation and a shape-adjusted lr, with torch.optim.Muon's conventions;
    everything else (embeddings, output head, norms, routers) takes AdamW with optim.beta1 / beta2 / eps and
    optim.weight_decay on its matrices. Both groups follow the warm-up and cosine of ``optim.*``."""

    lr: float = 0.02  # Muon's peak lr on the hidden matrices (0: they stay put and only the AdamW group trains)
    momentum: float = 0.95  # mu: momentum buffer B <- mu B + (1 - mu) g (torch's lerp form)
    nesterov: bool = True  # orthogonalise g + mu (B - g) (Nesterov) rather than B
    ns_steps: int = 5  # Newton-Schulz iterations (torch's quintic: coefficients 3.4445, -4.7750, 2.0315, in bf16)
    adjust_lr: str = "original"  # original: lr x sqrt(max(1, fan_out/fan_in)) | match_rms_adamw: lr x 0.2 sqrt(max(fan_out, fan_in))
    #   (torch's adjust_lr_fn: Keller Jordan's, and Moonshot's, whose update has AdamW's RMS so AdamW's lr carries over)
    weight_decay: float = 0.01  # decoupled decay of the Muon matrices: w <- w (1 - lr x weight_decay), torch's rule
    #   (0.01 at lr 0.02 shrinks them per step as AdamW's defaults do: 2e-3 x 0.1)
    adamw_lr: float = 0.0  # the AdamW group's peak lr (0 = optim.lr, so a grid over optim.lr moves it)

    def __post_init__(self) -> None:
        p = "optim.muon."
        _check_fields(self, p)
        _check(0 <= self.lr <= MAX_LR, p + "lr", f"must be >= 0 and <= {MAX_LR:g}", self.lr)
        _check(0 <= self.momentum < 1, p + "momentum", "must be in [0, 1)", self.momentum)
        _check(isinstance(self.ns_steps, int) and 1 <= self.ns_steps <= 99, p + "ns_steps",
               "must be an integer in [1, 99]", self.ns_steps)
        _check(self.adjust_lr in MUON_ADJUST_LR, p + "adjust_lr", "must be one of " + "|".join(MUON_ADJUST_LR),
               self.adjust_lr)
        _check(0 <= self.weight_decay and self.lr * self.weight_decay < 1, p + "weight_decay",
               f"must be >= 0 with optim.muon.lr x weight_decay < 1 (optim.muon.lr={self.lr})", self.weight_decay)
        _check(0 <= self.adamw_lr <= MAX_LR, p + "adamw_lr", f"must be >= 0 and <= {MAX_LR:g} (0 = optim.lr)",
               self.adamw_lr)


INNER_OPTIMIZERS = ("adamw", "shampoo", "muon", "sgd")


@dataclass
class OptimConfig:
    """Inner optimizer (per island) and its schedule: linear warm-up then cosine decay to min_lr_ratio * lr."""

    name: str = "adamw"  # adamw | shampoo | muon (Muon on the hidden matrices, AdamW on the rest: optim.muon) | sgd
    #   (plain SGD: the reference for equivalence tests)
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
    muon: MuonConfig = field(default_factory=MuonConfig)  # Muon's own knobs (read with name=muon)
    snoo: SnooConfig = field(default_factory=SnooConfig)  # SNOO around the inner optimizer (off by default)

    def __post_init__(self) -> None:
        p = "optim."
        _check_fields(self, p)
        _check(self.name in INNER_OPTIMIZERS, p + "name", "must be one of " + "|".join(INNER_OPTIMIZERS), self.name)
        _check(0 < self.lr <= MAX_LR, p + "lr", f"must be > 0 and <= {MAX_LR:g}", self.lr)
        _check(0 <= self.min_lr_ratio <= 1, p + "min_lr_ratio", "must be in [0, 1]", self.min_lr_ratio)
        _check(self.warmup_steps >= 0, p + "warmup_steps", "must be >= 0", self.warmup_steps)
        _check(self.weight_decay >= 0, p + "weight_decay", "must be >= 0", self.weight_decay)
        _check(self.lr * self.weight_decay < 1, p + "weight_decay", f"optim.lr x weight_decay must be < 1 (decoupled "
               f"decay scales the weights by 1 - lr x weight_decay each step; optim.lr={self.lr})", self.weight_decay)
        _check(0 <= self.beta1 < 1, p + "beta1", "must be in [0, 1)", self.beta1)
        _check(0 <= self.beta2 < 1, p + "beta2", "must be in [0, 1)", self.beta2)
        _check(self.eps > 0, p + "eps", "must be > 0", self.eps)
        _check(self.grad_clip >= 0, p + "grad_clip", "must be >= 0 (0 disables)", self.grad_clip)
        _check(self.precondition_frequency >= 1, p + "precondition_frequency", "must be >= 1", self.precondition_frequency)
        _check(self.start_preconditioning_step >= 0, p + "start_preconditioning_step", "must be >= 0", self.start_preconditioning_step)
        _check(1 <= self.max_preconditioner_dim <= 8192, p + "max_preconditioner_dim", "must be >= 1 and <= 8192 (a block "
               "of dimension d holds d x d factors and their inverse roots)", self.max_preconditioner_dim)
        _check(self.shampoo_epsilon > 0, p + "shampoo_epsilon", "must be > 0", self.shampoo_epsilon)
        _check(0 < self.shampoo_beta2 <= 1, p + "shampoo_beta2", "must be in (0, 1]", self.shampoo_beta2)
        _check(self.grafting in ("adam", "adagrad", "rmsprop", "sgd"), p + "grafting", "must be one of adam|adagrad|rmsprop|sgd", self.grafting)
        if self.name == "muon":
            adamw_lr = self.muon_adamw_lr
            _check(adamw_lr * self.weight_decay < 1, p + "weight_decay", f"the AdamW group's lr x weight_decay must "
                   f"be < 1 (optim.name=muon; its lr: {adamw_lr})", self.weight_decay)

    @property
    def muon_adamw_lr(self) -> float:
        """The AdamW group's peak lr under ``name=muon``: ``muon.adamw_lr``, or ``lr`` where that is 0."""
        return self.muon.adamw_lr or self.lr
