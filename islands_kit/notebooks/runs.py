"""Finished runs read back for the notebooks' figures: a run's result, history and link timeline, the seed groups a
band figure draws, the data-parallel bytes reference and the protocol's measured frontier."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping


def load_run(out_dir: str | Path) -> dict[str, Any]:
    """A finished run read back: ``{"dir", "result", "history", "timeline"}``.

    history: the ``history.jsonl`` records; timeline: ledger transfers ``(start_s, end_s, bytes, src, dst,
    channel)`` from ``link_timeline.jsonl`` when the run wrote one, else None."""
    from islands_kit.records.tracking import load_result

    d = Path(out_dir)
    result = load_result(d)
    hist_path = d / "history.jsonl"
    if not hist_path.exists():
        raise FileNotFoundError(f"load_run: no history.jsonl in {d}")
    history = [json.loads(line) for line in hist_path.read_text().splitlines() if line.strip()]
    tl_path = d / "link_timeline.jsonl"
    timeline = ([json.loads(line) for line in tl_path.read_text().splitlines() if line.strip()]
                if tl_path.exists() else None)
    return {"dir": d, "result": result, "history": history, "timeline": timeline}


def seed_groups(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[Any]]:
    """experiment -> the histories of its runs (one per seed), from ``load_run`` records: what ``plots.bpb_band``
    draws as mean and spread."""
    groups: dict[str, list[Any]] = {}
    for r in runs.values():
        groups.setdefault(r["result"]["experiment"], []).append(r["history"])
    return groups


def ddp_bytes_per_step(result: Mapping[str, Any]) -> float:
    """Bytes a fp32 gradient all-reduce would send per step (the ledger's data-parallel reference)."""
    return float(result["ddp_equivalent_bytes"]) / max(int(result["steps"]), 1)


def show_frontier(frontier_file: str | Path, out_dir: str | Path, experiment: str = "two_site",
                  run_preset: str | None = None) -> bool:
    """Draw the protocol's measured bpb-vs-bytes points of ``experiment`` (``benchmarks/frontier-*.json``, written by
    the retired protocol runner at the demo, kept as data; their rows are ``benchmarks/studies/protocol-demo.toml``);
    a relative path is read from the installed wheel, which carries them,
    or the checkout) with ``plots.frontier``, saved as OUT_DIR/frontier.png. The title says whose points they are (the
    preset they were measured at, not the run beside them); when that is not ``run_preset`` a line says so too. Without
    the file, say how to measure it and return False."""
    from islands_kit import plots
    from islands_kit.resources import resource_file

    path = resource_file(frontier_file)
    if not path.exists():
        print(f"{path} not found: the frontier files ship in a checkout's benchmarks/ (re-made by "
              "islands-kit study run benchmarks/studies/protocol-demo.toml)")
        return False
    points = json.loads(path.read_text())
    measured = str(points[0].get("preset", "demo")) if points else "demo"
    if run_preset is not None and run_preset != measured:
        print(f"frontier.png: the {measured} preset's measured points ({path.name}, benchmarks/RESULTS.md), not this "
              f"{run_preset} run's: the figure is the same whatever this notebook ran")
    title = f"{experiment}: quality vs bytes, the {measured} preset's measured points (benchmarks/RESULTS.md), not this run"
    plots.show(plots.frontier(points, title=title, experiment=experiment), Path(out_dir) / "frontier.png")
    return True
