"""A fourth experiment and a new strategy through the strategy registry and the experiment table alone: registered
here, run at the smoke preset, taken away again. And the names nobody registered fail with the list of known ones."""
from __future__ import annotations

import math
from typing import Iterator

import pytest
import torch

from islands_kit.config import ConfigError, apply_overrides
from islands_kit.config.experiment_table import ExperimentRow, cells, register_experiment, unregister_experiment
from islands_kit.config.presets import get_preset, preset_dict
from islands_kit.config.strategies import STRATEGY_TRAITS, StrategyTraits
from islands_kit.run import run_experiment
from islands_kit.sync.base import FragmentView, LockstepStrategy
from islands_kit.sync.registry import BuildArgs, StrategySpec, register_strategy, registered, unregister_strategy


class PeriodicMean(LockstepStrategy):
    """The plainest model averaging: every H inner steps each replica is replaced by the token-weighted mean of all."""

    name = "periodic_mean"

    def __init__(self, args: BuildArgs) -> None:
        super().__init__(args.models, args.transport)
        self.H = args.cfg.sync.H
        names = [n for n, _ in next(iter(self.models.values())).named_parameters()]
        self.views = {i: FragmentView(m, names) for i, m in self.models.items()}
        self.tokens = dict.fromkeys(self.ids, 0)
        self.syncs = 0

    def after_inner_step(self, step: int, tokens: dict[int, int]) -> None:
        for i in self.ids:
            self.tokens[i] += tokens.get(i, 0)
        if step % self.H:
            return
        handle = self.transport.all_reduce_tensor("gradients", {i: v.flat() for i, v in self.views.items()},
                                                  {i: float(self.tokens[i]) for i in self.ids})
        for i in self.ids:
            self.views[i].assign(handle.wait(i))
        self.syncs += 1

    def eval_state(self) -> dict[str, torch.Tensor]:
        return dict(self.models[self.ids[0]].state_dict())


TOY_TRAITS = StrategyTraits("periodic_mean", "periodic_mean", "lockstep", "replicas averaged every H steps")
TOY_ROW = ExperimentRow("four_cell", "periodic averaging between four cells", cells(4, batch=10),
                        dict(strategy="periodic_mean", H=4, routing_sync=True), color="#9467bd", marker="v")


@pytest.fixture
def toy() -> Iterator[None]:
    register_strategy(StrategySpec(TOY_TRAITS, PeriodicMean))
    register_experiment(TOY_ROW)
    try:
        yield
    finally:
        unregister_experiment(TOY_ROW.name)
        unregister_strategy(TOY_TRAITS.name)


@pytest.mark.slow  # trains for seconds
def test_a_toy_strategy_and_experiment_run_at_smoke(toy: None, tmp_path) -> None:
    cfg = apply_overrides(get_preset("four_cell", "smoke"), {"threads": 1})
    assert [i.name for i in cfg.islands] == ["cell-0", "cell-1", "cell-2", "cell-3"]
    assert sum(i.batch_size for i in cfg.islands) == sum(i["batch_size"] for i in preset_dict("two_site")["islands"])
    result = run_experiment(cfg, tmp_path / "run")
    assert result["experiment"] == "four_cell" and math.isfinite(result["final_val_bpb"])
    assert result["cross_site_bytes"] > 0  # the replicas' means crossed the link


def test_the_toy_is_gone_after_the_test() -> None:
    assert "periodic_mean" not in registered() and "periodic_mean" not in STRATEGY_TRAITS
    with pytest.raises(ConfigError, match=r"^experiment: must be one of baseline\|two_site\|eight_cell\|hierarchical\|orbital \(got 'four_cell'\)"):
        preset_dict("four_cell")


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"^sync\.strategy: must be one of ddp\|diloco\|butterfly\|hierarchical \(got 'gossip'\)"):
        apply_overrides(get_preset("two_site"), {"sync.strategy": "gossip"})
    with pytest.raises(ConfigError, match=r"^experiment: must be one of baseline\|two_site\|eight_cell\|hierarchical\|orbital \(got 'ring'\)"):
        get_preset("ring")
    with pytest.raises(ConfigError, match=r"^experiment: must be one of baseline\|two_site\|eight_cell"):
        apply_overrides(get_preset("two_site"), {"experiment": "ring"})
    with pytest.raises(ConfigError, match=r"^sync\.mode: decoupled needs sync\.strategy=diloco \(got 'butterfly'\)"):
        apply_overrides(get_preset("eight_cell"), {"sync.mode": "decoupled"})


def test_capabilities_not_names_decide_the_rules() -> None:
    """A registered strategy without a global state refuses preemption; one that is not synchronous cannot be the
    reference experiment's."""
    with pytest.raises(ConfigError, match=r"^faults\.preempt_island: preemption needs sync\.strategy=ddp\|diloco "):
        apply_overrides(get_preset("eight_cell"), {"faults.preempt_island": "1", "faults.preempt_steps": "2"})
    with pytest.raises(ConfigError, match="^sync.strategy: the baseline experiment is synchronous: must be ddp"):
        apply_overrides(get_preset("baseline"), {"sync.strategy": "diloco"})
