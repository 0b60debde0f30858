"""Shampoo (islands_kit.optim.shampoo): equivalence to torch optimizers with preconditioning off, a plain reference of
a blocked Shampoo step, idle parameters, resume, block ownership across two gloo ranks, errors, and a behaviour test."""
from __future__ import annotations

import copy
import io
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from ports import free_port

from islands_kit.optim import Shampoo
from islands_kit.optim.matrix_functions import matrix_inverse_root_reference


def _mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.LayerNorm(12), torch.nn.GELU(), torch.nn.Linear(12, 3))


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(16, 6, generator=g), torch.randn(16, 3, generator=g)


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int, start: int = 0) -> None:
    for s in range(start, start + steps):
        x, y = _batch(s)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


# ---------------------------------------------------------------- 1. preconditioning off == torch optimizers
OFF = dict(start_preconditioning_step=math.inf)
REFERENCES: list[tuple[str, dict[str, Any], Callable[..., torch.optim.Optimizer], dict[str, Any]]] = [
    ("adam", dict(betas=(0.9, 0.99), grafting_epsilon=1e-7), torch.optim.Adam, dict(betas=(0.9, 0.99), eps=1e-7)),
    ("adamw", dict(betas=(0.8, 0.95), weight_decay=0.1), torch.optim.AdamW, dict(betas=(0.8, 0.95), weight_decay=0.1)),
    ("adam-l2", dict(weight_decay=0.05, decoupled_weight_decay=False), torch.optim.Adam, dict(weight_decay=0.05)),
    ("adagrad", dict(grafting="adagrad", betas=(0.0, 0.9)), torch.optim.Adagrad, dict(eps=1e-8)),
    ("rmsprop", dict(grafting="rmsprop", betas=(0.0, 0.9)), torch.optim.RMSprop, dict(alpha=0.9, eps=1e-8)),
    ("sgd-nesterov", dict(grafting="sgd", betas=(0.0, 0.9), momentum=0.9, nesterov=True), torch.optim.SGD, dict(momentum=0.9, nesterov=True)),
]


@pytest.mark.parametrize("name, ours, ref_cls, ref_kwargs", REFERENCES, ids=[r[0] for r in REFERENCES])
@pytest.mark.parametrize("off", [OFF, dict(start_preconditioning_step=10**9)], ids=["inf", "large-int"])
def test_preconditioning_off_matches_torch(name: str, ours: dict, ref_cls: Callable, ref_kwargs: dict, off: dict) -> None:
    a, b = _mlp(), _mlp()
    opt_a = Shampoo(a.parameters(), lr=3e-2, **ours, **off)
    opt_b = ref_cls(b.parameters(), lr=3e-2, **ref_kwargs)
    for s in range(20):
        _train(a, opt_a, 1, s)
        _train(b, opt_b, 1, s)
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)
    assert any(p.ndim == 1 for p in a.parameters()) and any(p.ndim == 2 for p in a.parameters())


