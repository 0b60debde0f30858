"""Data parallelism's home beside its algorithm (``sync/ddp.py``): its traits and its spec (it has no knobs
of its own: ``sync.*``'s shared fields are all it reads). Torch-free (``sync/registry.py``).
"""
from __future__ import annotations

from islands_kit.config.strategies import StrategyTraits
from islands_kit.sync.registry import StrategySpec

TRAITS = StrategyTraits("ddp", "ddp", "lockstep", "ddp (gradients all-reduced every step, fp32)",
                        synchronous=True, global_state=True, projection="every_step")
SPEC = StrategySpec(TRAITS, "islands_kit.sync.ddp:build")
