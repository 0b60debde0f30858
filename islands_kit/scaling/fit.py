"""Fits of the gap (ratio - 1) against model size N (active parameters) or training tokens T, with intervals.

Two named models, both weighted least squares lines fitted with ``scipy.optimize.curve_fit``:

* **power law** — log10 gap = a + b log10 N over the points whose gap is positive (a power law gap = 10^a N^b is
  positive everywhere, so it never crosses 0: its exponent b says how fast the gap shrinks, not where it ends);
* **log-linear** — gap = a + b log10 N over every point, the model that can cross 0: at log10 N* = -a / b.

Weights: each point's standard error from its 95% interval, (hi - lo) / (2 x 1.96), on the gap (log-linear) or, by
the delta method, divided by the gap (power law); points without an interval (the published ones) are fitted
unweighted. The covariance is curve_fit's with ``absolute_sigma=False`` (scaled by the residual variance: the
standard WLS estimate), so an interval is a t interval with n - 2 degrees of freedom. Three seeds give a bootstrap
only ten distinct resamples, so no bootstrap is used.

The crossing's interval is Fieller's for the ratio -a / b: the values θ with (a + θ b)^2 <= t^2 (Vaa + 2θ Vab +
θ^2 Vbb). It is a bounded interval only when the slope is resolved (b^2 > t^2 Vbb); otherwise it is unbounded (the
data cannot place the crossing at any size) and the crossing is reported as None, with the reason.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as _stats

Z95 = float(_stats.norm.ppf(0.975))


def _line(x: np.ndarray, a: float, b: float) -> np.ndarray:
    return a + b * x


@dataclass(frozen=True)
class LineFit:
    """y = a + b x fitted by (weighted) least squares; x is log10 of the size (or tokens)."""

    model: str  # "power" (y = log10 gap) | "loglinear" (y = gap)
    a: float
    b: float
    cov: tuple[tuple[float, float], tuple[float, float]]
    n: int
    weighted: bool

    @property
    def df(self) -> int:
        return self.n - 2

    @property
    def t(self) -> float:
        return float(_stats.t.ppf(0.975, self.df))

    @property
    def b_se(self) -> float:
        return math.sqrt(self.cov[1][1])

    def b_ci95(self) -> tuple[float, float]:
        return self.b - self.t * self.b_se, self.b + self.t * self.b_se

    def gap(self, size: float | np.ndarray) -> np.ndarray:
        """The fitted gap at ``size`` (parameters or tokens)."""
        y = _line(np.log10(np.asarray(size, dtype=float)), self.a, self.b)
        return np.power(10.0, y) if self.model == "power" else y

    def band(self, size: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The 95% confidence band of the fitted mean gap at ``size``."""
        x = np.log10(np.asarray(size, dtype=float))
        (vaa, vab), (_, vbb) = self.cov
        half = self.t * np.sqrt(np.maximum(vaa + 2 * x * vab + x * x * vbb, 0.0))
        y = _line(x, self.a, self.b)
        lo, hi = y - half, y + half
        return (np.power(10.0, lo), np.power(10.0, hi)) if self.model == "power" else (lo, hi)


@dataclass(frozen=True)
class Crossing:
    """Where the log-linear fit's gap reaches ``threshold``: ``size`` with its Fieller interval [lo, hi], or None
    for each with ``reason`` when the data cannot place it."""

    threshold: float
    size: float | None
    lo: float | None
    hi: float | None
    reason: str


def se_from_ci(lo: float, hi: float) -> float:
    """A point's standard error from its 95% interval (its half-width over 1.96)."""
    if not hi > lo:
        raise ValueError(f"se_from_ci: the interval must have hi > lo (got [{lo}, {hi}])")
    return (hi - lo) / (2 * Z95)


def _fit(model: str, x: np.ndarray, y: np.ndarray, sigma: np.ndarray | None) -> LineFit:
    if len(x) < 3:
        raise ValueError(f"{model} fit: needs at least 3 points for an interval (got {len(x)})")
    if len(set(x.tolist())) < 2:
        raise ValueError(f"{model} fit: the points must span more than one size")
    popt, pcov = optimize.curve_fit(_line, x, y, p0=(float(np.mean(y)), 0.0), sigma=sigma, absolute_sigma=False)
    cov = ((float(pcov[0, 0]), float(pcov[0, 1])), (float(pcov[1, 0]), float(pcov[1, 1])))
    return LineFit(model, float(popt[0]), float(popt[1]), cov, len(x), sigma is not None)


def _arrays(size: Sequence[float], gap: Sequence[float], se: Sequence[float] | None) -> tuple[np.ndarray, ...]:
    if len(size) != len(gap) or (se is not None and len(se) != len(gap)):
        raise ValueError("fit: one size, one gap (and one standard error) per point")
    s, g = np.asarray(size, dtype=float), np.asarray(gap, dtype=float)
    if np.any(s <= 0) or not np.all(np.isfinite(g)):
        raise ValueError("fit: sizes must be positive and gaps finite")
    e = None if se is None else np.asarray(se, dtype=float)
    if e is not None and not np.all(e > 0):
        raise ValueError("fit: every standard error must be positive")
    return s, g, e  # type: ignore[return-value]


def power_fit(size: Sequence[float], gap: Sequence[float], se: Sequence[float] | None = None) -> LineFit:
    """log10 gap = a + b log10 size over the points with a positive gap (weights 1 / (se / gap)^2 when ``se``)."""
    s, g, e = _arrays(size, gap, se)
    keep = g > 0
    sigma = None if e is None else e[keep] / g[keep]
    return _fit("power", np.log10(s[keep]), np.log10(g[keep]), sigma)


def loglinear_fit(size: Sequence[float], gap: Sequence[float], se: Sequence[float] | None = None) -> LineFit:
    """gap = a + b log10 size over every point (weights 1 / se^2 when ``se``)."""
    s, g, e = _arrays(size, gap, se)
    return _fit("loglinear", np.log10(s), g, e)


def crossing(fit: LineFit, threshold: float = 0.0) -> Crossing:
    """Where ``fit`` (log-linear) reaches ``threshold``, with Fieller's 95% interval for -(a - threshold) / b."""
    if fit.model != "loglinear":
        raise ValueError("crossing: a power law never crosses 0; use the log-linear fit")
    a, b, t = fit.a - threshold, fit.b, fit.t
    (vaa, vab), (_, vbb) = fit.cov
    if b == 0:
        return Crossing(threshold, None, None, None, "the fitted gap is flat: it never reaches the threshold")
    theta = -a / b
    qa = b * b - t * t * vbb
    if qa <= 0:
        return Crossing(threshold, None, None, None, "the slope is not resolved (its interval holds 0): the "
                        "crossing's interval is unbounded at this many points and seeds")
    qb = a * b - t * t * vab
    qc = a * a - t * t * vaa
    disc = qb * qb - qa * qc
    root = math.sqrt(max(disc, 0.0))
    lo, hi = (-qb - root) / qa, (-qb + root) / qa
    if b > 0:
        reason = "the fitted gap grows with size: it reached the threshold below the measured sizes"
    else:
        reason = "Fieller 95% interval"
    return Crossing(threshold, 10.0 ** theta, 10.0 ** lo, 10.0 ** hi, reason)
