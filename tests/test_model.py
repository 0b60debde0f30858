"""The byte transformer: causality, parameter accounting, names, init loss, learning, determinism, input checks."""
from __future__ import annotations

import math

import pytest
import torch

from islands_kit.config import ConfigError
from islands_kit.config.presets import MODEL_SIZES, model_config
from islands_kit.model import build_model


def _tiny(seed: int = 0, **kw):
    torch.manual_seed(seed)
    return build_model(model_config("smoke", **kw))


def test_causal_gradients_zero_for_future_positions():
    """nanodo-style: d logits[t] / d embedding[s] == 0 for s > t, and != 0 for s <= t."""
    model = _tiny(n_shared_experts=1)
    captured = []

    def leaf(module, inputs, out):  # make the embedding output a leaf we can differentiate against
        e = out.detach().requires_grad_()
        captured.append(e)
        return e

    model.tok_emb.register_forward_hook(leaf)
    idx = torch.randint(0, 256, (1, 12))
    logits = model(idx).logits
    emb = captured[0]
    for t in (0, 5, 11):
        (g,) = torch.autograd.grad(logits[0, t].sum(), emb, retain_graph=True)
        per_pos = g[0].abs().sum(-1)  # (T,)
        assert (per_pos[t + 1:] == 0).all(), t
        assert (per_pos[: t + 1] > 0).all(), t


def _count(model, skip: str = "") -> int:
    return sum(p.numel() for n, p in model.named_parameters() if not (skip and skip in n))


@pytest.mark.parametrize("kw", [dict(), dict(n_shared_experts=2), dict(n_experts=6, top_k=3)])
def test_num_params_and_active_params(kw):
    model = _tiny(**kw)
    cfg = model.cfg
    assert model.num_params() == _count(model)
    # active = a model with only top_k experts (every expert used), with the router of the real width
    same_k = _tiny(**{**kw, "n_experts": cfg.top_k})
    router_real = cfg.n_layers * cfg.n_experts * cfg.d_model
    router_small = sum(p.numel() for n, p in same_k.named_parameters() if "router" in n)
    assert model.num_active_params() == same_k.num_params() - router_small + router_real
    assert model.num_active_params() < model.num_params()


def test_dense_control_counts():
    model = _tiny(n_experts=1, top_k=1, d_expert=64)
    assert model.num_active_params() == model.num_params() == _count(model)
    assert not any("router" in n for n, _ in model.named_parameters())
    out = model(torch.randint(0, 256, (2, 8)))
    assert out.aux_loss.item() == 0.0


def test_presets_build_and_dense_matches_moe_active():
    cfgs = {name: model_config(name) for name in MODEL_SIZES}
    assert cfgs["demo-64x2"].n_experts // cfgs["demo-64x2"].top_k == 32
    moe = build_model(cfgs["demo"]).num_active_params()
    dense = build_model(cfgs["demo-dense"]).num_active_params()
    assert abs(dense - moe) / moe < 0.01
    with pytest.raises(ValueError, match="model size"):
        model_config("nope")
    with pytest.raises(ConfigError, match="model.top_k"):
        model_config("smoke", top_k=5)


def test_param_names_partition_the_module():
    model = _tiny(n_shared_experts=1)
    blocks = model.block_param_names()
    extra = model.extra_param_names()
    assert len(blocks) == model.cfg.n_layers
    assert all(n.startswith(f"blocks.{i}.") for i, names in enumerate(blocks) for n in names)
    assert set(extra) == {"tok_emb", "norm_f", "lm_head"}
    listed = [n for names in blocks for n in names] + [n for names in extra.values() for n in names]
    assert sorted(listed) == sorted(n for n, _ in model.named_parameters())  # each parameter exactly once
    assert "blocks.1.moe.router.weight" in blocks[1] and "blocks.0.moe.w2" in blocks[0]
    assert model.lm_head.weight.data_ptr() != model.tok_emb.weight.data_ptr()  # untied


def test_init_scales_and_loss_near_uniform():
    model = _tiny(seed=1)
    out_std = model.cfg.init_std / math.sqrt(2 * model.cfg.n_layers)
    assert model.blocks[0].moe.w2.std().item() == pytest.approx(out_std, rel=0.1)
    assert model.blocks[0].attn.wo.weight.std().item() == pytest.approx(out_std, rel=0.15)
    assert model.blocks[0].moe.w1.std().item() == pytest.approx(model.cfg.init_std, rel=0.1)
    idx = torch.randint(0, 256, (4, 32))
    out = model(idx, idx.roll(-1, 1))
    assert out.logits.shape == (4, 32, 256)
    assert abs(out.loss.item() - math.log(256)) < 0.1
    assert out.aux_loss.item() > 0 and out.aux_loss.dim() == 0


def test_adamw_steps_reduce_loss():
    model = _tiny(seed=2)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    idx = torch.randint(0, 256, (4, 33))
    x, y = idx[:, :-1], idx[:, 1:]
    first = None
    for _ in range(15):
        out = model(x, y)
        if first is None:
            first = out.loss.item()
        opt.zero_grad()
        (out.loss + out.aux_loss).backward()
        opt.step()
    assert model(x, y).loss.item() < first - 1.0


def test_deterministic_given_seed():
    idx = torch.randint(0, 256, (2, 16))
    a, b, c = _tiny(seed=7), _tiny(seed=7), _tiny(seed=8)
    assert torch.equal(a(idx).logits, b(idx).logits)
    assert not torch.equal(a(idx).logits, c(idx).logits)


def test_bad_inputs_name_the_argument():
    model = _tiny()
    with pytest.raises(ValueError, match="idx"):
        model(torch.zeros(2, 40, dtype=torch.long))  # longer than seq_len 32
    with pytest.raises(ValueError, match="idx"):
        model(torch.zeros(2, 8))  # float
    with pytest.raises(ValueError, match="targets"):
        model(torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 7, dtype=torch.long))
