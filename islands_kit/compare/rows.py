"""The rows of a comparison: the checks that refuse to mislead, one reference, ratios paired by seed, and the
statistics over seeds (``stats``: a paired t interval on log-ratios, only where there are >= 2 seeds).

A comparison is a list of ``result.json`` records (:func:`islands_kit.records.tracking.load_result`). Before any number is
lined up:

* the runs must share the **corpus** (its sha256) and the **token budget** (``steps x global batch x seq_len`` from
  each run's config: a diverged or preempted run keeps its budget even though it trained fewer tokens). Otherwise
  :class:`ComparisonError` names the difference and the runs on each side; with ``allow_mismatch`` the table is
  made anyway, with a warning and the differing rows marked.
* one **reference** run — ``reference`` (a run label, i.e. its folder, or an experiment name), by default the first
  ``baseline`` run, else the first run — for the bpb ratio, which is paired: a row is divided by the reference
  experiment's run *with the same seed* when there is one (same data order, same initial weights), else by the
  reference run. A row that *trained* other tokens than its pair (the orbital satellites lose steps in eclipse,
  within the same budget) says so in its note.
* bytes come first as absolute numbers: the total on the link, per island, and on the busiest link (one direction,
  from the run's ledger). Two ratios stand beside them, each named in words with its reference: against the
  reference run's bytes (the baseline's, paired by seed), and against an fp32 gradient all-reduce every step among
  the row's *own* islands (``ddp_equivalent_bytes``, data-parallel training on the same hardware; the reference of
  result.json, the wandb summary and the frontier plots). Both are needed: eight cells all-reduce far more than two
  sites, so a run can send fewer bytes than its own all-reduce and still more than the two-site baseline.

Seed sweeps: :func:`seed_summary` groups the runs of one configuration (everything but the seed and the logging
settings), lists each seed once (repeats of a seed are averaged: a seed counts once), and gives the mean bpb (its
sample standard deviation from 2 seeds on) and the paired ratio to the reference with its 95% interval and n.
"""
from __future__ import annotations

import json
import math
import statistics
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from islands_kit.config.experiment_table import is_reference
from islands_kit.stats import RatioStat, paired_ratio, verdict

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


def machine_id(r: dict[str, Any]) -> str:
    """The CPU and torch kernel set a run was made on (``versions.machine``): a 1200-step run moves by up to a seed's
    spread between kernel sets, so runs from two machines are not paired."""
    return str(r.get("versions", {}).get("machine", "unknown machine"))


def check_comparable(results: Sequence[dict[str, Any]], allow_mismatch: bool = False) -> list[str]:
    """Per run, "" or a note saying how it differs from the first run (corpus, token budget, machine and kernel set).

    Raises ComparisonError naming the difference unless ``allow_mismatch`` (then warns and returns the notes)."""
    notes = [""] * len(results)
    problems = []
    for what, key, show in (("corpus", corpus_id, lambda r: str(r.get("corpus"))),
                            ("token budget", token_budget, lambda r: f"{token_budget(r):,} tokens"),
                            ("machine", machine_id, machine_id)):
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


def format_bytes(n: float) -> str:
    """Bytes in decimal units with one decimal: ``9.5 MB``, ``210.6 KB``."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def _x(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:,.1f}x" if v < 10 else f"{v:,.0f}x"


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
        tokens_vs = int(r["tokens"]) / int(paired["tokens"]) if paired["tokens"] else math.nan
        rows.append({
            "run": run_label(r), "experiment": r["experiment"], "corpus": r.get("corpus"), "preset": r.get("preset"),
            "tokens": r["tokens"], "token_budget": token_budget(r), "seed": r["seed"],
            "final_val_bpb": r["final_val_bpb"], "bpb_vs_ref": r["final_val_bpb"] / paired["final_val_bpb"],
            "ref_bpb": paired["final_val_bpb"], "same_seed_pair": paired["seed"] == r["seed"],
            "tokens_vs_ref": tokens_vs,
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
            "note": ", ".join(n for n in (note, tokens_note(tokens_vs)) if n),
        })
    return rows


def tokens_note(tokens_vs_ref: float) -> str:
    """"" when a run trained as many tokens as its pair (to 0.5%), else ``0.93x tokens``: it trained 0.93 times its
    pair's tokens (within the same budget), so the bpb ratio beside it is not at equal tokens."""
    if not math.isfinite(tokens_vs_ref) or abs(tokens_vs_ref - 1) < 0.005:
        return ""
    return f"{tokens_vs_ref:.2f}x tokens"


