"""bpb helpers and compressor floors, checked against direct computations."""
from __future__ import annotations

import bz2
import gzip
import lzma
import math
from pathlib import Path

import pytest
import torch

from islands_kit.data import eval_windows, load_corpus, split_bytes
from islands_kit.train import metrics
from islands_kit.train.metrics import bits_per_byte, compressor_bpb, evaluate_bpb


def test_bits_per_byte_converts_nats() -> None:
    assert bits_per_byte(100 * math.log(2), 100) == pytest.approx(1.0, abs=1e-15)
    assert bits_per_byte(0.0, 3) == 0.0
    with pytest.raises(ValueError, match="n_bytes: must be an integer >= 1"):
        bits_per_byte(1.0, 0)
    with pytest.raises(ValueError, match="nll_nats_sum"):
        bits_per_byte(float("nan"), 1)


def _windows(n: int = 3000, T: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    val = torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    return eval_windows(val, T)


def test_uniform_model_scores_exactly_eight() -> None:
    x, y = _windows()
    bpb = evaluate_bpb(lambda xb: torch.zeros(*xb.shape, 256), x, y, batch_size=7)
    assert bpb == pytest.approx(8.0, abs=1e-12)


def test_evaluate_bpb_matches_plain_reference_and_ignores_chunking() -> None:
    x, y = _windows(n=800)
    table = torch.randn(256, 256, generator=torch.Generator().manual_seed(1)) * 3  # a bigram "model"

    def model_fn(xb: torch.Tensor) -> torch.Tensor:
        return table[xb]  # (b, T, 256)

    ref_nats = 0.0  # plain loop over every predicted byte, float64 log-softmax
    logp = torch.log_softmax(table.double(), dim=-1)
    for a, b in zip(x.reshape(-1).tolist(), y.reshape(-1).tolist()):
        ref_nats -= logp[a, b].item()
    ref = ref_nats / y.numel() / math.log(2)
    assert evaluate_bpb(model_fn, x, y, batch_size=1) == pytest.approx(ref, rel=1e-12)
    assert evaluate_bpb(model_fn, x, y, batch_size=1000) == pytest.approx(ref, rel=1e-12)


def test_evaluate_bpb_rejects_wrong_logit_shapes() -> None:
    x, y = _windows()
    with pytest.raises(ValueError, match=r"model_fn: must return logits of shape \(b, T, 256\)"):
        evaluate_bpb(lambda xb: torch.zeros(*xb.shape, 255), x, y, batch_size=4)
    with pytest.raises(ValueError, match=r"x, y: must both be \(N, T\)"):
        evaluate_bpb(lambda xb: xb, x, y[:-1], batch_size=4)


def test_compressor_bpb_is_real_sizes_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blob = b"".join(f"line {i}: {i * i % 977} the quick brown fox\n".encode() for i in range(2000))
    got = compressor_bpb(blob, cache_dir=tmp_path)
    n = len(blob)
    assert got == {
        "gzip": 8 * len(gzip.compress(blob, compresslevel=9, mtime=0)) / n,
        "bz2": 8 * len(bz2.compress(blob, 9)) / n,
        "xz": 8 * len(lzma.compress(blob, preset=9 | lzma.PRESET_EXTREME)) / n,
    }
    assert len(list(tmp_path.glob("*.json"))) == 1

    def no_compress(data: bytes) -> dict[str, int]:
        raise AssertionError("compressed again although the figures are cached")

    monkeypatch.setattr(metrics, "_compressed_sizes", no_compress)
    assert compressor_bpb(blob, cache_dir=tmp_path) == got
    with pytest.raises(AssertionError, match="compressed again"):  # other bytes miss the cache
        compressor_bpb(blob + b"!", cache_dir=tmp_path)


def test_shakespeare_validation_compressor_floors(tmp_path: Path) -> None:
    """DESIGN.md: xz -9e on the last 5% of Shakespeare gives ~2.76 bpb (worse than 2.50 on the whole corpus)."""
    _, val = split_bytes(load_corpus("shakespeare", cache_dir=tmp_path).data, 0.05)
    val_bytes = bytes(val.numpy())
    got = compressor_bpb(val_bytes, cache_dir=tmp_path)
    assert got["xz"] == 8 * len(lzma.compress(val_bytes, preset=9 | lzma.PRESET_EXTREME)) / len(val_bytes)
    assert abs(got["xz"] - 2.76) < 0.01
    assert got["bz2"] < got["xz"] < got["gzip"]  # bzip2 wins on this small, plain-text input
    print(f"shakespeare val ({len(val_bytes)} bytes): {got}")
