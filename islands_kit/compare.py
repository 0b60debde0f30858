"""Comparisons of finished runs that refuse to mislead (``islands-kit compare``, the compare notebook).

A comparison is a list of ``result.json`` records (:func:`islands_kit.tracking.load_result`). Before any number is
lined up:

* the runs must share the **corpus** (its sha256) and the **token budget** (``steps x global batch x seq_len`` from
  each run's config: a diverged or preempted run keeps its budget even though it trained fewer tokens). Otherwise
  :class:`ComparisonError` names the difference and the runs on each side; with ``allow_mismatch`` the table is
  made anyway, with a warning and the differing rows marked.
* one **reference** run — ``reference`` (a run label, i.e. its folder, or an experiment name), by default the first
  ``baseline`` run, else the first run — for the bpb ratio, which is paired: a row is divided by the reference
  experiment's run *with the same seed* when there is one (same data order, same initial weights), else by the
  reference run.
* bytes come first as absolute numbers: the total on the link, per island, and on the busiest link (one direction,
  from the run's ledger). Two ratios stand beside them, each named in words with its reference: against the
  reference run's bytes (the baseline's, paired by seed), and against an fp32 gradient all-reduce every step among
  the row's *own* islands (``ddp_equivalent_bytes``, data-parallel training on the same hardware; the reference of
  result.json, the wandb summary and the frontier plots). Both are needed: eight cells all-reduce far more than two
  sites, so a run can send fewer bytes than its own all-reduce and still more than the two-site baseline. Tables
  say each ratio in words ("322x fewer", "2.0x more").

Each row is labelled by the folder it was read from (``run``), beside its corpus, preset, tokens and seed.

Seed sweeps: :func:`seed_summary` groups the runs of one configuration (everything but the seed and the logging
settings) and reports the mean and sample standard deviation of bpb over seeds, and of the paired bpb ratio.

Output: :func:`render` writes a row list as a terminal table, Markdown, CSV or JSON.
"""
from __future__ import annotations

import csv
import io
import json
import math
import statistics
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from islands_kit.config.experiment_table import is_reference

FORMATS = ("table", "markdown", "csv", "json")
# config fields that change no number of a run: left out when grouping the seeds of one configuration
_NOT_CONFIG = {"seed", "wandb_mode", "wandb_project", "wandb_group", "progress", "log_every", "threads",
               "checkpoint_every"}


class ComparisonError(ValueError):
    """Runs that cannot be compared honestly (different corpora or token budgets)."""


def run_label(r: dict[str, Any]) -> str:
    """A row's label: the folder its result.json came from (``load_result`` records it; relative to the working
    directory when below it, so a table reads the same on every machine), else experiment and seed."""
    d = r.get("dir")
    if not d:
        return f"{r['experiment']} s{r['seed']}"
    p, here = Path(d), Path.cwd()
    return str(p.relative_to(here)) if p.is_absolute() and p.is_relative_to(here) and p != here else str(d)


def token_budget(r: dict[str, Any]) -> int:
    """Planned training tokens: ``steps x sum(island batch) x seq_len`` from the run's config (the realised
    ``tokens`` when the result carries no config)."""
    c = r.get("config")
    if not c:
        return int(r["tokens"])
    return int(c["steps"]) * sum(int(i["batch_size"]) for i in c["islands"]) * int(c["model"]["seq_len"])


def corpus_id(r: dict[str, Any]) -> str:
    """The corpus a run was scored on: its sha256 when recorded (two names for the same bytes are the same corpus)."""
    return str(r.get("corpus_sha256") or r.get("corpus"))


