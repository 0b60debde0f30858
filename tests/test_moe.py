"""MoE layer: grouped dispatch == per-expert loop reference, routing semantics, auxiliary losses, expert bias."""
from __future__ import annotations

import math

import pytest
import torch

from islands_kit.config import ModelConfig
from islands_kit.config.presets import model_config
from islands_kit.model import build_model
from islands_kit.model.moe import (
    MoE,
    _padded_bmm,
    _swiglu,
    grouped_matmul,
    init_moe_,
    route,
    router_z_loss,
    switch_balance_loss,
    top_k_indices,
)


def _moe(seed: int = 0, **kw) -> MoE:
    cfg = ModelConfig(**{**dict(d_model=16, n_heads=2, n_experts=4, top_k=2, d_expert=12), **kw})
    torch.manual_seed(seed)
    m = MoE(cfg)
    init_moe_(m, 0.3, 0.2)  # larger than the model's init so that routing is far from uniform
    return m


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in module.named_parameters()}


# -- grouped dispatch vs the per-expert loop reference ------------------------------------------------------------

@pytest.mark.parametrize("n_experts,top_k,dead,shared", [
    (4, 2, (), 0), (4, 1, (), 0), (4, 4, (), 0), (6, 2, (1, 4), 0), (6, 1, (0, 2, 5), 1),
])
def test_grouped_equals_loop_outputs_and_grads(n_experts, top_k, dead, shared):
    grouped = _moe(n_experts=n_experts, top_k=top_k, n_shared_experts=shared)
    loop = _moe(n_experts=n_experts, top_k=top_k, n_shared_experts=shared, dispatch="loop")
    loop.load_state_dict(grouped.state_dict())
    for m in (grouped, loop):  # experts in `dead` are never selected (the bias only changes selection)
        m.expert_bias[list(dead)] = -10.0
    x = torch.randn(40, 16)
    outs = []
    for m in (grouped, loop):
        xi = x.clone().requires_grad_()
        y, aux = m(xi)
        dy = torch.randn_like(y, generator=torch.Generator().manual_seed(1))
        ((y * dy).sum() + aux).backward()
        outs.append((y.detach(), aux.detach(), xi.grad, _grads(m), m.last_loads))
    (y_g, a_g, dx_g, g_g, l_g), (y_l, a_l, dx_l, g_l, l_l) = outs
    for e in dead:
        assert l_g[e] == 0  # the zero-token case is really exercised
    assert l_g.sum() == 40 * top_k and torch.equal(l_g, l_l)
    torch.testing.assert_close(y_g, y_l, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a_g, a_l, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(dx_g, dx_l, atol=1e-5, rtol=1e-5)
    assert set(g_g) == set(g_l) and "router.weight" in g_g
    for name in g_g:
        torch.testing.assert_close(g_g[name], g_l[name], atol=1e-5, rtol=1e-5, msg=name)
    assert g_g["router.weight"].abs().sum() > 0  # the router learns through the gates and the aux loss
    for e in dead:
        assert g_g["w1"][e].abs().sum() == 0


def test_full_model_grouped_equals_loop():
    torch.manual_seed(3)
    a = build_model(model_config("smoke", n_shared_experts=1))
    b = build_model(model_config("smoke", n_shared_experts=1, dispatch="loop"))
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 256, (2, 32))
    for m in (a, b):
        out = m(idx, idx.roll(-1, 1))
        (out.loss + out.aux_loss).backward()
    torch.testing.assert_close(a(idx).logits, b(idx).logits, atol=1e-5, rtol=1e-5)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=n)


