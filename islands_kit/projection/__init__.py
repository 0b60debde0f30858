"""Projections without training: what a run would cost on the wire and the clock, priced by the pieces training uses.

  standin.py     islands that cost simulated time but train nothing, and a wire pricing their payloads at the real
                 sizes: the projection runs training's own drivers (train/drivers.py) and strategies on them
  lockstep.py    a lock-step DiLoCo or DDP plan priced by ``LockstepDriver`` on stand-ins (equal to a training run
                 with the same plan; ``plan_for_config`` reads the plan off a config)
  decoupled.py   a Decoupled DiLoCo plan priced by ``DecoupledDriver`` on stand-ins (equal to a training run with the
                 same plan; ``decoupled_plan_for_config`` reads the plan off a config)
  seed_scale.py  the seed run's size (32B MoE, 160 + 160 GPUs): lock-step streaming, decoupled and DDP side by side
"""
from islands_kit.projection.decoupled import DecoupledPlan, DecoupledResult, decoupled_plan_for_config, price_decoupled
from islands_kit.projection.lockstep import LockStepPlan, plan_for_config, price_lock_step, summary
from islands_kit.projection.seed_scale import ideal_link, seed_scale_projection

__all__ = ["DecoupledPlan", "DecoupledResult", "LockStepPlan", "decoupled_plan_for_config", "ideal_link",
           "plan_for_config", "price_decoupled", "price_lock_step", "seed_scale_projection", "summary"]
