"""The kit extended from outside, as a user would: this file defines a strategy of its own (a ring that averages each
fragment with one neighbour, over a ``Topology`` and the transport's directed step), its settings section
(``sync.ring.*``) with a rule, and an experiment row, registers them, and runs the experiment at the smoke preset
through the entry points every experiment goes through (``run_experiment`` and the CLI). Nothing in config/, sync/ or
any table is edited; after the test every list is as it was."""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Iterator

import pytest
import torch

from islands_kit.cli import main
from islands_kit.comm.codecs import get_codec
from islands_kit.comm.transport import LocalTransport
from islands_kit.config import EXPERIMENTS, ConfigError, SyncConfig, apply_overrides
from islands_kit.config.experiment_table import ExperimentRow, cells, register_experiment, unregister_experiment
from islands_kit.config.presets import get_preset
from islands_kit.config.strategies import StrategyTraits, strategy_names
from islands_kit.config.sync import SECTIONS, Section
from islands_kit.notebooks import comparison_experiments
from islands_kit.rules import _check, _check_fields
from islands_kit.run import run_experiment
from islands_kit.sync.base import FragmentView, LockstepStrategy, strided_fragments
from islands_kit.sync.registry import BuildArgs, StrategySpec, register_strategy, registered, unregister_strategy
from islands_kit.sync.topology import Topology, ring


@dataclass
class RingConfig:
    """The ring's knobs (``sync.ring.*``)."""

    weight: float = 0.5  # w: a merge sets θ_i ← (1 − w) θ_i + w θ_(i − hop), the neighbour's fragment as sent
    hop: int = 1  # island i sends to i + hop and hears from i − hop

    def __post_init__(self) -> None:
        _check_fields(self, "sync.ring.")
        _check(0 < self.weight <= 1, "sync.ring.weight", "must be in (0, 1]", self.weight)


