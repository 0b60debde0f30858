"""Laws of loss against size that can say "not identifiable": fits with chi^2 and AIC, and profile-likelihood
intervals for where an island arm reaches its baseline and for the gap it predicts at an unmeasured size.

The laws' forms are in ``models.py``. Sizes enter as x = ln(N / N0), N0 the geometric mean of the fitted sizes (it
decorrelates the amplitude from the exponent; ``A`` is reported back at N = 1). Two families, each fitted by
``scipy.optimize.least_squares``:

* **loss laws** (each arm's validation loss; ``arms[0]`` is the baseline every gap is read against):
  ``power`` L = A N^-alpha per arm; ``power+E`` L = E + A N^-alpha with E per arm; ``power+E shared`` the same with
  one irreducible E for every arm (Charles et al. 2025 fit the first; the last two are the Chinchilla form). The gap
  of arm k is L_k / L_0 - 1 of the fitted laws.
* **gap laws** (the paired ratio - 1, with its own interval): ``gap power`` g = a N^-b, which never crosses 0 (its
  "crossing" is reported as never, a property of the model, not a finding); ``gap power+offset`` g = c + a N^-b,
  which crosses where a N^-b = -c. A straight line in log N always crosses somewhere: ``local_slope`` keeps it as a
  labelled local slope with no crossing.

Weights: each value's standard error when given (``sigma``), otherwise unit weights with the scale taken from the
residuals. The 95% profile threshold on chi^2 is 3.84 x max(1, chi^2_min / df) with standard errors (the scale factor
carries scatter beyond the seeds', e.g. a point made on another machine) and (chi^2_min / df) x F(1, df) without.
Per-arm loss laws ignore that the arms' seeds are paired (their intervals are conservative); the gap laws use the
paired ratio's interval.

**Profiles.** The crossing: for each candidate size on a log grid from ``1e-3`` x the smallest to ``1e6`` x the largest
fitted size, the model is refitted with its gap held at 0 there (a stiff residual added to the fit), and the sizes
whose chi^2 rises by less than the threshold form the interval. When that set reaches an end of the grid, or the best
fit does not cross inside it, the crossing is "not identifiable from these points": the data allow it that far or
never. A prediction's interval is the same profile on the gap at one size, solved for its two ends.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as _stats

from islands_kit.scaling.models import Model

Z95 = float(_stats.norm.ppf(0.975))
CHI2_1_95 = float(_stats.chi2.ppf(0.95, 1))
NOT_IDENTIFIABLE = "not identifiable from these points"
GRID_BELOW, GRID_ABOVE = 1e-3, 1e6  # the crossing's search range around the fitted sizes


def se_from_ci(lo: float, hi: float) -> float:
    """A value's standard error from its 95% interval (its half-width over 1.96)."""
    if not hi > lo:
        raise ValueError(f"se_from_ci: the interval must have hi > lo (got [{lo}, {hi}])")
    return (hi - lo) / (2 * Z95)


@dataclass(frozen=True)
class Series:
    """One arm's values (losses, or gaps to the baseline) at its sizes, with standard errors or None."""

    arm: str
    size: tuple[float, ...]
    value: tuple[float, ...]
    se: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.size) != len(self.value) or (self.se is not None and len(self.se) != len(self.value)):
            raise ValueError(f"{self.arm}: one size, one value (and one standard error) per point")
        if any(not s > 0 for s in self.size) or not all(math.isfinite(v) for v in self.value):
            raise ValueError(f"{self.arm}: sizes must be positive and values finite")
        if self.se is not None and not all(e > 0 for e in self.se):
            raise ValueError(f"{self.arm}: every standard error must be positive")


