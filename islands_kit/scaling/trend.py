"""A scaling study's points, read through the protocol's report (and ledger), into ``benchmarks/scaling-trend.json``.

One ``point`` entry per (point, non-reference arm): ``axis`` (size | length), ``width``, ``params_active`` and
``params_total`` (the MoE's: every expert counted), ``steps``, ``tokens`` and ``tokens_per_active_param`` (of the
arm's pick), ``outer_steps_per_fragment``, ``global_batch`` and ``sync_H`` per arm, ``arm``, ``seeds`` (paired with
the reference), each arm's ``val_bpb`` at those seeds, ``ratio_mean`` and ``ratio_ci95`` (islands_kit/stats.py), the
``machine`` it was scored on and what the point cost (its finished ``runs``, their ``cpu_hours``). Then the laws
(islands_kit/scaling/laws.py) over each axis on both x-axes, the published grid's and the joint fits, and the
``prediction`` at the next width, which a later regeneration keeps as recorded while the fitted points are the same.

    python -m islands_kit.scaling.trend benchmarks/studies/scaling-size.toml benchmarks/studies/scaling-length.toml
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.io import dumps_strict, finite, replace_marked_block
from islands_kit.protocol.batch import global_batch
from islands_kit.protocol.command import default_root
from islands_kit.protocol.knobs import KnobError, active_params, outer_steps, total_params, width_sets
from islands_kit.protocol.ledger import overlay
from islands_kit.protocol.points import execute_in_process, point_root, point_studies, run_points
from islands_kit.protocol.report import make_report
from islands_kit.protocol.runs import Run, machines, read_result
from islands_kit.protocol.study import Study, StudyError, load_study
from islands_kit.protocol.tuning import tuned_pick
from islands_kit.resources import resource_dir
from islands_kit.scaling import fit, laws, references
from islands_kit.train.result import git_sha

SCHEMA = 2
TREND_BLOCK = "trend:scaling"  # its block's markers in benchmarks/RESULTS.md
X_OF_AXIS = {"size": "params_active", "length": "tokens"}
X_KEYS = {"size": ("params_active", "params_total"), "length": ("tokens",)}


def next_width(width: int, preset: str = "demo") -> tuple[int, int, int]:
    """The next width past ``width`` (the smallest multiple of 16 at least 1.25 x it that the width knob accepts),
    with its active and total parameters."""
    base = get_preset("baseline", preset)
    w = 16 * math.ceil(1.25 * width / 16)
    while True:
        try:
            cfg = apply_overrides(base, width_sets(base, w))
            return w, active_params(cfg), total_params(cfg)
        except KnobError:
            w += 16


def _paired(arm_e: dict[str, Any], ref_e: dict[str, Any]) -> tuple[list[int], dict[str, list[float]]]:
    """The seeds both arms scored, and each arm's validation bpb at them (the report's lists, in seed order)."""
    mine = dict(zip(arm_e.get("seeds") or [], arm_e.get("val_bpb") or []))
    ref = dict(zip(ref_e.get("seeds") or [], ref_e.get("val_bpb") or []))
    seeds = [s for s in mine if s in ref]
    return seeds, {arm_e["arm"]: [mine[s] for s in seeds], ref_e["arm"]: [ref[s] for s in seeds]}


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
                ref_found = tuned_pick(sub, e["ref"], proot, m)
                res = None if found is None else Run(found[0], e["seeds"][0], sub.preset, proot / m, "score").result()
                if found is None or res is None:
                    continue
                cfgs = {arm: apply_overrides(sub.base_config(found[0].experiment), found[0].overrides)}
                if ref_found is not None:
                    cfgs[e["ref"]] = apply_overrides(sub.base_config(ref_found[0].experiment), ref_found[0].overrides)
                cfg = cfgs[arm]
                ref = arms[(m, e["ref"])]
                seeds, vals = _paired(e, ref)
                tokens = res.get("tokens")
                out.append({"kind": "point", "point": p.name, "axis": p.axis, "study": study.name, "arm": arm,
                            "width": cfg.model.d_model, "params_active": res.get("params_active"),
                            "params_total": total_params(cfg), "steps": res.get("steps"), "tokens": tokens,
                            "tokens_per_active_param": tokens / res["params_active"] if tokens and res.get("params_active")
                            else None,
                            "outer_steps_per_fragment": {a: outer_steps(c) for a, c in cfgs.items()},
                            "global_batch": {a: global_batch(c) for a, c in cfgs.items()},
                            "sync_H": {a: c.sync.H for a, c in cfgs.items() if outer_steps(c) is not None},
                            "seeds": seeds, "val_bpb": vals,
                            "ratio_mean": e["ratio_mean"], "ratio_ci95": e["ratio_ci95"], "label": e["label"],
                            "ref": e["ref"], "ref_label": ref.get("label"),
                            "grid_edge": {a: arms[(m, a)].get("pick_at_grid_edge") or [] for a in (arm, e["ref"])},
                            "machine": m, "tuned_on": {a: arms[(m, a)].get("tuned_on") for a in (arm, e["ref"])},
                            "runs": runs, "cpu_hours": cpu_h})
    return out


def point_cost(machine_root: Path) -> tuple[int, float | None]:
    """What a point cost on one machine: its finished runs (every arm's tuning and scoring) and their CPU-hours
    (each run's ``cpu_time_s``; None if a run did not record it)."""
    results = [read_result(f) for f in sorted(machine_root.glob("*/*/seed*/result.json"))]
    cpu = [c for r in results if isinstance(c := r.get("cpu_time_s"), (int, float))]
    if not results or len(cpu) < len(results):
        return len(results), None
    return len(results), round(sum(cpu) / 3600.0, 3)


def fit_entries(points: Sequence[dict[str, Any]], grid: int = 41) -> list[dict[str, Any]]:
    """The laws of every axis over its points, on each of the axis's x-axes."""
    out = []
    for axis in ("size", "length"):
        pts = [e for e in points if e["axis"] == axis]
        if not pts:
            continue
        for x_key in X_KEYS[axis]:
            out += laws.fit_axis(axis, pts, x_key, grid=grid)
    return out


def predictions(points: Sequence[dict[str, Any]], fits: Sequence[dict[str, Any]],
                commit: str | None) -> list[dict[str, Any]]:
    """Each size-axis model's predicted gap at the next width past the largest measured (none before any point)."""
    size = [p for p in points if p["axis"] == "size"]
    if not size:
        return []
    w, active, total = next_width(max(int(p["width"]) for p in size))
    return laws.prediction_entries(fits, size, w, active, total, commit)


def build_trend(studies: Sequence[Study], roots: Sequence[Path] | None = None, grid: int = 41,
                published: bool = True) -> dict[str, Any]:
    """The trend document of ``studies`` (their runs under ``roots``, default runs/studies/NAME); ``published``:
    the published grid's and the joint fits too."""
    roots = list(roots) if roots is not None else [default_root(s) for s in studies]
    files = " ".join(str(s.path) for s in studies)
    command = (" && ".join(f"islands-kit study run {s.path} --jobs 2 && islands-kit study report {s.path} --write"
                           for s in studies) + f" && python -m islands_kit.scaling.trend {files}")
    points = [e for s, r in zip(studies, roots) for e in point_entries(s, r)]
    fits = fit_entries(points, grid)
    extra = (laws.published_entries(grid) + laws.joint_entries([p for p in points if p["axis"] == "size"], grid=grid)
             if published else [])
    return finite({"schema": SCHEMA, "studies": [s.name for s in studies], "command": command,
                   "entries": points + fits + extra + predictions(points, fits, git_sha())})


def _ci(v: list[float] | None, fmt: Any = "{:.2f}".format) -> str:
    return "-" if v is None else "[" + ", ".join(fmt(x) for x in v) + "]"


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    return next((f"{n / d:.3g}{u}" for d, u in ((1e9, "B"), (1e6, "M"), (1e3, "K")) if n >= d), f"{n:.3g}")


def contains(ci: list[float] | None, value: float | None) -> bool | None:
    """Whether the interval ``ci`` holds ``value`` (None when either is missing)."""
    return None if ci is None or value is None else ci[0] <= value <= ci[1]


def _pct(g: float | None) -> str:
    return "-" if g is None else f"{100 * g:+.2f}%"


def _param(e: dict[str, Any], prefix: str) -> str:
    """A fitted parameter (first whose name starts with ``prefix``) as value [lo, hi]."""
    v = next((v for k, v in (e.get("params") or {}).items() if k.startswith(prefix)), None)
    if v is None:
        return "-"
    lo, hi = v[1], v[2]
    return f"{v[0]:.3g}" + ("" if lo is None else f" [{lo:.3g}, {hi:.3g}]")


def _crossing_text(c: dict[str, Any] | None) -> str:
    if c is None:
        return "-"
    if c["verdict"] == "identified":
        return f"{_size(c['size'])} {_ci(c['ci95'], _size)}"
    if "never crosses" in c["reason"]:
        return "never (this law cannot cross)"
    ci = c.get("ci95")
    span = "" if not ci else f" (allowed {_size(ci[0]) if ci[0] else '-inf'} to {_size(ci[1]) if ci[1] else 'beyond the search'})"
    return f"not identifiable{span}"


def _fit_lines(entries: list[dict[str, Any]], axis: str, x_key: str, xname: str, kind: str = "") -> list[str]:
    out: list[str] = []
    lw = [e for e in entries if e["kind"] == f"{kind}law" and e["axis"] == axis and e["x"] == x_key]
    if lw:
        out += ["", f"Loss laws against {xname} (L = A N^-alpha, L = E + A N^-alpha; shared E over every arm):", "",
                "| arm | law | points | chi^2 / df | AIC | alpha [95%] | E [95%] |", "|---|---|---|---|---|---|---|"]
        for e in lw:
            if "chi2" not in e:
                out.append(f"| {e['arm']} | {e['model']} | {e['n_points']} | {e.get('note', '-')} | - | - | - |")
                continue
            out.append(f"| {e['arm']} | {e['model']} | {e['n_points']} | {e['chi2']:.3g} / {e['df']} | {e['aic']:.1f} | "
                       f"{_param(e, 'alpha')} | {_param(e, 'E')} |")
    gf = [e for e in entries if e["kind"] == f"{kind}gap_fit" and e["axis"] == axis and e["x"] == x_key]
    for arm in sorted({e["arm"] for e in gf}):
        mine = [e for e in gf if e["arm"] == arm]
        word = next((e.get("crossing_word") for e in mine if e.get("crossing_word")), "crossing")
        out += ["", f"{arm}: its gap against {xname} from each law, with the {word} (95% profile likelihood):", "",
                f"| law | from | chi^2 / df | AIC | {word} size [95%] |", "|---|---|---|---|---|"]
        for e in mine:
            if e["model"] == "local slope":
                continue
            if "chi2" not in e:
                out.append(f"| {e['model']} | {e['source']} | {e.get('note', '-')} | - | - |")
                continue
            out.append(f"| {e['model']} | {e['source']} | {e['chi2']:.3g} / {e['df']} | {e['aic']:.1f} | "
                       f"{_crossing_text(e.get('crossing'))} |")
        ls = next((e for e in mine if e["model"] == "local slope"), None)
        if ls is not None:
            out += ["", f"Local slope (a straight line in log N over the measured points: a description of this range, "
                        f"never a crossing model): {100 * ls['slope_per_decade']:+.2f} pp per decade "
                        f"{_ci([100 * v for v in ls['slope_ci95']])}."]
        v = next((e for e in entries if e["kind"] == f"{kind}verdict" and e["axis"] == axis and e["x"] == x_key
                  and e["arm"] == arm), None)
        if v is not None:
            pref = (f"the data prefer **{v['preferred_loss_law'] or '-'}** among the loss laws and "
                    f"**{v['preferred_gap_law'] or '-'}** among the gap laws (lowest AIC)")
            if v["identifiable"]:
                said = f"the {word} is at {_size(v['size'])} {_ci(v['ci95'], _size)}"
            else:
                said = f"the {word} is **{fit.NOT_IDENTIFIABLE}**: " + "; ".join(v["reasons"])
            out += ["", f"**{arm}, against {xname}:** {pref}; {said}."]
    return out


def render_trend(doc: dict[str, Any]) -> str:
    """The trend's markdown block (benchmarks/RESULTS.md, between ``<!-- trend:scaling:... -->``), made from the
    JSON document alone: each axis's points with their intervals, regime and cost, each law's fit and crossing, the
    verdicts in words, the published grid fitted the same way, the joint fits and the recorded prediction."""
    entries = doc["entries"]
    made = f"Made by `{doc['command']}`" if doc.get("command") else "No point of ours recorded yet"
    out = [f"{made}; every ratio is the arm over the baseline, each at its own pick, the geometric mean over paired "
           "seeds [95% paired t interval]; a gap is ratio - 1."]
    for axis, xname in (("size", "active parameters"), ("length", "training tokens")):
        pts = sorted((e for e in entries if e["kind"] == "point" and e["axis"] == axis), key=lambda e: e[X_OF_AXIS[axis]])
        out += ["", f"**{axis} axis** ({xname}):", ""]
        if not pts:
            out.append("no point measured yet.")
        else:
            out += ["| point | width | active params | total params | steps | tokens / active param | outer steps / "
                    "fragment | arm | pick | baseline's pick | seeds | / baseline, equal tokens | picks at the grid's edge "
                    "| scored on | runs | CPU-hours |",
                    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for e in pts:
                tpp = e.get("tokens_per_active_param")
                cpu = e.get("cpu_hours")
                pick = ", ".join(f"{k}={v}" for k, v in (e.get("label") or {}).items()) or "-"
                ref_pick = ", ".join(f"{k}={v}" for k, v in (e.get("ref_label") or {}).items()) or "-"
                edge = "; ".join(f"{a}: {', '.join(v)}" for a, v in (e.get("grid_edge") or {}).items() if v) or "none"
                osf = (e.get("outer_steps_per_fragment") or {}).get(e["arm"])
                total = e.get("params_total")
                out.append(f"| {e['point']} | {e['width']} | {e['params_active']:,} | "
                           f"{'-' if total is None else f'{total:,}'} | {e['steps']:,} | "
                           f"{'-' if tpp is None else f'{tpp:.2f}'} | {'-' if osf is None else osf} | {e['arm']} | "
                           f"{pick} | {ref_pick} | {len(e['seeds'])} | "
                           f"{e['ratio_mean']:.4f} {_ci(e['ratio_ci95'], '{:.4f}'.format)} | {edge} | "
                           f"{e.get('machine', '-')} | {e.get('runs', '-')} | {'-' if cpu is None else f'{cpu:.2f}'} |")
        for x_key in X_KEYS[axis]:
            out += _fit_lines(entries, axis, x_key, {"params_active": "active parameters", "params_total":
                                                     "total parameters", "tokens": "training tokens"}[x_key])
    pub = [e for e in entries if e["kind"].startswith("published_")]
    if pub:
        out += ["", f"**The published grid, {laws.LABEL_PUBLISHED}** ({references.SOURCE}; dense: active = total):", "",
                "| column | this kit's L = A N^-alpha: A, alpha | their printed fit: A, alpha |", "|---|---|---|"]
        for e in (e for e in pub if e["kind"] == "published_law" and e["model"] == "power" and "chi2" in e):
            a = (e.get("A_at_N1") or {}).get(e["arm"])
            alpha = e["params"][f"alpha[{e['arm']}]"][0]
            tf = e.get("their_fit") or {}
            out.append(f"| {e['arm']} | {a:.3f}, {-alpha:.4f} | {tf.get('A', '-')}, {tf.get('alpha', '-')} |")
        for col in ("M=2", "M=8"):
            out += _fit_lines([e for e in pub if e.get("arm") in (col, "DP", "all")], "size", "params_total",
                              f"parameters ({col}, {laws.LABEL_PUBLISHED})", "published_")
    joint = [e for e in entries if e["kind"] == "joint_fit"]
    if joint:
        out += ["", f"**Ours and theirs in one gap law** ({laws.LABEL_PUBLISHED}, jointly with ours; ours on active "
                    "parameters, a shared exponent and an amplitude per setting; the published gaps weighted by their "
                    "own law's rms residual):", "",
                "| our arm | published column | law | chi^2 / df | AIC | ours: crossing | theirs: crossing |",
                "|---|---|---|---|---|---|---|"]
        for e in joint:
            if "chi2" not in e:
                out.append(f"| {e['arm']} | {e['published']} | {e['model']} | {e.get('note', '-')} | - | - | - |")
                continue
            c = e["crossing"]
            out.append(f"| {e['arm']} | {e['published']} | {e['model']} | {e['chi2']:.3g} / {e['df']} | {e['aic']:.1f} | "
                       f"{_crossing_text(c[e['arm']])} | {_crossing_text(c[e['published']])} |")
    preds = [e for e in entries if e["kind"] == "prediction"]
    if preds:
        p0 = preds[0]
        out += ["", f"**Recorded prediction** at width {p0['width']} ({p0['params_active']:,} active, "
                    f"{p0['params_total']:,} total parameters), made at commit `{p0.get('commit') or 'unknown'}` "
                    f"from the points {', '.join(p0['fitted_points'])}, before any run of that width:", "",
                "| arm | law | from | predicted gap [95% profile] |", "|---|---|---|---|"]
        for e in preds:
            ci = e.get("gap_ci95")
            out.append(f"| {e['arm']} | {e['model']} | {e['source']} | {_pct(e['gap'])} "
                       f"{'[open]' if ci is None else '[' + _pct(ci[0]) + ', ' + _pct(ci[1]) + ']'} |")
    return "\n".join(out)


def keep_recorded_predictions(doc: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """``doc`` with the predictions of ``old`` in place of its own when they were made at the same width from the
    same points: a prediction is recorded once, before the run, and a regeneration does not remake it."""
    if not old or old.get("schema") != SCHEMA:
        return doc
    was = [e for e in old.get("entries", []) if e.get("kind") == "prediction"]
    now = [e for e in doc["entries"] if e["kind"] == "prediction"]
    if not was or not now or {(e["width"], tuple(e["fitted_points"])) for e in was} != {
            (e["width"], tuple(e["fitted_points"])) for e in now}:
        return doc
    return {**doc, "entries": [e for e in doc["entries"] if e["kind"] != "prediction"] + was}


def write_trend(studies: Sequence[Study], roots: Sequence[Path] | None = None,
                results: Path | None = Path("benchmarks") / "RESULTS.md") -> Path:
    """Write the trend's JSON (the studies' ``trend`` file; its recorded predictions kept) and, when ``results``
    exists, its block there."""
    targets = {s.trend for s in studies}
    if len(targets) != 1 or None in targets:
        raise StudyError(f"trend: the studies must name one trend file (got {sorted(map(str, targets))})")
    path = Path(str(targets.pop()))
    old = json.loads(path.read_text()) if path.is_file() and path.stat().st_size < 64 << 20 else None
    doc = keep_recorded_predictions(build_trend(studies, roots), old)
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
        return build_trend(studies, roots, grid=9)  # a coarse profile grid: the smoke numbers only show the machinery
    if preset != "demo":
        raise StudyError(f"preset: the scaling trend is recorded at demo (or made at smoke), not {preset!r}")
    recorded = bench / "scaling-trend.json"
    if recorded.is_file():
        return dict(json.loads(recorded.read_text()))
    say(f"{recorded} does not exist yet: the runs are not made (see its studies' commands); the published fit alone")
    return {"schema": SCHEMA, "studies": [], "command": "", "entries": laws.published_entries()}


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