def check_comparable(results: Sequence[dict[str, Any]], allow_mismatch: bool = False) -> list[str]:
    """Per run, "" or a note saying how it differs from the first run (corpus, token budget).

    Raises ComparisonError naming the difference unless ``allow_mismatch`` (then warns and returns the notes)."""
    notes = [""] * len(results)
    problems = []
    for what, key, show in (("corpus", corpus_id, lambda r: str(r.get("corpus"))),
                            ("token budget", token_budget, lambda r: f"{token_budget(r):,} tokens")):
        first = key(results[0])
        odd = [i for i, r in enumerate(results) if key(r) != first]
        if not odd:
            continue
        sides: dict[Any, tuple[str, list[str]]] = {}
        for r in results:
            sides.setdefault(key(r), (show(r), []))[1].append(run_label(r))
        names = [name for name, _ in sides.values()]
        problems.append(f"{what}: the runs differ (" + "; ".join(
            f"{name if names.count(name) == 1 else f'{name} [{str(k)[:12]}]'}: {', '.join(labels)}"
            for k, (name, labels) in sides.items()) + ")")
        for i in odd:
            notes[i] = (notes[i] + ", " if notes[i] else "") + f"different {what}"
    if problems:
        what = " and ".join(p.split(":")[0] for p in problems)
        msg = f"compare: the runs differ in {what}, so they are not comparable: " + "; ".join(problems)
        if not allow_mismatch:
            raise ComparisonError(msg + " (--allow-mismatch compares them anyway, marking the rows)")
        warnings.warn(msg + " (compared anyway: rows marked)", RuntimeWarning, stacklevel=3)
    return notes


def pick_reference(results: Sequence[dict[str, Any]], reference: str | None = None) -> int:
    """Index of the reference run: the run labelled ``reference`` or the first of experiment ``reference``; by
    default the first baseline, else the first run."""
    if reference is not None:
        for i, r in enumerate(results):
            if run_label(r) == reference or str(Path(run_label(r)).resolve()) == str(Path(reference).resolve()):
                return i
        for i, r in enumerate(results):
            if r["experiment"] == reference:
                return i
        raise ComparisonError(f"reference: {reference!r} is neither a compared run nor an experiment among them "
                              f"(runs: {', '.join(run_label(r) for r in results)})")
    return next((i for i, r in enumerate(results) if is_reference(r["experiment"])), 0)


def x_fewer_bytes(r: Mapping[str, Any]) -> float:
    """How many times fewer bytes a run put on the link than an fp32 gradient all-reduce every step among its own
    islands would have (< 1: more; inf: none sent)."""
    sent = float(r["cross_site_bytes"])
    return float(r["ddp_equivalent_bytes"]) / sent if sent else math.inf


def n_islands(r: Mapping[str, Any]) -> int:
    """How many islands a run had (result.json's ``n_islands``, else its config's island list; 1 when neither)."""
    return int(r.get("n_islands") or len((r.get("config") or {}).get("islands") or [0]))


def busiest_link_bytes(r: Mapping[str, Any]) -> float | None:
    """Bytes on the run's busiest link, one direction (its ledger's ``links``); None when the result has no ledger."""
    links = (r.get("ledger") or {}).get("links") or {}
    return float(max(links.values())) if links else None


def x_fewer_than(r: Mapping[str, Any], other: Mapping[str, Any]) -> float:
    """How many times fewer bytes run ``r`` put on the link than run ``other`` (< 1: more; inf: ``r`` sent none)."""
    sent = float(r["cross_site_bytes"])
    return float(other["cross_site_bytes"]) / sent if sent else math.inf


def ratio_words(v: float) -> str:
    """A byte ratio in words: ``322x fewer``, ``2.0x more``, ``same``, ``none sent``."""
    if math.isinf(v):
        return "none sent"
    if math.isnan(v) or v <= 0:
        return "?"
    if abs(v - 1) < 0.005:
        return "same"
    return f"{_x(v)} fewer" if v > 1 else f"{_x(1 / v)} more"


def smoke_note(presets: Sequence[Any]) -> str:
    """The line that comes with any smoke run's numbers ("" when none of ``presets`` is smoke): they are no result."""
    if "smoke" not in presets:
        return ""
    return ("smoke: a plumbing check, not a result: a tiny model trained for seconds, so its bpb and every ratio "
            "beside it mean nothing (`make demo` gives the numbers that do)")


def ratio_phrase(v: float, reference: str) -> str:
    """A byte ratio in words with its reference: ``2.0x more than baseline``, ``as many as baseline``, ``none sent``."""
    words = ratio_words(v)
    return {"same": f"as many as {reference}", "none sent": words, "?": words}.get(words, f"{words} than {reference}")