class RingAverage(LockstepStrategy):
    """Every H inner steps, fragment p of every island goes to its ring neighbour (one directed step of the transport,
    fp32) and each island mixes in what it received: θ_i[p] ← (1 − w) θ_i[p] + w θ_(i − hop)[p]. Fragment p syncs
    at step offsets p · H / P, so the fragments take turns on the wire."""

    name = "ring"

    def __init__(self, args: BuildArgs) -> None:
        super().__init__(args.models, args.transport)
        s = args.cfg.sync
        self.H, self.w = s.H, s.ring.weight
        self.topology: Topology = ring(args.transport.n_islands, s.ring.hop)
        self.views = {i: [FragmentView(m, names) for names in args.fragments] for i, m in args.models.items()}
        self.P = len(args.fragments)
        self.codec = get_codec("fp32")
        self.syncs = [0] * self.P

    def after_inner_step(self, step: int, tokens: dict[int, int]) -> None:
        for p in range(self.P):
            if step % self.H == (p * self.H) // self.P:
                self.mix(p)

    @torch.no_grad()
    def mix(self, p: int) -> None:
        payloads = {i: self.codec.encode(self.views[i][p].flat()) for i in self.ids}
        handle = self.transport.send_recv("fragments", payloads, self.topology.targets(self.syncs[p]))
        for i in self.ids:
            v = self.views[i][p]
            v.assign((1 - self.w) * v.flat() + self.w * handle.wait(i).to(v.device))
        self.syncs[p] += 1

    def outer_steps_per_fragment(self) -> list[int] | None:
        return list(self.syncs)

    def eval_state(self) -> dict[str, torch.Tensor]:
        return dict(self.models[self.ids[0]].state_dict())

    def state_dict(self) -> dict[str, Any]:
        return {"syncs": list(self.syncs)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.syncs = list(d["syncs"])


RING = StrategySpec(StrategyTraits("ring", "ring", "lockstep", "ring averaging (each fragment with one neighbour)",
                                   own_replica=True),
                    RingAverage, (Section("ring", RingConfig, "ring-only knobs (merge weight, hop)"),))
RING_CELLS = ExperimentRow("ring_cells", "ring averaging between four cells", cells(4, batch=10),
                           dict(strategy="ring", H=4, n_fragments=2, routing_sync=True, ring=dict(weight=0.5)),
                           color="#8c564b", marker="P", notebook="ring_cells")


@pytest.fixture
def ring_kit() -> Iterator[None]:
    register_strategy(RING)
    register_experiment(RING_CELLS)
    try:
        yield
    finally:
        unregister_experiment(RING_CELLS.name)
        unregister_strategy(RING.name)


def test_the_registered_strategy_and_row_reach_every_list_and_the_config(ring_kit: None) -> None:
    assert "ring" in strategy_names() and "ring" in registered() and "ring" in SECTIONS
    assert "ring_cells" in EXPERIMENTS and EXPERIMENTS[-1] == "ring_cells"  # EXPERIMENTS was imported before
    assert "ring_cells" in comparison_experiments([])  # a row with a notebook on the shared link joins comparisons
    cfg = get_preset("ring_cells", "smoke")
    assert cfg.sync.ring == RingConfig(weight=0.5) and cfg.to_dict()["sync"]["ring"] == {"weight": 0.5, "hop": 1}
    assert apply_overrides(cfg, {"sync.ring.hop": "-1"}).sync.ring.hop == -1  # --set reaches the section
    with pytest.raises(ConfigError, match=r"^sync\.ring\.weight: must be in \(0, 1\] \(got 1\.5\)"):
        apply_overrides(cfg, {"sync.ring.weight": "1.5"})
    with pytest.raises(ConfigError, match=r"^sync\.ring\.wieght: unknown key \(did you mean sync\.ring\.weight"):
        apply_overrides(cfg, {"sync.ring.wieght": "0.3"})
    with pytest.raises(ConfigError, match="^faults.preempt_island: preemption needs sync.strategy=ddp|diloco "):
        apply_overrides(cfg, {"faults.preempt_island": "1", "faults.preempt_steps": "2"})  # no global state
    assert SyncConfig(strategy="ring").ring == RingConfig()


def test_everything_is_as_it_was_after_the_test() -> None:
    assert "ring" not in strategy_names() and "ring" not in registered() and "ring" not in SECTIONS
    assert "ring_cells" not in EXPERIMENTS and "ring" not in {f.name for f in dataclasses.fields(SyncConfig)}
    with pytest.raises(ConfigError, match=r"^sync\.strategy: must be one of ddp\|diloco\|butterfly\|hierarchical \(got 'ring'\)"):
        SyncConfig(strategy="ring")


def test_a_ring_step_mixes_each_island_with_its_source(ring_kit: None) -> None:
    """One sync of the ring on two-parameter replicas: island i takes (1 − w) of its own and w of island i − 1's
    fragment, as sent, and the wire carries every fragment once, to its target."""
    cfg = apply_overrides(get_preset("ring_cells", "smoke"), {"sync.ring.weight": "0.25", "sync.n_fragments": "1"})
    models = {i: torch.nn.Linear(1, 1) for i in range(4)}
    for i, m in models.items():
        torch.nn.init.constant_(m.weight, float(i))
        torch.nn.init.constant_(m.bias, 10.0 * i)
    transport = LocalTransport(4)
    s = RING.build(BuildArgs(cfg, models, transport, strided_fragments([["weight", "bias"]], {}, 1), 1.0))
    s.after_inner_step(cfg.sync.H, {i: 1 for i in range(4)})
    for i in range(4):
        src = (i - 1) % 4
        assert models[i].weight.item() == pytest.approx(0.75 * i + 0.25 * src)
        assert models[i].bias.item() == pytest.approx(0.75 * 10 * i + 0.25 * 10 * src)
    assert transport.ledger.bytes("fragments") == 4 * get_codec("fp32").encode(torch.zeros(2)).nbytes
    assert sorted((a, b) for *_, a, b, _ in transport.ledger.timeline) == [(0, 1), (1, 2), (2, 3), (3, 0)]


@pytest.mark.slow  # two smoke runs (seconds)
def test_the_ring_experiment_runs_at_smoke_through_run_experiment_and_the_cli(ring_kit: None, tmp_path) -> None:
    cfg = apply_overrides(get_preset("ring_cells", "smoke"), {"threads": 1})
    res = run_experiment(cfg, tmp_path / "run")
    assert res["experiment"] == "ring_cells" and res["strategy"] == "ring" and math.isfinite(res["final_val_bpb"])
    # 24 steps, H = 4, two fragments: 6 syncs each, every one sending each cell's fragment once along the ring
    assert res["outer_steps_per_fragment"] == [6, 6]
    assert res["fragment_bytes"] > 0 and res["gradient_bytes"] == 0
    assert main(["run", "ring_cells", "--preset", "smoke", "--set", "threads=1", "--out", str(tmp_path / "cli")]) == 0
    cli = json.loads((tmp_path / "cli" / "result.json").read_text())
    assert cli["final_val_bpb"] == res["final_val_bpb"] and cli["ledger"] == json.loads(json.dumps(res["ledger"]))
