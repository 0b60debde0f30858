"""The bandwidth each method needs for a target compute utilisation: the published tables (Charles et al. 2025
Table 6; Streaming DiLoCo's Table 4) beside the kit's clock and link under the papers' assumptions and under its own
fuller model, per case x method x target. Writes benchmarks/utilisation-table.json and prints the tables.

    python benchmarks/utilisation_table.py [--cases 10B,405B] [--effects streaming,full] [--out FILE]

Columns (Gbit/s, the smallest point of the 0.1-1000 grid reaching the target; "-" beyond it, printed "1000+" by
the papers): T6 / T4 the published cells; "kit" the papers' schedule on the kit's wire at the printed step time
(bf16, no latency, reductions overlapping the backward, islands_kit/projection/published.py); "kit@1.25T" the same at
1.25x the step time (the reading that reproduces Table 6); then one column per modelled effect. Decoupled is the
share of merges applied, not utilisation (a decoupled site never waits).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from islands_kit.io import write_json_atomic
from islands_kit.projection.published import (
    CASES,
    CU_TARGETS,
    EFFECTS,
    EXPLAINED,
    FORWARD_SHARE,
    GRID_GBPS,
    METHODS,
    N_SITES,
    PAPER,
    PUBLISHED,
    T6,
    T6_STEP_FACTOR,
    effect_utilisation,
    grid_steps,
    paper_utilisation,
    required_gbps,
)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "utilisation-table.json")


def table(cases: list[str], effects: list[str]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for name in cases:
        case = CASES[name]
        for H, method in METHODS:
            kit = required_gbps(lambda g: paper_utilisation(case, H, g))
            kit_t6 = required_gbps(lambda g: paper_utilisation(case, H, g, T6_STEP_FACTOR))
            per_effect = {e: required_gbps(lambda g: effect_utilisation(e, case, H, g) or 0.0)
                          if H > 1 or EFFECTS[e].data_parallel else None for e in effects}
            for k, cu in enumerate(CU_TARGETS):
                published = [{"source": p.source, "gbps": p.gbps[k]} for p in PUBLISHED.get((name, H), [])]
                # the column each source is reproduced by: Table 6 at 1.25x its step times, Table 4 as printed
                steps = {p["source"]: grid_steps(kit_t6[k] if p["source"] == T6 else kit[k], p["gbps"])
                         for p in published}
                steps_as_printed = {p["source"]: grid_steps(kit[k], p["gbps"]) for p in published}
                rows.append({"case": name, "H": H, "method": method, "cu": cu, "published": published,
                             "kit_paper": kit[k], "kit_paper_t6": kit_t6[k], "grid_steps": steps,
                             "grid_steps_as_printed": steps_as_printed, "explained": EXPLAINED.get((name, H, cu)),
                             "kit_effects": {e: (v[k] if v is not None else None) for e, v in per_effect.items()},
                             "kit_full": per_effect["full"][k] if per_effect.get("full") else None})
    return {
        "made_by": "python benchmarks/utilisation_table.py",
        "assumptions": {
            "payload_codec": PAPER.payload_codec, "latency_s": PAPER.latency_s, "overlap_backward": PAPER.overlap,
            "forward_share": FORWARD_SHARE, "n_sites": N_SITES, "grid_gbps": list(GRID_GBPS),
            "t6_step_factor": T6_STEP_FACTOR, "tolerance_grid_steps": 1,
            "cases": {n: {"params": CASES[n].params, "step_s": CASES[n].step_s, "n_layers": CASES[n].n_layers,
                          "note": CASES[n].note} for n in cases},
            "effects": {e: EFFECTS[e].what for e in effects},
        },
        "rows": rows,
    }


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def render(t: dict[str, Any]) -> str:
    effects = list(t["assumptions"]["effects"])
    head = ["method", "CU", "T6", "T4", "kit", "kit@1.25T", *effects]
    lines: list[str] = []
    for name in t["assumptions"]["cases"]:
        c = t["assumptions"]["cases"][name]
        lines.append(f"\n{name}: {c['note']} (step {c['step_s']:.3g} s)")
        lines.append(" | ".join(f"{h:>13}" if i == 0 else f"{h:>9}" for i, h in enumerate(head)))
        for r in (r for r in t["rows"] if r["case"] == name):
            pub = {p["source"]: p["gbps"] for p in r["published"]}
            t4 = next((v for s, v in pub.items() if s != T6), "")
            cells = [r["method"], f"{r['cu']:.0%}", _fmt(pub[T6]) if T6 in pub else "", _fmt(t4) if t4 != "" else "",
                     _fmt(r["kit_paper"]), _fmt(r["kit_paper_t6"]),
                     *[_fmt(r["kit_effects"][e]) if r["H"] > 1 or EFFECTS[e].data_parallel else "n/a"
                       for e in effects]]
            lines.append(" | ".join(f"{x:>13}" if i == 0 else f"{x:>9}" for i, x in enumerate(cells)))
    scored = [(s, v) for r in t["rows"] for s, v in r["grid_steps"].items()]
    if scored:
        within = sum(abs(v) <= 1 for _, v in scored)
        exact = sum(v == 0 for _, v in scored)
        lines.append(f"\npublished cells within one grid step (x{GRID_GBPS[1] / GRID_GBPS[0]:.4f}) of the kit: "
                     f"{within} / {len(scored)}, {exact} on the same point (Table 6 at {T6_STEP_FACTOR}x its step "
                     "times, Table 4 as printed)")
        for r in t["rows"]:
            if r["explained"]:
                lines.append(f"  {r['case']} {r['method']} {r['cu']:.0%}: {r['explained']}")
        printed = [v for r in t["rows"] for s, v in r["grid_steps_as_printed"].items() if s == T6]
        lines.append(f"Table 6 at its printed step times: {sum(abs(v) <= 1 for v in printed)} / {len(printed)} "
                     f"within one step; steps off: {sorted(set(printed))}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    ap.add_argument("--effects", default=",".join(EFFECTS), help="comma-separated subset of " + ",".join(EFFECTS))
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    cases = [c for c in a.cases.split(",") if c]
    effects = [e for e in a.effects.split(",") if e]
    bad = [c for c in cases if c not in CASES] + [e for e in effects if e not in EFFECTS]
    if bad or "full" not in effects:
        print(f"--cases/--effects: unknown {bad} or 'full' missing (cases {list(CASES)}, effects {list(EFFECTS)})",
              file=sys.stderr)
        return 2
    t0 = time.time()
    t = table(cases, effects)
    write_json_atomic(Path(a.out), t)
    print(render(t))
    print(f"\nwrote {a.out} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
