"""The README's two result tables, rendered from the JSON files they quote and nothing else, so that the first screen
a newcomer reads cannot drift from the measurements: the headline study on one machine (``benchmarks/headline-demo.json``)
and what ``make demo`` itself shows, its untuned defaults at three paired seeds (the default points of
``benchmarks/frontier-demo.json`` and ``benchmarks/frontier-eight_cell-demo.json``). Every ratio carries its paired
interval, n and the words :func:`islands_kit.stats.verdict` gives it.

    python -m islands_kit.protocol.readme          # rewrite both blocks of README.md from the JSON
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from islands_kit.io import replace_marked_block
from islands_kit.stats import paired_ratio, verdict

HEADLINE = Path("benchmarks") / "headline-demo.json"
DEMO_POINTS = (Path("benchmarks") / "frontier-demo.json", Path("benchmarks") / "frontier-eight_cell-demo.json")
BLOCKS = ("readme:headline", "readme:demo")
_WORDS = {"batch": "batch", "optim.lr": "lr", "sync.diloco.outer_momentum": "outer momentum"}


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _ratio(mean: float | None, ci: Sequence[float] | None) -> str:
    if mean is None:
        return "-"
    if ci is None:
        return f"{mean:.4f} (no interval)"
    return f"{mean:.4f} [{ci[0]:.4f}, {ci[1]:.4f}], {verdict(ci[0], ci[1])}"


def _times(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}x fewer" if x >= 1 else f"{1 / x:.3g}x more"


def headline_machine(doc: dict[str, Any]) -> str:
    """The machine whose runs the README quotes: the one with the most finished arms (a ratio pairs runs of one
    machine only), the first listed on a tie."""
    done = {m["machine"]: 0 for m in doc["machines"]}
    for e in doc["entries"]:
        if e.get("kind") == "arm" and e.get("status") == "done":
            done[e["machine"]] = done.get(e["machine"], 0) + 1
    return max(done, key=lambda m: done[m])


def headline_table(doc: dict[str, Any]) -> str:
    """The headline study's arms on one machine: each arm's tuned pick, mean bpb, ratios to the baseline at equal
    tokens and at equal simulated time with their intervals and verdicts, and its bytes."""
    machine = headline_machine(doc)
    fp = next(m["fingerprint"] for m in doc["machines"] if m["machine"] == machine)
    arms = [e for e in doc["entries"] if e.get("kind") == "arm" and e["machine"] == machine and e["status"] == "done"]
    if not arms:
        raise ValueError(f"{doc.get('study', 'the study')}: no arm has finished its seeds on any machine (nothing to quote)")
    n = min(len(e["seeds"]) for e in arms)
    tuned = arms[0].get("tuning")
    how = ("every arm tuned on the tuning split" if tuned is None else
           f"every arm tuned on the tuning split at seeds {', '.join(map(str, arms[0].get('tune_seeds', [])))} by successive "
           "halving, each grid extended past an edge until its pick is interior or at a bound the study declares")
    out = [f"On one machine ({fp}); {how}, then scored at seeds "
           f"{', '.join(map(str, arms[0]['seeds']))}; ratios are geometric means of the per-seed ratios with a 95% "
           f"paired t interval (n = {n}) and the words the interval supports (lower bpb is better: \"behind\" means "
           "more bits per byte than the baseline). Equal simulated time: "
           + ("the baseline trained with its whole schedule fitted into the arm's finishing time."
              if any(e.get("equal_time") for e in arms) else
              "the baseline's validation curve read at the arm's finishing time, an interpolation mid-schedule "
              "(docs/methods.md)."), "",
           "| arm | tuned setting | val bpb, mean | / baseline, equal tokens | / baseline, equal simulated time "
           "| bytes on the link | bytes vs an fp32 all-reduce among its own islands |",
           "|---|---|---|---|---|---|---|"]
    for e in arms:
        pick = ", ".join(f"{_WORDS.get(k, k)} {v}" for k, v in e["label"].items())
        if "tuning" in e:  # protocol 3: the grid was extended past every edge; what is left is a declared bound
            held = [f"{_WORDS.get(k, k)} {v.split(' (')[0]}" for k, v in e["tuning"].get("axes", {}).items() if v != "interior"]
            pick += f" ({'; '.join(held)})" if held else ""
        elif e.get("pick_at_grid_edge"):
            pick += " (on its grid's edge)"
        bpb = sum(e["val_bpb"]) / len(e["val_bpb"])
        ref = e["arm"] == e["ref"]
        tok = "1 (reference)" if ref else _ratio(e.get("ratio_mean"), e.get("ratio_ci95"))
        timed = e.get("equal_time") or {"ratio_mean": e.get("time_ratio_mean"), "ratio_ci95": e.get("time_ratio_ci95")}
        tim = "1 (reference)" if ref else _ratio(timed.get("ratio_mean"), timed.get("ratio_ci95"))
        link = _size(e["cross_site_bytes"])
        channels = e.get("bytes_by_channel") or {}
        if "site" in channels:  # two link kinds: the site links carry most, DiLoCo's fragments cross the WAN
            link += f", of it {_size(channels['fragments'])} of fragments over the WAN"
        own = "same (it is the all-reduce)" if ref else _times(e.get("bytes_vs_ddp"))
        out.append(f"| {e['arm']} | {pick} | {bpb:.4f} | {tok} | {tim} | {link} | {own} |")
    return "\n".join(out)


def demo_table(points: Sequence[dict[str, Any]]) -> str:
    """What ``make demo`` shows, at its untuned defaults: each island arm's default point, paired per seed with the
    baseline's runs of the same seeds."""
    base = points[0]["baseline"]["bpb"]
    out = [f"`make demo`'s own settings (untuned defaults, seeds {', '.join(map(str, points[0]['seeds']))}, the same "
           "machine; seed 0 is what `make demo` prints):", "",
           "| experiment | val bpb, mean | / baseline, equal tokens | bytes vs an fp32 all-reduce among its own islands |",
           "|---|---|---|---|",
           f"| baseline | {sum(base) / len(base):.4f} | 1 (reference) | same (it is the all-reduce) |"]
    for p in points:
        if p["baseline"]["bpb"] != base:
            raise ValueError(f"{p['label']}: paired with other baseline runs than the first point's")
        s = paired_ratio(p["bpb"], base)
        out.append(f"| {p['experiment']} | {sum(p['bpb']) / len(p['bpb']):.4f} | {_ratio(s.mean, s.interval())} "
                   f"| {_times(p['fewer'])} |")
    return "\n".join(out)


def default_points(root: Path) -> list[dict[str, Any]]:
    """The default point (``"default": true``) of each demo frontier file, in ``DEMO_POINTS``' order."""
    out = []
    for f in DEMO_POINTS:
        pts = [p for p in json.loads((root / f).read_text()) if p.get("default")]
        if len(pts) != 1:
            raise ValueError(f"{f}: needs exactly one point with \"default\": true (found {len(pts)})")
        out.append(pts[0])
    return out


def blocks(root: Path) -> dict[str, str]:
    """Marker name -> the README block made from the JSON files under ``root``."""
    return {BLOCKS[0]: headline_table(json.loads((root / HEADLINE).read_text())),
            BLOCKS[1]: demo_table(default_points(root))}


def write(root: Path) -> None:
    for name, text in blocks(root).items():
        replace_marked_block(root / "README.md", name, text)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("."))