def compare_table(results: Sequence[dict[str, Any]], reference: str | None = None,
                  allow_mismatch: bool = False) -> list[dict[str, Any]]:
    """One row per run (see the module docstring for the checks and the reference)."""
    if not results:
        raise ComparisonError("compare: need at least one run")
    notes = check_comparable(results, allow_mismatch)
    ref = results[pick_reference(results, reference)]
    by_seed = {r["seed"]: r for r in results if r["experiment"] == ref["experiment"]}
    rows = []
    for r, note in zip(results, notes):
        paired = by_seed.get(r["seed"], ref)
        sent = r["cross_site_bytes"]
        rows.append({
            "run": run_label(r), "experiment": r["experiment"], "corpus": r.get("corpus"), "preset": r.get("preset"),
            "tokens": r["tokens"], "token_budget": token_budget(r), "seed": r["seed"],
            "final_val_bpb": r["final_val_bpb"], "bpb_vs_ref": r["final_val_bpb"] / paired["final_val_bpb"],
            "cross_site_bytes": sent, "n_islands": n_islands(r), "bytes_per_island": sent / n_islands(r),
            "busiest_link_bytes": busiest_link_bytes(r), "ddp_equivalent_bytes": r["ddp_equivalent_bytes"],
            "x_fewer_bytes": x_fewer_bytes(r), "x_fewer_than_ref": x_fewer_than(r, paired),
            # the regime (None in results written before these were recorded; outer steps: None for data-parallel)
            "tokens_per_active_param": r.get("tokens_per_active_param"),
            "outer_steps_per_fragment": r.get("outer_steps_per_fragment"),
            "sim_wall_clock_s": r["sim_wall_clock_s"], "compute_utilization": r["compute_utilization"],
            # a run on the orbit (result.json's ``orbit``; None elsewhere): contact windows used, bytes per window,
            # simulated seconds transfers spent waiting for their link's window
            "windows_used": (r.get("orbit") or {}).get("windows_used"),
            "bytes_per_window": (r.get("orbit") or {}).get("mean_bytes_per_window"),
            "window_wait_s": (r.get("orbit") or {}).get("window_wait_s"),
            "diverged_at_step": r.get("diverged_at_step"), "reference": run_label(ref),
            "reference_experiment": ref["experiment"],
            "paired_with": run_label(paired), "mismatch": note,
        })
    return rows


