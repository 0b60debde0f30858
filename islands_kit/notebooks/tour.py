"""Small live examples for ``notebooks/tour.ipynb`` (each runs in seconds on one CPU core).

The tour notebook holds no logic: it calls these, then ``islands_kit.plots``. Each example uses the kit's real
pieces (the router and its losses, the byte model, Shampoo, the link model) on toy sizes:

* ``ngram_bpb`` — what a byte n-gram model scores, the ladder between 8 bpb (uniform) and the compressors;
* ``routing_example`` — two routing states built with the real ``route`` / ``switch_balance_loss``: the balance score
  improves while the busiest expert's real load gets worse;
* ``train_tiny_moe`` — a tiny MoE trained for a few dozen steps, recording both figures side by side;
* ``optimizer_race`` — Shampoo against Adam on an ill-conditioned matrix least-squares problem;
* ``link_durations`` — many transfers of one payload on an idle link, naive vs chunked;
* ``kit_diloco`` — the kit's own DiLoCo (``sync/diloco.py``) on the replicas of the notebook's hand-written
  two-replica DiLoCo, so the notebook can show that its plain PyTorch and the kit agree bit for bit;
* ``outer_step_sentence`` — that section's outer step beside the demo two_site's, both read from their configs.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from islands_kit.comm.transport import LocalTransport
from islands_kit.config import SyncConfig, _check
from islands_kit.config.presets import get_preset
from islands_kit.sync.diloco import DiLoCo
from islands_kit.sync.diloco_spec import DiLoCoConfig


def _as_u8(data: Any, name: str) -> np.ndarray:
    if isinstance(data, torch.Tensor):
        data = data.numpy()
    a = np.frombuffer(bytes(data), dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else np.asarray(data)
    _check(a.dtype == np.uint8 and a.ndim == 1, name, "must be bytes or a 1-D uint8 array", getattr(a, "dtype", None))
    return a


def _context_keys(a: np.ndarray, order: int) -> np.ndarray:
    """Key of the ``order`` bytes before each position i >= order: sum_j a[i-order+j] * 256^(order-1-j)."""
    n = len(a) - order
    keys = np.zeros(n, dtype=np.int64)
    for j in range(order):
        keys = keys * 256 + a[j:j + n].astype(np.int64)
    return keys


def ngram_bpb(train: Any, val: Any, order: int, alpha: float = 0.5) -> float:
    """bpb on ``val`` of a byte n-gram model counted on ``train``: P(x | previous ``order`` bytes) =
    (c(ctx, x) + alpha) / (c(ctx) + 256 alpha) (additive smoothing; alpha = 1/2 is the Krichevsky-Trofimov
    estimator). The first ``order`` validation bytes have no full context and are not scored.

    order 0 is the byte-frequency model (its bpb is the cross-entropy of the byte histogram)."""
    _check(isinstance(order, int) and 0 <= order <= 6, "order", "must be an integer in [0, 6] (keys fit in 64 bits)", order)
    _check(alpha > 0, "alpha", "must be > 0", alpha)
    tr, va = _as_u8(train, "train"), _as_u8(val, "val")
    _check(len(tr) > order and len(va) > order, "val", f"train and val must hold more than order={order} bytes", len(va))
    ctx_tr, nxt_tr = _context_keys(tr, order), tr[order:].astype(np.int64)
    ctx_va, nxt_va = _context_keys(va, order), va[order:].astype(np.int64)
    pair_keys, pair_counts = np.unique(ctx_tr * 256 + nxt_tr, return_counts=True)
    ctx_keys, ctx_counts = np.unique(ctx_tr, return_counts=True)

    def lookup(keys: np.ndarray, table: np.ndarray, counts: np.ndarray) -> np.ndarray:
        pos = np.clip(np.searchsorted(table, keys), 0, len(table) - 1)
        return np.where(table[pos] == keys, counts[pos], 0).astype(np.float64)

    c_pair = lookup(ctx_va * 256 + nxt_va, pair_keys, pair_counts)
    c_ctx = lookup(ctx_va, ctx_keys, ctx_counts)
    p = (c_pair + alpha) / (c_ctx + 256 * alpha)
    return float(-np.log2(p).mean())


def routing_example(n_tokens: int = 4096, n_experts: int = 4, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Two top-1 routing states scored with the kit's real router (``model.moe.route``) and Switch loss.

    * "confident router": each token strongly prefers one expert, the preferences spread 40/20/20/20 %: real load
      max/mean = 1.6, balance score about E·Σ f_e² ≈ 1.1.
    * "hesitant router": near-uniform probabilities with a slight tilt to expert 0, so argmax sends most tokens
      there: max/mean load near 3, yet the balance score drops toward 1, because the mean probability P_e of the
      overloaded expert is barely above 1/E. Minimising the aux loss can move a router this way.

    Returns label -> {"load_fraction", "mean_prob", "balance_loss", "max_over_mean"} (numpy arrays / floats)."""
    from islands_kit.model.moe import route, switch_balance_loss

    _check(n_experts >= 2, "n_experts", "must be >= 2", n_experts)
    g = torch.Generator().manual_seed(seed)
    E = n_experts
    share = torch.full((E,), 0.6 / (E - 1))
    share[0] = 0.4
    fav = torch.multinomial(share, n_tokens, replacement=True, generator=g)  # (N,) favourite expert per token
    confident_NE = 4.0 * torch.nn.functional.one_hot(fav, E).float() + 0.1 * torch.randn(n_tokens, E, generator=g)
    hesitant_NE = 0.05 * torch.randn(n_tokens, E, generator=g)
    hesitant_NE[:, 0] += 0.1
    out = {}
    for label, logits_NE in (("confident router", confident_NE), ("hesitant router", hesitant_NE)):
        probs_NE, idx_NK, _ = route(logits_NE, torch.zeros(E), top_k=1)
        loads_E = torch.bincount(idx_NK.reshape(-1), minlength=E).float()
        out[label] = {
            "load_fraction": (loads_E / loads_E.sum()).numpy(),
            "mean_prob": probs_NE.mean(0).numpy(),
            "balance_loss": float(switch_balance_loss(probs_NE, loads_E)),
            "max_over_mean": float(loads_E.max() / loads_E.mean()),
        }
    return out


