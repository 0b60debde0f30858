"""Projections without training: what a run would cost on the wire and the clock, priced by the pieces training uses.

  lockstep.py    the lock-step loop replayed with payload sizes on the transport's clock, ledger and ring all-reduce
                 (equal to a training run with the same plan; ``plan_for_config`` reads the plan off a config)
  decoupled.py   Decoupled DiLoCo's own schedule (sync/decoupled.py) replayed on stand-in fragments with payload sizes
                 (equal to a training run with the same plan; ``decoupled_plan_for_config`` reads the plan off a config)
  seed_scale.py  the seed run's size (32B MoE, 160 + 160 GPUs): lock-step streaming, decoupled and DDP side by side
"""
from islands_kit.projection.decoupled import DecoupledPlan, DecoupledResult, decoupled_plan_for_config, price_decoupled
from islands_kit.projection.lockstep import LockStepPlan, plan_for_config, price_lock_step, summary
from islands_kit.projection.seed_scale import ideal_link, seed_scale_projection

__all__ = ["DecoupledPlan", "DecoupledResult", "LockStepPlan", "decoupled_plan_for_config", "ideal_link",
           "plan_for_config", "price_decoupled", "price_lock_step", "seed_scale_projection", "summary"]
