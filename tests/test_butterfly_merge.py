"""The butterfly's delay-aware merge against its derived mixing matrix (delay > 0), checked by running the Butterfly
class on scalar 'models'; exact averages on a frozen snapshot; scoring the cell mean."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from islands_kit.comm.transport import LocalTransport
from islands_kit.config import SyncConfig
from islands_kit.sync.butterfly import Butterfly, butterfly_schedule, mixing_matrix
from islands_kit.sync.butterfly_spec import ButterflyConfig

N, P, H, E, D = 8, 2, 12, 3, 2  # exchanges of a fragment are H/E = 4 steps apart > D


class Scalars(nn.Module):
    """One scalar per fragment (float64 here; the wire and the merges run in float32, hence the tolerances)."""

    def __init__(self, x: list[float]) -> None:
        super().__init__()
        for p in range(P):
            self.register_parameter(f"b{p}", nn.Parameter(torch.tensor([x[p]], dtype=torch.float64)))


def increment(i: int, s: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(97 * i + s)
    return torch.randn(P, generator=g, dtype=torch.float64)


def run(steps: int, **opts) -> tuple[Butterfly, torch.Tensor, torch.Tensor]:
    x0 = torch.randn(N, P, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    models = {i: Scalars(x0[i].tolist()) for i in range(N)}
    cfg = SyncConfig(strategy="butterfly", H=H, n_fragments=P, tau=D, codec="fp32", error_feedback=False,
                     butterfly=ButterflyConfig(exchanges_per_window=E, **opts))
    b = Butterfly(models, LocalTransport(N), [[f"b{p}"] for p in range(P)], cfg, seed=0)
    for s in range(1, steps + 1):
        with torch.no_grad():
            for i, m in models.items():
                for p in range(P):
                    getattr(m, f"b{p}").add_(increment(i, s)[p])
        b.after_inner_step(s, {i: 1 for i in models})
    b.finalize(steps)
    x = torch.tensor([[getattr(models[i], f"b{p}").item() for p in range(P)] for i in range(N)], dtype=torch.float64)
    return b, x0, x


def derived(steps: int, x0: torch.Tensor) -> torch.Tensor:
    """x(end) = W(all) x(0) + Σ_s W(≥ s) u(s), per fragment, from the schedule and the round matrices."""
    sched = butterfly_schedule(N, H, E, P, steps)
    out = torch.zeros(N, P, dtype=torch.float64)
    for p in range(P):
        ex = [e for e in sched if e.fragment == p]

        def W_from(s: int) -> torch.Tensor:
            return mixing_matrix(N, [e.round for e in ex if e.step >= s])

        x = W_from(1) @ x0[:, p]
        for s in range(1, steps + 1):
            u = torch.stack([increment(i, s)[p] for i in range(N)])
            x = x + W_from(s) @ u
        out[:, p] = x
    return out


def test_delay_aware_merge_follows_the_derived_mixing_matrix():
    steps = 3 * H + 1
    _, x0, x = run(steps, merge="delay_aware")
    torch.testing.assert_close(x, derived(steps, x0), atol=2e-5, rtol=1e-5)


def test_plain_merge_with_delay_does_not():
    """Today's rule halves the steps taken during the delay: it departs from the derived matrix (and from the mean)."""
    steps = 3 * H + 1
    _, x0, x = run(steps, merge="mean")
    assert (x - derived(steps, x0)).abs().max() > 1e-3


def test_delay_aware_preserves_the_cell_average():
    steps = 2 * H + 3
    _, x0, x = run(steps, merge="delay_aware")
    total_u = sum(torch.stack([increment(i, s) for i in range(N)]) for s in range(1, steps + 1))
    torch.testing.assert_close(x.mean(0), (x0 + total_u).mean(0), atol=2e-5, rtol=1e-5)


def test_final_average_leaves_every_cell_at_the_exact_mean():
    steps = 2 * H + 5
    _, x0, x = run(steps, merge="delay_aware", final_average=True)
    total_u = sum(torch.stack([increment(i, s) for i in range(N)]) for s in range(1, steps + 1))
    target = (x0 + total_u).mean(0)
    torch.testing.assert_close(x, target.expand(N, P), atol=2e-5, rtol=1e-5)


def test_periodic_exact_average_syncs_every_cell_and_is_charged():
    b, _, _ = run(H, merge="delay_aware")
    b2, _, x = run(H, merge="delay_aware", exact_average_every=1)
    # after the window's exact average (before finalize drains the last in-flight merges) cells agree closely,
    # and the complete butterfly cost R rounds x P fragments x N messages of fp32 scalars more
    msgs = [t.transport.ledger.to_dict()["channels"]["fragments"]["messages"] for t in (b, b2)]
    assert msgs[1] - msgs[0] == 3 * P * N  # R = 3 rounds x P fragments x one message per cell
    per_message = b.transport.ledger.bytes("fragments") // msgs[0]
    assert b2.transport.ledger.bytes("fragments") - b.transport.ledger.bytes("fragments") == 3 * P * N * per_message


def test_mean_eval_scores_the_cell_average():
    b, _, x = run(H + 2, eval="mean")
    ev = b.eval_state()
    torch.testing.assert_close(ev["b0"], x[:, 0].mean().reshape(1), atol=2e-6, rtol=0)
    assert not b.deploys_own_replica


def test_mean_eval_needs_every_cell_in_process():
    models = {0: Scalars([0.0, 0.0])}

    class Partial(LocalTransport):
        pass

    tr = Partial(N)
    tr.local_islands = [0]
    with pytest.raises(ValueError, match="sync.butterfly.eval"):
        Butterfly(models, tr, [[f"b{p}"] for p in range(P)],
                  SyncConfig(strategy="butterfly", H=H, n_fragments=P, butterfly=ButterflyConfig(eval="mean")), seed=0)
