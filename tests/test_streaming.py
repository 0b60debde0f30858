"""Streaming DiLoCo's merge arithmetic against an independent hand-written reference (P > 1, τ > 0, α > 0, unequal
3:2 token weights, Nesterov outer steps) and the published options (keep-local merge, eager updates, post-local-SGD
warm start, outer-momentum warm-up, a lossless final sync); fragment membership for every preset model; what is
deployed before a fragment's first sync; inner-optimizer state across an outer sync."""
from __future__ import annotations

import copy

import pytest
import torch
from vector_replicas import Vec, inner_direction, sync

from islands_kit.comm.transport import LocalTransport
from islands_kit.config import ConfigError, SyncConfig
from islands_kit.config.presets import PRESETS, get_preset
from islands_kit.model import ByteTransformer
from islands_kit.sync.base import strided_fragments
from islands_kit.sync.diloco import DiLoCo
from islands_kit.sync.schedule import fragment_offsets

P, H, DIM = 3, 6, 5
TOKENS = {0: 3, 1: 2}  # the seed's 3:2 sites


def run_strategy(cfg: SyncConfig, steps: int, lr: float = 0.05) -> tuple[DiLoCo, dict[int, Vec]]:
    init = torch.randn(P, DIM, generator=torch.Generator().manual_seed(7))
    models = {i: Vec(init) for i in TOKENS}
    strat = DiLoCo(models, LocalTransport(2), [[f"b{p}"] for p in range(P)], cfg, seed=0)
    for t in range(1, steps + 1):
        with torch.no_grad():
            for i, m in models.items():
                for p in range(P):
                    getattr(m, f"b{p}").sub_(lr * inner_direction(i, t, P, DIM)[p])
        strat.after_inner_step(t, TOKENS)
    strat.finalize(steps)
    return strat, models


def reference(cfg: SyncConfig, steps: int, lr: float = 0.05) -> tuple[list[torch.Tensor], dict[int, torch.Tensor]]:
    """Streaming DiLoCo written out step by step from the papers' description (no code shared with DiLoCo)."""
    init = torch.randn(P, DIM, generator=torch.Generator().manual_seed(7))
    theta = {i: init.clone() for i in TOKENS}  # replicas (P, DIM)
    g = init.clone()  # global copy
    buf = [None] * P  # Nesterov momentum buffers
    n_outer = [0] * P
    since = {i: [0] * P for i in TOKENS}
    pending = []  # (lands_at, p, mean_delta, {island: replica as sent})
    last_mean: list = [None] * P
    offs = [round((p + 1) * H / P) % H for p in range(P)]
    W = sum(TOKENS.values())

    def outer_step(p, d):
        mu = cfg.diloco.outer_momentum
        if cfg.diloco.outer_momentum_warmup:
            mu *= min(1.0, n_outer[p] / cfg.diloco.outer_momentum_warmup)
        if mu > 0 or buf[p] is not None:
            buf[p] = d.clone() if buf[p] is None else mu * buf[p] + d
            upd = d + mu * buf[p] if cfg.diloco.nesterov else buf[p]
        else:
            upd = d
        g[p] = g[p] - cfg.diloco.outer_lr * upd
        n_outer[p] += 1

    def land(p, d, sent):
        outer_step(p, d)
        last_mean[p] = d
        for i in TOKENS:
            if sent is not None:
                theta[i][p] = g[p] + (theta[i][p] - sent[i])
            else:
                theta[i][p] = cfg.diloco.alpha * theta[i][p] + (1 - cfg.diloco.alpha) * g[p]

    def send(t, p, lands_at):
        deltas = {i: g[p] - theta[i][p] for i in TOKENS}
        w = {i: since[i][p] for i in TOKENS}
        for i in TOKENS:
            since[i][p] = 0
        d = sum(w[i] * deltas[i] for i in TOKENS) / sum(w.values())
        if cfg.diloco.eager and lands_at > t:
            for i in TOKENS:
                wi = w[i] / sum(w.values())
                est = wi * deltas[i] + (0 if last_mean[p] is None else (1 - wi) * last_mean[p])
                theta[i][p] = g[p] - cfg.diloco.outer_lr * est
        keep = cfg.diloco.merge == "keep_local" or cfg.diloco.eager
        pending.append((lands_at, p, d, {i: theta[i][p].clone() for i in TOKENS} if keep else None))

    def due(t):
        for item in [x for x in pending if x[0] <= t]:
            pending.remove(item)
            land(item[1], item[2], item[3])

    for t in range(1, steps + 1):
        for i in TOKENS:
            theta[i] = theta[i] - lr * inner_direction(i, t, P, DIM)
            for p in range(P):
                since[i][p] += TOKENS[i]
        due(t)
        if t <= cfg.diloco.warm_start_steps:
            for p in range(P):
                d = sum(TOKENS[i] * (g[p] - theta[i][p]) for i in TOKENS) / W
                g[p] = g[p] - d
                for i in TOKENS:
                    theta[i][p] = g[p].clone()
                    since[i][p] = 0
            continue
        for p in range(P):
            if t % H == offs[p]:
                send(t, p, t + cfg.tau)
        due(t)
    for item in sorted(pending, key=lambda x: (x[0], x[1])):
        land(item[1], item[2], item[3])
    pending.clear()
    for p in range(P):
        if any(since[i][p] for i in TOKENS):
            send(steps, p, steps)
            due(steps)
    return [g[p] for p in range(P)], theta