# ---------------------------------------------------------------- 2. blocked Shampoo == a plain per-block reference
def _reference_shampoo(W: torch.Tensor, grads: list[torch.Tensor], lr: float, bs: int, eps: float, root: float = 4.0,
                       b2: float = 1.0) -> torch.Tensor:
    """Adam-grafted Shampoo on one matrix, roots every step, blocks sliced (not padded) with row/col edges at multiples
    of the block size bs; NumPy float64 roots X^(-1/root); factors L <- b2 L + (1 - b2) G G^T (plain sums for b2 = 1),
    bias-corrected by 1 - b2^t; betas (0.9, 0.999), grafting eps 1e-8, bias correction."""
    W, m, v = W.clone(), torch.zeros_like(W), torch.zeros_like(W)
    rows = [slice(i, min(i + bs, W.shape[0])) for i in range(0, W.shape[0], bs)]
    cols = [slice(j, min(j + bs, W.shape[1])) for j in range(0, W.shape[1], bs)]
    L = {(r.start, c.start): 0.0 for r in rows for c in cols}
    R = dict(L)
    for t, G in enumerate(grads, start=1):
        m = 0.9 * m + 0.1 * G
        v = 0.999 * v + 0.001 * G * G
        graft = m / ((v / (1 - 0.999**t)).sqrt() + 1e-8)
        D = torch.zeros_like(W)
        for r in rows:
            for c in cols:
                k = (r.start, c.start)
                a, corr = (1.0, 1.0) if b2 == 1.0 else (1 - b2, 1 - b2**t)
                L[k] = b2 * L[k] + a * G[r, c] @ G[r, c].T
                R[k] = b2 * R[k] + a * G[r, c].T @ G[r, c]
                P = matrix_inverse_root_reference(L[k] / corr, root, eps) @ m[r, c] @ matrix_inverse_root_reference(R[k] / corr, root, eps)
                D[r, c] = P * graft[r, c].norm() / P.norm()
        W = W - lr / (1 - 0.9**t) * D
    return W


@pytest.mark.parametrize("max_dim, bs, root, b2", [(4, 4, 0, 1.0), (3, 3, 0, 1.0), (100, 100, 0, 1.0), (4, 4, 2, 0.9)])
def test_blocked_step_matches_plain_reference(max_dim: int, bs: int, root: float, b2: float) -> None:
    # (10, 8): max_dim 4 -> rows 3 blocks of 4 (last one padded by 2), cols 2 of 4; 3 -> 4x3 rows (pad 2), 3x3 cols (pad 1)
    g = torch.Generator().manual_seed(0)
    W0 = torch.randn(10, 8, generator=g)
    grads = [torch.randn(10, 8, generator=g) for _ in range(4)]
    W = torch.nn.Parameter(W0.clone())
    opt = Shampoo([W], lr=0.1, epsilon=1e-6, max_preconditioner_dim=max_dim, precondition_frequency=1, start_preconditioning_step=1,
                  exponent_override=root, shampoo_beta2=b2)
    for G in grads:
        W.grad = G.clone()
        opt.step()
    torch.testing.assert_close(W.detach(), _reference_shampoo(W0, grads, 0.1, bs, 1e-6, root or 4.0, b2), rtol=1e-4, atol=1e-5)


def test_block_shapes_and_large_block_equals_unblocked() -> None:
    torch.manual_seed(0)
    mat = torch.nn.Parameter(torch.randn(10, 7))
    experts = torch.nn.Parameter(torch.randn(3, 5, 9))  # (E, d, f): each expert its own matrix
    bias = torch.nn.Parameter(torch.randn(7))
    opt = Shampoo([mat, experts, bias], max_preconditioner_dim=4, start_preconditioning_step=1)
    for p in (mat, experts, bias):
        p.grad = torch.randn_like(p)
    opt.step()
    assert opt.state[mat]["factor_L"].shape == (3 * 2, 4, 4)  # 10 -> 3 blocks of 4; 7 -> 2 blocks of 4
    assert opt.state[mat]["factor_R"].shape == (6, 4, 4)
    assert opt.state[experts]["factor_L"].shape == (3 * 2 * 3, 3, 3)  # 5 -> 2 of 3; 9 -> 3 of 3
    assert opt.state[experts]["root_R"].shape == (18, 3, 3)
    assert "factor_L" not in opt.state[bias]  # 1-D: grafting only

    def run(max_dim: int) -> list[torch.Tensor]:
        torch.manual_seed(1)
        ps = [torch.nn.Parameter(torch.randn(10, 7)), torch.nn.Parameter(torch.randn(3, 5, 9))]
        o = Shampoo(ps, lr=0.05, max_preconditioner_dim=max_dim, start_preconditioning_step=2, precondition_frequency=2)
        for _ in range(5):
            for p in ps:
                p.grad = torch.randn_like(p)
            o.step()
        assert o.state[ps[1]]["factor_L"].shape == (3, 5, 5)
        return [p.detach().clone() for p in ps]

    for a, b in zip(run(10), run(1024)):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- failures never reach the parameters
