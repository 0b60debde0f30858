"""The features that attach to a run through its hook points (``sync/hooks.py``), in one place. Each looks at the
config and registers on the points it needs, or on none:

  faults.attach      an adversarial island and a defence (faults.attack, faults.defense): around each merge, the
                     checkpoint's adversary and defense, result.json's faults_report
  faults.seu.attach  a bit flip in one replica's weights (faults.upset_island): after a step, result.json's upsets
  orbital.attach     the orbit (train/orbit.py): eclipse throttling of each step (link.orbit.eclipse), a run
                     that flies (link.schedule=orbit) gets result.json's orbit section

A feature of one's own is one more function of that shape in ``FEATURES``: nothing in the loop changes.
"""
from __future__ import annotations

from typing import Callable, Sequence

from islands_kit import faults
from islands_kit.config import ExperimentConfig
from islands_kit.faults import seu
from islands_kit.sync.hooks import Hooks
from islands_kit.train import orbit as orbital

Feature = Callable[[Hooks, ExperimentConfig, Sequence[int]], None]  # (the run's hooks, its config, local islands)
FEATURES: list[Feature] = [faults.attach, seu.attach, orbital.attach]


def run_hooks(cfg: ExperimentConfig, local_islands: Sequence[int]) -> Hooks:
    """The hook points of a run of ``cfg`` on the islands this process holds, every feature attached."""
    hooks = Hooks()
    for attach in FEATURES:
        attach(hooks, cfg, local_islands)
    return hooks
