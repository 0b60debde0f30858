"""optim.name=muon: the kit's Muon against torch.optim.Muon (2-D, and each expert of a 3-D stack), zero Muon lr
against the AdamW group alone, the split of a model's parameters, its config section, and a run end to end in every
place an inner optimizer goes (every strategy, decoupled, checkpoint and resume)."""
from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

from islands_kit.config import ConfigError, ExperimentConfig, OptimConfig, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.model import ByteTransformer
from islands_kit.optim.build import build_optimizer, muon_param_groups, optimizer_groups
from islands_kit.optim.muon import Muon, adjusted_lr, zeropower_via_newtonschulz
from islands_kit.run import run_experiment

TorchMuon = getattr(torch.optim, "Muon", None)
needs_torch_muon = pytest.mark.skipif(TorchMuon is None, reason="torch.optim.Muon arrived in torch 2.9")
STEPS = 50


def _targets(shapes: list[tuple[int, ...]], seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in shapes]


def _loss(ws: list[torch.Tensor], targets: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """A fixed problem with curvature across the matrices: each W pulled towards its target along x's directions
    (x is (k, cols) for every W, so W x^T is defined whatever W's shape)."""
    return sum((((w - t) @ x.T[: w.shape[-1]]) ** 2).mean() + 0.1 * (w ** 4).mean() for w, t in zip(ws, targets))


@needs_torch_muon
@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("adjust", ["original", "match_rms_adamw"])
def test_2d_matches_torch_muon_over_50_steps(nesterov: bool, adjust: str) -> None:
    """Wide, square and tall matrices as nn.Linear stores them (fan_out, fan_in), 50 steps with the gradient of a
    fixed problem: the kit's Muon gives torch.optim.Muon's weights, momentum buffers included, bit for bit."""
    shapes = [(12, 40), (24, 24), (48, 16)]
    targets = _targets(shapes)
    x = torch.randn(40, 40, generator=torch.Generator().manual_seed(1))
    ours = [nn.Parameter(0.1 * t.flip(0)) for t in targets]
    ref = [nn.Parameter(p.detach().clone()) for p in ours]
    kw = dict(lr=0.03, momentum=0.9, nesterov=nesterov, ns_steps=5, weight_decay=0.05)
    opt = Muon([{"params": ours, "kind": "muon", "layout": "out_in"}], adjust_lr=adjust, **kw)
    ref_opt = TorchMuon(ref, adjust_lr_fn=adjust, **kw)
    for _ in range(STEPS):
        for ps, o in ((ours, opt), (ref, ref_opt)):
            o.zero_grad()
            _loss(ps, targets, x).backward()
            o.step()
    for a, b in zip(ours, ref):
        assert torch.equal(a, b)
        assert torch.equal(opt.state[a]["momentum_buffer"], ref_opt.state[b]["momentum_buffer"])
    assert not torch.equal(ours[0], 0.1 * targets[0].flip(0))  # it moved


@needs_torch_muon
@pytest.mark.parametrize("adjust", ["original", "match_rms_adamw"])
def test_expert_stack_is_torch_muon_on_each_expert(adjust: str) -> None:
    """A (E, in, out) stack stored as ``x @ W`` (the MoE's experts, layout in_out) steps each expert as torch.optim.Muon
    steps that expert's matrix in nn.Linear's orientation (W_e^T, fan_out x fan_in): orthogonalised on its own, its lr
    adjusted by its own fans (here fan_out > fan_in, so ``original`` scales by sqrt(2))."""
    E, d_in, d_out = 5, 16, 32
    g = torch.Generator().manual_seed(3)
    w0 = 0.1 * torch.randn(E, d_in, d_out, generator=g)
    grads = [torch.randn(E, d_in, d_out, generator=g) for _ in range(8)]
    stack = nn.Parameter(w0.clone())
    experts = [nn.Parameter(w0[e].T.contiguous()) for e in range(E)]
    kw = dict(lr=0.05, momentum=0.95, nesterov=True, ns_steps=5, weight_decay=0.1)
    opt = Muon([{"params": [stack], "kind": "muon", "layout": "in_out"}], adjust_lr=adjust, **kw)
    ref_opt = TorchMuon(experts, adjust_lr_fn=adjust, **kw)
    for G in grads:
        stack.grad = G.clone()
        for e, p in enumerate(experts):
            p.grad = G[e].T.contiguous()
        opt.step()
        ref_opt.step()
    for e in range(E):
        torch.testing.assert_close(stack[e].T, experts[e], rtol=1e-6, atol=1e-7)
    # the per-expert part is real: one NS over the whole (E*in, out) block would give another answer
    whole = zeropower_via_newtonschulz(grads[0].reshape(E * d_in, d_out), 5).reshape(E, d_in, d_out)
    assert not torch.allclose(whole.float(), zeropower_via_newtonschulz(grads[0], 5).float(), atol=1e-3)


def test_adjusted_lr_reads_fans_from_the_layout() -> None:
    out_in = Muon([{"params": [nn.Parameter(torch.zeros(64, 16))], "kind": "muon", "layout": "out_in"}])
    in_out = Muon([{"params": [nn.Parameter(torch.zeros(3, 16, 64))], "kind": "muon", "layout": "in_out"}])
    for opt in (out_in, in_out):
        group = opt.param_groups[0]
        assert opt.fans(group, group["params"][0]) == (64, 16)
    assert adjusted_lr(0.02, "original", 64, 16) == pytest.approx(0.04)
    assert adjusted_lr(0.02, "original", 16, 64) == 0.02
    assert adjusted_lr(0.02, "match_rms_adamw", 16, 64) == pytest.approx(0.2 * 0.02 * 8)


def _smoke(experiment: str = "two_site", **sets: object) -> ExperimentConfig:
    return apply_overrides(get_preset(experiment, "smoke"), {"threads": 1, "progress": False, "optim.name": "muon",
                                                             **{k: str(v) for k, v in sets.items()}})


def test_zero_muon_lr_is_the_adamw_group_alone() -> None:
    """muon.lr = 0: the hidden matrices stay where they were and every other parameter follows torch.optim.AdamW
    (decay on the embedding, head and routers, none on the norms) bit for bit, over steps of the smoke model."""
    cfg = _smoke(**{"optim.muon.lr": 0.0, "model.n_shared_experts": 1}).optim
    torch.manual_seed(0)
    model = ByteTransformer(_smoke(**{"model.n_shared_experts": 1}).model)
    ref = copy.deepcopy(model)
    names = muon_param_groups(model)
    opt = build_optimizer(model, cfg)
    assert isinstance(opt, Muon)
    named = dict(ref.named_parameters())
    fused = opt.param_groups[-1]["fused"]
    ref_opt = torch.optim.AdamW([{"params": [named[n] for n in names["adamw_decay"]], "weight_decay": cfg.weight_decay},
                                 {"params": [named[n] for n in names["adamw_no_decay"]], "weight_decay": 0.0}],
                                lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=fused)
    emb0 = named["tok_emb.weight"].detach().clone()
    hidden0 = {n: dict(model.named_parameters())[n].detach().clone() for n in names["muon_out_in"] + names["muon_in_out"]}
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        x = torch.randint(0, 256, (4, 17), generator=g)
        for m, o in ((model, opt), (ref, ref_opt)):
            o.zero_grad()
            out = m(x[:, :-1], x[:, 1:])
            (out.loss + out.aux_loss).backward()
            o.step()
    for (n, a), (_, b) in zip(model.named_parameters(), ref.named_parameters()):
        assert torch.equal(a, b), n
    for n, w in hidden0.items():
        assert torch.equal(dict(model.named_parameters())[n], w), n
    assert not torch.equal(named["tok_emb.weight"], emb0)  # the AdamW group did move


def test_groups_cover_every_parameter_once() -> None:
    """The split: attention projections (nn.Linear) and expert / shared MLP weights (x @ W) on Muon; embedding, head
    and routers on AdamW with decay, the norms without; every parameter in exactly one group."""
    cfg = _smoke(**{"model.n_shared_experts": 1})
    model = ByteTransformer(cfg.model)
    names = muon_param_groups(model)
    every = [n for ns in names.values() for n in ns]
    assert sorted(every) == sorted(n for n, _ in model.named_parameters())
    assert all(n.endswith(("attn.wqkv.weight", "attn.wo.weight")) for n in names["muon_out_in"])
    assert {n.split(".moe.")[1] for n in names["muon_in_out"]} == {"w1", "w2", "w3", "shared.w1", "shared.w2", "shared.w3"}
    assert {"tok_emb.weight", "lm_head.weight", "blocks.0.moe.router.weight"} <= set(names["adamw_decay"])
    assert all("norm" in n for n in names["adamw_no_decay"])
    groups = optimizer_groups(model, cfg.optim)
    assert groups is not None and groups["muon_in_out"]["params"][0] == "blocks.*.moe.w1"
    assert sum(g["numel"] for g in groups.values()) == sum(p.numel() for p in model.parameters())
    assert optimizer_groups(model, OptimConfig()) is None  # adamw: one rule for every parameter


@pytest.mark.parametrize("sets, field", [
    ({"optim.name": "muonn"}, "optim.name"),
    ({"optim.muon.lr": "-0.1"}, "optim.muon.lr"),
    ({"optim.muon.momentum": "1.0"}, "optim.muon.momentum"),
    ({"optim.muon.ns_steps": "0"}, "optim.muon.ns_steps"),
    ({"optim.muon.ns_steps": "100"}, "optim.muon.ns_steps"),
    ({"optim.muon.adjust_lr": "none"}, "optim.muon.adjust_lr"),
    ({"optim.muon.weight_decay": "60"}, "optim.muon.weight_decay"),
    ({"optim.muon.adamw_lr": "-1"}, "optim.muon.adamw_lr"),
    ({"optim.muon.nesterov": "maybe"}, "optim.muon.nesterov"),
    ({"optim.muon.adamw_lr": "5", "optim.weight_decay": "0.5"}, "optim.weight_decay"),
])
def test_bad_muon_settings_name_the_field(sets: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        apply_overrides(get_preset("two_site", "smoke"), {"optim.name": "muon", **sets})


def test_adamw_lr_defaults_to_optim_lr() -> None:
    assert _smoke(**{"optim.lr": 0.004}).optim.muon_adamw_lr == 0.004
    assert _smoke(**{"optim.lr": 0.004, "optim.muon.adamw_lr": 0.001}).optim.muon_adamw_lr == 0.001
    opt = build_optimizer(ByteTransformer(_smoke().model), _smoke(**{"optim.muon.adamw_lr": 0.001}).optim)
    assert [(g["kind"], g["lr"]) for g in opt.param_groups] == [("muon", 0.02), ("muon", 0.02), ("adamw", 0.001),
                                                                 ("adamw", 0.001)]


@pytest.mark.slow
@pytest.mark.parametrize("experiment, sets", [
    ("baseline", {}),
    ("two_site", {}),
    ("eight_cell", {}),
    ("hierarchical", {"sync.H": 4, "sync.hierarchical.site_every": 2}),
    ("two_site", {"sync.mode": "decoupled"}),
])
def test_every_strategy_trains_with_muon(experiment: str, sets: dict, tmp_path) -> None:
    """Each strategy (and the decoupled driver) runs a smoke job under Muon, records the split in result.json, and
    lands elsewhere than the same job under AdamW: Muon really stepped the islands."""
    res = run_experiment(_smoke(experiment, **sets), tmp_path / "m")
    ref = run_experiment(apply_overrides(_smoke(experiment, **sets), {"optim.name": "adamw"}), tmp_path / "a")
    on_disk = json.loads((tmp_path / "m" / "result.json").read_text())
    assert set(on_disk["optim_groups"]) == {"muon_out_in", "muon_in_out", "adamw_decay", "adamw_no_decay"}
    assert "optim_groups" not in ref
    assert res.final_val_bpb == res.final_val_bpb and res.final_val_bpb != ref.final_val_bpb  # finite, and other


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["two_site", "baseline"])
def test_resume_of_a_muon_run_is_bit_identical(experiment: str, tmp_path) -> None:
    """The checkpoint after step 7 holds the momentum buffers and the AdamW moments; resuming gives the
    uninterrupted run's numbers to the last bit."""
    from islands_kit.run import Experiment
    from islands_kit.train.checkpoint import load_checkpoint

    cfg = _smoke(experiment, steps=12, checkpoint_every=7)
    full = run_experiment(cfg, tmp_path / "a")
    exp = Experiment(cfg)
    exp.load_state_dict(load_checkpoint(tmp_path / "a"))
    assert exp.step == 7
    state = exp.first.optimizer.state
    assert any("momentum_buffer" in s for s in state.values()) and any("exp_avg" in s for s in state.values())
    again = exp.run()
    for k in ("final_val_bpb", "val_curve", "tokens", "ledger"):
        assert again[k] == full[k], k


def test_config_listing_shows_the_split(capsys: pytest.CaptureFixture[str]) -> None:
    """``islands-kit config`` under optim.name=muon ends with the group assignment as comments (the listing stays a
    config file); under adamw there is none."""
    from islands_kit import cli

    assert cli.main(["config", "two_site", "--set", "optim.name=muon"]) == 0
    out = capsys.readouterr().out
    tail = out[out.index("# optim.name=muon"):].splitlines()
    assert [line.split(":")[0].strip("# ") for line in tail[1:]] == ["muon_out_in", "muon_in_out", "adamw_decay",
                                                                      "adamw_no_decay"]
    assert "blocks.*.moe.w1" in tail[2] and "blocks.*.moe.router.weight" in tail[3]
    assert cli.main(["config", "two_site"]) == 0
    assert "# optim.name=muon" not in capsys.readouterr().out


def test_lr_scale_knob_scales_every_group_under_muon() -> None:
    """The scaling study's ``lr_scale`` moves Muon's lr and the AdamW group's with it, not the AdamW group alone."""
    from islands_kit.protocol.knobs import resolve

    base = get_preset("baseline", "smoke")
    sets = resolve(base, "smoke", {"optim.name": "muon", "optim.muon.lr": "0.02"}, {"lr_scale": "2"})
    assert (float(sets["optim.lr"]), float(sets["optim.muon.lr"])) == (2 * base.optim.lr, 0.04)
    sets = resolve(base, "smoke", {"optim.name": "muon", "optim.muon.adamw_lr": "1e-3"}, {"lr_scale": "0.5"})
    assert float(sets["optim.muon.adamw_lr"]) == 5e-4
    assert "optim.muon.lr" not in resolve(base, "smoke", {}, {"lr_scale": "2"})  # adamw: optim.lr alone