BASE = dict(strategy="diloco", H=H, n_fragments=P, codec="fp32", error_feedback=False, outer_lr=0.7,
            outer_momentum=0.9, nesterov=True)


@pytest.mark.parametrize("opts", [
    dict(tau=0, alpha=0.0),
    dict(tau=2, alpha=0.5),
    dict(tau=3, alpha=0.25, outer_momentum=0.0, outer_lr=1.0),
    dict(tau=2, merge="keep_local"),
    dict(tau=2, eager=True),
    dict(tau=1, alpha=0.5, outer_momentum_warmup=2),
    dict(tau=1, merge="keep_local", warm_start_steps=4),
], ids=["tau0", "tau2-alpha.5", "tau3-alpha.25-sgd", "keep_local", "eager", "momentum-warmup", "warm-start"])
def test_streaming_matches_hand_written_reference(opts):
    cfg = sync(**{**BASE, **opts})
    steps = 4 * H + 1  # the run ends mid-window, so the final flush has work to do
    strat, models = run_strategy(cfg, steps)
    g_ref, theta_ref = reference(cfg, steps)
    for p in range(P):
        torch.testing.assert_close(strat.global_params[p].detach(), g_ref[p], atol=1e-5, rtol=1e-5)
        for i in TOKENS:
            torch.testing.assert_close(getattr(models[i], f"b{p}").detach(), theta_ref[i][p], atol=1e-5, rtol=1e-5)


def test_reference_notices_a_wrong_weighting():
    """The reference is sensitive to the 3:2 weights: equal weights give a different global model."""
    cfg = sync(**{**BASE, "tau": 2, "alpha": 0.5})
    strat, _ = run_strategy(cfg, 2 * H)
    global TOKENS
    saved, TOKENS = TOKENS, {0: 1, 1: 1}
    try:
        g_eq, _ = reference(cfg, 2 * H)
    finally:
        TOKENS = saved
    assert not torch.allclose(strat.global_params[0].detach(), g_eq[0], atol=1e-4)


def test_keep_local_with_tau0_is_the_plain_merge_bit_for_bit():
    a, ma = run_strategy(sync(**{**BASE, "tau": 0, "alpha": 0.0}), 3 * H)
    b, mb = run_strategy(sync(**{**BASE, "tau": 0, "merge": "keep_local"}), 3 * H)
    for p in range(P):
        assert torch.equal(a.global_params[p], b.global_params[p])
        assert torch.equal(ma[0].b0, mb[0].b0)


def test_options_name_their_field():
    with pytest.raises(ConfigError, match="sync.diloco.alpha"):
        sync(**{**BASE, "merge": "keep_local", "alpha": 0.5})
    with pytest.raises(ConfigError, match="sync.diloco.eager"):
        sync(**{**BASE, "eager": True, "tau": 0})
    with pytest.raises(ConfigError, match="sync.diloco.final_codec"):
        sync(**{**BASE, "final_codec": "int3"})
    with pytest.raises(ConfigError, match="sync.diloco.merge"):
        sync(**{**BASE, "merge": "blend"})