def configuration_groups(results: Sequence[dict[str, Any]]) -> list[list[int]]:
    """The indices of the runs of each configuration (configs equal but for the seed and the logging settings), in
    the order each first appears."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(results):
        cfg = {k: v for k, v in (r.get("config") or {"experiment": r["experiment"]}).items() if k not in _NOT_CONFIG}
        groups.setdefault(json.dumps(cfg, sort_keys=True, default=str), []).append(i)
    return list(groups.values())


def group_labels(rows: Sequence[dict[str, Any]], groups: Sequence[Sequence[int]]) -> list[str]:
    """A configuration's label: its experiment, with its first run's folder where two share an experiment."""
    names = [rows[idx[0]]["experiment"] for idx in groups]
    return [name if names.count(name) == 1 else f"{name} ({rows[idx[0]]['run']})" for idx, name in zip(groups, names)]


def seed_summary(rows: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration (``configuration_groups``; ``rows`` and ``results`` in the same order): its seeds (each
    once), the mean bpb over them (sample sd from 2 seeds on, else None) and the bpb ratio to the reference
    experiment paired per seed (``stats.paired_ratio``: geometric mean, 95% interval only from 2 seeds on,
    ``resolved`` when it excludes 1). Seeds without a same-seed reference run, or that diverged, are left out of the
    paired ratio, and ``ratio_note`` says so."""
    groups = configuration_groups(results)
    ref_run = rows[0]["reference"] if rows else ""
    out = []
    for idx, label in zip(groups, group_labels(rows, groups)):
        sel = [rows[i] for i in idx]
        by_seed: dict[Any, list[dict[str, Any]]] = {}
        for r in sel:
            by_seed.setdefault(r["seed"], []).append(r)
        seeds = sorted(by_seed)
        bpb = [statistics.fmean(r["final_val_bpb"] for r in by_seed[s]) for s in seeds]
        finite = [b for b in bpb if math.isfinite(b)]
        is_ref = any(r["run"] == ref_run for r in sel)
        stat, note = (None, "") if is_ref else _paired(by_seed, seeds)
        repeats = [s for s in seeds if len(by_seed[s]) > 1]
        if repeats:
            note = ", ".join(n for n in (note, "seed " + ", ".join(map(str, repeats)) + " repeated: averaged") if n)
        tokens = {r["note"] for r in sel if r["note"]}
        out.append({
            "experiment": label, "n_seeds": len(seeds), "seeds": seeds, "runs": len(sel),
            "final_val_bpb_mean": statistics.fmean(finite) if finite else math.nan,
            "final_val_bpb_sd": statistics.stdev(finite) if len(finite) > 1 else None,
            "bpb_vs_ref_mean": None if stat is None else stat.mean, "bpb_vs_ref_ci95": None if stat is None else stat.interval(),
            "bpb_vs_ref_n": 0 if stat is None else stat.n, "bpb_vs_ref_resolved": False if stat is None else stat.resolved,
            "bpb_vs_ref_text": ("1 (reference)" if is_ref else "no paired seed") if stat is None else stat.text(),
            "is_reference": is_ref, "ratio_note": note, "note": "; ".join(sorted(tokens)),
            "cross_site_bytes_mean": statistics.fmean(r["cross_site_bytes"] for r in sel),
            "x_fewer_bytes_mean": statistics.fmean(r["x_fewer_bytes"] for r in sel),
            "x_fewer_than_ref_mean": statistics.fmean(r["x_fewer_than_ref"] for r in sel),
            "compute_utilization_mean": statistics.fmean(r["compute_utilization"] for r in sel),
            "reference": sel[0]["reference"], "reference_experiment": sel[0]["reference_experiment"],
        })
    return out


def _paired(by_seed: Mapping[Any, list[dict[str, Any]]], seeds: Sequence[Any]) -> tuple[RatioStat | None, str]:
    """The paired ratio over the seeds that have a same-seed reference run and a finite bpb on both sides."""
    arm, ref, left_out = [], [], []
    for s in seeds:
        runs = by_seed[s]
        a = statistics.fmean(r["final_val_bpb"] for r in runs)
        b = runs[0]["ref_bpb"]
        if runs[0]["same_seed_pair"] and math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0:
            arm.append(a)
            ref.append(b)
        else:
            left_out.append(s)
    note = f"seed {', '.join(map(str, left_out))} unpaired or diverged: left out" if left_out else ""
    return (paired_ratio(arm, ref) if arm else None), note


def comparison_summary(rows: Sequence[dict[str, Any]], seed_rows: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The comparison's figures as flat keys for a wandb run summary (what the runs table shows per comparison): per
    configuration (a run, when each ran one seed) its paired bpb ratio to the reference —
    ``bpb_vs_ref/<label>/{mean,ci95_low,ci95_high,n,resolved,text,verdict}`` (``stats.verdict``'s words),
    the interval only from 2 paired seeds on (``seed_summary``'s rows); from a single seed the ratio with ``n`` = 1 and
    the text "n = 1, no interval", never a zero-width interval."""
    def keys(label: str, mean: Any, n: int, ci: Any, resolved: bool, text: Any) -> dict[str, Any]:
        k = f"bpb_vs_ref/{label}"
        return {f"{k}/mean": mean, f"{k}/n": n, f"{k}/ci95_low": None if ci is None else ci[0],
                f"{k}/ci95_high": None if ci is None else ci[1], f"{k}/resolved": resolved, f"{k}/text": text,
                f"{k}/verdict": verdict(*(ci or (None, None)))}

    out: dict[str, Any] = {}
    if seed_rows:
        for r in seed_rows:
            if not r.get("is_reference"):
                out.update(keys(r["experiment"], r.get("bpb_vs_ref_mean"), r.get("bpb_vs_ref_n", 0), r.get("bpb_vs_ref_ci95"),
                                bool(r.get("bpb_vs_ref_resolved")), r.get("bpb_vs_ref_text")))
        return out
    for r in rows:
        if r["run"] != r["reference"]:
            out.update(keys(r["run"], r["bpb_vs_ref"], 1, None, False, f"{r['bpb_vs_ref']:.4f} (n = 1, no interval)"))
    return out