def test_forced_root_failure_keeps_previous_root_and_no_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _mlp()
    opt = Shampoo(model.parameters(), lr=1e-2, start_preconditioning_step=2, precondition_frequency=2)
    _train(model, opt, 4)  # roots computed at steps 2 and 4
    w = model[0].weight
    root_before = opt.state[w]["root_L"].clone()

    def broken_eigh(*args: Any, **kwargs: Any):
        raise torch.linalg.LinAlgError("forced failure")

    monkeypatch.setattr(torch.linalg, "eigh", broken_eigh)
    _train(model, opt, 2, start=4)  # step 6 recomputes roots: every decomposition fails
    assert opt.root_failures == 4  # two matrices x (L, R)
    assert torch.equal(opt.state[w]["root_L"], root_before)
    assert all(torch.isfinite(p).all() for p in model.parameters())


# ---------------------------------------------------------------- 4. idle parameters
def test_idle_parameter_is_untouched() -> None:
    torch.manual_seed(0)
    experts = [torch.nn.Linear(4, 4) for _ in range(3)]
    params = [p for e in experts for p in e.parameters()]
    opt = Shampoo(params, lr=1e-2, start_preconditioning_step=2, precondition_frequency=2, momentum=0.5, weight_decay=0.1)
    x = torch.randn(8, 4)

    def step(active: list[int]) -> None:
        opt.zero_grad(set_to_none=True)
        sum(experts[i](x).square().mean() for i in active).backward()
        opt.step()

    step([0, 1, 2])
    step([0, 1, 2])
    idle = experts[2].weight
    value, state = idle.detach().clone(), copy.deepcopy(opt.state[idle])
    busy_before = experts[0].weight.detach().clone()
    for _ in range(3):
        step([0, 1])  # expert 2 gets no gradient (grad is None)
    assert torch.equal(idle, value)
    assert opt.state[idle]["step"] == state["step"] == 2
    for k, v in state.items():
        assert torch.equal(opt.state[idle][k], v) if torch.is_tensor(v) else opt.state[idle][k] == v
    assert opt.state[experts[0].weight]["step"] == 5 and not torch.equal(experts[0].weight, busy_before)


# ---------------------------------------------------------------- 5. resume
def test_state_dict_resume_takes_identical_step() -> None:
    kw = dict(lr=1e-2, start_preconditioning_step=3, precondition_frequency=2, momentum=0.9, nesterov=True,
              weight_decay=0.01, shampoo_beta2=0.99, max_preconditioner_dim=5)
    a = _mlp()
    opt_a = Shampoo(a.parameters(), **kw)
    _train(a, opt_a, 7)
    buf = io.BytesIO()
    torch.save({"model": a.state_dict(), "opt": opt_a.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf)
    b = _mlp(seed=123)  # different init: everything must come from the checkpoint
    b.load_state_dict(ckpt["model"])
    opt_b = Shampoo(b.parameters(), **kw)
    opt_b.load_state_dict(ckpt["opt"])
    _train(a, opt_a, 3, start=7)  # crosses a root recomputation (step 8 and 10)
    _train(b, opt_b, 3, start=7)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


# ---------------------------------------------------------------- 6. block ownership across two gloo ranks
DIST_KW = dict(lr=2e-2, start_preconditioning_step=2, precondition_frequency=2, max_preconditioner_dim=4, momentum=0.5)


def dist_train(process_group: Any) -> tuple[list[torch.Tensor], Shampoo]:
    """Same model and data on every rank (as after a data-parallel gradient all-reduce); 6 steps."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(10, 7)), torch.nn.Parameter(torch.randn(4, 6, 5)), torch.nn.Parameter(torch.randn(7))]
    opt = Shampoo(params, process_group=process_group, **DIST_KW)
    for s in range(6):
        g = torch.Generator().manual_seed(s)
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return [p.detach().clone() for p in params], opt


WORKER = """
import sys, datetime, torch, torch.distributed as dist
sys.path.insert(0, sys.argv[4])
from test_shampoo import dist_train
rank, world, init, out = int(sys.argv[1]), 2, sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30))
params, opt = dist_train(dist.group.WORLD)
owned = sum(len(opt.state[p].get("factor_L", ())) for p in opt.param_groups[0]["params"])
torch.save({"params": params, "owned": owned}, f"{out}/rank{rank}.pt")
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_block_ownership_two_gloo_ranks_equals_one_process(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    init = f"tcp://127.0.0.1:{free_port()}"
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), init, str(tmp_path), str(Path(__file__).parent)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(2)]
    try:
        outs = [p.communicate(timeout=240)[0].decode() for p in procs]  # generous: a loaded 2-core box
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    single, opt = dist_train(None)
    k_total = sum(len(opt.state[p].get("factor_L", ())) for p in opt.param_groups[0]["params"])
    assert results[0]["owned"] + results[1]["owned"] == k_total == 6 + 4 * 2 * 2  # each block owned exactly once
    assert 0 < results[0]["owned"] < k_total  # really shared
    for res in results:
        for a, b in zip(res["params"], single):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- 7. errors
