"""The sync section (``sync.*``): what every strategy shares, and each strategy's own sub-config."""
from __future__ import annotations

from dataclasses import dataclass, field

from islands_kit.codec_registry import CODECS
from islands_kit.config.butterfly import ButterflyConfig
from islands_kit.config.diloco import DecoupledConfig, DiLoCoConfig
from islands_kit.config.rules import _check, _check_fields
from islands_kit.config.strategies import MODES, StrategyTraits, strategy_names, traits_of

MAX_CODEC_BLOCK = 1 << 20  # values per codec block: a million (SparseLoCo chunks are 4096); 10**12 would allocate 4 TB


@dataclass
class SyncConfig:
    """How islands synchronise. Symbols follow Streaming DiLoCo (Douillard et al. 2025) and butterfly mixing
    (Zhao & Canny 2013): H inner steps per window, P = n_fragments, τ = tau, the overlap delay of both strategies.
    The knobs of one strategy live in its sub-config: ``sync.diloco.*`` (DiLoCoConfig), ``sync.butterfly.*``
    (ButterflyConfig)."""

    strategy: str = "ddp"  # ddp | diloco | butterfly (config/strategies.py: the registered names)
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
        _check_fields(self, p)
        known = strategy_names()
        _check(self.strategy in known, p + "strategy", "must be one of " + "|".join(known), self.strategy)
        _check(self.H >= 1, p + "H", "must be >= 1", self.H)
        _check(self.n_fragments >= 1, p + "n_fragments", "must be >= 1", self.n_fragments)
        _check(self.H >= self.n_fragments, p + "H", f"must be >= sync.n_fragments={self.n_fragments} so every fragment gets its own offset", self.H)
        _check(0 <= self.tau < self.H, p + "tau", f"must satisfy 0 <= tau < sync.H={self.H}", self.tau)
        _check(self.codec in CODECS, p + "codec", "must be one of " + "|".join(CODECS), self.codec)
        _check(1 <= self.codec_block_size <= MAX_CODEC_BLOCK, p + "codec_block_size",
               f"must be in [1, {MAX_CODEC_BLOCK}] (a block is padded and scaled as one tensor)", self.codec_block_size)
        _check(not self.codec.startswith("top") or self.codec_block_size <= 256, p + "codec_block_size",
               f"must be <= 256 with the top-k codec {self.codec} (one-byte in-block indices)", self.codec_block_size)
        _check(self.routing_sync_mode in ("all_reduce", "butterfly"), p + "routing_sync_mode",
               "must be one of all_reduce|butterfly", self.routing_sync_mode)
        _check(self.error_feedback or self.diloco.error_feedback_decay == 1.0, p + "diloco.error_feedback_decay",
               "needs sync.error_feedback=true (it decays the error-feedback buffer)", self.diloco.error_feedback_decay)
        _check(not self.diloco.eager or self.tau >= 1, p + "diloco.eager",
               "needs sync.tau >= 1 (with tau = 0 nothing overlaps)", self.diloco.eager)
        _check(self.mode in MODES, p + "mode", "must be one of " + "|".join(MODES), self.mode)
        _check(isinstance(self.quorum, int) and self.quorum >= 1, p + "quorum", "must be an integer >= 1", self.quorum)
        _check(self.grace_s >= 0, p + "grace_s", "must be >= 0 (seconds)", self.grace_s)
        if self.traits.own_clocks:
            _check(not self.diloco.eager and self.diloco.warm_start_steps == 0, p + "diloco",
                   f"eager updates and the warm start are lock-step schedules: not with sync.mode={self.mode}",
                   "eager" if self.diloco.eager else "warm_start_steps")

    @property
    def traits(self) -> StrategyTraits:
        """What the strategy of ``strategy`` and ``mode`` can do (a ConfigError naming the known ones if none)."""
        return traits_of(self.strategy, self.mode)
