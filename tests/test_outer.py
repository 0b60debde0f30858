"""The outer-optimizer seam (``optim/outer.py``): the update rule against SNOO's equations written out by hand, the
records each step makes, SNOO against its two references (η = 1, μ = 0 is the inner optimizer alone; SNOO on one
island is DiLoCo with one replica, one fragment, τ = 0 and lossless outer gradients), the outer optimizer handed to
DiLoCo as an argument, and SNOO in a run (result.json's ``outer_log``, the identity on the baseline)."""
from __future__ import annotations

import contextlib
import math

import pytest
import torch
from test_sync import batches, flat, make_replicas, train
from torch import nn

from islands_kit.comm.transport import LocalTransport
from islands_kit.config import ConfigError, SyncConfig, apply_overrides
from islands_kit.config.model import OUTER_OPTIMIZERS
from islands_kit.config.presets import get_preset
from islands_kit.optim.build import snoo_params
from islands_kit.optim.outer import (
    OUTER_MAKERS,
    OuterStep,
    Snoo,
    nesterov_sgd,
    register_outer_optimizer,
    unregister_outer_optimizer,
)
from islands_kit.run import run_experiment
from islands_kit.sync.base import strided_fragments
from islands_kit.sync.diloco import DiLoCo
from islands_kit.sync.diloco_spec import DiLoCoConfig
from islands_kit.sync.schedule import fragment_offsets


@pytest.mark.parametrize("nesterov", [True, False])
def test_outer_step_is_snoos_update_with_the_momentum_ramp(nesterov):
    """b_t = μ_t b_{t-1} + s_t; w ← w − η (μ_t b_t + s_t) (Nesterov) or w − η b_t, μ_t = μ min(1, t / K); the
    buffer starts (b = s) at the first step with μ_t > 0, as torch's SGD starts it."""
    g = torch.Generator().manual_seed(3)
    w0 = torch.randn(7, 3, generator=g)
    deltas = [torch.randn(7, 3, generator=g) for _ in range(6)]
    eta, mu, K = 0.6, 0.8, 3
    slow = [nn.Parameter(w0.clone())]
    step = OuterStep(slow, nesterov_sgd(eta, mu, nesterov), momentum_warmup=K)
    w, b = w0.double().clone(), None
    for t, s in enumerate(deltas):
        step.step([s])
        m = mu * min(1.0, t / K)
        s = s.double()
        if m == 0:
            w = w - eta * s
        else:
            b = s.clone() if b is None else m * b + s
            w = w - eta * ((m * b + s) if nesterov else b)
        assert torch.allclose(slow[0].detach().double(), w, atol=1e-5)
    assert step.n == 6


def test_outer_record_measures_the_step():
    slow = [nn.Parameter(torch.tensor([3.0, 4.0]))]  # ‖w‖ = 5
    step = OuterStep(slow, nesterov_sgd(1.0, 0.0))
    r1 = step.step([torch.tensor([0.5, 0.0])])
    assert r1.rel_delta == pytest.approx(0.1) and r1.cos_prev is None
    assert r1.weight_norm == pytest.approx(math.hypot(2.5, 4.0)) and r1.applied_over_delta == pytest.approx(1.0)
    r2 = step.step([torch.tensor([0.0, -2.0])])  # orthogonal to the first
    assert r2.cos_prev == pytest.approx(0.0)
    r3 = step.step([torch.tensor([0.0, -1.0])])
    assert r3.cos_prev == pytest.approx(1.0)
    # Nesterov with a full buffer applies more than the fresh pseudo-gradient: (1 + μ) on a repeated direction
    slow = [nn.Parameter(torch.zeros(2))]
    nst = OuterStep(slow, nesterov_sgd(1.0, 0.9))
    nst.step([torch.tensor([1.0, 0.0])])
    assert nst.step([torch.tensor([1.0, 0.0])]).applied_over_delta == pytest.approx(1.0 + 0.9 * 1.9)


