"""The statistics every printed ratio carries: paired per seed, a t interval on the log-ratios, and n.

An arm and its reference trained at the same seeds share initial weights and data order, so the per-seed ratios
r_i = arm_i / ref_i are the paired observations. Ratios are multiplicative, so the interval is a paired t interval on
log r_i, mapped back: exp(mean ± t_{0.975, n-1} · sd / √n); the point estimate is the geometric mean exp(mean log r).
One seed has no interval (never "± 0"); a ratio whose interval contains 1 is "not resolved".

Every verdict word the kit prints or a document states beside a ratio comes from :func:`verdict`, a function of the
interval and a stated threshold alone: "ahead" / "behind" (the interval is on one side of 1), "within X%" (it holds 1
and lies inside 1 ± X), "met" / "not met" (a bar ``ratio <= bar`` the whole interval clears, or misses), and "not
resolved" otherwise — never "a tie" or "level", which an interval holding 1 does not show.

How well a tuning split's pick transfers to the scored bytes is read with Spearman's rank correlation between the
two orderings of a grid and the pick's regret: its validation bpb over the grid's best, minus one.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
VERDICTS = ("ahead", "behind", "within", "met", "not met", "not resolved")  # "within" is written "within X%"


def verdict(lo: float | None, hi: float | None, *, bar: float | None = None, within: float | None = None) -> str:
    """The words an interval ``[lo, hi]`` on a ratio arm / reference of bpb (lower is better) supports.

    With ``bar`` (a stated goal ``ratio <= bar``): "met" when ``hi <= bar``, "not met" when ``lo > bar``, else "not
    resolved". Otherwise: "ahead" when ``hi < 1``, "behind" when ``lo > 1``; an interval that holds 1 is "within
    X%" when ``within`` (a fraction, 0.02 for 2%) is given and ``[lo, hi]`` lies inside ``[1 - within, 1 + within]``,
    else "not resolved". No interval (one seed) is "not resolved"."""
    if lo is None or hi is None:
        return "not resolved"
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"verdict: the interval must be finite with lo <= hi (got [{lo}, {hi}])")
    if bar is not None:
        return "met" if hi <= bar else "not met" if lo > bar else "not resolved"
    if hi < 1.0:
        return "ahead"
    if lo > 1.0:
        return "behind"
    if within is not None:
        if not 0 < within < 1:
            raise ValueError(f"verdict: within must be a fraction in (0, 1) (got {within})")
        if 1.0 - within <= lo and hi <= 1.0 + within:
            return f"within {100 * within:g}%"
    return "not resolved"


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student-t quantile t_{(1+confidence)/2, df} (4.303 at df 2 for 95%)."""
    if df < 1:
        raise ValueError(f"df: a t quantile needs at least 1 degree of freedom (got {df})")
    from scipy import stats  # here, not at import: scipy.stats costs ~0.7 s, and every run process imports this module

    return float(stats.t.ppf(0.5 + confidence / 2, df))


@dataclass(frozen=True)
class RatioStat:
    """A paired ratio: ``mean`` (geometric mean of the per-seed ratios), ``lo``/``hi`` (the interval; None for n = 1),
    ``n`` seeds, and the per-seed ``ratios`` it came from."""

    mean: float
    lo: float | None
    hi: float | None
    n: int
    ratios: tuple[float, ...]
    confidence: float = CONFIDENCE

    @property
    def resolved(self) -> bool:
        """True when the interval excludes 1 (an n = 1 ratio is never resolved)."""
        return self.verdict() in ("ahead", "behind")

    def verdict(self, *, bar: float | None = None, within: float | None = None) -> str:
        """:func:`verdict` of this ratio's interval."""
        return verdict(self.lo, self.hi, bar=bar, within=within)

    def interval(self) -> list[float] | None:
        return None if self.lo is None or self.hi is None else [self.lo, self.hi]

    def text(self, digits: int = 4) -> str:
        """``1.0270 [1.0100, 1.0440] n=5`` (``not resolved`` added when the interval contains 1); one seed:
        ``1.0270 (n = 1, no interval)``."""
        if self.lo is None or self.hi is None:
            return f"{self.mean:.{digits}f} (n = 1, no interval)"
        tail = "" if self.resolved else f", {self.verdict()}"
        return f"{self.mean:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}] n={self.n}{tail}"

    def as_dict(self) -> dict[str, object]:
        return {"ratio_mean": self.mean, "ratio_ci95": self.interval(), "n": self.n, "ratios": list(self.ratios),
                "resolved": self.resolved}


def paired_ratio(arm: Sequence[float], ref: Sequence[float], confidence: float = CONFIDENCE) -> RatioStat:
    """The paired ratio of ``arm`` to ``ref`` (same seeds, in the same order)."""
    if len(arm) != len(ref):
        raise ValueError(f"paired_ratio: {len(arm)} arm values against {len(ref)} reference values (pair per seed)")
    if not arm:
        raise ValueError("paired_ratio: no seeds to pair")
    for name, xs in (("arm", arm), ("ref", ref)):
        bad = [x for x in xs if not (math.isfinite(x) and x > 0)]
        if bad:
            raise ValueError(f"paired_ratio: {name} values must be finite and positive (got {bad[0]!r})")
    ratios = tuple(a / b for a, b in zip(arm, ref))
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    m = sum(logs) / n
    if n == 1:
        return RatioStat(math.exp(m), None, None, 1, ratios, confidence)
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
    half = t_quantile(n - 1, confidence) * sd / math.sqrt(n)
    return RatioStat(math.exp(m), math.exp(m - half), math.exp(m + half), n, ratios, confidence)


def rank_correlation(tune: Sequence[float], val: Sequence[float]) -> float | None:
    """Spearman's rho between two orderings of one grid (None for fewer than 3 points or a constant ordering)."""
    if len(tune) != len(val):
        raise ValueError(f"rank_correlation: {len(tune)} tuning against {len(val)} validation values")
    if len(tune) < 3 or len(set(tune)) == 1 or len(set(val)) == 1:
        return None
    from scipy import stats

    return float(stats.spearmanr(tune, val).statistic)


def pick_regret(tune: Sequence[float], val: Sequence[float]) -> float:
    """The validation cost of picking on the tuning split: val[argmin tune] / min(val) − 1 (0 when they agree)."""
    if not tune or len(tune) != len(val):
        raise ValueError("pick_regret: one tuning and one validation value per trial, at least one trial")
    pick = min(range(len(tune)), key=lambda i: tune[i])
    return val[pick] / min(val) - 1.0