def train_tiny_moe(train: torch.Tensor, steps: int = 60, seed: int = 0, aux_loss_coef: float = 0.01,
                   bias_balancing: bool = False, batch_size: int = 16, lr: float = 3e-3, record_every: int = 5,
                   **model_overrides: Any) -> list[dict[str, Any]]:
    """Train a tiny byte MoE (the ``smoke`` model size with 8 experts) with AdamW and record its routing every ``record_every`` steps.

    train: 1-D uint8 tensor of training bytes (``data.split_bytes``). aux_loss_coef: the Switch loss coefficient;
    bias_balancing: apply the aux-loss-free bias update (DeepSeek-V3) from each step's loads.
    Returns records shaped like ``history.jsonl`` (step, tokens, train_loss, balance_loss and max_over_mean_load
    per layer, the latter two averaged over the steps since the previous record)."""
    from islands_kit.data import BatchStream
    from islands_kit.model import ByteTransformer

    _check(isinstance(steps, int) and steps >= 1, "steps", "must be an integer >= 1", steps)
    _check(isinstance(record_every, int) and record_every >= 1, "record_every", "must be an integer >= 1", record_every)
    from islands_kit.config.presets import model_config

    cfg = model_config("smoke", **{"n_experts": 8, "aux_loss_coef": aux_loss_coef, "bias_balancing": bias_balancing,
                                   **model_overrides})
    torch.manual_seed(seed)
    model = ByteTransformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    stream = BatchStream(train, batch_size, cfg.seq_len, seed=seed, stream_id=0)
    records: list[dict[str, Any]] = []
    acc_bal, acc_mom, acc_loss = [], [], []
    for step in range(1, steps + 1):
        x, y = stream.next()
        out = model(x, y)
        opt.zero_grad(set_to_none=True)
        (out.loss + out.aux_loss).backward()
        opt.step()
        stats = model.routing_stats()
        model.update_expert_bias(stats.loads)  # a no-op unless bias_balancing
        acc_bal.append(stats.balance_loss.numpy().copy())
        acc_mom.append(stats.max_over_mean.numpy().copy())
        acc_loss.append(float(out.loss.detach()))
        if step % record_every == 0 or step == steps:
            records.append({"step": step, "tokens": step * batch_size * cfg.seq_len,
                            "train_loss": float(np.mean(acc_loss)) / math.log(2),  # bits per byte on training batches
                            "balance_loss": np.mean(acc_bal, axis=0).round(6).tolist(),
                            "max_over_mean_load": np.mean(acc_mom, axis=0).round(4).tolist()})
            acc_bal, acc_mom, acc_loss = [], [], []
    return records


