"""The faults section (``faults.*``): preemption, stragglers, an adversarial island and the defences."""
from __future__ import annotations

from dataclasses import dataclass

from islands_kit.rules import _check, _check_fields

ATTACKS = ("none", "sign_flip", "scale", "nan", "noise", "replay")
DEFENSES = ("none", "auto", "trimmed_mean", "median", "clip")


MAX_STRAGGLER_FACTOR = 1e6

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
    upset_island: int = -1  # a single-event upset in this island's replica (-1 = none; faults/seu.py)
    upset_step: int = 1  # ... after this inner step of the schedule
    upset_bit: int = 30  # ... flipping this bit (float32: 0-22 mantissa, 23-30 exponent, 31 sign) of one seeded weight

    def __post_init__(self) -> None:
        p = "faults."
        _check_fields(self, p)
        _check(self.preempt_start >= 0, p + "preempt_start", "must be >= 0", self.preempt_start)
        _check(self.preempt_steps >= 0, p + "preempt_steps", "must be >= 0", self.preempt_steps)
        # a slow island's step times stay finite however long the run: 1.7e308 made every simulated time inf
        _check(1.0 <= self.straggler_factor <= MAX_STRAGGLER_FACTOR, p + "straggler_factor",
               f"must be in [1, {MAX_STRAGGLER_FACTOR:g}] (a compute-time multiplier)", self.straggler_factor)
        _check(self.attack in ATTACKS, p + "attack", "must be one of " + "|".join(ATTACKS), self.attack)
        _check(self.attack_start >= 0, p + "attack_start", "must be >= 0", self.attack_start)
        _check(self.attack_scale > 0, p + "attack_scale", "must be > 0", self.attack_scale)
        _check(self.attack_noise_std >= 0, p + "attack_noise_std", "must be >= 0", self.attack_noise_std)
        _check(self.defense in DEFENSES, p + "defense", "must be one of " + "|".join(DEFENSES), self.defense)
        _check(self.norm_ratio > 1.0, p + "norm_ratio", "must be > 1", self.norm_ratio)
        _check(-1.0 <= self.min_cosine <= 1.0, p + "min_cosine", "must be in [-1, 1]", self.min_cosine)
        _check(self.history >= 1, p + "history", "must be >= 1", self.history)
        _check(self.upset_island >= -1, p + "upset_island", "must be >= -1 (-1 = no upset)", self.upset_island)
        _check(self.upset_step >= 1, p + "upset_step", "must be >= 1", self.upset_step)
        _check(0 <= self.upset_bit <= 31, p + "upset_bit", "must be in [0, 31] (a float32 bit)", self.upset_bit)
