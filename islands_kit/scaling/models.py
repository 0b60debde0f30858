"""The laws' forms (islands_kit/scaling/fit.py fits them): each says how its series are predicted at x = ln(N / N0),
what arm k's gap is, and which parameter a profile solves to hold that gap at a given value (``pin``), so that a
profile is an ordinary least-squares refit of the other parameters.

* loss laws over arms (the first is the baseline): ``power`` L = A N^-alpha, ``power+E`` L = E + A N^-alpha with E
  per arm, ``power+E shared`` one E for every arm; a gap is L_k / L_0 - 1;
* gap laws, one series per arm: ``gap power`` g = a N^-b (never crosses 0), ``gap power+offset`` g = c + a N^-b;
* joint gap laws over settings (ours and a published column): a shared exponent (and offset), an amplitude each.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

LOSS_MODELS = ("power", "power+E", "power+E shared")
GAP_MODELS = ("gap power", "gap power+offset")


@dataclass(frozen=True)
class Model:
    """A law over some series: parameter names, a start, bounds, each series' prediction at x, the gap of series k
    against series 0 (loss laws) or series k itself (gap laws) at x, and ``pin``: the parameters with the one at
    ``pinned(k)`` solved so that arm k's gap at x is v (how a profile holds the gap exactly)."""

    name: str
    names: tuple[str, ...]
    p0: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    predict: Callable[[np.ndarray, int, np.ndarray], np.ndarray]  # (theta, series index, x) -> values
    gap: Callable[[np.ndarray, int, np.ndarray], np.ndarray]  # (theta, arm index, x) -> gap
    pinned: Callable[[int], int]  # arm index -> the parameter a held gap solves for
    pin: Callable[[np.ndarray, int, float, float], np.ndarray]  # (theta, k, x, v) -> theta with gap_k(x) = v
    crosses: bool = True


def _power_value(la: float, al: float, x: np.ndarray) -> np.ndarray:
    return np.exp(la - al * x)


