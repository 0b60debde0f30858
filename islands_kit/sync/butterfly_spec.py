"""Butterfly mixing's home beside its algorithm (``sync/butterfly.py``): its settings ``sync.butterfly.*``
(``ButterflyConfig``), the keys that moved into them, the strategy's traits and its spec. Torch-free
(``sync/registry.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

from islands_kit.config.strategies import StrategyTraits
from islands_kit.config.sync import Section
from islands_kit.rules import _check, _check_fields
from islands_kit.sync.registry import StrategySpec


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
        _check_fields(self, p)
        _check(self.exchanges_per_window >= 1, p + "exchanges_per_window", "must be >= 1", self.exchanges_per_window)
        _check(self.merge in ("mean", "delay_aware"), p + "merge", "must be one of mean|delay_aware", self.merge)
        _check(self.exact_average_every >= 0, p + "exact_average_every", "must be >= 0 (0 = never)",
               self.exact_average_every)
        _check(self.eval in ("cell0", "mean"), p + "eval", "must be one of cell0|mean", self.eval)
        _check(self.payload in ("weights", "delta"), p + "payload", "must be one of weights|delta", self.payload)


SECTION = Section(
    "butterfly", ButterflyConfig, "butterfly-only knobs (exchanges, merge, eval)",
    moved={**{f"sync.{k}": f"sync.butterfly.{k}" for k in ("exchanges_per_window", "exact_average_every", "final_average")},
           "sync.butterfly_merge": "sync.butterfly.merge", "sync.butterfly_eval": "sync.butterfly.eval"})
TRAITS = StrategyTraits("butterfly", "butterfly", "lockstep", "butterfly mixing (pairwise fragment exchanges, no all-reduce)",
                        own_replica=True, pairwise=True,
                        summary="butterfly H={s.H}, P={s.n_fragments} fragments, {s.butterfly.exchanges_per_window} exchanges "
                        "per window, merge delay tau={s.tau}, codec {s.codec}, routing sync {s.routing_sync}")
SPEC = StrategySpec(TRAITS, "islands_kit.sync.butterfly:build", (SECTION,))