@dataclass
class Fit:
    """A model fitted to ``series`` (x = ln(N / n0)): the parameters, chi^2, df, AIC and their 95% Wald intervals."""

    model: Model
    series: tuple[Series, ...]
    n0: float
    theta: np.ndarray
    chi2: float
    df: int
    aic: float
    cov: np.ndarray | None
    weighted: bool

    @property
    def scale(self) -> float:
        """chi^2 per degree of freedom (the residual variance factor)."""
        return self.chi2 / self.df if self.df > 0 else float("nan")

    @property
    def threshold(self) -> float:
        """The chi^2 rise that bounds a 95% profile interval."""
        if self.weighted:
            return CHI2_1_95 * max(1.0, self.scale if self.df > 0 else 1.0)
        return self.scale * float(_stats.f.ppf(0.95, 1, self.df)) if self.df > 0 else float("inf")

    def x(self, size: float | np.ndarray) -> np.ndarray:
        return np.log(np.asarray(size, dtype=float) / self.n0)

    def gap(self, k: int, size: float | np.ndarray) -> np.ndarray:
        """Arm k's fitted gap at ``size``."""
        return self.model.gap(self.theta, k, self.x(size))

    def value(self, k: int, size: float | np.ndarray) -> np.ndarray:
        return self.model.predict(self.theta, k, self.x(size))

    def params(self) -> dict[str, list[float | None]]:
        """Each parameter [value, lo, hi] (95% t or normal Wald interval; None where it is not estimable); an ``lnA``
        is the amplitude's log at N = n0 (``amplitudes`` gives A at N = 1)."""
        q = _stats.t.ppf(0.975, self.df) if (not self.weighted and self.df > 0) else Z95
        out: dict[str, list[float | None]] = {}
        for i, name in enumerate(self.model.names):
            v = float(self.theta[i])
            se = None if self.cov is None or not np.isfinite(self.cov[i, i]) else math.sqrt(max(self.cov[i, i], 0.0))
            out[name] = [v, None if se is None else v - q * se, None if se is None else v + q * se]
        return out

    def amplitudes(self) -> dict[str, float]:
        """``A`` of each arm at N = 1 (L = E + A N^-alpha), from its lnA at n0 and its exponent."""
        p = dict(zip(self.model.names, self.theta))
        out = {}
        for s in self.series:
            la, al = p.get(f"lnA[{s.arm}]"), p.get(f"alpha[{s.arm}]")
            if la is not None and al is not None:
                out[s.arm] = float(math.exp(la) * self.n0 ** al)
        return out


def _resid(model: Model, series: Sequence[Series], n0: float, theta: np.ndarray) -> np.ndarray:
    out = []
    for k, s in enumerate(series):
        x = np.log(np.asarray(s.size) / n0)
        r = model.predict(theta, k, x) - np.asarray(s.value)
        out.append(r / np.asarray(s.se) if s.se is not None else r)
    return np.concatenate(out)


def _solve(model: Model, series: Sequence[Series], n0: float, starts: Sequence[np.ndarray]) -> tuple[np.ndarray, float]:
    """The least-squares minimum over several starts."""
    lo, hi = np.asarray(model.lower), np.asarray(model.upper)

    def fun(th: np.ndarray) -> np.ndarray:
        return _resid(model, series, n0, th)

    best: tuple[np.ndarray, float] | None = None
    for p in starts:
        p = np.clip(np.asarray(p, dtype=float), lo + 1e-12 * (hi - lo), hi - 1e-12 * (hi - lo))
        try:
            res = optimize.least_squares(fun, p, bounds=(lo, hi), method="trf", x_scale="jac", max_nfev=2000,
                                         xtol=1e-12, ftol=1e-12, gtol=1e-12)
        except ValueError:
            continue
        c = float(np.sum(_resid(model, series, n0, res.x) ** 2))
        if best is None or c < best[1]:
            best = (res.x, c)
    if best is None:
        raise ValueError(f"{model.name}: the fit did not converge from any start")
    return best


def fit(model: Model, series: Sequence[Series]) -> Fit:
    """``model`` fitted to ``series`` (every series weighted, or none)."""
    series = tuple(series)
    if len({s.se is None for s in series}) != 1:
        raise ValueError(f"{model.name}: every series needs standard errors, or none")
    n = sum(len(s.size) for s in series)
    k = len(model.names)
    if n <= k:
        raise ValueError(f"{model.name} fit: needs more points than its {k} parameters (got {n})")
    if any(len(set(s.size)) < 2 for s in series):
        raise ValueError(f"{model.name} fit: every series must span more than one size")
    n0 = float(np.exp(np.mean(np.log([x for s in series for x in s.size]))))
    p0 = np.asarray(model.p0, dtype=float)
    starts = [p0] + [np.where(np.array([nm.startswith(("alpha", "b")) for nm in model.names]), a, p0)
                     for a in (0.1, 0.6, 1.5)]
    theta, chi2 = _solve(model, series, n0, starts)
    weighted = series[0].se is not None
    df = n - k
    if weighted:
        aic = chi2 + 2 * k
    else:
        aic = n * math.log(max(chi2, 1e-300) / n) + 2 * k
    cov = None
    try:
        jac = _jac(model, series, n0, theta)
        jtj = jac.T @ jac
        cov = np.linalg.pinv(jtj)
        if not weighted and df > 0:
            cov = cov * chi2 / df
        elif df > 0:
            cov = cov * max(1.0, chi2 / df)
    except np.linalg.LinAlgError:
        cov = None
    return Fit(model, series, n0, theta, chi2, df, aic, cov, weighted)


