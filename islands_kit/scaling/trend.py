"""A scaling study's points, read through the protocol's report (and ledger), into ``benchmarks/scaling-trend.json``.

One ``point`` entry per (point, non-reference arm): ``axis`` (size | length), ``width``, ``params_active``,
``steps``, ``tokens`` (of the arm's pick), ``arm``, ``seeds`` (paired with the reference), ``ratio_mean`` and
``ratio_ci95`` (islands_kit/stats.py), and what the point cost (``machine``, its finished ``runs``, their
``cpu_hours``). One ``fit`` entry per axis and arm: the power law's ``exponent`` with
``exponent_ci95`` over the points with a positive gap, and the log-linear fit's ``crossing`` (the size, or tokens,
where the fitted gap reaches 0; null when its Fieller interval is unbounded, with the reason), and the ``command``
that re-makes it. One ``published_fit`` entry: the same two fits of Charles et al.'s Table 4 M = 2 points.

    python -m islands_kit.scaling.trend benchmarks/studies/scaling-size.toml benchmarks/studies/scaling-length.toml
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from islands_kit.config import apply_overrides
from islands_kit.io import dumps_strict, finite, replace_marked_block
from islands_kit.protocol.command import default_root
from islands_kit.protocol.ledger import overlay
from islands_kit.protocol.points import execute_in_process, point_root, point_studies, run_points
from islands_kit.protocol.report import make_report
from islands_kit.protocol.runs import Run, machines
from islands_kit.protocol.study import Study, StudyError, load_study
from islands_kit.protocol.tuning import tuned_pick
from islands_kit.resources import resource_dir
from islands_kit.scaling import fit, references

SCHEMA = 1
TREND_BLOCK = "trend:scaling"  # its block's markers in benchmarks/RESULTS.md
X_OF_AXIS = {"size": "params_active", "length": "tokens"}


def point_entries(study: Study, root: Path) -> list[dict[str, Any]]:
    """Every finished point of ``study`` (with its ledgers' runs, read in a scratch copy): per arm, one
    entry, read from the machine whose runs pair the most seeds with its reference (the report's order breaks ties:
    the most complete machine first). Runs of different machines are never paired; what the point cost counts every
    machine's runs."""
    out = []
    for p, sub in point_studies(study):
        with overlay(sub, point_root(root, p)) as proot:  # the ledger's runs read, none written into runs/
            doc = make_report(sub, proot, "trend")
            arms = {(e["machine"], e["arm"]): e for e in doc["entries"] if e["kind"] == "arm"}
            best: dict[str, dict[str, Any]] = {}
            for e in doc["entries"]:
                if e["kind"] != "arm" or e["arm"] == e["ref"] or not e.get("ratio_n"):
                    continue
                if e["arm"] not in best or e["ratio_n"] > best[e["arm"]]["ratio_n"]:
                    best[e["arm"]] = e
            costs = [point_cost(proot / m) for m in machines(proot)]
            runs = sum(n for n, _ in costs)
            cpu_h = None if any(c is None for _, c in costs) else round(sum(c for _, c in costs if c is not None), 3)
            for arm, e in best.items():
                m = e["machine"]
                found = tuned_pick(sub, arm, proot, m)
                res = None if found is None else Run(found[0], e["seeds"][0], sub.preset, proot / m, "score").result()
                if found is None or res is None:
                    continue
                chosen = found[0]
                ref = arms[(m, e["ref"])]
                out.append({"kind": "point", "point": p.name, "axis": p.axis, "study": study.name, "arm": arm,
                            "width": apply_overrides(sub.base_config(chosen.experiment), chosen.overrides).model.d_model,
                            "params_active": res.get("params_active"), "steps": res.get("steps"),
                            "tokens": res.get("tokens"), "seeds": e["seeds"][: e["ratio_n"]],
                            "ratio_mean": e["ratio_mean"], "ratio_ci95": e["ratio_ci95"], "label": e["label"],
                            "ref": e["ref"], "ref_label": ref.get("label"),
                            "grid_edge": {a: arms[(m, a)].get("pick_at_grid_edge") or [] for a in (arm, e["ref"])},
                            "machine": m, "tuned_on": {a: arms[(m, a)].get("tuned_on") for a in (arm, e["ref"])},
                            "runs": runs, "cpu_hours": cpu_h})
    return out


def point_cost(machine_root: Path) -> tuple[int, float | None]:
    """What a point cost on one machine: its finished runs (every arm's tuning and scoring) and their CPU-hours
    (each run's ``cpu_time_s``; None if a run did not record it)."""
    results = [json.loads(f.read_text()) for f in sorted(machine_root.glob("*/*/seed*/result.json"))]
    cpu = [r.get("cpu_time_s") for r in results]
    if not results or not all(isinstance(c, (int, float)) for c in cpu):
        return len(results), None
    return len(results), round(sum(cpu) / 3600.0, 3)


def fit_entry(axis: str, arm: str, points: Sequence[dict[str, Any]], command: str) -> dict[str, Any]:
    """The axis's fits over its points (exponent and crossing None, with a note, below three usable points)."""
    x_key = X_OF_AXIS[axis]
    pts = [p for p in points if p["ratio_ci95"] is not None and p[x_key]]
    x = [float(p[x_key]) for p in pts]
    gap = [p["ratio_mean"] - 1.0 for p in pts]
    se = [fit.se_from_ci(*p["ratio_ci95"]) for p in pts]
    entry: dict[str, Any] = {"kind": "fit", "axis": axis, "arm": arm, "x": x_key, "model": "power law over the "
                             "positive gaps (WLS, log-log); crossing from gap linear in log10 x (Fieller)",
                             "exponent": None, "exponent_ci95": None, "points_in_power_fit": sum(g > 0 for g in gap),
                             "crossing": None, "crossing_ci95": None, "crossing_note": "", "command": command}
    try:
        pw = fit.power_fit(x, gap, se)
        entry.update({"exponent": pw.b, "exponent_ci95": list(pw.b_ci95()), "power_a": pw.a, "power_cov": pw.cov})
    except ValueError as e:
        entry["exponent_note"] = str(e)
    try:
        ll = fit.loglinear_fit(x, gap, se)
        c = fit.crossing(ll)
        entry.update({"crossing": c.size, "crossing_ci95": None if c.lo is None else [c.lo, c.hi],
                      "crossing_note": c.reason, "loglinear_a": ll.a, "loglinear_b": ll.b, "loglinear_cov": ll.cov})
    except ValueError as e:
        entry["crossing_note"] = str(e)
    return entry


def published_entry() -> dict[str, Any]:
    pts = references.charles_m2()
    n, gap = [p for p, _ in pts], [g for _, g in pts]
    pw, ll = fit.power_fit(n, gap), fit.loglinear_fit(n, gap)
    c = fit.crossing(ll)
    return {"kind": "published_fit", "axis": "size", "source": references.SOURCE, "points": [list(p) for p in pts],
            "exponent": pw.b, "exponent_ci95": list(pw.b_ci95()), "power_a": pw.a, "power_cov": pw.cov,
            "points_in_power_fit": pw.n, "crossing": c.size, "crossing_ci95": None if c.lo is None else [c.lo, c.hi],
            "crossing_note": c.reason, "loglinear_a": ll.a, "loglinear_b": ll.b, "loglinear_cov": ll.cov}


def build_trend(studies: Sequence[Study], roots: Sequence[Path] | None = None) -> dict[str, Any]:
    """The trend document of ``studies`` (their runs under ``roots``, default runs/studies/NAME)."""
    roots = list(roots) if roots is not None else [default_root(s) for s in studies]
    files = " ".join(str(s.path) for s in studies)
    command = (" && ".join(f"islands-kit study run {s.path} --jobs 2 && islands-kit study report {s.path} --write"
                           for s in studies) + f" && python -m islands_kit.scaling.trend {files}")
    points = [e for s, r in zip(studies, roots) for e in point_entries(s, r)]
    fits = []
    for axis in sorted({p.axis for s in studies for p in s.points}):
        for arm in sorted({e["arm"] for e in points if e["axis"] == axis}):
            fits.append(fit_entry(axis, arm, [e for e in points if e["axis"] == axis and e["arm"] == arm], command))
    return finite({"schema": SCHEMA, "studies": [s.name for s in studies], "command": command,
                   "entries": points + fits + [published_entry()]})


def _ci(v: list[float] | None, fmt: Any = "{:.2f}".format) -> str:
    return "-" if v is None else "[" + ", ".join(fmt(x) for x in v) + "]"


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    return next((f"{n / d:.3g}{u}" for d, u in ((1e9, "B"), (1e6, "M"), (1e3, "K")) if n >= d), f"{n:.3g}")


def contains(ci: list[float] | None, value: float | None) -> bool | None:
    """Whether the interval ``ci`` holds ``value`` (None when either is missing)."""
    return None if ci is None or value is None else ci[0] <= value <= ci[1]


def render_trend(doc: dict[str, Any]) -> str:
    """The trend's markdown block (benchmarks/RESULTS.md, between ``<!-- trend:scaling:... -->``), made from the
    JSON document alone: each axis's points with their intervals and costs, the fits, and in plain words whether our
    exponent's interval holds the published one."""
    entries = doc["entries"]
    pub = next((e for e in entries if e["kind"] == "published_fit"), None)
    made = f"Made by `{doc['command']}`" if doc.get("command") else "No point of ours recorded yet"
    out = [f"{made}; every ratio is the arm over the baseline, each at its own pick, the geometric mean over paired "
           "seeds [95% paired t interval]."]
    for axis, xname in (("size", "active parameters"), ("length", "training tokens")):
        pts = sorted((e for e in entries if e["kind"] == "point" and e["axis"] == axis), key=lambda e: e[X_OF_AXIS[axis]])
        out += ["", f"**{axis} axis** ({xname}):", ""]
        if not pts:
            out.append("no point measured yet.")
        else:
            out += ["| point | width | active params | steps | tokens | tokens / active param | arm | pick | baseline's "
                    "pick | seeds | / baseline, equal tokens | picks at the grid's edge | scored on | runs | CPU-hours |",
                    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for e in pts:
                tpp = e["tokens"] / e["params_active"] if e.get("tokens") and e.get("params_active") else None
                cpu = e.get("cpu_hours")
                pick = ", ".join(f"{k}={v}" for k, v in (e.get("label") or {}).items()) or "-"
                ref_pick = ", ".join(f"{k}={v}" for k, v in (e.get("ref_label") or {}).items()) or "-"
                edge = "; ".join(f"{a}: {', '.join(v)}" for a, v in (e.get("grid_edge") or {}).items() if v) or "none"
                out.append(f"| {e['point']} | {e['width']} | {e['params_active']:,} | {e['steps']:,} | {e['tokens']:,} | "
                           f"{'-' if tpp is None else f'{tpp:.2f}'} | {e['arm']} | {pick} | {ref_pick} | {len(e['seeds'])} | "
                           f"{e['ratio_mean']:.4f} {_ci(e['ratio_ci95'], '{:.4f}'.format)} | {edge} | {e.get('machine', '-')} | "
                           f"{e.get('runs', '-')} | "
                           f"{'-' if cpu is None else f'{cpu:.2f}'} |")
        for f in (e for e in entries if e["kind"] == "fit" and e["axis"] == axis):
            if f.get("exponent") is None:
                out += ["", f"{f['arm']}: no power-law fit yet ({f.get('exponent_note') or 'fewer than 3 points'})."]
                continue
            cross = (f"crossing 0 at {_size(f['crossing'])} {_ci(f['crossing_ci95'], _size)}" if f.get("crossing")
                     else f"no crossing: {f.get('crossing_note') or 'unbounded'}")
            line = (f"{f['arm']}: gap ~ {xname}^b over {f['points_in_power_fit']} points, b = {f['exponent']:.2f} "
                    f"{_ci(f['exponent_ci95'])}; {cross}.")
            if axis == "size" and pub is not None:
                ours_holds = contains(f["exponent_ci95"], pub["exponent"])
                theirs_holds = contains(pub["exponent_ci95"], f["exponent"])
                line += (f" **Our exponent's interval {'contains' if ours_holds else 'does not contain'} the exponent "
                         f"of our fit to their table**, and that one's {'contains' if theirs_holds else 'does not contain'} "
                         "ours.")
            out += ["", line]
        if axis == "size" and pub is not None:
            out += ["", f"Our fit to Charles et al.'s Table 4 (M = 2, dense: active = total; their rounded gaps, the "
                        f"power law over the {pub['points_in_power_fit']} positive ones): b = {pub['exponent']:.2f} "
                        f"{_ci(pub['exponent_ci95'])}, crossing 0 at "
                        f"{_size(pub['crossing'])} {_ci(pub['crossing_ci95'], _size)}."]
    return "\n".join(out)


def write_trend(studies: Sequence[Study], roots: Sequence[Path] | None = None,
                results: Path | None = Path("benchmarks") / "RESULTS.md") -> Path:
    """Write the trend's JSON (the studies' ``trend`` file) and, when ``results`` exists, its block there."""
    targets = {s.trend for s in studies}
    if len(targets) != 1 or None in targets:
        raise StudyError(f"trend: the studies must name one trend file (got {sorted(map(str, targets))})")
    path = Path(str(targets.pop()))
    doc = build_trend(studies, roots)
    path.write_text(dumps_strict(doc, indent=1) + "\n")
    if results is not None and results.is_file():
        replace_marked_block(results, TREND_BLOCK, render_trend(doc))
    return path


def notebook_trend(preset: str, out: Path, say: Any = print) -> dict[str, Any]:
    """The scaling notebook's document: at ``smoke`` the smoke studies (benchmarks/studies/smoke/) run here, in this
    process, under ``out`` (finished runs are kept) and fitted; at any other preset the recorded trend
    (benchmarks/scaling-trend.json), or, before its runs are made, the published fit alone."""
    bench = resource_dir("benchmarks")
    if preset == "smoke":
        studies = [load_study(bench / "studies" / "smoke" / f"scaling-{axis}.toml") for axis in ("size", "length")]
        roots = [Path(out) / "runs" / s.name for s in studies]
        said: set[str] = set()
        for s, r in zip(studies, roots):
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):  # each run ends with the same "wandb: off (...)" line
                made = run_points(s, r, jobs=1, say=lambda _: None, execute_run=execute_in_process)
            for line in dict.fromkeys(printed.getvalue().splitlines()):  # every distinct line once, over both studies
                if line not in said:
                    said.add(line)
                    say(line)
            say(f"{s.name}: {len(made)} runs made, the rest finished before")
        return build_trend(studies, roots)
    if preset != "demo":
        raise StudyError(f"preset: the scaling trend is recorded at demo (or made at smoke), not {preset!r}")
    recorded = bench / "scaling-trend.json"
    if recorded.is_file():
        return dict(json.loads(recorded.read_text()))
    say(f"{recorded} does not exist yet: the runs are not made (see its studies' commands); the published fit alone")
    return {"schema": SCHEMA, "studies": [], "command": "", "entries": [published_entry()]}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m islands_kit.scaling.trend STUDY.toml [STUDY.toml ...]")
        return 2
    try:
        studies = [load_study(a) for a in args]
        if any(not s.points for s in studies):
            raise StudyError("trend: every study must have [[points]]")
        print(f"wrote {write_trend(studies)}")
    except StudyError as e:
        print(f"scaling trend: {e}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
