"""DiLoCo with one replica (M = 1, ``presets.TWO_SITE_M1_CONTROL``): with outer lr 1, no momentum and no overlap it
is the replica trained alone (the outer step then only hands the replica its own weights back), streaming fragments
included; with Nesterov it is not; no byte crosses a link; and the control runs end to end from the preset."""
from __future__ import annotations

import math

import pytest
import torch
from test_sync import batches, flat, make_replicas, train

from islands_kit.comm.transport import LocalTransport
from islands_kit.config import SyncConfig, apply_overrides
from islands_kit.config.presets import TWO_SITE_M1_CONTROL, get_preset, two_site_m1_control
from islands_kit.run import run_experiment
from islands_kit.sync.base import strided_fragments
from islands_kit.sync.diloco import DiLoCo
from islands_kit.sync.diloco_spec import DiLoCoConfig


def _one_replica(outer_lr: float, momentum: float, tau: int, merge: str = "alpha"):
    models = make_replicas(1)
    cfg = SyncConfig(strategy="diloco", H=3, n_fragments=2, tau=tau, codec="fp32", error_feedback=False,
                     diloco=DiLoCoConfig(outer_lr=outer_lr, outer_momentum=momentum, merge=merge))
    frags = strided_fragments(models[0].block_param_names(), models[0].extra_param_names(), 2)
    transport = LocalTransport(1)
    strat = DiLoCo(models, transport, frags, cfg, seed=0)
    train(models, strat, batches(1, 10))
    ev = strat.eval_state()
    return models[0], torch.cat([ev[n].reshape(-1) for n, _ in models[0].named_parameters()]), strat, transport


def _alone():
    models = make_replicas(1)
    opt = torch.optim.SGD(models[0].parameters(), lr=0.1)
    for batch in batches(1, 10):
        x, y = batch[0]
        ((models[0](x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
    return flat(models[0])


@pytest.mark.parametrize("tau, merge", [(0, "alpha"), (1, "keep_local")])
def test_one_replica_plain_averaging_is_training_alone(tau, merge):
    model, deployed, strat, transport = _one_replica(1.0, 0.0, tau, merge)
    alone = _alone()
    # θ_g − (θ_g − θ_1) is θ_1 up to the rounding of the two subtractions
    assert torch.allclose(flat(model), alone, atol=1e-6)
    assert torch.allclose(deployed, alone, atol=1e-6)
    assert strat.n_outer == [4, 4]  # 10 steps, H = 3: offsets 2 and 0 sync 3 times each, then the final flush
    assert transport.ledger.bytes() == 0  # one replica: no collective sends a byte


def test_one_replica_with_nesterov_is_not_training_alone():
    _, deployed, _, transport = _one_replica(0.7, 0.9, 0)
    assert (deployed - _alone()).abs().max() > 1e-3
    assert transport.ledger.bytes() == 0


@pytest.mark.slow
def test_m1_control_end_to_end():
    """The preset control: site A alone with the global batch of 40; plain averaging equals the same island trained
    without DiLoCo (sync.strategy=ddp on one island: no collective), Nesterov moves the number."""
    base = apply_overrides(get_preset("two_site", "smoke"), {**TWO_SITE_M1_CONTROL, "threads": 1})
    assert [i.batch_size for i in base.islands] == [40] and base.sync.strategy == "diloco"
    plain = {"sync.diloco.outer_lr": "1.0", "sync.diloco.outer_momentum": "0.0", "sync.tau": "0", "sync.codec": "fp32",
             "sync.diloco.final_codec": "fp32"}
    m1 = run_experiment(apply_overrides(base, plain))
    alone = run_experiment(apply_overrides(base, {"sync.strategy": "ddp"}))
    nesterov = run_experiment(apply_overrides(base, {**plain, "sync.diloco.outer_lr": "0.7",
                                                     "sync.diloco.outer_momentum": "0.9"}))
    assert m1.final_val_bpb == pytest.approx(alone.final_val_bpb, rel=1e-6)
    assert abs(nesterov.final_val_bpb - alone.final_val_bpb) > 1e-3 and math.isfinite(nesterov.final_val_bpb)
    assert m1.cross_site_bytes == nesterov.cross_site_bytes == m1.ddp_equivalent_bytes == 0
    assert m1.tokens == alone.tokens == run_experiment(get_preset("two_site", "smoke")).tokens  # the same budget


def test_m1_control_keeps_the_presets_site_a():
    for preset in ("demo", "gpu"):
        site_a = get_preset("two_site", preset).islands[0]
        cfg = apply_overrides(get_preset("two_site", preset), two_site_m1_control(preset))
        assert len(cfg.islands) == 1
        assert (cfg.islands[0].hardware, cfg.islands[0].dp_ranks) == (site_a.hardware, site_a.dp_ranks)
        assert cfg.islands[0].batch_size == sum(i.batch_size for i in get_preset("two_site", preset).islands)
