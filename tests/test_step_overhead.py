"""benchmarks/step_overhead.py on the smoke preset: the arms it times are the experiment's own models, the profile's
groups add up to the whole step, and every group is named by what its events are."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("step_overhead", ROOT / "benchmarks" / "step_overhead.py")
        mod = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_profile_groups_name_the_ops(bench):
    assert bench.profile_group("aten::mm") == "matrix products"
    assert bench.profile_group("aten::_grouped_mm") == "matrix products"
    assert bench.profile_group("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert bench.profile_group("aten::_fused_adamw_") == "optimizer"
    assert bench.profile_group("aten::mul") == "other"


def test_compile_flag_reaches_the_config(bench):
    assert bench._config("baseline", "smoke", compile=True).model.compile is True
    assert bench._config("baseline", "smoke").model.compile is False
    assert bench._config("two_site", "smoke", steps=3).steps == 3


def test_measure_steps_rows(bench, capsys):
    torch.set_num_threads(1)
    rows = bench.measure_steps("smoke", repeats=2, steps=1, warmup=1, skip=1)
    assert [r["experiment"] for r in rows] == bench.lockstep_experiments() == ["baseline", "two_site", "eight_cell", "hierarchical"]
    for r in rows:
        assert r["kit_ms"] > 0 and r["plain_ms"] > 0 and r["plain-fused_ms"] > 0
        assert "compiled/kit" not in r  # only with compile=True
        cfg = bench._config(r["experiment"], "smoke")
        tokens_per_step = sum(i.batch_size for i in cfg.islands) * cfg.model.seq_len
        assert r["kit_tokens_per_cpu_s"] * r["kit_ms"] / 1e3 == pytest.approx(tokens_per_step)  # the median step's
    assert capsys.readouterr().out.count("| ") >= 3


@pytest.mark.slow  # the torch profiler over a step of each experiment: the fast tier's costliest test (~8 s idle)
def test_profile_shares_sum_to_the_step(bench, capsys):
    bench.profile_steps("smoke", n_steps=2, skip=1)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| ") and "%" in ln]
    assert len(lines) == len(bench.lockstep_experiments())
    for ln in lines:
        shares = [float(c.strip().rstrip("%")) for c in ln.strip("|").split("|")[2:]]
        assert len(shares) == len(bench.PROFILE_GROUPS) + 1
        assert abs(sum(shares) - 100) <= 2  # rounded to whole percent each
        assert shares[0] > 0  # the model's matrix products are in every step