def test_lossless_final_sync_lands_the_exact_average():
    """With int4 outer gradients the final flush's quantisation error stays in the deployed model unless the last sync
    is lossless: with final_codec=fp32 (outer lr 1, no momentum) the final global model is exactly the 3:2 average of
    the replicas' last states. (Error feedback off here: with it on, the lossless last sync also folds the carried
    residuals in, which corrects the earlier syncs' rounding rather than reproducing the plain average.)"""
    common = {**BASE, "codec": "int4", "error_feedback": False, "tau": 0, "outer_lr": 1.0, "outer_momentum": 0.0}
    steps = 2 * H + 2  # two steps after the last scheduled sync: the final flush carries them
    for final_codec, exact in (("fp32", True), ("", False)):
        init = torch.randn(P, DIM, generator=torch.Generator().manual_seed(7))
        models = {i: Vec(init) for i in TOKENS}
        strat = DiLoCo(models, LocalTransport(2), [[f"b{p}"] for p in range(P)],
                       sync(**common, final_codec=final_codec), seed=0)
        for t in range(1, steps + 1):
            with torch.no_grad():
                for i, m in models.items():
                    for p in range(P):
                        getattr(m, f"b{p}").sub_(0.05 * inner_direction(i, t, P, DIM)[p])
            strat.after_inner_step(t, TOKENS)
        before = {i: [getattr(models[i], f"b{p}").detach().clone() for p in range(P)] for i in TOKENS}
        strat.finalize(steps)
        # fragment 2 (offset 0) last synced at step 12: the final flush carries steps 13-14
        avg = (3 * before[0][2] + 2 * before[1][2]) / 5
        close = torch.allclose(strat.global_params[2].detach(), avg, atol=1e-6)
        assert close == exact, final_codec


def test_unsynced_fragment_is_deployed_from_the_local_replica():
    cfg = sync(**{**BASE, "tau": 0, "alpha": 0.0})
    init = torch.randn(P, DIM, generator=torch.Generator().manual_seed(7))
    models = {i: Vec(init) for i in TOKENS}
    strat = DiLoCo(models, LocalTransport(2), [[f"b{p}"] for p in range(P)], cfg, seed=0)
    offs = fragment_offsets(H, P)  # [2, 4, 0]: fragment 0 syncs first
    for t in range(1, offs[0] + 1):
        with torch.no_grad():
            for i, m in models.items():
                m.b0.sub_(0.1 * (i + 1))
                m.b1.sub_(0.1 * (i + 1))
        strat.after_inner_step(t, TOKENS)
    ev = strat.eval_state()
    assert torch.equal(ev["b0"], strat.global_params[0].detach())  # synced: the global copy
    assert torch.equal(ev["b1"], models[0].b1.detach())  # not yet: island 0's own copy, not the initial weights
    assert not torch.equal(ev["b1"], init[1])


@pytest.mark.parametrize("preset", PRESETS)
def test_fragment_membership_for_every_preset_model(preset):
    cfg = get_preset("two_site", preset)
    with torch.device("meta"):  # names only: the gpu model need not be allocated
        model = ByteTransformer(cfg.model)
    for n_frag in range(1, min(cfg.model.n_layers, 4) + 1):
        frags = strided_fragments(model.block_param_names(), model.extra_param_names(), n_frag)
        listed = [n for f in frags for n in f]
        assert sorted(listed) == sorted(n for n, _ in model.named_parameters())  # each parameter exactly once
        assert "tok_emb.weight" in frags[0]
        assert "lm_head.weight" in frags[-1] and "norm_f.weight" in frags[-1]
        for l in range(cfg.model.n_layers):
            assert f"blocks.{l}.attn.wq.weight" in frags[l % n_frag] or any(
                n.startswith(f"blocks.{l}.") for n in frags[l % n_frag])


