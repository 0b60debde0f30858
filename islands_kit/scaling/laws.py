"""The scaling trend's fits as JSON entries: each arm's loss laws, each island arm's gap laws with its crossing (two
sites) or parity size (eight cells), the published grid fitted the same way, ours and theirs fitted jointly, a
verdict per arm in words generated from the intervals, and the prediction at the next width (islands_kit/scaling/fit.py
holds the mathematics; trend.py the points).

Entry kinds:

* ``law`` — one arm's validation loss against size (``power``, ``power+E``), and ``power+E shared`` over every arm:
  parameters [value, lo, hi], chi^2, df, AIC;
* ``gap_fit`` — an island arm's gap read from a loss law (``source`` "loss laws") or fitted itself (``gap power``,
  ``gap power+offset``; ``local slope`` is the straight line in log N, a labelled description with no crossing): its
  chi^2, AIC, and ``crossing`` {size, ci95, verdict, reason};
* ``verdict`` — per axis and island arm: the preferred loss law and gap law by AIC, and whether a crossing (parity) is
  identifiable: only when every crossing model the data do not reject bounds it and their intervals overlap, and no
  law that never crosses fits as well;
* ``published_law`` / ``published_gap_fit`` / ``published_verdict`` — the same on Charles et al.'s losses
  ("this kit's fit to published values"), with ``their_fit`` beside the kit's pure power law;
* ``joint_fit`` — our gaps and the published column beside each arm (two_site: M = 2, eight_cell: M = 8) in one gap
  law with a shared exponent (and offset) and an amplitude per setting;
* ``prediction`` — each model's gap with its interval at the next width past the largest measured, with the commit
  that made it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as _stats

from islands_kit.scaling import fit as F
from islands_kit.scaling import models as M
from islands_kit.scaling import references

REF = "baseline"
LABEL_PUBLISHED = "this kit's fit to published values"
CROSSING_WORD = {"two_site": "crossing", "eight_cell": "parity"}
REJECT_P = 0.01  # a weighted fit whose chi^2 has a p-value under this is rejected by the data
AIC_TIE = 2.0  # laws within this much AIC fit as well


def _word(arm: str) -> str:
    return CROSSING_WORD.get(arm, "crossing")


def _mean_se(values: Sequence[float]) -> tuple[float, float | None]:
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return float(v.mean()), None
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size))


def series_of(points: Sequence[dict[str, Any]], x_key: str) -> tuple[F.Series | None, dict[str, F.Series],
                                                                      dict[str, F.Series]]:
    """From a axis's point entries: the baseline's loss series, each island arm's loss series, and each island arm's
    gap series (the paired ratio - 1 with its interval's standard error). A size's baseline comes from the first arm
    measured there (its reference on the same machine). Values without a seed spread are left out."""
    base: dict[float, tuple[float, float]] = {}
    loss: dict[str, list[tuple[float, float, float]]] = {}
    gap: dict[str, list[tuple[float, float, float]]] = {}
    for p in points:
        x = p.get(x_key)
        vb = p.get("val_bpb") or {}
        if not x:
            continue
        ref = vb.get(p["ref"])
        if ref is not None and x not in base:
            m, se = _mean_se(ref)
            if se:
                base[float(x)] = (m, se)
        mine = vb.get(p["arm"])
        if mine is not None:
            m, se = _mean_se(mine)
            if se:
                loss.setdefault(p["arm"], []).append((float(x), m, se))
        if p.get("ratio_ci95"):
            gap.setdefault(p["arm"], []).append((float(x), p["ratio_mean"] - 1.0, F.se_from_ci(*p["ratio_ci95"])))

    def mk(arm: str, rows: list[tuple[float, float, float]]) -> F.Series:
        rows = sorted(rows)
        return F.Series(arm, tuple(r[0] for r in rows), tuple(r[1] for r in rows), tuple(r[2] for r in rows))

    b = mk(REF, [(x, m, s) for x, (m, s) in base.items()]) if base else None
    return b, {a: mk(a, r) for a, r in loss.items()}, {a: mk(a, r) for a, r in gap.items()}


def _p_value(f: F.Fit) -> float | None:
    return float(_stats.chi2.sf(f.chi2, f.df)) if f.weighted and f.df > 0 else None


def _stats_of(f: F.Fit) -> dict[str, Any]:
    return {"params": f.params(), "A_at_N1": f.amplitudes() or None, "chi2": f.chi2, "df": f.df, "aic": f.aic,
            "p_value": _p_value(f), "n0": f.n0, "theta": f.theta.tolist(), "weighted": f.weighted}


def _try(model: M.Model, series: Sequence[F.Series]) -> tuple[F.Fit | None, str]:
    try:
        return F.fit(model, series), ""
    except ValueError as e:
        return None, str(e)


def _e0(series: Sequence[F.Series]) -> float:
    return 0.5 * min(v for s in series for v in s.value)


def fit_axis(axis: str, points: Sequence[dict[str, Any]], x_key: str, kind: str = "",
             label: str | None = None, grid: int = 41) -> list[dict[str, Any]]:
    """Every law of one axis over ``points`` on ``x_key`` (see the module docstring); ``kind`` prefixes the entry
    kinds (``published_`` for the published grid)."""
    base, losses, gaps = series_of(points, x_key)
    head = {"axis": axis, "x": x_key, **({"label": label} if label else {})}
    out: list[dict[str, Any]] = []
    e: dict[str, Any]
    loss_fits: dict[tuple[str, str], F.Fit] = {}
    if base is not None:
        for arm, s in [(REF, base), *sorted(losses.items())]:
            for name in ("power", "power+E"):
                f, why = _single(name, s)
                e = {"kind": f"{kind}law", **head, "arm": arm, "model": name, "n_points": len(s.size)}
                out.append({**e, **(_stats_of(f) if f else {"note": why})})
        arms = [a for a in sorted(losses) if len(losses[a].size) >= 2]
        for name in M.LOSS_MODELS:
            if name == "power+E shared":
                f, why = _try(M.loss_model(name, [REF, *arms], _e0([base, *[losses[a] for a in arms]])),
                              [base, *[losses[a] for a in arms]]) if arms else (None, "no island arm")
                out.append({"kind": f"{kind}law", **head, "arm": "all", "arms": [REF, *arms], "model": name,
                            "n_points": len(base.size) + sum(len(losses[a].size) for a in arms),
                            **(_stats_of(f) if f else {"note": why})})
                for a in arms:
                    if f:
                        loss_fits[(a, name)] = f
                continue
            for a in arms:
                f, _ = _try(M.loss_model(name, [REF, a], _e0([base, losses[a]])), [base, losses[a]])
                if f:
                    loss_fits[(a, name)] = f
    for arm in sorted(set(gaps) | set(losses)):
        word = _word(arm)
        for name in M.LOSS_MODELS:
            f = loss_fits.get((arm, name))
            e = {"kind": f"{kind}gap_fit", **head, "arm": arm, "model": name, "source": "loss laws",
                 "arms": [s.arm for s in f.series] if f else None, "crossing_word": word}
            if f is None:
                out.append({**e, "note": "too few points for this law"})
                continue
            k = [s.arm for s in f.series].index(arm)
            out.append({**e, "k": k, **_stats_of(f), "crossing": F.crossing(f, k, points=grid).as_dict()})
        g = gaps.get(arm)
        for name in M.GAP_MODELS:
            e = {"kind": f"{kind}gap_fit", **head, "arm": arm, "model": name, "source": "gap", "crossing_word": word}
            f, why = _try(M.gap_model(name, [arm], _g0(g)), [g]) if g else (None, "no gap measured")
            if f is None:
                out.append({**e, "note": why})
                continue
            out.append({**e, "k": 0, "arms": [arm], **_stats_of(f), "crossing": F.crossing(f, 0, points=grid).as_dict()})
        if g is not None and len(g.size) >= 3:
            ls = F.local_slope(g.size, g.value, g.se)
            lo, hi = ls.b_ci95()
            out.append({"kind": f"{kind}gap_fit", **head, "arm": arm, "model": "local slope", "source": "gap",
                        "note": "the gap's slope per decade of size over the measured points: a description of "
                                "this range, never read as a crossing (a line in log N crosses 0 somewhere)",
                        "slope_per_decade": ls.b, "slope_ci95": [lo, hi], "intercept": ls.a})
        out.append(verdict(axis, arm, out, kind, head))
    return out


def _single(name: str, s: F.Series) -> tuple[F.Fit | None, str]:
    """One arm's own loss law."""
    return _try(M.loss_model(name, [s.arm], _e0([s])), [s])


def _g0(g: F.Series | None) -> float:
    return float(np.mean(g.value)) if g is not None else 0.01


def verdict(axis: str, arm: str, entries: Sequence[dict[str, Any]], kind: str, head: dict[str, Any]) -> dict[str, Any]:
    """The words for one arm, generated from its fits' intervals (see the module docstring)."""
    mine = [e for e in entries if e.get("arm") == arm and e["kind"] == f"{kind}gap_fit" and "chi2" in e]
    laws = [e for e in entries if e["kind"] == f"{kind}law" and e.get("arm") in (arm, "all") and "aic" in e]
    word = _word(arm)

    def rejected(e: dict[str, Any]) -> bool:
        return e.get("p_value") is not None and e["p_value"] < REJECT_P

    loss_pref = min((e for e in laws if e.get("arm") == arm), key=lambda e: e["aic"], default=None)
    gap_laws = [e for e in mine if e["source"] == "gap"]
    gap_pref = min(gap_laws, key=lambda e: e["aic"], default=None)
    reasons = []
    usable = [e for e in mine if e["model"] != "gap power" and not rejected(e)]
    for e in (e for e in mine if rejected(e)):
        reasons.append(f"{e['model']} is rejected by the data (chi^2 {e['chi2']:.1f} on {e['df']} df)")
    never = next((e for e in gap_laws if e["model"] == "gap power" and not rejected(e)), None)
    offset = next((e for e in gap_laws if e["model"] == "gap power+offset"), None)
    if never is not None and (offset is None or never["aic"] - offset["aic"] <= AIC_TIE):
        reasons.append("a gap law that never crosses (gap power) fits as well (AIC within 2)")
    for e in usable:
        c = e["crossing"]
        if c["verdict"] != "identified":
            reasons.append(f"{e['model']}: {c['reason']}")
    ivs = [e["crossing"]["ci95"] for e in usable if e["crossing"]["verdict"] == "identified"]
    if ivs and max(i[0] for i in ivs) > min(i[1] for i in ivs):
        reasons.append("the models' intervals do not overlap")
    ok = bool(usable) and not reasons
    if not usable and not reasons:
        reasons.append("no law that can cross has been fitted (too few points)")
    best = min(usable, key=lambda e: e["crossing"]["ci95"][1] - e["crossing"]["ci95"][0]) if ok else None
    return {"kind": f"{kind}verdict", **head, "arm": arm, "crossing_word": word,
            "preferred_loss_law": None if loss_pref is None else loss_pref["model"],
            "preferred_gap_law": None if gap_pref is None else gap_pref["model"],
            "identifiable": ok, "verdict": (f"{word} identified" if ok else F.NOT_IDENTIFIABLE),
            "size": None if best is None else best["crossing"]["size"],
            "ci95": None if best is None else best["crossing"]["ci95"], "reasons": reasons}


def published_points(columns: Sequence[str] = ("M=1", "M=2", "M=4", "M=8")) -> list[dict[str, Any]]:
    """The published grid as point entries (dense: active = total), each column an arm read against DP. The losses
    are single numbers (no seed spread): the fits are unweighted, their scale taken from the residuals."""
    out = []
    for col in columns:
        for i, n in enumerate(references.SIZES):
            out.append({"arm": col, "ref": "DP", "params_active": n, "params_total": n,
                        "val_bpb": {col: [references.LOSSES[col][i]], "DP": [references.LOSSES["DP"][i]]},
                        "ratio_mean": references.LOSSES[col][i] / references.LOSSES["DP"][i], "ratio_ci95": None})
    return out


def published_entries(grid: int = 41) -> list[dict[str, Any]]:
    """Charles et al.'s grid fitted with the same laws (unweighted): per column the loss laws with their own fit
    beside, each DiLoCo column's gap laws and crossing, and a verdict per column."""
    n = np.asarray(references.SIZES)
    out: list[dict[str, Any]] = []
    cols = [c for c in references.COLUMNS if c != "DP"]
    series = {c: F.Series(c, tuple(n), references.LOSSES[c]) for c in references.COLUMNS}
    head = {"axis": "size", "x": "params_total", "label": LABEL_PUBLISHED, "source_paper": references.SOURCE}
    for c in references.COLUMNS:
        for name in ("power", "power+E"):
            f, why = _single(name, series[c])
            e: dict[str, Any] = {"kind": "published_law", **head, "arm": c, "model": name, "n_points": len(n)}
            if name == "power":
                e["their_fit"] = {"A": references.THEIR_FITS[c][0], "alpha": references.THEIR_FITS[c][1]}
            out.append({**e, **(_stats_of(f) if f else {"note": why})})
    shared, why = _try(M.loss_model("power+E shared", ["DP", *cols], 1.0), [series[c] for c in references.COLUMNS])
    out.append({"kind": "published_law", **head, "arm": "all", "arms": list(references.COLUMNS),
                "model": "power+E shared", "n_points": len(n) * len(references.COLUMNS),
                **(_stats_of(shared) if shared else {"note": why})})
    for c in cols:
        word = "parity" if c == "M=8" else "crossing"
        for name in M.LOSS_MODELS:
            if name == "power+E shared":
                f, k = shared, 1 + cols.index(c)
            else:
                f, k = F.fit(M.loss_model(name, ["DP", c], 1.0), [series["DP"], series[c]]), 1
            e = {"kind": "published_gap_fit", **head, "arm": c, "model": name, "source": "loss laws",
                 "crossing_word": word}
            if f is None:
                out.append({**e, "note": why})
                continue
            out.append({**e, "arms": [s.arm for s in f.series], "k": k, **_stats_of(f),
                        "crossing": F.crossing(f, k, points=grid).as_dict()})
        g = F.Series(c, tuple(n), tuple(v for _, v in references.gaps(c)))
        for name in M.GAP_MODELS:
            f = F.fit(M.gap_model(name, [c], _g0(g)), [g])
            out.append({"kind": "published_gap_fit", **head, "arm": c, "model": name, "source": "gap",
                        "crossing_word": word, "arms": [c], "k": 0, **_stats_of(f),
                        "crossing": F.crossing(f, 0, points=grid).as_dict()})
        v = verdict("size", c, out, "published_", head)
        out.append({**v, "crossing_word": word})
    return out


def joint_entries(points: Sequence[dict[str, Any]], x_key: str = "params_active", grid: int = 41) -> list[dict[str, Any]]:
    """Our gaps and the published column beside each arm in one gap law per model: the exponent (and offset) shared,
    an amplitude per setting. The published gaps carry no seed spread; each gets the rms residual of the same law
    fitted to that column alone as its standard error, so neither setting is weighted by fiat."""
    _, _, gaps = series_of(points, x_key)
    out: list[dict[str, Any]] = []
    for arm, col in references.BESIDE.items():
        ours = gaps.get(arm)
        if ours is None or len(ours.size) < 2:
            continue
        pub = references.gaps(col)
        for name in M.GAP_MODELS:
            alone = F.fit(M.gap_model(name, [col]), [F.Series(col, tuple(p for p, _ in pub), tuple(g for _, g in pub))])
            rms = math.sqrt(alone.chi2 / max(alone.df, 1)) or references.ROUNDING_SD
            theirs = F.Series(col, tuple(p for p, _ in pub), tuple(g for _, g in pub), (rms,) * len(pub))
            e = {"kind": "joint_fit", "axis": "size", "x": x_key, "arm": arm, "published": col, "model": f"joint {name}",
                 "label": f"{LABEL_PUBLISHED}, jointly with ours (a shared exponent{' and offset' if 'offset' in name else ''}, "
                          "an amplitude per setting)", "published_se": rms}
            f, why = _try(M.joint_gap_model(name, [arm, col], _g0(ours)), [ours, theirs])
            if f is None:
                out.append({**e, "note": why})
                continue
            out.append({**e, "arms": [arm, col], **_stats_of(f),
                        "crossing": {s: F.crossing(f, i, points=grid).as_dict() for i, s in enumerate((arm, col))}})
    return out


def fit_of_entry(e: dict[str, Any]) -> F.Fit:
    """The fit an entry records, rebuilt from its model, arms, n0 and parameters (for drawing and predicting)."""
    name = e["model"]
    if name in M.LOSS_MODELS:
        model = M.loss_model(name, e["arms"])
    elif name.startswith("joint "):
        model = M.joint_gap_model(name[len("joint "):], e["arms"])
    else:
        model = M.gap_model(name, e["arms"])
    theta = np.asarray(e["theta"], dtype=float)
    return F.Fit(model, (), float(e["n0"]), theta, float(e["chi2"]), int(e["df"]), float(e["aic"]), None,
                 bool(e["weighted"]))


def prediction_entries(entries: Sequence[dict[str, Any]], points: Sequence[dict[str, Any]], width: int,
                       active: int, total: int, commit: str | None) -> list[dict[str, Any]]:
    """Each size-axis gap model's predicted gap (with its 95% profile interval) at the next width, refitted from the
    points (a prediction needs the data, not only the recorded parameters)."""
    base, losses, gaps = series_of(points, "params_active")
    out = []
    for e in entries:
        if e["kind"] != "gap_fit" or e["axis"] != "size" or "theta" not in e or e["x"] != "params_active":
            continue
        arm = e["arm"]
        if e["source"] == "gap":
            series: list[F.Series] = [gaps[arm]]
            model = M.gap_model(e["model"], [arm])
        elif base is not None:
            names = e["arms"]
            series = [base] + [losses[a] for a in names[1:]]
            model = M.loss_model(e["model"], names, _e0(series))
        else:
            continue
        f = F.fit(model, series)
        p = F.predict(f, int(e["k"]), float(active))
        out.append({"kind": "prediction", "axis": "size", "arm": arm, "model": e["model"], "source": e["source"],
                    "width": width, "params_active": active, "params_total": total, "gap": p.gap,
                    "gap_ci95": None if p.lo is None or p.hi is None else [p.lo, p.hi],
                    "fitted_points": sorted({q["point"] for q in points if q.get("axis") == "size"}),
                    "commit": commit, "note": "made before any run of this width; an open end means the gap can "
                                              "move that far without the fit rejecting it"})
    return out
