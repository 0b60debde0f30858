"""Butterfly payloads as deltas against the cells' last common state (``sync.butterfly.payload``), with error
feedback: fp32 deltas merge like fp32 weights; with a lossy codec the residuals keep Σ_i θ_i + ½ Σ_i e_i conserved, so
the cell mean does not drift with the number of exchanges (it does without error feedback); the byte ledger charges
the encoded sizes; a checkpoint taken mid-run with deltas in flight resumes bit for bit."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.transport import LocalTransport
from islands_kit.config import ConfigError, SyncConfig
from islands_kit.sync.butterfly import Butterfly, butterfly_schedule
from islands_kit.sync.butterfly_spec import ButterflyConfig

N, P, K, H, E, D = 8, 2, 300, 12, 3, 2  # K values per fragment: several codec blocks (block size 128), one partial


class Vectors(nn.Module):
    """One float32 vector of K values per fragment (float32 like a real replica's parameters)."""

    def __init__(self, x: torch.Tensor) -> None:  # x: (P, K)
        super().__init__()
        for p in range(P):
            self.register_parameter(f"w{p}", nn.Parameter(x[p].clone()))


def increment(i: int, s: int, scale: float) -> torch.Tensor:
    """Cell i's local step s: (P, K) float32."""
    return scale * torch.randn(P, K, generator=torch.Generator().manual_seed(97 * i + s))


def run(steps: int, *, payload: str, codec: str, ef: bool, step_scale: float = 1e-3, weight_scale: float = 1.0,
        merge: str = "delay_aware", **opts) -> tuple[Butterfly, torch.Tensor, torch.Tensor]:
    """Train N cells from the same weights with random local steps; returns (strategy, x0 (P, K), x (N, P, K))."""
    x0 = weight_scale * torch.randn(P, K, generator=torch.Generator().manual_seed(3))
    models = {i: Vectors(x0) for i in range(N)}
    cfg = SyncConfig(strategy="butterfly", H=H, n_fragments=P, tau=D, codec=codec, error_feedback=ef,
                     butterfly=ButterflyConfig(exchanges_per_window=E, merge=merge, payload=payload, **opts))
    b = Butterfly(models, LocalTransport(N), [[f"w{p}"] for p in range(P)], cfg, seed=0)
    for s in range(1, steps + 1):
        with torch.no_grad():
            for i, m in models.items():
                u = increment(i, s, step_scale)
                for p in range(P):
                    getattr(m, f"w{p}").add_(u[p])
        b.after_inner_step(s, {i: 1 for i in models})
    b.finalize(steps)
    return b, x0, cells(models)


def cells(models: dict[int, nn.Module]) -> torch.Tensor:
    return torch.stack([torch.stack([getattr(models[i], f"w{p}").detach() for p in range(P)]) for i in range(N)])


def exact_mean(x0: torch.Tensor, steps: int, step_scale: float) -> torch.Tensor:
    """What a lossless doubly-stochastic mixing leaves as the cell mean: x0 + mean of every local step, (P, K) float64."""
    total = sum(torch.stack([increment(i, s, step_scale) for i in range(N)]).double() for s in range(1, steps + 1))
    return x0.double() + total.mean(0)


def residual_sum(b: Butterfly) -> torch.Tensor:
    """Σ_i e_i, (P, K) float64 (zeros where a fragment has not been sent)."""
    out = torch.zeros(P, K, dtype=torch.float64)
    for i in range(N):
        for p in range(P):
            r = b.ef.residual((i, p))
            if r is not None:
                out[p] += r.double()
    return out


@pytest.mark.parametrize("merge, opts", [("delay_aware", {}), ("mean", {}), ("delay_aware", {"exact_average_every": 1})])
def test_fp32_deltas_merge_like_fp32_weights(merge, opts):
    """The reference cancels: ref + (θ − ref) = θ up to one float32 rounding per exchange (with exact averages
    the reference moves, and messages in flight across one keep the older reference)."""
    steps = 3 * H + 5
    bw, _, xw = run(steps, payload="weights", codec="fp32", ef=True, merge=merge, **opts)
    bd, _, xd = run(steps, payload="delta", codec="fp32", ef=True, merge=merge, **opts)
    torch.testing.assert_close(xd, xw, atol=1e-6, rtol=1e-6)
    assert not torch.equal(xd, xw)  # two different computations, not one path taken twice
    assert bd.transport.ledger.bytes("fragments") == bw.transport.ledger.bytes("fragments")  # fp32: 4 bytes a value
    if opts:  # the newest exact average's snapshot is the only reference still held
        assert list(bd.refs) == [bd.ref_version] and bd.ref_version == 3 * H


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["int8", "int4"])
def test_error_feedback_conserves_the_cell_sum_with_a_lossy_codec(codec):
    """Σ_i θ_i + ½ Σ_i e_i is what the local steps alone make it (delay-aware merges are doubly stochastic): the cell
    mean is off by exactly half the mean *current* residual, however many exchanges were made. Without error feedback
    every exchange's error stays in the mean, so the mean wanders off with the number of exchanges: the gap between
    the two widens as the run goes on."""
    def drift(windows: int, ef: bool) -> float:
        steps = windows * H
        b, x0, x = run(steps, payload="delta", codec=codec, ef=ef)
        target = exact_mean(x0, steps, 1e-3)
        mean = x.double().mean(0)
        if ef:  # the invariant, to float32 rounding of the merges
            torch.testing.assert_close(mean + 0.5 * residual_sum(b) / N, target, atol=2e-6, rtol=0)
        return float((mean - target).abs().mean())

    short, long = 2, 32
    with_ef = {w: drift(w, True) for w in (short, long)}
    without = {w: drift(w, False) for w in (short, long)}
    assert with_ef[long] < without[long] / 3
    assert without[long] / with_ef[long] > 2 * without[short] / with_ef[short]  # no-EF error accumulates


