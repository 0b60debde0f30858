"""Top-k sparsified codecs (SparseLoCo-style): exact byte formula, the kept entries are the block's largest
magnitudes (against a plain per-block loop), kept values rounded as the int4/int2 grid prescribes, stochastic rounding
unbiased on the kept values, error feedback delivers every coordinate in the long run, clear errors."""
from __future__ import annotations

import math

import pytest
import torch

from islands_kit.comm.codecs import ErrorFeedback, NonFiniteError, decode_bytes, encode_bytes, get_codec
from islands_kit.config import ConfigError, SyncConfig

TOPK = ["top8_int4", "top16_int4", "top32_int4", "top16_int2"]


def reference(x: torch.Tensor, every: int, B: int, qmax: float, offset: float) -> torch.Tensor:
    """Per block, a loop: keep the ceil(len/every) largest |x| (lower index first on ties), round-to-nearest-even
    onto the grid at scale absmax/qmax, everything else zero."""
    out = torch.zeros_like(x)
    for s in range(0, x.numel(), B):
        blk = x[s:s + B]
        k = math.ceil(blk.numel() / every)
        order = sorted(range(blk.numel()), key=lambda i: (-abs(float(blk[i])), i))[:k]
        scale = float(blk.abs().max()) / qmax
        for i in order:
            v = max(-qmax, min(qmax, float(blk[i]) / scale)) if scale > 0 else 0.0
            j = torch.round(torch.tensor(v - offset)).item() + offset
            out[s + i] = torch.tensor(j, dtype=torch.float32) * torch.tensor(scale, dtype=torch.float32)
    return out


@pytest.mark.parametrize("name", TOPK)
@pytest.mark.parametrize("n", [0, 1, 7, 128, 130, 1000])
def test_bytes_and_round_trip(name, n):
    c = get_codec(name, 64)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    p = c.encode(x, stochastic=True, generator=torch.Generator().manual_seed(1))
    every = int(name[3:].split("_")[0])
    bits = 4 if name.endswith("int4") else 2
    nb = math.ceil(n / 64)
    K = (n // 64) * math.ceil(64 / every) + (math.ceil((n % 64) / every) if n % 64 else 0)
    assert p.nbytes == c.nbytes(n) == 4 * nb + K + math.ceil(K * bits / 8)
    d = c.decode(p)
    assert d.shape == (n,) and int((d != 0).sum()) <= K
    assert torch.equal(c.decode(decode_bytes(encode_bytes(p))), d)


@pytest.mark.parametrize("name", TOPK)
def test_round_to_nearest_matches_a_plain_loop(name):
    every = int(name[3:].split("_")[0])
    qmax, offset = (7.0, 0.0) if name.endswith("int4") else (1.5, 0.5)
    x = torch.randn(300, generator=torch.Generator().manual_seed(5))
    x[10] = x[11] = 3.0  # a tie: the lower index goes first
    got = get_codec(name, 128).decode(get_codec(name, 128).encode(x, stochastic=False))
    torch.testing.assert_close(got, reference(x, every, 128, qmax, offset), atol=0, rtol=0)


@pytest.mark.slow
def test_stochastic_rounding_unbiased_on_kept_values():
    c = get_codec("top16_int2", 128)
    x = torch.randn(256, generator=torch.Generator().manual_seed(2))
    kept = c.decode(c.encode(x, stochastic=False)) != 0
    mean = torch.stack([c.decode(c.encode(x, stochastic=True, generator=torch.Generator().manual_seed(s)))
                        for s in range(3000)]).mean(0)
    scale = x[:128].abs().max() / 1.5
    assert (mean[kept[:128].nonzero()] - x[:128][kept[:128]].unsqueeze(1)).abs().max() < 0.06 * scale


def test_error_feedback_delivers_every_coordinate():
    """Sending the same vector T times through top-32 with error feedback: the sum of what was sent equals T x minus
    a bounded residual, so small coordinates — never in a single top-k — arrive too."""
    c = get_codec("top32_int4", 128)
    x = torch.randn(512, generator=torch.Generator().manual_seed(3))
    ef = ErrorFeedback(True)
    g = torch.Generator().manual_seed(4)
    sent = torch.zeros_like(x)
    T = 400
    for _ in range(T):
        _, d = ef.compress("k", x, c, stochastic=True, generator=g)
        sent += d
    assert (sent / T - x).abs().max() < 0.05 * x.abs().max()
    assert (c.decode(c.encode(x)) == 0).float().mean() > 0.9  # one shot sends ~1/32 of the coordinates


def test_errors_name_the_field():
    with pytest.raises(NonFiniteError):
        get_codec("top16_int4").encode(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ConfigError, match="sync.codec_block_size"):
        get_codec("top16_int4", 512)
    with pytest.raises(ConfigError, match="sync.codec_block_size"):
        SyncConfig(strategy="diloco", codec="top16_int4", codec_block_size=512)