def _jac(model: Model, series: Sequence[Series], n0: float, theta: np.ndarray) -> np.ndarray:
    cols = []
    for i in range(len(theta)):
        h = 1e-6 * max(1.0, abs(theta[i]))
        up, dn = theta.copy(), theta.copy()
        up[i] += h
        dn[i] -= h
        cols.append((_resid(model, series, n0, up) - _resid(model, series, n0, dn)) / (2 * h))
    return np.stack(cols, axis=1)


def profile(f: Fit, k: int, x: float, v: float, start: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """The least chi^2 of ``f``'s model with arm k's gap at x (= ln(N / n0)) held at v, and its parameters: the
    pinned parameter is solved from the others, which are refitted (from the best fit and from ``start``)."""
    m = f.model
    j = m.pinned(k)
    keep = np.array([i != j for i in range(len(m.names))])
    lo, hi = np.asarray(m.lower)[keep], np.asarray(m.upper)[keep]

    def full(free: np.ndarray) -> np.ndarray:
        th = np.empty(len(m.names))
        th[keep] = free
        th[j] = f.theta[j]
        return m.pin(th, k, x, v)

    def fun(free: np.ndarray) -> np.ndarray:
        r = _resid(m, f.series, f.n0, full(free))
        return np.where(np.isfinite(r), r, 1e6)

    best: tuple[float, np.ndarray] | None = None
    for p in [f.theta] + ([start] if start is not None else []):
        p0 = np.clip(np.asarray(p, dtype=float)[keep], lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))
        res = optimize.least_squares(fun, p0, bounds=(lo, hi), method="trf", x_scale="jac", max_nfev=400)
        c = float(np.sum(fun(res.x) ** 2))
        if best is None or c < best[0]:
            best = (c, full(res.x))
    assert best is not None
    return best


@dataclass(frozen=True)
class Crossing:
    """Where arm k's fitted gap reaches ``threshold``: ``size`` (None where the best fit does not cross in the
    searched range) and the 95% profile interval [lo, hi], each None where it reaches the range's end."""

    size: float | None
    lo: float | None
    hi: float | None
    identifiable: bool
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {"size": self.size, "ci95": None if self.lo is None and self.hi is None else [self.lo, self.hi],
                "verdict": "identified" if self.identifiable else NOT_IDENTIFIABLE, "reason": self.reason}


def fitted_roots(f: Fit, k: int, threshold: float, lo: float, hi: float, points: int = 4001) -> list[float]:
    """Where the best fit's gap of arm k passes ``threshold`` between x = lo and hi (sign changes, refined)."""
    xs = np.linspace(lo, hi, points)
    g = f.model.gap(f.theta, k, xs) - threshold
    out = []
    for i in np.flatnonzero(np.sign(g[:-1]) * np.sign(g[1:]) < 0):
        out.append(float(optimize.brentq(lambda x: float(f.model.gap(f.theta, k, np.array([x]))[0]) - threshold,
                                         xs[i], xs[i + 1], xtol=1e-10)))
    return out + [float(x) for x in xs[g == 0]]


