"""The averaging rules of sync/averaging.py (one implementation for lock-step and decoupled DiLoCo): by hand and
against the formula written out, radial-directional equal to the mean where the replicas agree, and the lock-step
option ``sync.diloco.average`` end to end (different from the mean, deterministic, priced as its all-gather)."""
from __future__ import annotations

import math

import pytest
import torch
from test_sync import batches, make_replicas, train

from islands_kit.comm.transport import LocalTransport, weighted_mean
from islands_kit.config import ConfigError, SyncConfig, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.run import run_experiment
from islands_kit.sync.averaging import combine
from islands_kit.sync.base import strided_fragments
from islands_kit.sync.diloco import DiLoCo
from islands_kit.sync.diloco_spec import DiLoCoConfig


def test_combine_by_hand():
    d1, d2 = torch.tensor([3.0, 0.0]), torch.tensor([0.0, 4.0])
    # weighted mean, weights 3:2
    assert torch.allclose(combine([d1, d2], [3.0, 2.0], "mean"), torch.tensor([1.8, 1.6]))
    # radial-directional, equal weights: radius (3 + 4) / 2 = 3.5 along the mean of the unit vectors (1, 1) / 2
    rd = combine([d1, d2], [1.0, 1.0], "radial_directional")
    assert torch.allclose(rd, 3.5 * torch.tensor([1.0, 1.0]) / math.sqrt(2.0))
    # weights 3:2: radius (9 + 8) / 5 = 3.4, direction (3/5, 2/5) normalised
    rd = combine([d1, d2], [3.0, 2.0], "radial_directional")
    u = torch.tensor([0.6, 0.4])
    assert torch.allclose(rd, 3.4 * u / u.norm())
    # a zero outer gradient counts in the radius and has no direction: radius 3 / 2 along d1
    assert torch.allclose(combine([d1, torch.zeros(2)], [1.0, 1.0], "radial_directional"), torch.tensor([1.5, 0.0]))
    with pytest.raises(ValueError, match="positive weight"):
        combine([d1], [0.0], "mean")
    with pytest.raises(ValueError, match="average: must be one of mean|radial_directional"):
        combine([d1], [1.0], "median")


def test_radial_directional_equals_the_formula_on_random_vectors():
    g = torch.Generator().manual_seed(3)
    deltas = [torch.randn(50, generator=g) * s for s in (0.5, 1.0, 3.0)]
    w = torch.tensor([300.0, 200.0, 100.0])
    D = torch.stack(deltas).double()  # (n, numel)
    norms = D.norm(dim=1)  # (n,)
    radius = (w.double() * norms).sum() / w.sum()
    u = (w.double()[:, None] * D / norms[:, None]).sum(0)
    expected = radius * u / u.norm()
    got = combine(deltas, w.tolist(), "radial_directional")
    assert torch.allclose(got.double(), expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, combine(deltas, w.tolist(), "mean"), atol=1e-3)  # disagreeing: not the mean
    # the mean is the transport's all-reduce arithmetic, bit for bit
    assert torch.equal(combine(deltas, w.tolist(), "mean"), weighted_mean(deltas, w.tolist()))


def test_identical_outer_gradients_give_the_mean():
    d = torch.randn(40, generator=torch.Generator().manual_seed(0))
    rd = combine([d, d.clone(), d.clone()], [3.0, 2.0, 1.0], "radial_directional")
    assert torch.allclose(rd, combine([d, d, d], [3.0, 2.0, 1.0], "mean"), atol=1e-6)
    assert torch.allclose(rd, d, atol=1e-6)


def _lockstep(average: str, n: int = 2, same_data: bool = False):
    """Two replicas, streaming DiLoCo (2 fragments, H = 3), Nesterov outer steps, 9 SGD steps."""
    models = make_replicas(n)
    data = batches(n, 9)
    if same_data:
        data = [{i: b[0] for i in range(n)} for b in data]
    cfg = SyncConfig(strategy="diloco", H=3, n_fragments=2, tau=0, codec="fp32", error_feedback=False,
                     diloco=DiLoCoConfig(outer_lr=0.7, outer_momentum=0.9, average=average))
    frags = strided_fragments(models[0].block_param_names(), models[0].extra_param_names(), 2)
    transport = LocalTransport(n)
    strat = DiLoCo(models, transport, frags, cfg, seed=0)
    train(models, strat, data, tokens={0: 4, 1: 6})
    return torch.cat([g.detach() for g in strat.global_params]), transport.ledger


def test_lockstep_radial_directional_differs_from_the_mean_and_is_deterministic():
    rd, rd_ledger = _lockstep("radial_directional")
    mean, mean_ledger = _lockstep("mean")
    assert torch.equal(rd, _lockstep("radial_directional")[0])
    assert not torch.allclose(rd, mean, atol=1e-4)
    # two islands: the all-gather sends each island's payload once each way, as the ring does
    assert rd_ledger.bytes() == mean_ledger.bytes() > 0
    # replicas that see the same data send the same outer gradient: radial-directional is then the mean
    same_rd, _ = _lockstep("radial_directional", same_data=True)
    same_mean, _ = _lockstep("mean", same_data=True)
    assert torch.allclose(same_rd, same_mean, atol=1e-6)


@pytest.mark.slow
def test_lockstep_radial_directional_end_to_end():
    base = apply_overrides(get_preset("two_site", "smoke"), {"threads": 1, "sync.diloco.average": "mean"})
    mean = run_experiment(base)
    rd_cfg = apply_overrides(base, {"sync.diloco.average": "radial_directional"})
    rd = run_experiment(rd_cfg)
    assert math.isfinite(rd.final_val_bpb) and rd.final_val_bpb != mean.final_val_bpb
    assert rd.final_val_bpb == run_experiment(rd_cfg).final_val_bpb
    assert rd.fragment_bytes == mean.fragment_bytes  # two sites: the all-gather costs the ring's bytes


@pytest.mark.parametrize("sets, field", [
    ({"sync.diloco.average": "median"}, "sync.diloco.average"),
    ({"faults.defense": "median", "sync.diloco.average": "radial_directional"}, "sync.diloco.average"),
])
def test_bad_average_settings_name_the_field(sets, field):
    with pytest.raises(ConfigError, match=field):
        apply_overrides(get_preset("two_site", "smoke"), sets)