def loss_model(name: str, arms: Sequence[str], e0: float = 0.0) -> Model:
    """A loss law over ``arms`` (the first is the baseline); ``e0`` starts E (below every loss). A held gap v at x
    solves arm k's E (per-arm E) or its lnA (the other two) from L_k(x) = (1 + v) L_0(x)."""
    if not arms:
        raise ValueError(f"{name}: needs at least one arm (the first is the baseline)")
    if name == "power":
        names = tuple(p for a in arms for p in (f"lnA[{a}]", f"alpha[{a}]"))
        p0 = tuple(v for _ in arms for v in (0.0, 0.2))
        lower, upper = tuple(v for _ in arms for v in (-50.0, -2.0)), tuple(v for _ in arms for v in (50.0, 5.0))

        def pred(th: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
            return _power_value(th[2 * k], th[2 * k + 1], x)

        def pinned(k: int) -> int:
            return 2 * k

        def pin(th: np.ndarray, k: int, x: float, v: float) -> np.ndarray:
            th = th.copy()
            th[2 * k] = math.log(1.0 + v) + th[0] - th[1] * x + th[2 * k + 1] * x
            return th
    elif name == "power+E":
        names = tuple(p for a in arms for p in (f"E[{a}]", f"lnA[{a}]", f"alpha[{a}]"))
        p0 = tuple(v for _ in arms for v in (e0, 0.0, 0.3))
        lower = tuple(v for _ in arms for v in (-50.0, -50.0, 0.0))
        upper = tuple(v for _ in arms for v in (50.0, 50.0, 5.0))

        def pred(th: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
            return th[3 * k] + _power_value(th[3 * k + 1], th[3 * k + 2], x)

        def pinned(k: int) -> int:
            return 3 * k

        def pin(th: np.ndarray, k: int, x: float, v: float) -> np.ndarray:
            th = th.copy()
            base = th[0] + math.exp(th[1] - th[2] * x)
            th[3 * k] = (1.0 + v) * base - math.exp(th[3 * k + 1] - th[3 * k + 2] * x)
            return th
    elif name == "power+E shared":
        names = ("E",) + tuple(p for a in arms for p in (f"lnA[{a}]", f"alpha[{a}]"))
        p0 = (e0,) + tuple(v for _ in arms for v in (0.0, 0.3))
        lower = (-50.0,) + tuple(v for _ in arms for v in (-50.0, 0.0))
        upper = (50.0,) + tuple(v for _ in arms for v in (50.0, 5.0))

        def pred(th: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
            return th[0] + _power_value(th[1 + 2 * k], th[2 + 2 * k], x)

        def pinned(k: int) -> int:
            return 1 + 2 * k

        def pin(th: np.ndarray, k: int, x: float, v: float) -> np.ndarray:
            th = th.copy()
            rest = (1.0 + v) * (th[0] + math.exp(th[1] - th[2] * x)) - th[0]
            # no positive amplitude reaches the held gap: an infeasible point (its residuals become huge)
            th[1 + 2 * k] = math.log(rest) + th[2 + 2 * k] * x if rest > 0 else float("nan")
            return th
    else:
        raise ValueError(f"loss model: {name!r} is not one of {', '.join(LOSS_MODELS)}")

    def gap(th: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
        return pred(th, k, x) / pred(th, 0, x) - 1.0

    return Model(name, names, p0, lower, upper, pred, gap, pinned, pin)


def gap_model(name: str, arms: Sequence[str], g0: float = 0.01) -> Model:
    """A law of the gap itself, one series per arm (no baseline series): amplitude any sign, exponent >= 0. A held
    gap solves the amplitude (gap power) or the offset."""
    if name == "gap power":
        names = tuple(p for a in arms for p in (f"a[{a}]", f"b[{a}]"))
        p0 = tuple(v for _ in arms for v in (g0, 0.3))
        lower, upper = tuple(v for _ in arms for v in (-10.0, 0.0)), tuple(v for _ in arms for v in (10.0, 5.0))

        def pred(th: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
            return th[2 * k] * np.exp(-th[2 * k + 1] * x)

        def pinned(k: int) -> int:
            return 2 * k

        def pin(th: np.ndarray, k: int, x: float, v: float) -> np.ndarray:
            th = th.copy()
            th[2 * k] = v * math.exp(th[2 * k + 1] * x)
            return th
        crosses = False
    elif name == "gap power+offset":
        names = tuple(p for a in arms for p in (f"c[{a}]", f"a[{a}]", f"b[{a}]"))
        p0 = tuple(v for _ in arms for v in (0.0, g0, 0.3))
        lower = tuple(v for _ in arms for v in (-10.0, -10.0, 0.0))
        upper = tuple(v for _ in arms for v in (10.0, 10.0, 5.0))

        def pred(th: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
            return th[3 * k] + th[3 * k + 1] * np.exp(-th[3 * k + 2] * x)

        def pinned(k: int) -> int:
            return 3 * k

        def pin(th: np.ndarray, k: int, x: float, v: float) -> np.ndarray:
            th = th.copy()
            th[3 * k] = v - th[3 * k + 1] * math.exp(-th[3 * k + 2] * x)
            return th
        crosses = True
    else:
        raise ValueError(f"gap model: {name!r} is not one of {', '.join(GAP_MODELS)}")
    return Model(name, names, p0, lower, upper, pred, pred, pinned, pin, crosses)


def joint_gap_model(name: str, settings: Sequence[str], g0: float = 0.01) -> Model:
    """One gap law over several settings (ours, the published grid's): the exponent (and the offset) shared, the
    amplitude per setting (the term for the setting). A held gap solves the setting's amplitude."""
    if name not in GAP_MODELS:
        raise ValueError(f"joint gap model: {name!r} is not one of {', '.join(GAP_MODELS)}")
    ns = len(settings)
    offset = name == "gap power+offset"
    j = 1 if offset else 0
    names = (("c",) if offset else ()) + ("b",) + tuple(f"a[{s}]" for s in settings)
    p0 = ((0.0,) if offset else ()) + (0.3,) + (g0,) * ns
    lower = ((-10.0,) if offset else ()) + (0.0,) + (-1e3,) * ns
    upper = ((10.0,) if offset else ()) + (5.0,) + (1e3,) * ns

    def pred(th: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
        return (th[0] if offset else 0.0) + th[j + 1 + k] * np.exp(-th[j] * x)

    def pinned(k: int) -> int:
        return j + 1 + k

    def pin(th: np.ndarray, k: int, x: float, v: float) -> np.ndarray:
        th = th.copy()
        th[j + 1 + k] = (v - (th[0] if offset else 0.0)) * math.exp(th[j] * x)
        return th

    return Model(f"joint {name}", names, p0, lower, upper, pred, pred, pinned, pin, offset)
