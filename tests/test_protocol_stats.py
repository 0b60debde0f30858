"""The interval code against hand-worked values (docs: every ratio carries mean, 95% interval and n)."""
from __future__ import annotations

import math

import pytest

from islands_kit.stats import paired_ratio, pick_regret, rank_correlation, t_quantile, verdict


def test_t_quantile_known_values():
    assert t_quantile(2) == pytest.approx(4.303, abs=5e-4)
    assert t_quantile(4) == pytest.approx(2.776, abs=5e-4)
    assert t_quantile(1000) == pytest.approx(1.962, abs=1e-3)
    with pytest.raises(ValueError, match="df"):
        t_quantile(0)


def test_paired_ratio_by_hand():
    # the batch-20 baseline against batch 40 at seeds 0-2 (DESIGN.md): ratios 0.9753 / 0.9828 / 0.9893
    ref = [2.0, 2.5, 3.0]
    arm = [r * x for r, x in zip([0.9753, 0.9828, 0.9893], ref)]
    s = paired_ratio(arm, ref)
    logs = [math.log(0.9753), math.log(0.9828), math.log(0.9893)]
    m = sum(logs) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)
    assert s.n == 3 and s.mean == pytest.approx(math.exp(m), rel=1e-12)
    assert (s.lo, s.hi) == (pytest.approx(math.exp(m - half), rel=1e-9), pytest.approx(math.exp(m + half), rel=1e-9))
    # the arithmetic interval was 0.965-0.9999; on the log-ratios its top edge lands just above 1
    assert s.lo == pytest.approx(0.96520, abs=1e-5) and s.hi == pytest.approx(1.00001, abs=1e-5)
    assert not s.resolved and s.text() == "0.9825 [0.9652, 1.0000] n=3, not resolved"
    assert s.as_dict()["ratio_ci95"] == [s.lo, s.hi]


def test_an_interval_containing_one_is_not_resolved_and_one_seed_has_none():
    s = paired_ratio([1.01, 0.99, 1.005], [1.0, 1.0, 1.0])
    assert s.lo < 1 < s.hi and not s.resolved and s.text().endswith("not resolved")
    one = paired_ratio([2.2875], [2.2217])
    assert one.lo is None and one.interval() is None and not one.resolved
    assert one.text() == "1.0296 (n = 1, no interval)" and "±" not in one.text()


def test_paired_ratio_refuses_what_cannot_be_paired():
    with pytest.raises(ValueError, match="pair per seed"):
        paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite and positive"):
        paired_ratio([float("nan")], [1.0])
    with pytest.raises(ValueError, match="no seeds"):
        paired_ratio([], [])


def test_transfer_of_a_tuning_pick():
    tune = [2.30, 2.25, 2.28, 2.40]
    val = [2.31, 2.27, 2.24, 2.41]
    assert rank_correlation(tune, val) == pytest.approx(0.8)  # one swap among four: 1 - 6*2/(4*15)
    assert pick_regret(tune, val) == pytest.approx(2.27 / 2.24 - 1)
    assert pick_regret([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert rank_correlation([1.0, 2.0], [1.0, 2.0]) is None


@pytest.mark.parametrize("lo, hi, kw, words", [
    (0.9623, 0.9944, {}, "ahead"),
    (1.0163, 1.0449, {}, "behind"),
    (0.9883, 1.0105, {}, "not resolved"),        # hierarchical / eight_cell: not "a tie"
    (0.9883, 1.0105, {"within": 0.02}, "within 2%"),
    (0.9703, 1.0152, {"within": 0.02}, "not resolved"),  # holds 1 but reaches past 2%
    (1.0163, 1.0449, {"within": 0.05}, "behind"),  # a resolved side wins over a band
    (1.0007, 1.0292, {"bar": 1.02}, "not resolved"),  # demo-long's two_site against "<= 1.02"
    (1.0184, 1.0607, {"bar": 1.04}, "not resolved"),
    (1.0404, 1.0690, {"bar": 1.08}, "met"),
    (1.0404, 1.0690, {"bar": 1.03}, "not met"),
    (None, None, {}, "not resolved"),
])
def test_verdict_words_follow_the_interval_and_the_stated_threshold(lo, hi, kw, words):
    assert verdict(lo, hi, **kw) == words


def test_a_ratio_says_its_verdict_and_refuses_a_malformed_interval():
    s = paired_ratio([2.2882, 2.2815, 2.2403, 2.2349, 2.2664], [2.1916, 2.2389, 2.1853, 2.1851, 2.1753])
    assert s.verdict() == "behind" and s.resolved and "not resolved" not in s.text()
    level = paired_ratio([1.01, 0.99, 1.005], [1.0, 1.0, 1.0])
    assert level.verdict() == "not resolved" and level.text().endswith(", not resolved")
    assert level.verdict(within=0.05) == "within 5%"
    with pytest.raises(ValueError, match="lo <= hi"):
        verdict(1.1, 1.0)
    with pytest.raises(ValueError, match="within must be a fraction"):
        verdict(0.99, 1.01, within=2)
