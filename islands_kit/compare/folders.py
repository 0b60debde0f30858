"""Which runs a comparison reads: the folders named, and for a folder without a result.json every run below it,
less the runs that are not rows of a comparison (each skipped run is named, with why); and their evaluation
histories for the comparison figure."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from islands_kit.compare.rows import configuration_groups, group_labels, run_label
from islands_kit.io import load_result, read_limited

MAX_HISTORY_BYTES = 64 << 20  # a history.jsonl (one line per evaluation and log step: a long run's is a few MB)


def expand_run_dirs(paths: Sequence[str | Path], nested: list[Path] | None = None,
                    found: set[Path] | None = None) -> list[Path]:
    """Run folders: each path holding a result.json (or a result.json file) as is; a folder without one stands for
    every run folder below it (a seed sweep's ``OUT/s<seed>``, a comparison's ``OUT/<experiment>`` or
    ``OUT/<experiment>/s<seed>``), in path order.

    Runs inside another run's folder are that run's side runs (the two_site notebook's lock-step vs decoupled pair
    sits in its own folder), not rows of the comparison: they are left out, and appended to ``nested`` when given.
    Named explicitly, a side run is compared like any other. ``found``, when given, collects the folders that were
    found below a folder rather than named."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir() and not (p / "result.json").exists():
            below = sorted(q.parent for q in p.rglob("result.json"))
            if not below:
                raise FileNotFoundError(f"compare: no result.json in {p} or in its subfolders")
            runs = set(below)
            for d in below:
                inside = any(a in runs for a in d.parents)
                if inside and nested is not None:
                    nested.append(d)
                elif not inside:
                    out.append(d)
                    if found is not None:
                        found.add(d)
        else:
            out.append(p)
    return out


@dataclass
class Selection:
    """The runs to compare (their result.json records) and the folders left out, each with why."""

    results: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    def skipped_text(self) -> str:
        """One line naming every folder left out and why ("" when none was)."""
        if not self.skipped:
            return ""
        return (f"compare: skipped {len(self.skipped)} run(s) (name a folder to compare it): "
                + "; ".join(f"{d} ({why})" for d, why in self.skipped))


def select_runs(paths: Sequence[str | Path]) -> Selection:
    """The runs ``paths`` stand for (``expand_run_dirs``), less the ones a folder holds that are no row of a
    comparison: side runs inside another run's folder, and smoke runs (a plumbing check, e.g. the tour's
    ``sample_run``) found beside runs of a real preset. A folder named explicitly is always compared."""
    nested: list[Path] = []
    found: set[Path] = set()
    dirs = expand_run_dirs(paths, nested, found)
    sel = Selection(skipped=[(d, "a side run inside another run's folder") for d in nested])
    loaded: list[tuple[Path, dict[str, Any]]] = []
    for d in dirs:
        try:
            loaded.append((d, load_result(d)))
        except ValueError as e:  # a stub, a partial or a hostile result.json: named, and the rest compared
            sel.skipped.append((d, str(e).removeprefix("compare: ")))
    if not loaded:
        raise ValueError("compare: no run to compare: " + "; ".join(why for _, why in sel.skipped))
    real = any(r.get("preset") != "smoke" for _, r in loaded)
    for d, r in loaded:
        if real and d in found and r.get("preset") == "smoke":
            sel.skipped.append((d, "a smoke run, a plumbing check, among runs of a real preset"))
        else:
            sel.results.append(r)
    return sel


def run_history(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A run's evaluation records: its folder's ``history.jsonl``, else (a result.json alone) its ``val_curve`` with
    the run's total bytes on the last point, which is the final one: ``val_curve`` ends on every held-out byte, its
    earlier points score the curve's subset, whose final score is ``final_val_bpb_subset`` (when recorded)."""
    f = Path(result.get("dir") or ".") / "history.jsonl"
    if result.get("dir") and f.exists():
        text = read_limited(f, MAX_HISTORY_BYTES, "a history.jsonl in compare --plot").decode(errors="replace")
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except (ValueError, RecursionError) as e:
            raise ValueError(f"compare --plot: {f} is not a history of JSON lines ({str(e)[:80]})") from None
    curve: list[dict[str, Any]] = [{"tokens": t, "val_bpb": b} for t, b in result["val_curve"]]
    if curve:
        curve[-1].update(cross_site_bytes=result["cross_site_bytes"], final=True)
        if result.get("final_val_bpb_subset") is not None:
            curve[-1]["val_bpb_subset"] = result["final_val_bpb_subset"]
    return curve


def curve_groups(results: Sequence[Mapping[str, Any]]) -> dict[str, list[list[dict[str, Any]]]]:
    """Configuration label (``rows.group_labels``) -> the histories of its runs, one per seed: what
    ``plots.comparison_curves`` draws as a mean with its interval band."""
    labelled = [{"experiment": r["experiment"], "run": run_label(dict(r))} for r in results]
    groups = configuration_groups([dict(r) for r in results])
    return {label: [run_history(results[i]) for i in idx] for idx, label in zip(groups, group_labels(labelled, groups))}