@pytest.mark.parametrize("kwargs, name", [
    (dict(lr=0.0), "lr"), (dict(lr=-1.0), "lr"), (dict(epsilon=0.0), "epsilon"),
    (dict(precondition_frequency=0), "precondition_frequency"), (dict(grafting="adamax"), "grafting"),
    (dict(max_preconditioner_dim=0), "max_preconditioner_dim"), (dict(betas=(1.0, 0.999)), "betas"),
    (dict(betas=(0.9, -0.1)), "betas"), (dict(shampoo_beta2=0.0), "shampoo_beta2"),
    (dict(grafting_epsilon=0.0), "grafting_epsilon"), (dict(momentum=1.0), "momentum"),
    (dict(nesterov=True), "nesterov"), (dict(start_preconditioning_step=-1), "start_preconditioning_step"),
    (dict(weight_decay=-0.1), "weight_decay"), (dict(exponent_override=-2), "exponent_override"),
])
def test_bad_settings_raise_naming_the_argument(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}: must"):
        Shampoo([torch.nn.Parameter(torch.zeros(2, 2))], **kwargs)


# ---------------------------------------------------------------- 8. it preconditions
def _least_squares_loss(make_opt: Callable[[list[torch.Tensor]], torch.optim.Optimizer], steps: int = 100) -> float:
    """Relative loss of min ||X W - Y||^2 with correlated, ill-conditioned inputs (singular values 1 .. 1e-2)."""
    g = torch.Generator().manual_seed(0)
    U, _ = torch.linalg.qr(torch.randn(24, 24, generator=g))
    X = torch.randn(128, 24, generator=g) @ (U * torch.logspace(0, -2, 24)) @ U.T
    Y = X @ torch.randn(24, 12, generator=g)
    W = torch.nn.Parameter(torch.zeros(24, 12))
    opt = make_opt([W])
    for _ in range(steps):
        opt.zero_grad()
        ((X @ W - Y) ** 2).mean().backward()
        opt.step()
    with torch.no_grad():
        return (((X @ W - Y) ** 2).mean() / (Y**2).mean()).item()


def test_shampoo_beats_adam_on_ill_conditioned_least_squares() -> None:
    lrs = (0.03, 0.1, 0.3, 1.0)  # each optimizer gets its best learning rate
    adam = min(_least_squares_loss(lambda p: torch.optim.Adam(p, lr=lr)) for lr in lrs)
    shampoo = min(_least_squares_loss(lambda p: Shampoo(p, lr=lr, start_preconditioning_step=5, precondition_frequency=5)) for lr in lrs)
    assert shampoo < adam / 5, (shampoo, adam)
