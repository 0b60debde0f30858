"""Projections without training: what a run would cost on the wire and the clock, priced by the pieces training uses.

  lockstep.py    the lock-step loop replayed with payload sizes on the transport's clock, ledger and ring all-reduce
                 (equal to a training run with the same plan; ``plan_for_config`` reads the plan off a config)
  decoupled.py   Decoupled DiLoCo's schedule as an event model on the same link model and ledger
  seed_scale.py  the seed run's size (32B MoE, 160 + 160 GPUs): lock-step streaming, decoupled and DDP side by side
"""
from islands_kit.projection.decoupled import DecoupledResult, Merge, full_speed_steps, simulate_decoupled
from islands_kit.projection.lockstep import LockStepPlan, plan_for_config, price_lock_step, summary
from islands_kit.projection.seed_scale import ideal_link, seed_scale_projection

__all__ = ["DecoupledResult", "LockStepPlan", "Merge", "full_speed_steps", "ideal_link", "plan_for_config",
           "price_lock_step", "seed_scale_projection", "simulate_decoupled", "summary"]