def test_deltas_make_a_lossy_codecs_error_follow_the_distance_from_the_reference():
    """Large weights, small local steps: int8 on the weights spends its grid on the weights' size, int8 on the
    deltas on the steps, so every cell lands far closer to where the lossless run puts it (both with error feedback)."""
    steps = 4 * H
    _, _, lossless = run(steps, payload="weights", codec="fp32", ef=False)
    err = {}
    for payload in ("weights", "delta"):
        _, _, x = run(steps, payload=payload, codec="int8", ef=True)
        err[payload] = float((x - lossless).abs().mean())
    assert err["delta"] < err["weights"] / 10


@pytest.mark.parametrize("codec", ["int8", "int4", "fp32"])
def test_ledger_charges_the_encoded_delta_sizes(codec):
    steps = 2 * H
    b, _, _ = run(steps, payload="delta", codec=codec, ef=True)
    n_exchanges = len(butterfly_schedule(N, H, E, P, steps))
    assert b.transport.ledger.bytes("fragments") == n_exchanges * N * get_codec(codec).nbytes(K)


def test_delta_payloads_need_a_common_start_and_a_known_payload():
    x = torch.zeros(P, K)
    models = {i: Vectors(x + i) for i in range(N)}
    cfg = SyncConfig(strategy="butterfly", H=H, n_fragments=P, butterfly=ButterflyConfig(payload="delta"))
    with pytest.raises(ValueError, match="sync.butterfly.payload: 'delta' needs every cell to start from the same"):
        Butterfly(models, LocalTransport(N), [[f"w{p}"] for p in range(P)], cfg, seed=0)
    with pytest.raises(ConfigError, match=r"sync.butterfly.payload: must be one of weights\|delta \(got 'deltas'\)"):
        ButterflyConfig(payload="deltas")


@pytest.mark.slow
def test_resume_mid_run_with_delta_payloads_is_bit_identical(tmp_path):
    """Smoke eight_cell with int8 deltas, error feedback and an exact average inside the run: the checkpoint after
    step 7 holds exchanges in flight, the residuals and the reference; resuming gives the uninterrupted run's numbers."""
    from islands_kit.config import apply_overrides
    from islands_kit.config.presets import get_preset
    from islands_kit.run import Experiment, run_experiment
    from islands_kit.train.checkpoint import load_checkpoint

    cfg = apply_overrides(get_preset("eight_cell", "smoke"), {
        "steps": "12", "checkpoint_every": "7", "sync.codec": "int8", "sync.butterfly.payload": "delta", "sync.H": "6",
        "sync.butterfly.exact_average_every": "1"})
    full = run_experiment(cfg, tmp_path / "a")
    exp = Experiment(cfg)
    exp.load_state_dict(load_checkpoint(tmp_path / "a"))
    assert exp.step == 7 and len(exp.strategy.pending) > 0
    assert exp.strategy.ref_version == 6 and exp.strategy.ef.residual((0, 0)) is not None
    again = exp.run()
    for k in ("final_val_bpb", "val_curve", "ledger", "sim_wall_clock_s", "tokens"):
        assert again[k] == full[k], k