def seed_summary(rows: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and spread over seeds per configuration: ``compare_table`` rows and the results they came from (same
    order). Groups are the runs whose configs differ only in seed and logging; ``bpb_vs_ref`` is the paired ratio."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(results):
        cfg = {k: v for k, v in (r.get("config") or {"experiment": r["experiment"]}).items() if k not in _NOT_CONFIG}
        groups.setdefault(json.dumps(cfg, sort_keys=True, default=str), []).append(i)
    names = [rows[idx[0]]["experiment"] for idx in groups.values()]
    out = []
    for idx, name in zip(groups.values(), names):
        label = name if names.count(name) == 1 else f"{name} ({rows[idx[0]]['run']})"
        sel = [rows[i] for i in idx]
        out.append({
            "experiment": label, "n_seeds": len(sel), "seeds": [r["seed"] for r in sel],
            **_mean_spread("final_val_bpb", [r["final_val_bpb"] for r in sel]),
            **_mean_spread("bpb_vs_ref", [r["bpb_vs_ref"] for r in sel]),
            "cross_site_bytes_mean": statistics.fmean(r["cross_site_bytes"] for r in sel),
            "x_fewer_bytes_mean": statistics.fmean(r["x_fewer_bytes"] for r in sel),
            "x_fewer_than_ref_mean": statistics.fmean(r["x_fewer_than_ref"] for r in sel),
            "compute_utilization_mean": statistics.fmean(r["compute_utilization"] for r in sel),
            "reference": sel[0]["reference"], "reference_experiment": sel[0]["reference_experiment"],
        })
    return out


def _mean_spread(name: str, vals: list[float]) -> dict[str, float]:
    """mean, sample standard deviation (0 for one seed), min and max."""
    return {f"{name}_mean": statistics.fmean(vals), f"{name}_std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
            f"{name}_min": min(vals), f"{name}_max": max(vals)}


# ---------------------------------------------------------------------------------------------------------------
# Output


def _bpb(r: dict[str, Any]) -> str:
    if r.get("diverged_at_step") is not None:
        return f"diverged at step {r['diverged_at_step']}"
    return f"{r['final_val_bpb']:.4f}"


def format_bytes(n: float) -> str:
    """Bytes in decimal units with one decimal: ``9.5 MB``, ``210.6 KB``."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def _x(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:,.1f}x" if v < 10 else f"{v:,.0f}x"


def _outer_steps(steps: list[int] | None) -> str:
    """Syncs per fragment: one number when every fragment took as many, else min..max; — without fragment syncs."""
    if not steps:
        return "—"
    return str(steps[0]) if min(steps) == max(steps) else f"{min(steps)}..{max(steps)}"


RUN_COLUMNS = [
    ("run", lambda r: r["run"]), ("experiment", lambda r: r["experiment"]), ("corpus", lambda r: str(r["corpus"])),
    ("preset", lambda r: str(r["preset"])), ("tokens", lambda r: f"{r['tokens']:,}"),
    ("seed", lambda r: str(r["seed"])), ("bpb", _bpb), ("bpb / {ref}", lambda r: f"{r['bpb_vs_ref']:.4f}"),
    ("link bytes", lambda r: format_bytes(r["cross_site_bytes"])),
    ("per island", lambda r: format_bytes(r["bytes_per_island"])),
    ("busiest link", lambda r: "—" if r["busiest_link_bytes"] is None else format_bytes(r["busiest_link_bytes"])),
    ("bytes vs {ref}", lambda r: ratio_words(r["x_fewer_than_ref"])),
    ("bytes vs own all-reduce", lambda r: ratio_words(r["x_fewer_bytes"])),
    ("tokens / active param", lambda r: "—" if r["tokens_per_active_param"] is None else f"{r['tokens_per_active_param']:.1f}"),
    ("outer steps / fragment", lambda r: _outer_steps(r["outer_steps_per_fragment"])),
    ("sim s", lambda r: f"{r['sim_wall_clock_s']:.2f}"),
    ("util", lambda r: f"{100 * r['compute_utilization']:.1f}%"),
    ("window wait s", lambda r: "—" if r.get("window_wait_s") is None else f"{r['window_wait_s']:.2f}"),
    ("note", lambda r: r["mismatch"]),
]
SEED_COLUMNS = [
    ("experiment", lambda r: r["experiment"]), ("seeds", lambda r: " ".join(map(str, r["seeds"]))),
    ("bpb mean ± std", lambda r: f"{r['final_val_bpb_mean']:.4f} ± {r['final_val_bpb_std']:.4f}"),
    ("bpb / {ref} (paired) mean ± std", lambda r: f"{r['bpb_vs_ref_mean']:.4f} ± {r['bpb_vs_ref_std']:.4f}"),
    ("link bytes mean", lambda r: format_bytes(r["cross_site_bytes_mean"])),
    ("bytes vs {ref}", lambda r: ratio_words(r["x_fewer_than_ref_mean"])),
    ("bytes vs own all-reduce", lambda r: ratio_words(r["x_fewer_bytes_mean"])),
    ("util", lambda r: f"{100 * r['compute_utilization_mean']:.1f}%"),
]


def render(rows: Sequence[dict[str, Any]], fmt: str = "table", columns: Sequence[tuple[str, Any]] | None = None) -> str:
    """``rows`` as a terminal table, Markdown, CSV (display columns for the first two, every field for CSV and JSON:
    non-finite numbers become empty cells / ``null``)."""
    if fmt not in FORMATS:
        raise ComparisonError(f"format: must be one of {'|'.join(FORMATS)} (got {fmt!r})")
    if fmt == "json":
        from islands_kit.records import dumps_strict

        return dumps_strict(list(rows), indent=1)
    if fmt == "csv":
        buf = io.StringIO()
        keys = list(rows[0]) if rows else []
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(keys)
        for r in rows:
            w.writerow(["" if isinstance(v, float) and not math.isfinite(v) else
                        " ".join(map(str, v)) if isinstance(v, list) else "" if v is None else v for v in r.values()])
        return buf.getvalue().rstrip("\n")
    cols = list(columns or (RUN_COLUMNS if rows and "run" in rows[0] else SEED_COLUMNS))
    if rows and not any(r.get("mismatch") for r in rows):
        cols = [c for c in cols if c[0] != "note"]
    body = [[str(f(r)) for _, f in cols] for r in rows]
    # "{ref}" in a header: the reference run's experiment, so that no ratio column stands without its reference
    ref = str(rows[0].get("reference_experiment", "ref")) if rows else "ref"
    hdr = [name.replace("{ref}", ref) for name, _ in cols]
    if fmt == "markdown":
        esc = [[v.replace("|", "\\|") for v in line] for line in [hdr] + body]
        lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join("---" for _ in hdr) + "|"]
        return "\n".join(lines + ["| " + " | ".join(line) + " |" for line in esc[1:]])
    widths = [max(len(line[c]) for line in [hdr] + body) for c in range(len(hdr))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in [hdr] + body)


def reference_note(rows: Sequence[dict[str, Any]]) -> str:
    """The legend under a table: what "ref" is and what each number column means."""
    if not rows:
        return ""
    ref, exp = rows[0]["reference"], rows[0].get("reference_experiment", "ref")
    return "\n".join([
        "bpb: bits per byte on the held-out bytes (lower is better).",
        f"bpb / {exp}: over the {exp} run with the same seed (paired; reference run {ref}).",
        "link bytes: every byte the run put on the wide-area link (all islands, both directions); per island: that "
        "total over the run's islands; busiest link: the most bytes on one link in one direction.",
        f"bytes vs {exp}: the run's link bytes against the {exp} run's with the same seed (the same reference as "
        "bpb).",
        "bytes vs own all-reduce: the run's link bytes against an fp32 gradient all-reduce every step among its own "
        "islands (data-parallel on the same hardware: eight islands all-reduce more than two).",
        "sim s: simulated wall-clock seconds (each island's compute time from its hardware profile, plus waiting for "
        "the simulated link), not the real time the run took.",
        "util: compute utilisation, the share of that simulated time the islands spent computing rather than waiting.",
        "window wait s: on the orbit, simulated seconds the run's transfers spent waiting for their link's contact "
        "window, summed over transfers (— off the orbit); result.json's orbit section has bytes per link and window.",
        "tokens / active param, outer steps / fragment: the regime (the papers measure DiLoCo at >= 20 tokens per "
        "parameter and hundreds of outer steps; a handful of outer steps measures the method's warm-up).",
    ])


def report(results: Sequence[dict[str, Any]], fmt: str = "table", reference: str | None = None,
           allow_mismatch: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Rows, seed summary (when some configuration ran with more than one seed, else []) and the rendered text."""
    rows = compare_table(results, reference, allow_mismatch)
    seeds = seed_summary(rows, results)
    swept = any(s["n_seeds"] > 1 for s in seeds)
    if fmt == "json":
        from islands_kit.records import dumps_strict

        return rows, seeds if swept else [], dumps_strict({"runs": rows, "seeds": seeds if swept else []}, indent=1)
    text = render(rows, fmt)
    note = smoke_note([r.get("preset") for r in rows])
    if note and fmt != "csv":
        text = f"{note}\n\n{text}"
    if swept:
        head = "mean ± sample std over seeds:\n" if fmt == "table" else ""
        text += "\n\n" + head + render(seeds, fmt, None if fmt == "csv" else SEED_COLUMNS)
    if fmt != "csv":
        text += "\n\n" + reference_note(rows)
    return rows, seeds if swept else [], text


def expand_run_dirs(paths: Sequence[str | Path], nested: list[Path] | None = None) -> list[Path]:
    """Run folders: each path holding a result.json (or a result.json file) as is; a folder without one stands for
    every run folder below it (a seed sweep's ``OUT/s<seed>``, a comparison's ``OUT/<experiment>`` or
    ``OUT/<experiment>/s<seed>``), in path order.

    Runs inside another run's folder are that run's side runs (the two_site notebook's lock-step vs decoupled pair
    sits in its own folder), not rows of the comparison: they are left out, and appended to ``nested`` when given.
    Named explicitly, a side run is compared like any other."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir() and not (p / "result.json").exists():
            found = sorted(q.parent for q in p.rglob("result.json"))
            if not found:
                raise FileNotFoundError(f"compare: no result.json in {p} or in its subfolders")
            runs = set(found)
            for d in found:
                inside = any(a in runs for a in d.parents)
                if inside and nested is not None:
                    nested.append(d)
                elif not inside:
                    out.append(d)
        else:
            out.append(p)
    return out
