"""SparseLoCo (Sarfi et al. 2025) through the DiLoCo strategy: the same outer steps, bit for bit, as a plain loop
written from the paper's Algorithm 1 (decayed error feedback, chunked top-k, 2-bit values with a scale per chunk,
averaged sparse updates applied with outer lr α and no momentum); at density 1 without a quantiser it is DiLoCo
with outer SGD (lr α, no momentum) bit for bit; the ledger charges the codec's exact bytes; the knobs name their
field; the paper's settings make a valid two_site config that trains."""
from __future__ import annotations

import math

import pytest
import torch
from vector_replicas import Vec, inner_direction, sync

from islands_kit.comm.codecs import ErrorFeedback, TopKCodec, get_codec
from islands_kit.comm.transport import LocalTransport
from islands_kit.config import ConfigError, SyncConfig, apply_overrides, codec_registry
from islands_kit.config.codec_registry import CodecSpec
from islands_kit.config.presets import SPARSELOCO, get_preset
from islands_kit.sync.diloco import DiLoCo

P, H, DIM, CHUNK = 2, 5, 150, 64  # two fragments of 150 values: chunks of 64, 64 and a partial 22
TOKENS = {0: 3, 1: 2}


def paper(beta: float = 0.95, alpha: float = 1.0, **kw) -> SyncConfig:
    """SparseLoCo's settings on a small streaming case (P = 2 staggered fragments, tau = 0; 1 in 32 kept per chunk,
    so 2 + 2 + 1 of each fragment's 150 values)."""
    return sync(strategy="diloco", H=H, n_fragments=P, tau=0, codec="ctop32_int2", codec_block_size=CHUNK,
                stochastic_rounding=False, error_feedback=True, error_feedback_decay=beta, outer_lr=alpha,
                outer_momentum=0.0, merge="alpha", alpha=0.0, **kw)


def run_strategy(cfg: SyncConfig, steps: int, codec=None, lr: float = 0.05):
    init = torch.randn(P, DIM, generator=torch.Generator().manual_seed(7))
    models = {i: Vec(init) for i in TOKENS}
    tr = LocalTransport(2)
    strat = DiLoCo(models, tr, [[f"b{p}"] for p in range(P)], cfg, seed=0)
    if codec is not None:  # a codec outside the registry (the density-1 check)
        strat.codec = strat.final_codec = codec
    for t in range(1, steps + 1):
        with torch.no_grad():
            for i, m in models.items():
                for p in range(P):
                    getattr(m, f"b{p}").sub_(lr * inner_direction(i, t, P, DIM)[p])
        strat.after_inner_step(t, TOKENS)
    strat.finalize(steps)
    return strat, models, tr


def top_k_2bit(e: torch.Tensor, k_of: int) -> torch.Tensor:
    """Q(TopK(e)) as Algorithm 1 states it, one chunk at a time: keep the ceil(len / k_of) largest |e| of the chunk
    (the lower index first on ties), put each on the 2-bit grid {-1.5, -0.5, 0.5, 1.5} · s with s = max|e_chunk| / 1.5,
    rounded to the nearest level (ties to the even j of j + 0.5), the rest 0."""
    out = torch.zeros_like(e)
    for c0 in range(0, e.numel(), CHUNK):
        chunk = e[c0:c0 + CHUNK]
        k = math.ceil(chunk.numel() / k_of)
        s = chunk.abs().max() / 1.5  # float32
        for i in sorted(range(chunk.numel()), key=lambda i: (-abs(float(chunk[i])), i))[:k]:
            v = (chunk[i] / s).clamp(-1.5, 1.5) if s > 0 else torch.tensor(0.0)
            out[c0 + i] = (torch.round(v - 0.5) + 0.5) * s
    return out


def reference(beta: float, alpha: float, k_of: int, steps: int, lr: float = 0.05):
    """Algorithm 1 of the paper with Streaming DiLoCo's fragment schedule: for fragment p at its sync, every island r
    forms Δ_r = θ − θ_r, e_r ← β e_r + Δ_r, Δ̂_r = Q(TopK(e_r)), e_r ← e_r − Δ̂_r; Δ = Σ_r w_r Δ̂_r / W (tokens since
    the fragment's last sync, accumulated in island order); θ ← θ − α Δ; every replica restarts from θ."""
    init = torch.randn(P, DIM, generator=torch.Generator().manual_seed(7))
    theta = init.clone()
    replica = {i: init.clone() for i in TOKENS}
    e = {(i, p): torch.zeros(DIM) for i in TOKENS for p in range(P)}
    since = {(i, p): 0 for i in TOKENS for p in range(P)}
    offs = [round((p + 1) * H / P) % H for p in range(P)]
    sent_bytes = 0

    def outer_step(p: int) -> None:
        nonlocal sent_bytes
        W = float(sum(since[(i, p)] for i in TOKENS))
        delta = torch.zeros(DIM)
        for i in TOKENS:
            e[(i, p)] = beta * e[(i, p)] + (theta[p] - replica[i][p])
            sent = top_k_2bit(e[(i, p)], k_of)
            e[(i, p)] = e[(i, p)] - sent
            delta.add_(sent, alpha=since[(i, p)] / W)
            since[(i, p)] = 0
            K = sum(math.ceil(min(CHUNK, DIM - c) / k_of) for c in range(0, DIM, CHUNK))
            sent_bytes += 4 * math.ceil(DIM / CHUNK) + math.ceil(K * 6 / 8) + math.ceil(K * 2 / 8)  # 6-bit indices
        theta[p].add_(delta, alpha=-alpha)
        for i in TOKENS:
            replica[i][p] = theta[p].clone()

    for t in range(1, steps + 1):
        for i in TOKENS:
            replica[i] = replica[i] - lr * inner_direction(i, t, P, DIM)
            for p in range(P):
                since[(i, p)] += TOKENS[i]
        for p in range(P):
            if t % H == offs[p]:
                outer_step(p)
    for p in range(P):  # the strategy's last sync of every fragment with steps since its previous one
        if any(since[(i, p)] for i in TOKENS):
            outer_step(p)
    return theta, replica, e, sent_bytes


