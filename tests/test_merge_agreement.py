"""benchmarks/merge_agreement.py: recording the islands' agreement leaves the run unchanged (bit-identical bpb), records
one entry per sync of each fragment, and its measures obey their definitions (cosine in [-1, 1], the radial-directional
amplification >= 1 and equal to the merge's norm over the mean's)."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.run import run_experiment
from islands_kit.sync.averaging import combine
from islands_kit.sync.diloco import DiLoCo

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("merge_agreement", ROOT / "benchmarks" / "merge_agreement.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["merge_agreement"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_agreement_matches_the_merges(bench):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    deltas, weights = {0: a, 1: 0.5 * a + b}, {0: 3.0, 1: 2.0}
    m = bench.agreement(deltas, weights)
    rd = combine([deltas[0], deltas[1]], [3.0, 2.0], "radial_directional")
    mean = combine([deltas[0], deltas[1]], [3.0, 2.0], "mean")
    assert m["amplification"] == pytest.approx(float(rd.norm()) / float(mean.norm()), rel=1e-5)
    assert m["mean_norm"] == pytest.approx(float(mean.norm()), rel=1e-5)
    assert m["cos"] == pytest.approx(float(torch.nn.functional.cosine_similarity(a, 0.5 * a + b, dim=0)), rel=1e-5)
    same = bench.agreement({0: a, 1: 2 * a}, {0: 1.0, 1: 1.0})
    assert same["cos"] == pytest.approx(1.0) and same["amplification"] == pytest.approx(1.0)
    ortho = bench.agreement({0: torch.tensor([1.0, 0.0]), 1: torch.tensor([0.0, 1.0])}, {0: 1.0, 1: 1.0})
    assert ortho["cos"] == pytest.approx(0.0) and ortho["amplification"] == pytest.approx(math.sqrt(2))


def test_recording_leaves_the_run_bit_identical(bench, tmp_path):
    cfg = apply_overrides(get_preset("two_site", "smoke"), {"steps": "16", "threads": "1", "sync.diloco.average": "mean"})
    plain = run_experiment(cfg)
    original = DiLoCo._post
    with bench.recording() as records:
        assert DiLoCo._post is not original
        res = run_experiment(cfg)
    assert DiLoCo._post is original  # the strategy is restored on exit
    assert res.final_val_bpb == plain.final_val_bpb
    assert len(records) == sum(res.outer_steps_per_fragment)  # one record per sync of each fragment
    assert {r["fragment"] for r in records} == set(range(cfg.sync.n_fragments))
    for r in records:
        assert -1.0 <= r["cos"] <= 1.0 and r["amplification"] >= 1.0 - 1e-6
    rows = bench.window_table(records, 8)
    assert sum(n for _, _, n, *_ in rows) == len(records)