def _snoo_run(eta: float, mu: float, k: int, steps: int = 12) -> tuple[nn.Module, Snoo]:
    model = make_replicas(1)[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    snoo = Snoo([list(model.parameters())], k, nesterov_sgd(eta, mu))
    for batch in batches(1, steps):
        x, y = batch[0]
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        snoo.after_inner_step()
    return model, snoo


def test_snoo_with_lr_1_and_no_momentum_is_the_inner_optimizer_alone():
    model, snoo = _snoo_run(1.0, 0.0, 3)
    alone = make_replicas(1)[0]
    opt = torch.optim.SGD(alone.parameters(), lr=0.1)
    for batch in batches(1, 12):
        x, y = batch[0]
        ((alone(x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
    assert torch.allclose(flat(model), flat(alone), atol=1e-6)
    assert [r["step"] for r in snoo.records] == [3, 6, 9, 12]
    assert all(r["applied_over_delta"] == pytest.approx(1.0) for r in snoo.records)


def test_snoo_final_fast_scores_the_inner_optimizers_last_iterate():
    """final=fast: no outer step after the last inner step, so the model is the fast weights the K steps since the
    previous outer step made (the same run's outer-step model differs only by that last extrapolation)."""
    model = make_replicas(1)[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    snoo = Snoo([list(model.parameters())], 4, nesterov_sgd(0.7, 0.9), fast_at=12)
    ref, ref_snoo = _snoo_run(0.7, 0.9, 4)
    for t, batch in enumerate(batches(1, 12), start=1):
        x, y = batch[0]
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        snoo.after_inner_step()
        if t == 11:
            before_last = flat(model).clone()
    assert [r["step"] for r in snoo.records] == [4, 8] and [r["step"] for r in ref_snoo.records][-1] == 12
    assert (flat(model) - before_last).abs().max() > 0  # the last inner step was taken ...
    assert torch.equal(torch.cat([w.detach().reshape(-1) for w in snoo.outer[0].slow]), flat(model))  # ... and kept
    assert (flat(model) - flat(ref)).abs().max() > 1e-4


def test_snoo_is_diloco_with_one_replica():
    """The reference: DiLoCo with M = 1, one fragment, τ = 0, fp32 outer gradients without error feedback and H = K
    takes exactly SNOO's steps."""
    model, snoo = _snoo_run(0.7, 0.9, 4)
    models = make_replicas(1)
    cfg = SyncConfig(strategy="diloco", H=4, n_fragments=1, tau=0, codec="fp32", error_feedback=False,
                     diloco=DiLoCoConfig(outer_lr=0.7, outer_momentum=0.9))
    frags = strided_fragments(models[0].block_param_names(), models[0].extra_param_names(), 1)
    strat = DiLoCo(models, LocalTransport(1), frags, cfg, seed=0)
    train(models, strat, batches(1, 12))
    assert torch.allclose(flat(model), flat(models[0]), atol=1e-6)
    assert (flat(model) - flat(make_replicas(1)[0])).abs().max() > 1e-2  # it trained
    assert [r["step"] for r in strat.outer_records()] == [4, 8, 12]
    for a, b in zip(snoo.records, strat.outer_records()):
        assert a["rel_delta"] == pytest.approx(b["rel_delta"], rel=1e-5)


def test_snoo_in_fragments_is_streaming_diloco_with_one_replica():
    """Two strided fragments stepping at their offsets in the K-step window: DiLoCo with M = 1, P = 2, τ = 0 and fp32
    outer gradients takes exactly the same steps (the final flush included: it lands on the same last step)."""
    models = make_replicas(1)
    frags = strided_fragments(models[0].block_param_names(), models[0].extra_param_names(), 2)
    cfg = SyncConfig(strategy="diloco", H=4, n_fragments=2, tau=0, codec="fp32", error_feedback=False,
                     diloco=DiLoCoConfig(outer_lr=0.7, outer_momentum=0.9))
    strat = DiLoCo(models, LocalTransport(1), frags, cfg, seed=0)
    train(models, strat, batches(1, 12))
    model = make_replicas(1)[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    named = dict(model.named_parameters())
    snoo = Snoo([[named[n] for n in names] for names in frags], 4, nesterov_sgd(0.7, 0.9), offsets=fragment_offsets(4, 2))
    for batch in batches(1, 12):
        x, y = batch[0]
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        snoo.after_inner_step()
    assert [(r["step"], r["group"]) for r in snoo.records] == [(2, 0), (4, 1), (6, 0), (8, 1), (10, 0), (12, 1)]
    assert [(r["step"], r["fragment"]) for r in strat.outer_records()][:6] == [(2, 0), (4, 1), (6, 0), (8, 1), (10, 0),
                                                                                (12, 1)]
    # DiLoCo's final flush gives fragment 0 one more outer step (2 steps since its last); SNOO ends with the fast weights
    ev = strat.eval_state()
    for n in frags[1]:
        assert torch.allclose(named[n].detach(), ev[n], atol=1e-6), n


def test_diloco_takes_its_outer_optimizer_as_an_argument():
    """torchft's shape: any optimizer over the global fragments; here Adam, whose first step moves every coordinate
    by about its lr whatever the pseudo-gradient's size."""
    models = make_replicas(2)
    cfg = SyncConfig(strategy="diloco", H=3, n_fragments=2, tau=0, codec="fp32", error_feedback=False)
    frags = strided_fragments(models[0].block_param_names(), models[0].extra_param_names(), 2)
    start = [torch.cat([models[0].get_parameter(n).detach().reshape(-1) for n in names]) for names in frags]
    strat = DiLoCo(models, LocalTransport(2), frags, cfg, seed=0,
                   outer_optimizer=lambda params: torch.optim.Adam(params, lr=1e-3))
    assert all(isinstance(o.opt, torch.optim.Adam) for o in strat.outer)
    train(models, strat, batches(2, 3))
    moved = (strat.global_params[1].detach() - start[1]).abs()  # fragment 1 synced once, at step 3
    assert torch.allclose(moved[moved > 0], torch.full_like(moved[moved > 0], 1e-3), rtol=1e-2)


def _diloco_globals(**diloco) -> list[torch.Tensor]:
    """The global fragments after 6 steps of two replicas (H 3, P 2, fp32, no error feedback), with ``sync.diloco``."""
    models = make_replicas(2)
    cfg = SyncConfig(strategy="diloco", H=3, n_fragments=2, tau=0, codec="fp32", error_feedback=False,
                     diloco=DiLoCoConfig(**diloco))
    frags = strided_fragments(models[0].block_param_names(), models[0].extra_param_names(), 2)
    strat = DiLoCo(models, LocalTransport(2), frags, cfg, seed=0)
    train(models, strat, batches(2, 6))
    return [g.detach().clone() for g in strat.global_params]


def test_the_outer_optimizer_is_a_config_choice():
    """``sync.diloco.outer_optimizer=adam`` builds the same outer steps as torch's Adam handed in as an argument (the
    seam above); the default is DiLoCo's SGD, and a name nobody registered is refused naming the field."""
    assert set(OUTER_MAKERS) == set(OUTER_OPTIMIZERS)  # the torch-free names validation reads are the builders'
    models = make_replicas(2)
    cfg = SyncConfig(strategy="diloco", H=3, n_fragments=2, tau=0, codec="fp32", error_feedback=False,
                     diloco=DiLoCoConfig(outer_optimizer="adam", outer_lr=1e-3, outer_momentum=0.8))
    frags = strided_fragments(models[0].block_param_names(), models[0].extra_param_names(), 2)
    strat = DiLoCo(models, LocalTransport(2), frags, cfg, seed=0)
    assert all(isinstance(o.opt, torch.optim.Adam) and o.opt.param_groups[0]["betas"] == (0.8, 0.999)
               for o in strat.outer)
    train(models, strat, batches(2, 6))
    models = make_replicas(2)
    ref = DiLoCo(models, LocalTransport(2), frags, cfg, seed=0,
                 outer_optimizer=lambda params: torch.optim.Adam(params, lr=1e-3, betas=(0.8, 0.999)))
    train(models, ref, batches(2, 6))
    assert all(torch.equal(a, b) for a, b in zip(strat.global_params, ref.global_params))
    with pytest.raises(ConfigError, match=r"^sync\.diloco\.outer_optimizer: must be one of sgd\|adam \(got 'lion'\)"):
        DiLoCoConfig(outer_optimizer="lion")
    with pytest.raises(ConfigError, match=r"^optim\.snoo\.outer_optimizer: must be one of sgd\|adam"):
        apply_overrides(get_preset("baseline", "smoke"), {"optim.snoo.outer_optimizer": "lion"})


def test_an_outer_optimizer_registered_from_outside_is_a_config_choice():
    """Anything with torch.optim's interface: plain averaging registered under its own name (SGD at lr 1 without
    momentum, whatever sync.diloco says) takes exactly the steps of sgd at outer_lr 1, outer_momentum 0."""
    register_outer_optimizer("average", lambda lr, momentum, nesterov: lambda ps: torch.optim.SGD(ps, lr=1.0),
                             "the islands' mean becomes the global model (outer lr and momentum not read)")
    try:
        got = _diloco_globals(outer_optimizer="average", outer_lr=0.3, outer_momentum=0.9)
        apply_overrides(get_preset("two_site", "smoke"), {"sync.diloco.outer_optimizer": "average"})
    finally:
        unregister_outer_optimizer("average")
    want = _diloco_globals(outer_lr=1.0, outer_momentum=0.0)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert not all(torch.equal(a, b) for a, b in zip(want, _diloco_globals(outer_lr=0.3, outer_momentum=0.9)))
    with pytest.raises(ConfigError, match="sync.diloco.outer_optimizer"):
        apply_overrides(get_preset("two_site", "smoke"), {"sync.diloco.outer_optimizer": "average"})


def test_snoo_params_selects_the_outer_steps_parameters():
    from islands_kit.model import ByteTransformer

    m = ByteTransformer(get_preset("baseline", "smoke").model)
    names = {id(p): n for n, p in m.named_parameters()}
    assert len(snoo_params(m, "all")) == len(list(m.parameters()))
    assert all(p.ndim >= 2 for p in snoo_params(m, "matrices"))
    hidden = {names[id(p)] for p in snoo_params(m, "hidden")}
    assert hidden and all(n.startswith("blocks.") and ".router." not in n and "norm" not in n for n in hidden)
    assert "tok_emb.weight" not in hidden and "lm_head.weight" not in hidden
    dense = {names[id(p)] for p in snoo_params(m, "dense")}
    experts = {n for n in names.values() if n.split(".")[-1] in ("w1", "w2", "w3") and ".moe." in n}
    assert experts and not dense & experts and dense | experts == set(names.values())


def test_snoo_config_is_checked():
    base = get_preset("baseline", "smoke")
    for key, bad in (("optim.snoo.k", "-1"), ("optim.snoo.momentum", "1.0"), ("optim.snoo.params", "embeddings"),
                     ("optim.snoo.lr", "0"), ("optim.snoo.final", "slow"),
                     ("optim.snoo.merges", "drop")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            apply_overrides(base, {key: bad})


SNOO = {"optim.snoo.k": "4", "optim.snoo.lr": "0.5", "optim.snoo.momentum": "0.5", "threads": "1"}


@pytest.mark.slow  # three baseline smoke runs (~5 s idle); the resume test below keeps SNOO in the fast tier
def test_baseline_with_snoo_identity_and_records():
    """On the baseline (one model, data-parallel): η = 1, μ = 0 reproduces the baseline (w − (w − w̃) rounds to w̃
    in all but a few last bits); η 0.5 / μ 0.5 changes the number, and result.json records every outer step."""
    base = apply_overrides(get_preset("baseline", "smoke"), {"threads": "1"})
    ref = run_experiment(base)
    same = run_experiment(apply_overrides(base, {**SNOO, "optim.snoo.lr": "1.0", "optim.snoo.momentum": "0.0"}))
    assert same.final_val_bpb == pytest.approx(ref.final_val_bpb, rel=1e-5)
    snoo = run_experiment(apply_overrides(base, SNOO))
    assert abs(snoo.final_val_bpb - ref.final_val_bpb) > 1e-4 and math.isfinite(snoo.final_val_bpb)
    log = snoo.outer_log
    assert [r["step"] for r in log] == list(range(4, base.steps + 1, 4)) and {r["fragment"] for r in log} == {"snoo"}
    assert all(r["rel_delta"] > 0 and r["weight_norm"] > 0 for r in log)
    assert ref.outer_log == [] and snoo.tokens == ref.tokens and snoo.cross_site_bytes == ref.cross_site_bytes


def test_two_site_records_each_fragments_outer_steps():
    r = run_experiment(apply_overrides(get_preset("two_site", "smoke"), {"threads": "1"}))
    per_fragment = [sum(1 for rec in r.outer_log if rec["fragment"] == p) for p in range(2)]
    assert per_fragment == r.outer_steps_per_fragment
    assert all(rec["cos_prev"] is None for rec in r.outer_log[:2])


def test_resume_mid_window_with_snoo_is_bit_identical(tmp_path):
    """The checkpoint after step 7 falls between SNOO's outer steps (K = 3): the slow weights, the momentum buffer and
    the inner-step count travel in it, and resuming gives the uninterrupted run's numbers and outer records."""
    from islands_kit.run import Experiment
    from islands_kit.train.checkpoint import load_checkpoint

    cfg = apply_overrides(get_preset("baseline", "smoke"), {**SNOO, "optim.snoo.k": "3", "steps": "12",
                                                            "checkpoint_every": "7"})
    full = run_experiment(cfg, tmp_path / "a")
    exp = Experiment(cfg)
    exp.load_state_dict(load_checkpoint(tmp_path / "a"))
    assert exp.step == 7 and exp.first.snoo is not None and exp.first.snoo.inner_steps == 7
    again = exp.run()
    for k in ("final_val_bpb", "val_curve", "outer_log", "tokens"):
        assert again[k] == full[k], k
    assert [r["step"] for r in full["outer_log"]] == [3, 6, 9, 12]


def test_baseline_with_snoo_in_two_fragments_records_each():
    cfg = apply_overrides(get_preset("baseline", "smoke"), {**SNOO, "optim.snoo.fragments": "2"})
    r = run_experiment(cfg)
    steps = {f: [x["step"] for x in r.outer_log if x["fragment"] == f] for f in ("snoo0", "snoo1")}
    assert steps == {"snoo0": [2, 6, 10, 14, 18, 22], "snoo1": [4, 8, 12, 16, 20, 24]}  # offsets 2 and 0 of K = 4
    with pytest.raises(ConfigError, match=r"optim\.snoo\.fragments"):
        apply_overrides(cfg, {"optim.snoo.fragments": "5"})


def test_snoo_external_write_moves_the_slow_weights_with_the_fast():
    """A write that is not the inner optimizer's (a merge landing on the island) moves the slow weights by the same
    amount: the next outer step keeps all of it and smooths the window's own progress alone (η 0.5, μ 0: the merge
    D kept whole, the inner progress g halved). Without ``external`` only half of D would survive."""
    model = make_replicas(1)[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    snoo = Snoo([list(model.parameters())], 2, nesterov_sgd(0.5, 0.0))
    w0 = flat(model).clone()
    progress = []
    for t, batch in enumerate(batches(1, 2), start=1):
        x, y = batch[0]
        ((model(x) - y) ** 2).mean().backward()
        before = flat(model).clone()
        opt.step()
        opt.zero_grad()
        progress.append(flat(model) - before)
        if t == 1:  # between the window's two inner steps, the strategy writes D into the fast weights
            with snoo.external(), torch.no_grad():
                for p in model.parameters():
                    p.add_(0.25)
        snoo.after_inner_step()
    d = torch.full_like(w0, 0.25)
    g = progress[0] + progress[1]
    assert torch.allclose(flat(model), w0 + d + 0.5 * g, atol=1e-6)
    assert torch.allclose(torch.cat([w.detach().reshape(-1) for w in snoo.outer[0].slow]), flat(model))


@pytest.mark.parametrize("experiment,sets,call", [
    ("two_site", {}, "after_inner_step"), ("eight_cell", {}, "after_inner_step"),
    ("two_site", {"sync.mode": "decoupled"}, "land")])
def test_snoo_inside_each_site_keeps_the_strategys_merges(experiment, sets, call, monkeypatch):
    """SNOO inside each island of a DiLoCo / butterfly / decoupled run: every strategy call that writes an island's
    weights leaves that island's window progress w̃ − w unchanged (the slow weights moved with the merge), and the
    merges did write (so the check is not vacuous)."""
    from islands_kit.run import Experiment

    cfg = apply_overrides(get_preset(experiment, "smoke"), {**SNOO, "optim.snoo.k": "3", "threads": "1", **sets})
    exp = Experiment(cfg)
    strategy = exp.strategy
    inner = getattr(strategy, call)
    islands = list(exp.islands.values())
    seen = {"writes": 0, "calls": 0}
    writes = exp.driver.writes  # the driver's own wrapper, called here once around each strategy call

    def progress() -> list[torch.Tensor]:
        return [torch.cat([(f.detach() - w).reshape(-1) for f, w in zip(isl.snoo.fast[0], isl.snoo.outer[0].slow)])
                for isl in islands]

    def weights() -> list[torch.Tensor]:
        return [flat(isl.model) for isl in islands]

    def checked(*args):
        p0, w0 = progress(), weights()
        with writes(islands):
            inner(*args)
        seen["calls"] += 1
        seen["writes"] += any(not torch.equal(a, b) for a, b in zip(w0, weights()))
        for a, b in zip(p0, progress()):
            assert torch.allclose(a, b, atol=1e-6), args

    monkeypatch.setattr(strategy, call, checked)
    monkeypatch.setattr(exp.driver, "writes", lambda isls: contextlib.ExitStack())  # ``checked`` wraps instead
    exp.run()
    assert seen["calls"] >= cfg.steps and seen["writes"] >= 2


def test_snoo_merges_smooth_puts_the_merge_into_the_pseudo_gradient():
    """optim.snoo.merges=smooth (Nesterov on each island's merged trajectory): the strategy's writes leave SNOO's
    slow weights where they were, so the window progress w̃ − w after a merge includes the merge; the same run with
    merges=keep differs in its numbers."""
    from islands_kit.run import Experiment

    sets = {**SNOO, "optim.snoo.k": "3", "threads": "1", "optim.snoo.merges": "smooth"}
    exp = Experiment(apply_overrides(get_preset("two_site", "smoke"), sets))
    strategy, islands = exp.strategy, list(exp.islands.values())
    inner = strategy.after_inner_step
    moved = []

    def slow() -> list[torch.Tensor]:
        return [torch.cat([w.detach().reshape(-1) for w in isl.snoo.outer[0].slow]) for isl in islands]

    def checked(step, tokens):
        s0, w0 = slow(), [flat(isl.model) for isl in islands]
        inner(step, tokens)
        assert all(torch.equal(a, b) for a, b in zip(s0, slow()))  # the slow weights did not follow the merge
        moved.append(any(not torch.equal(a, flat(isl.model)) for a, isl in zip(w0, islands)))

    strategy.after_inner_step = checked
    smooth = exp.run()
    keep = run_experiment(apply_overrides(get_preset("two_site", "smoke"), {**sets, "optim.snoo.merges": "keep"}))
    assert sum(moved) >= 2 and abs(smooth.final_val_bpb - keep.final_val_bpb) > 1e-5