def crossing(f: Fit, k: int, threshold: float = 0.0, points: int = 41) -> Crossing:
    """The profile-likelihood crossing of arm k's gap through ``threshold`` (see the module docstring)."""
    if not f.model.crosses:
        return Crossing(None, None, None, False, f"{f.model.name} never crosses {threshold:g} (a property of the "
                        "model): read the crossing from a model that can cross")
    sizes = [x for s in f.series for x in s.size]
    x_lo, x_hi = math.log(min(sizes) * GRID_BELOW / f.n0), math.log(max(sizes) * GRID_ABOVE / f.n0)
    mid = float(np.mean(np.log(np.asarray(sizes) / f.n0)))
    roots = fitted_roots(f, k, threshold, x_lo, x_hi)
    x_hat = min(roots, key=lambda r: abs(r - mid)) if roots else None
    grid = sorted(set(np.linspace(x_lo, x_hi, points).tolist()) | ({x_hat} if x_hat is not None else set()))
    delta = []
    start = None
    for xs in grid:
        c, start = profile(f, k, float(xs), threshold, start=start)
        delta.append(0.0 if xs == x_hat else c - f.chi2)
    crit = f.threshold
    inside = [i for i, d in enumerate(delta) if d <= crit]
    if not inside:
        return Crossing(None, None, None, False, f"no size from {min(sizes) * GRID_BELOW:.3g} to "
                        f"{max(sizes) * GRID_ABOVE:.3g} is allowed: the fitted gap stays away from {threshold:g}")
    # the block of allowed sizes around the estimate (the hull of every allowed size when the fit never crosses)
    if x_hat is not None:
        a = b = grid.index(x_hat)
        while a > 0 and delta[a - 1] <= crit:
            a -= 1
        while b < len(grid) - 1 and delta[b + 1] <= crit:
            b += 1
    else:
        a, b = inside[0], inside[-1]
    split = len(inside) != b - a + 1 or any(i < a or i > b for i in inside)

    def end(i: int, j: int) -> float:
        """The profile's threshold crossing between grid points i (inside) and j (outside), by bisection."""
        u, w = grid[i], grid[j]
        for _ in range(16):
            m = 0.5 * (u + w)
            if profile(f, k, m, threshold)[0] - f.chi2 <= crit:
                u = m
            else:
                w = m
        return 0.5 * (u + w)

    lo = None if a == 0 else float(f.n0 * math.exp(end(a, a - 1)))
    hi = None if b == len(grid) - 1 else float(f.n0 * math.exp(end(b, b + 1)))
    size = None if x_hat is None else float(f.n0 * math.exp(x_hat))
    if lo is None or hi is None:
        side = "below" if lo is None and hi is not None else "above" if hi is None and lo is not None else "both ways"
        reason = (f"the 95% profile interval is unbounded {side} (the data allow a crossing out to the searched "
                  f"range's end, {GRID_BELOW:g} to {GRID_ABOVE:g} x the fitted sizes)")
        return Crossing(size, lo, hi, False, reason)
    if size is None:
        return Crossing(None, lo, hi, False, "the best fit does not cross in the searched range, though the data "
                        "allow it in the interval")
    if split:
        return Crossing(size, lo, hi, False, "the profile also allows sizes apart from this interval")
    return Crossing(size, lo, hi, True, "95% profile-likelihood interval")


@dataclass(frozen=True)
class Prediction:
    size: float
    gap: float
    lo: float | None
    hi: float | None

    def as_dict(self) -> dict[str, object]:
        return {"size": self.size, "gap": self.gap, "ci95": None if self.lo is None or self.hi is None
                else [self.lo, self.hi]}


def predict(f: Fit, k: int, size: float, span: float = 1.0) -> Prediction:
    """Arm k's fitted gap at ``size`` with its 95% profile interval (an end is None when the gap can move ``span``
    without the chi^2 rising past the threshold)."""
    x = float(f.x(size))
    g0 = float(f.model.gap(f.theta, k, np.array([x]))[0])
    crit = f.threshold

    def rise(v: float) -> float:
        c, _ = profile(f, k, x, v)
        return c - f.chi2 - crit

    ends: list[float | None] = []
    for sign in (-1.0, 1.0):
        step, inner, found = 1e-3, g0, None
        while step <= span:
            v = g0 + sign * step
            if rise(v) > 0:
                found = float(optimize.brentq(rise, min(inner, v), max(inner, v), xtol=1e-6))
                break
            inner, step = v, step * 2
        ends.append(found)
    return Prediction(size, g0, ends[0], ends[1])


@dataclass(frozen=True)
class LineFit:
    """The local slope: gap = a + b log10 N by (weighted) least squares, a description of the measured range only
    (a line in log N always crosses 0 somewhere, so it is never read as a crossing)."""

    a: float
    b: float
    b_se: float
    df: int

    def b_ci95(self) -> tuple[float, float]:
        t = float(_stats.t.ppf(0.975, self.df))
        return self.b - t * self.b_se, self.b + t * self.b_se


def local_slope(size: Sequence[float], gap: Sequence[float], se: Sequence[float] | None = None) -> LineFit:
    """The gap's slope per decade of size over the measured points (WLS with ``se``; residual-scaled covariance)."""
    if len(size) < 3:
        raise ValueError(f"local slope: needs at least 3 points (got {len(size)})")
    x = np.log10(np.asarray(size, dtype=float))
    popt, pcov = optimize.curve_fit(lambda x, a, b: a + b * x, x, np.asarray(gap, dtype=float), p0=(0.0, 0.0),
                                    sigma=None if se is None else np.asarray(se, dtype=float), absolute_sigma=False)
    return LineFit(float(popt[0]), float(popt[1]), float(math.sqrt(pcov[1, 1])), len(size) - 2)