def test_inner_optimizer_state_is_untouched_by_an_outer_sync():
    """The choice: an outer sync replaces the replica's parameters but leaves each island's inner optimizer state
    (AdamW moments, Shampoo's Kronecker factors and grafting state) as it was — the statistics describe the local
    loss geometry, which one averaging step barely moves, and restarting them would cost the warm-up again."""
    from islands_kit.config import OptimConfig
    from islands_kit.optim.build import build_optimizer

    init = torch.randn(P, DIM, generator=torch.Generator().manual_seed(7))
    models = {i: Vec(init) for i in TOKENS}
    ocfg = OptimConfig(name="shampoo", start_preconditioning_step=1, precondition_frequency=1)
    opts = {i: build_optimizer(m, ocfg) for i, m in models.items()}
    strat = DiLoCo(models, LocalTransport(2), [[f"b{p}"] for p in range(P)],
                   sync(**{**BASE, "tau": 0}), seed=0)
    for t in range(1, fragment_offsets(H, P)[0] + 1):
        for i, m in models.items():
            loss = sum(((getattr(m, f"b{p}") - inner_direction(i, t, P, DIM)[p]) ** 2).sum() for p in range(P))
            loss.backward()
            opts[i].step()
            opts[i].zero_grad()
        snap = {i: copy.deepcopy(opts[i].state_dict()) for i in models}
        before = models[0].b0.detach().clone()
        strat.after_inner_step(t, TOKENS)
    assert not torch.equal(models[0].b0.detach(), before)  # the sync did replace the parameters
    for i in models:
        after = opts[i].state_dict()
        flat_a = [v for s in after["state"].values() for v in _tensors(s)]
        flat_b = [v for s in snap[i]["state"].values() for v in _tensors(s)]
        assert flat_a and len(flat_a) == len(flat_b)
        assert all(torch.equal(a, b) for a, b in zip(flat_a, flat_b))


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def test_qsr_windows_by_hand():
    from islands_kit.sync.schedule import qsr_windows, streaming_schedule, sync_schedule

    def lr_at(t: int) -> float:
        return 0.01 if t < 10 else 0.001

    # (0.02 / 0.01)^2 = 4 = H_base while the lr is high; (0.02 / 0.001)^2 = 400 once it has dropped
    assert qsr_windows(4, 0.02, lr_at, 20) == [(0, 4), (4, 4), (8, 4), (12, 400)]
    # alpha small enough that H_base always wins: the constant schedule exactly
    wins = qsr_windows(8, 1e-9, lr_at, 40)
    assert wins == [(0, 8), (8, 8), (16, 8), (24, 8), (32, 8)]
    assert sync_schedule(8, 2, 40, wins) == streaming_schedule(8, 2, 40)
    # P = 2 in windows (0, 4) and (4, 6): offsets round(2/1)=2 -> step 2, 0 -> step 4; then 4+3 = 7 and 4+6 = 10
    assert sync_schedule(4, 2, 10, [(0, 4), (4, 6)]) == [(2, 0), (4, 1), (7, 0), (10, 1)]


@pytest.mark.slow
def test_qsr_with_h_base_always_winning_is_the_constant_schedule():
    from islands_kit.config import apply_overrides
    from islands_kit.config.presets import get_preset
    from islands_kit.run import run_experiment

    cfg = apply_overrides(get_preset("two_site", "smoke"), {"threads": 1, "progress": False})
    const = run_experiment(cfg)
    qsr = run_experiment(apply_overrides(cfg, {"sync.diloco.h_schedule": "qsr", "sync.diloco.qsr_alpha": 1e-9}))
    assert qsr["val_curve"] == const["val_curve"] and qsr["cross_site_bytes"] == const["cross_site_bytes"]
    # a large alpha stretches the windows as the lr decays: fewer syncs, fewer bytes, different numbers
    long = run_experiment(apply_overrides(cfg, {"sync.diloco.h_schedule": "qsr", "sync.diloco.qsr_alpha": 0.02}))
    assert long["fragment_bytes"] < const["fragment_bytes"]
    assert long["final_val_bpb"] != const["final_val_bpb"]


@pytest.mark.parametrize("sets, field", [
    ({"sync.diloco.h_schedule": "cubic"}, "sync.diloco.h_schedule"),
    ({"sync.diloco.h_schedule": "qsr"}, "sync.diloco.qsr_alpha"),
])
def test_bad_h_schedule_names_the_field(sets, field):
    from islands_kit.config import ConfigError, apply_overrides
    from islands_kit.config.presets import get_preset

    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        apply_overrides(get_preset("two_site", "smoke"), sets)