@pytest.mark.parametrize("d,f", [(8, 12), (6, 5)])  # (6, 5) is unaligned: the padded-bmm fallback runs
def test_grouped_matmul_native_and_padded_equal_per_group_mm(d, f):
    torch.manual_seed(0)
    sizes = torch.tensor([3, 0, 7, 1, 0, 9])
    x = torch.randn(int(sizes.sum()), d, requires_grad=True)
    w = torch.randn(6, d, f, requires_grad=True)
    ref = torch.cat([xe @ w[e] for e, xe in enumerate(x.split(sizes.tolist()))])
    rdx, rdw = torch.autograd.grad(ref.sum(), (x, w))
    offs = sizes.cumsum(0).to(torch.int32)
    for fn in (lambda: grouped_matmul(x, w, sizes), lambda: _padded_bmm(x, w, sizes, offs)):
        y = fn()
        torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
        dx, dw = torch.autograd.grad(y.sum(), (x, w))  # y.sum(): the stride-0 gradient layout
        torch.testing.assert_close(dx, rdx, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(dw, rdw, atol=1e-5, rtol=1e-5)
        assert dw[1].abs().sum() == 0 and dw[4].abs().sum() == 0


def test_dense_control_is_a_plain_swiglu():
    m = _moe(n_experts=1, top_k=1)
    assert m.router is None
    x = torch.randn(10, 16)
    y, aux = m(x)
    torch.testing.assert_close(y, _swiglu(x, m.w1[0], m.w3[0], m.w2[0]))
    assert aux.item() == 0.0 and m.last_loads.tolist() == [10.0] and m.last_max_over_mean.item() == 1.0


# -- routing semantics and the expert bias ------------------------------------------------------------------------

def test_bias_changes_selection_only():
    torch.manual_seed(0)
    logits = torch.randn(50, 5) * 2
    bias = torch.tensor([5.0, 0, 0, 0, 0])  # large bias on expert 0
    probs, idx, gates = route(logits, bias, top_k=2)
    assert (idx == 0).any(dim=1).all()  # expert 0 selected for every token
    assert not (logits.argmax(1) == 0).all()  # ... which the unbiased scores would not do
    expected = torch.softmax(logits, -1).gather(1, idx)
    expected = expected / expected.sum(1, keepdim=True)
    torch.testing.assert_close(gates, expected)  # gates come from the *unbiased* softmax
    biased = (torch.softmax(logits, -1) + bias).gather(1, idx)
    assert not torch.allclose(gates, biased / biased.sum(1, keepdim=True))
    _, _, g1 = route(logits, torch.zeros(5), top_k=1)  # top-1: raw probability (Switch), not renormalised to 1
    torch.testing.assert_close(g1.squeeze(1), torch.softmax(logits, -1).max(1).values)


@pytest.mark.parametrize("n_experts,k", [(4, 2), (32, 1), (32, 2), (64, 2), (64, 3)])
def test_top_k_indices_match_torch_topk(n_experts, k):
    scores = torch.rand(300, n_experts, generator=torch.Generator().manual_seed(n_experts + k))
    got = top_k_indices(scores, k)
    ref = torch.topk(scores, k, dim=-1).indices
    assert got.shape == (300, k)
    assert torch.equal(got.sort(dim=1).values, ref.sort(dim=1).values)


def test_update_expert_bias_moves_toward_balance():
    torch.manual_seed(0)
    cfg = model_config("smoke", bias_update_rate=0.01)
    model = build_model(cfg)
    loads = torch.tensor([[10.0, 2.0, 2.0, 2.0], [4.0, 4.0, 1.0, 7.0]])
    model.update_expert_bias(loads)
    bias = model.expert_bias()
    assert bias[0, 0] < 0 and (bias[0, 1:] > 0).all()  # overloaded expert's bias decreases
    torch.testing.assert_close(bias[1], torch.tensor([0.0, 0.0, 0.01, -0.01]))  # sign(mean - load) * u
    assert "blocks.0.moe.expert_bias" in dict(model.named_buffers())
    assert "blocks.0.moe.expert_bias" not in dict(model.named_parameters())
    off = build_model(model_config("smoke", bias_balancing=False))
    off.update_expert_bias(loads)
    assert off.expert_bias().abs().sum() == 0
    with pytest.raises(ValueError, match="loads"):
        model.update_expert_bias(torch.ones(3, 4))


def test_bias_updates_balance_a_skewed_router():
    m = _moe(n_experts=4, top_k=1, bias_update_rate=0.02)
    with torch.no_grad():
        m.router.weight.normal_(0.0, 0.2)
        m.router.weight[0] += 0.3  # expert 0 wins for most tokens
        x = torch.randn(200, 16) + 0.5
        m(x)
        before = m.last_max_over_mean.item()
        history = []
        for _ in range(40):
            m(x)
            history.append(m.last_max_over_mean.item())
            m.update_bias(m.last_loads)
    assert before > 2.0  # really skewed at the start
    assert sum(history[-10:]) / 10 < 0.6 * before  # the real max/mean load came down
    assert m.expert_bias[0] < 0  # by lowering the overloaded expert's bias


# -- auxiliary losses and statistics ------------------------------------------------------------------------------

def test_switch_balance_loss_by_hand():
    probs = [[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.5, 0.25, 0.25], [0.2, 0.2, 0.6]]
    chosen = [[0, 1], [1, 2], [0, 1], [2, 0]]  # top-2 assignments
    E, N, k = 3, 4, 2
    f = [sum(e in c for c in chosen) / (N * k) for e in range(E)]
    P = [sum(p[e] for p in probs) / N for e in range(E)]
    expected = E * sum(f[e] * P[e] for e in range(E))
    loads = torch.bincount(torch.tensor(chosen).flatten(), minlength=E)
    got = switch_balance_loss(torch.tensor(probs), loads)
    assert got.item() == pytest.approx(expected, rel=1e-6)
    uniform = switch_balance_loss(torch.full((6, 3), 1 / 3), torch.tensor([4, 4, 4]))
    assert uniform.item() == pytest.approx(1.0)  # 1 at perfect balance


def test_router_z_loss_by_hand():
    logits = [[1.0, -2.0, 0.5], [3.0, 3.0, -1.0]]
    expected = sum(math.log(sum(math.exp(v) for v in row)) ** 2 for row in logits) / len(logits)
    assert router_z_loss(torch.tensor(logits)).item() == pytest.approx(expected, rel=1e-6)


def test_layer_aux_loss_and_stats_match_formulas():
    m = _moe(n_experts=5, top_k=2, aux_loss_coef=0.3, z_loss_coef=0.05)
    m.expert_bias[3] = 1.0  # selection differs from the plain scores: f_e must use the real selection
    x = torch.randn(30, 16)
    _, aux = m(x)
    logits = m.router(x)
    probs, idx, _ = route(logits, m.expert_bias, 2)
    loads = torch.bincount(idx.flatten(), minlength=5)
    balance = switch_balance_loss(probs, loads)
    torch.testing.assert_close(aux, 0.3 * balance + 0.05 * router_z_loss(logits))
    torch.testing.assert_close(m.last_loads, loads.float())
    torch.testing.assert_close(m.last_balance, balance.detach())
    assert m.last_max_over_mean.item() == pytest.approx(loads.max().item() / 12.0)
    assert m.last_loads[3] == 30  # the biased expert takes every token


def test_max_over_mean_shows_imbalance_the_balance_loss_hides():
    """A bias can overload an expert the router gives low probability: the Switch value then looks *better*
    than balanced (< 1) while the real load is as bad as it gets; max_over_mean must show it."""
    m = _moe(n_experts=4, top_k=1)
    x = torch.rand(64, 16) + 0.5  # positive features
    with torch.no_grad():
        m(x)
        assert m.last_max_over_mean < 2.5
        m.router.weight[0] = -1.0  # expert 0: logit -sum(x) < -8, probability ~0 ...
        m.expert_bias[0] = 10.0  # ... but selected for every token
        m(x)
    assert m.last_loads.tolist() == [64.0, 0.0, 0.0, 0.0]
    assert m.last_balance < 1.0  # the balance loss says "better than balanced"
    assert m.last_max_over_mean == 4.0  # the real max/mean load is the worst possible (E)


def test_routing_stats_shapes_and_consistency():
    torch.manual_seed(0)
    model = build_model(model_config("smoke"))
    with pytest.raises(RuntimeError, match="no forward"):
        model.routing_stats()
    model(torch.randint(0, 256, (3, 20)))
    st = model.routing_stats()
    assert st.loads.shape == (2, 4) and st.balance_loss.shape == (2,) and st.max_over_mean.shape == (2,)
    assert (st.loads.sum(1) == 3 * 20 * 2).all()
    torch.testing.assert_close(st.max_over_mean, st.loads.max(1).values / st.loads.mean(1))
    assert not st.loads.requires_grad and not st.balance_loss.requires_grad


def test_mxfp8_flag_changes_expert_matmuls_only_slightly():
    """cfg.mxfp8 routes the expert matmuls through MXFP8 quantise-dequantise: outputs differ (the flag is wired)
    but stay within the E4M3 precision (about 2^-4 relative per operand)."""
    from islands_kit.config import ModelConfig
    from islands_kit.model import build_model

    torch.manual_seed(0)
    base = ModelConfig(seq_len=16, d_model=32, n_layers=1, n_heads=2, n_experts=4, top_k=2, d_expert=32)
    m0 = build_model(base)
    m1 = build_model(ModelConfig(**{**base.__dict__, "mxfp8": True}))
    m1.load_state_dict(m0.state_dict())
    x = torch.randint(0, 256, (2, 16))
    a, b = m0(x).logits, m1(x).logits
    assert not torch.equal(a, b)
    assert torch.allclose(a, b, atol=0.1 * a.abs().max().item())


def test_mxfp8_expert_ffn_quantises_both_operands_to_mx_not_bf16():
    """With mxfp8 the expert SwiGLU equals plain grouped matmuls of MX-quantised operands (OCP MX reference: E4M3
    elements, one power-of-two scale per 32 values along the contraction dim) — and not of bf16-cast operands: E4M3
    keeps 3 mantissa bits where bf16 keeps 7, so the MX error against fp32 is several times the bf16 one."""
    import torch.nn.functional as F

    from islands_kit import kernels
    from islands_kit.kernels.reference import grouped_mm_reference, mx_qdq_reference
    from islands_kit.model.moe import expert_ffn

    torch.manual_seed(0)
    gs = torch.tensor([3, 0, 5, 2])
    x, w1, w3, w2 = torch.randn(10, 64), torch.randn(4, 64, 96), torch.randn(4, 64, 96), torch.randn(4, 96, 64)

    def swiglu(cast_x, cast_w):
        mm = lambda a, w: grouped_mm_reference(cast_x(a), cast_w(w), gs)  # noqa: E731
        return mm(F.silu(mm(x, w1)) * mm(x, w3), w2)

    with kernels.set_backend("torch"):
        got = expert_ffn(x, w1, w2, w3, gs, mxfp8=True)
    mx = swiglu(lambda a: mx_qdq_reference(a, 32, -1), lambda w: mx_qdq_reference(w, 32, 1))
    bf16 = swiglu(lambda a: a.bfloat16().float(), lambda w: w.bfloat16().float())
    exact = swiglu(lambda a: a, lambda w: w)
    torch.testing.assert_close(got, mx, rtol=1e-5, atol=1e-4)  # the grouped matmuls' summation order only
    err_mx, err_bf16 = (got - exact).abs().max().item(), (bf16 - exact).abs().max().item()
    assert err_mx > 4 * err_bf16 and not torch.allclose(got, bf16, rtol=1e-3, atol=1e-2)