@pytest.fixture
def keep_all(monkeypatch) -> TopKCodec:
    """The chunked codec at density 1 with raw fp32 values (not a registry row: registered for this test only, so the
    transport can decode it)."""
    spec = CodecSpec("ctop1_fp32", 250, "chunk_topk", 32, every=1, values="fp32")
    monkeypatch.setitem(codec_registry.CODEC_SPECS, spec.name, spec)
    return TopKCodec(spec, CHUNK)


@pytest.mark.parametrize("beta,alpha", [(0.95, 1.0), (0.9, 0.8), (1.0, 1.0)])
def test_outer_steps_match_the_papers_algorithm_bit_for_bit(beta, alpha):
    steps = 8 * H + 2  # nine outer steps per fragment (fragment 1: the last from the final sync mid-window)
    strat, models, tr = run_strategy(paper(beta, alpha), steps)
    theta, replica, e, sent_bytes = reference(beta, alpha, 32, steps)
    for p in range(P):
        assert torch.equal(strat.global_params[p].detach(), theta[p]), (p, beta, alpha)
        for i in TOKENS:
            assert torch.equal(getattr(models[i], f"b{p}").detach(), replica[i][p])
            assert torch.equal(strat.ef.residual((i, p)), e[(i, p)])
    assert tr.ledger.bytes("fragments") == sent_bytes  # two islands: each payload crosses once each way
    assert strat.n_outer == [9, 9]


def test_the_reference_notices_a_missing_decay():
    """β matters: the β = 0.95 reference is not the β = 1 run (the test above can fail)."""
    strat, _, _ = run_strategy(paper(1.0, 1.0), 3 * H)
    theta, _, _, _ = reference(0.95, 1.0, 32, 3 * H)
    assert not torch.equal(strat.global_params[0].detach(), theta[0])


def test_density_one_without_quantiser_is_diloco_with_outer_sgd(keep_all):
    """Keeping every entry raw, the residual after each sync is exactly 0, so e = β·0 + Δ = Δ and the decay has nothing
    to act on: SparseLoCo is then DiLoCo with outer SGD at lr α and no momentum, bit for bit (the same SGD step on the
    same averaged float32 vector)."""
    a, ma, ta = run_strategy(paper(0.95, 0.8), 3 * H + 1, codec=keep_all)
    b, mb, tb = run_strategy(sync(strategy="diloco", H=H, n_fragments=P, tau=0, codec="fp32", error_feedback=False,
                                  outer_lr=0.8, outer_momentum=0.0, alpha=0.0), 3 * H + 1)
    for p in range(P):
        assert torch.equal(a.global_params[p], b.global_params[p])
        for i in TOKENS:
            assert torch.equal(getattr(ma[i], f"b{p}"), getattr(mb[i], f"b{p}"))
    assert all(not bool(r.any()) for r in (a.ef.residual((i, p)) for i in TOKENS for p in range(P)))
    # the chunked format costs its indices on top of the raw values: 6 bits each at chunks of 64
    assert ta.ledger.bytes("fragments") == tb.ledger.bytes("fragments") // (4 * DIM) * (4 * DIM + math.ceil(6 * DIM / 8))


def test_error_feedback_decay_keeps_beta_times_the_residual():
    ef = ErrorFeedback(True, decay=0.5)
    c = get_codec("ctop64_int2", 64)
    x1, x2 = torch.randn(128, generator=torch.Generator().manual_seed(1)), torch.randn(128)
    _, d1 = ef.compress("k", x1, c, stochastic=False)
    r1 = ef.residual("k").clone()
    assert torch.equal(r1, x1 - d1)
    _, d2 = ef.compress("k", x2, c, stochastic=False)
    assert torch.equal(ef.residual("k"), (x2 + 0.5 * r1) - d2)


def test_knobs_name_their_field():
    with pytest.raises(ConfigError, match="sync.diloco.error_feedback_decay"):
        paper(beta=1.5)
    with pytest.raises(ConfigError, match="sync.diloco.error_feedback_decay.*error_feedback=true"):
        sync(strategy="diloco", error_feedback=False, error_feedback_decay=0.9)


def test_the_papers_settings_make_a_two_site_config():
    cfg = apply_overrides(get_preset("two_site", "demo"), SPARSELOCO)
    assert (cfg.sync.codec, cfg.sync.codec_block_size, cfg.sync.H) == ("ctop64_int2", 4096, 15)
    assert cfg.sync.diloco.error_feedback_decay == 0.95 and cfg.sync.diloco.outer_momentum == 0.0