def ill_conditioned_problem(n: int = 24, cond: float = 1e3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(A, B, C) for min_W ½·mean((A W B − C)²): A, B symmetric positive definite with eigenvalues log-spaced in
    [1, sqrt(cond)], so the Hessian (B Bᵀ) ⊗ (Aᵀ A) has condition number cond² — Kronecker-structured, the case
    Shampoo's left/right preconditioners L^{-1/4}, R^{-1/4} are built for."""
    g = torch.Generator().manual_seed(seed)

    def spd() -> torch.Tensor:
        q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
        return (q * torch.logspace(0, 0.5 * math.log10(cond), n, dtype=torch.float64)) @ q.T

    A, B = spd(), spd()
    C = A @ torch.randn(n, n, generator=g, dtype=torch.float64) @ B
    return A, B, C


def optimizer_race(n: int = 24, cond: float = 1e3, steps: int = 150, lrs: Sequence[float] = (0.03, 0.1, 0.3),
                   shampoo_starts: Sequence[int] = (5,), epsilon: float = 1e-12, precondition_frequency: int = 1,
                   seed: int = 0, muon_lrs: Sequence[float] = ()) -> dict[str, list[float]]:
    """Loss curves of Adam and of Shampoo (Adam grafting; one run per ``start_preconditioning_step`` in
    ``shampoo_starts``) on ``ill_conditioned_problem``, each at the best learning rate of ``lrs`` (lowest final
    loss): label -> losses per step. Before its start step Shampoo is its grafting optimizer, i.e. Adam. With
    ``muon_lrs``, also the kit's Muon (``optim.name=muon``'s matrix rule: momentum 0.95, Nesterov, 5 Newton-Schulz
    steps) at the best of those."""
    from islands_kit.optim import Muon, Shampoo

    A, B, C = ill_conditioned_problem(n, cond, seed)

    def run(make: Any) -> list[float]:
        W = torch.zeros(n, n, dtype=torch.float64, requires_grad=True)
        opt = make([W])
        out = []
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = 0.5 * ((A @ W @ B - C) ** 2).mean()
            loss.backward()
            opt.step()
            out.append(float(loss.detach()))
        return out

    def best(label: str, make: Any) -> tuple[str, list[float]]:
        curves = {lr: run(lambda p: make(p, lr)) for lr in lrs}
        finite = {lr: c for lr, c in curves.items() if math.isfinite(c[-1])}
        lr = min(finite, key=lambda k: finite[k][-1]) if finite else lrs[0]
        return f"{label} (best lr {lr:g})", curves[lr]

    out = dict([best("Adam", lambda p, lr: torch.optim.Adam(p, lr=lr))])
    for start in shampoo_starts:
        out.update([best(f"Shampoo, preconditioned from step {start}", lambda p, lr, start=start: Shampoo(
            p, lr=lr, epsilon=epsilon, precondition_frequency=precondition_frequency,
            start_preconditioning_step=start))])
    if muon_lrs:
        lrs = tuple(muon_lrs)
        out.update([best("Muon", lambda p, lr: Muon([{"params": p, "kind": "muon"}], lr=lr))])
    return out


def link_durations(preset: str = "transpacific-25g", payload_bytes: int = 64 << 20, n_transfers: int = 300,
                   methods: Sequence[str] = ("naive", "chunked"), seed: int = 0,
                   **link_overrides: Any) -> tuple[dict[str, list[float]], float]:
    """Durations (s) of ``n_transfers`` transfers of ``payload_bytes`` from island 0 to 1 on an otherwise idle link,
    one list per method, and the ideal closed-form time. Transfers start far apart (10 s + 100x the ideal time), so
    each sees an idle wire: the spread comes from jitter, the heavy tail and losses alone."""
    from islands_kit.comm.link import LinkModel, closed_form_time, link_config

    _check(isinstance(n_transfers, int) and n_transfers >= 1, "n_transfers", "must be an integer >= 1", n_transfers)
    out: dict[str, list[float]] = {}
    ideal = closed_form_time(link_config(preset, **link_overrides), payload_bytes)
    gap = 10.0 + 100.0 * ideal
    for method in methods:
        lm = LinkModel(link_config(preset, **{**link_overrides, "method": method}), seed=seed)
        out[method] = [lm.transfer(payload_bytes, k * gap, 0, 1).duration_s for k in range(n_transfers)]
    return out, ideal


def bpb_ladder(train: Any, val: Any, orders: Sequence[int] = (0, 1, 2, 3)) -> dict[str, float]:
    """From 8 bpb (uniform) down: byte n-gram models of increasing order, then gzip/bz2/xz, all on ``val``."""
    from islands_kit.train.metrics import compressor_bpb

    out = {"uniform over 256 byte values": 8.0}
    for k in orders:
        out[f"{k + 1}-gram bytes (context {k})"] = ngram_bpb(train, val, k)
    floors = compressor_bpb(_as_u8(val, "val").tobytes())
    out.update({"gzip -9": floors["gzip"], "bzip2 -9": floors["bz2"], "xz -9e": floors["xz"]})
    return out


def butterfly_mixing(n_cells: int = 8) -> dict[str, torch.Tensor]:
    """Mixing matrices after the first 1, 2, …, log2(n) rounds of instantaneous butterfly merges (uniform at the end)."""
    from islands_kit.sync.butterfly import check_power_of_two, mixing_matrix

    R = check_power_of_two(n_cells)
    return {f"after round{'s' if r else ''} {', '.join(str(i) for i in range(r + 1))}": mixing_matrix(n_cells, list(range(r + 1)))
            for r in range(R)}


def kit_diloco(initial: nn.Module, trained: Sequence[Sequence[nn.Module]], H: int, outer_lr: float,
               outer_momentum: float, seed: int, codec: str = "int4", block_size: int = 128) -> list[dict[str, Any]]:
    """Outer rounds of the kit's DiLoCo (``sync.diloco.DiLoCo``: one fragment holding every parameter, τ = 0, α = 0,
    outer SGD with Nesterov momentum, ``codec`` with stochastic rounding and error feedback, equal token weights) on
    given replicas: ``initial`` is the global model before round 0, ``trained[r][i]`` island i's replica after the
    inner steps of round r (trained by the caller from the global model round r - 1 produced). Per round: the
    global parameters after the outer step (``global``, flat) and each island's error-feedback residual
    (``residuals``), as the strategy holds them."""
    n = len(trained[0])
    models = {i: copy.deepcopy(initial) for i in range(n)}
    names = [name for name, _ in initial.named_parameters()]
    cfg = SyncConfig(strategy="diloco", H=H, n_fragments=1, tau=0, codec=codec, codec_block_size=block_size,
                     diloco=DiLoCoConfig(alpha=0.0, outer_lr=outer_lr, outer_momentum=outer_momentum, nesterov=True))
    strategy = DiLoCo(models, LocalTransport(n), [names], cfg, seed)
    out = []
    for r, replicas in enumerate(trained):
        for i, m in enumerate(replicas):
            models[i].load_state_dict(m.state_dict())
        strategy.after_inner_step((r + 1) * H, {i: H for i in range(n)})  # the window's last step: the sync
        residuals = [strategy.ef.residual((i, 0)) for i in range(n)]
        out.append({"global": strategy.global_params[0].detach().clone(),
                    "residuals": [torch.zeros(0) if e is None else e.clone() for e in residuals]})
    return out


def outer_step_sentence(outer_lr: float, outer_momentum: float, experiment: str = "two_site",
                        preset: str = "demo") -> str:
    """The tour's DiLoCo section beside what ``experiment`` at ``preset`` does, both in words read from the configs
    (``DiLoCoConfig.outer_step`` and ``merge_words``), so the tour cannot describe a demo that no longer exists."""
    mine = DiLoCoConfig(outer_lr=outer_lr, outer_momentum=outer_momentum)
    demo = get_preset(experiment, preset).sync.diloco
    return (f"this section: the two outer gradients merged by {mine.merge_words}, then {mine.outer_step}; "
            f"the {preset} preset's {experiment}: merged by {demo.merge_words}, then {demo.outer_step}")
