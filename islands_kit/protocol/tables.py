"""A study's markdown tables, rendered from its JSON document alone (protocol/report.py) — so a table in
benchmarks/RESULTS.md can always be re-made from the file beside it, and a test checks that it is."""
from __future__ import annotations

from typing import Any

from islands_kit.stats import verdict


def _ratio(mean: float | None, ci: list[float] | None, n: int, restored: int = 0) -> str:
    if mean is None or n == 0:
        return "-"
    # how many of the n pairs hold a run restored from a ledger (made elsewhere): the rest were made here
    src = f" ({restored} of {n} from the ledger)" if restored else ""
    if ci is None:
        return (f"{mean:.4f} (n = 1, no interval)" if n == 1 else f"{mean:.4f}") + src
    words = verdict(ci[0], ci[1])
    tail = "" if words in ("ahead", "behind") else f", {words}"
    return f"{mean:.4f} [{ci[0]:.4f}, {ci[1]:.4f}] n={n}{tail}{src}"


def _provenance(e: dict[str, Any]) -> str:
    """The status's note on runs restored from a ledger rather than made on the machine that wrote the report."""
    out = ""
    if e.get("restored_seeds"):
        out += f"; seeds {', '.join(map(str, e['restored_seeds']))} restored from the ledger"
    if e.get("tuning_restored"):
        out += f"; {e['tuning_restored']} tuning runs restored from the ledger"
    if e.get("shared_with"):
        n = e.get("tuning_shared", 0) + len(e.get("shared_seeds", []))
        out += f"; {n} of them shared with study {', '.join(e['shared_with'])} (the same config, seed and machine)"
    return out


def _label(d: dict[str, str] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items()) if d else "-"


def _bytes(e: dict[str, Any]) -> str:
    b = e.get("cross_site_bytes")
    if b is None:
        return "-"
    vs = e.get("bytes_vs_ref")
    return f"{b:,}" + ("" if vs is None else f" ({vs:.3g}x fewer than ref)" if vs >= 1 else f" ({1 / vs:.3g}x more than ref)")


def render(doc: dict[str, Any]) -> str:
    """The markdown block of a study: per machine that made runs (never paired across machines), the arms (pick, bpb
    per seed, ratios with intervals, bytes), how well the tuning split's picks transfer, and the rows; then how far
    the same runs moved between machines, and how many comparisons the tables make."""
    out = [f"Study `{doc['study']}` at the `{doc['preset']}` preset; re-made by `{doc['command']}`. Picks on the "
           f"tuning split (seeds {', '.join(map(str, doc['tune_seeds']))}); ratios paired per seed against each arm's "
           "reference: geometric mean [95% paired t interval on the log-ratios] n; \"not resolved\" when the interval "
           "holds 1. Runs are paired only with runs of the same machine."]
    n_cmp = 0
    for m in doc["machines"]:
        entries = [e for e in doc["entries"] if e.get("machine") == m["machine"]]
        out += ["", f"**On {m['fingerprint'] or m['machine']}** (`{m['machine']}`):"]
        n_cmp += _render_machine(entries, out)
    moved = doc.get("across_machines", [])
    if moved:
        out += ["", "The same pick and seed on two machines (validation bpb; move = second / first - 1):", "",
                "| arm | machines | seeds | moves | largest |", "|---|---|---|---|---|"]
        for a in moved:
            moves = " / ".join(f"{100 * v:+.2f}%" for v in a["moves"])
            out.append(f"| {a['arm']} | {a['machines'][0]} -> {a['machines'][1]} | {len(a['seeds'])} | {moves} | "
                       f"{100 * a['max_abs_move']:.2f}% |")
    out += ["", f"These tables make {n_cmp} comparisons at 95% each: about {0.05 * n_cmp:.1f} of them would read as "
            "resolved by chance alone if nothing differed."]
    return "\n".join(out)


def _render_machine(entries: list[dict[str, Any]], out: list[str]) -> int:
    """One machine's tables, appended to ``out``; how many comparisons they make."""
    arms = [e for e in entries if e["kind"] == "arm"]
    rows = [e for e in entries if e["kind"] == "row"]
    out += ["", "| arm | pick (tuning split) | val bpb per seed | / ref, equal tokens | / ref, equal simulated time | bytes on the link | status |",
            "|---|---|---|---|---|---|---|"]
    n_cmp = 0
    for e in arms:
        vals = " / ".join(f"{v:.4f}" for v in e.get("val_bpb", [])) or "-"
        if e["arm"] != e["ref"]:
            n_cmp += 2 if e.get("ratio_n") else 0
            tok = _ratio(e.get("ratio_mean"), e.get("ratio_ci95"), e.get("ratio_n", 0), e.get("ratio_restored_n", 0))
            tim = _ratio(e.get("time_ratio_mean"), e.get("time_ratio_ci95"), e.get("time_ratio_n", 0),
                         min(e.get("ratio_restored_n", 0), e.get("time_ratio_n", 0)))
            et = e.get("equal_time")
            if et is not None:  # trained to the time; the curve's interpolated reading is the labelled secondary
                n_cmp += 1 if et.get("ratio_n") else 0
                tim = (_ratio(et.get("ratio_mean"), et.get("ratio_ci95"), et.get("ratio_n", 0),
                              et.get("ratio_restored_n", 0)) + " (trained); " + tim + " (interpolated)")
        else:
            tok = tim = "1 (reference)"
        status = e["status"] + "".join(f"; {u}" for u in e.get("unpaired", [])) + _provenance(e)
        if e.get("pick_at_grid_edge") and "tuning" in e:  # protocol 3: each axis through the pick that is not interior
            status += "; pick not interior: " + ", ".join(e["pick_at_grid_edge"])
        elif e.get("pick_at_grid_edge"):
            status += "; pick at the grid's edge: " + ", ".join(e["pick_at_grid_edge"])
        if e.get("tuned_on") not in (None, e.get("machine")):
            status += f"; tuned on {e['tuned_on']}"
        parts = [_label(e.get("label"))] if e.get("label") or not e.get("fixed") else []
        if e.get("fixed"):  # the arm's settings that were not tuned
            parts.append(f"fixed {_label(e['fixed'])}")
        pick = "; ".join(parts)
        out.append(f"| {e['arm']} | {pick} | {vals} | {tok} | {tim} | {_bytes(e)} | {status} |")
    _render_tuning([e for e in arms if "tuning" in e and e.get("tuned_on") in (None, e.get("machine"))], out)
    _render_equal_time([e for e in arms if e.get("equal_time")], out)
    tuned_here = [e for e in arms if e.get("tuned_on") in (None, e.get("machine")) and len(e["grid"]) > 1]  # a choice
    if tuned_here:
        out += ["", "How the tuning split's pick transfers to the validation bytes (per arm, over its grid at the tuning "
                "seeds):", "", "| arm | trials | Spearman rho (tune vs val) | pick's regret on val | pick also best on val |",
                "|---|---|---|---|---|"]
    for e in tuned_here:
        t = e.get("transfer")
        if t is None:
            out.append(f"| {e['arm']} | {len(e['grid'])} | - | - | - |")
            continue
        rho = "-" if t["spearman"] is None else f"{t['spearman']:.2f}"
        out.append(f"| {e['arm']} | {len(e['grid'])} | {rho} | {100 * t['regret']:.2f}% | {'yes' if t['pick_wins_on_val'] else 'no'} |")
    trials = [(e["arm"], g) for e in tuned_here for g in e["grid"] if g.get("final_tune_bpb") is not None]
    if trials and any("tune_seeds_run" in g for _, g in trials):
        out += ["", "Every finished tuning trial (mean over the tuning seeds it ran at; the pick is the lowest mean among "
                "the trials that ran at every tuning seed; + marks a trial that extends the declared grid):", "",
                "| arm | trial | tuning seeds | tuning-split bpb | validation bpb |", "|---|---|---|---|---|"]
        out += [f"| {arm} | {_label(g['label'])}{' +' if g.get('extension') else ''} | "
                f"{', '.join(map(str, g.get('tune_seeds_run', [])))} | {g['final_tune_bpb']:.4f} | "
                f"{g['final_val_bpb']:.4f} |" for arm, g in trials]
    elif trials:
        out += ["", "Every finished tuning trial (mean over the tuning seeds; the pick is the lowest tuning-split bpb of a "
                "complete grid):", "", "| arm | trial | tuning-split bpb | validation bpb |", "|---|---|---|---|"]
        out += [f"| {arm} | {_label(g['label'])} | {g['final_tune_bpb']:.4f} | {g['final_val_bpb']:.4f} |" for arm, g in trials]
    if rows:
        out += ["", "| row | val bpb per seed | tokens | / its arm's pick | / its control | / the reference arm | "
                "/ its control, equal simulated time | / the reference arm, equal simulated time | bytes on the link | "
                "status |", "|---|---|---|---|---|---|---|---|---|---|"]
        for e in rows:
            vals = " / ".join(f"{v:.4f}" for v in e.get("val_bpb", [])) or "-"
            cells = []
            for key, kind in (("vs_arm", ""), ("vs_control", ""), ("vs_ref", ""), ("vs_control", "time_"),
                              ("vs_ref", "time_")):
                r = e.get(key)
                n = 0 if r is None else r.get(f"{kind}ratio_n", 0)
                cells.append("-" if r is None else _ratio(r.get(f"{kind}ratio_mean"), r.get(f"{kind}ratio_ci95"), n,
                                                          min(n, r.get("ratio_restored_n", 0))))
                n_cmp += 1 if n else 0
            cells.append(_bytes(e))
            status = e["status"] + "".join(f"; {u}" for u in e.get("unpaired", [])) + _provenance(e)
            toks = sorted({t for t in e.get("tokens", []) if t is not None})
            tok = "-" if not toks else f"{toks[0]:,}" if len(toks) == 1 else f"{toks[0]:,}-{toks[-1]:,}"
            out.append(f"| {e['row']} | {vals} | {tok} | {' | '.join(cells)} | {status} |")
    _render_where([e for e in arms if e.get("seeds")] + [e for e in rows if e.get("seeds")], out)
    pairs = [e for e in entries if e["kind"] == "pair" and e.get("ratio_n")]
    if pairs:
        out += ["", "Arm against arm, each at its pick (paired per seed on this machine; below 1: the first arm ends "
                "lower):", "", "| arm | against | equal tokens | equal simulated time |", "|---|---|---|---|"]
        for e in pairs:
            tok = _ratio(e["ratio_mean"], e["ratio_ci95"], e["ratio_n"], e.get("ratio_restored_n", 0))
            tim = _ratio(e.get("time_ratio_mean"), e.get("time_ratio_ci95"), e.get("time_ratio_n", 0),
                         min(e.get("ratio_restored_n", 0), e.get("time_ratio_n", 0)))
            n_cmp += 1 + (1 if e.get("time_ratio_n") else 0)
            out.append(f"| {e['arms'][0]} | {e['arms'][1]} | {tok} | {tim} |")
    return n_cmp


def _mean(values: list[Any]) -> float | None:
    got = [float(v) for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _render_where(entries: list[dict[str, Any]], out: list[str]) -> None:
    """Where each scored arm's and row's simulated time and bytes went (reports written before these fields
    existed have none: no table)."""
    have = [e for e in entries if "compute_utilization" in e]
    if not have:
        return
    out += ["", "Where the simulated time and the bytes went (mean over the scored seeds; bytes per ledger channel at "
            "the first seed):", "", "| arm or row | seeds | simulated wall-clock | compute utilisation | bytes per "
            "channel |", "|---|---|---|---|---|"]
    for e in have:
        t, u = _mean(e.get("sim_wall_clock_s", [])), _mean(e["compute_utilization"])
        by = e.get("bytes_by_channel")
        chans = "-" if by is None else ", ".join(f"{ch} {b:,}" for ch, b in by.items()) or "none"
        out.append(f"| {e.get('row') or e['arm']} | {len(e['seeds'])} | {'-' if t is None else f'{t:.1f} s'} | "
                   f"{'-' if u is None else f'{100 * u:.1f}%'} | {chans} |")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _signed_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.2f}%"


def _render_tuning(entries: list[dict[str, Any]], out: list[str]) -> None:
    """Per arm what its tuning spent and how sure its pick is (protocol 3): trials (declared + extensions), runs,
    rungs, the pick's margin over the runner-up against the tuning seeds' spread, its validation regret, each axis."""
    if not entries:
        return
    out += ["", "Tuning per arm (successive halving over the tuning seeds; margin: the runner-up's mean tuning-split "
            "bpb over the pick's, minus 1; spread: the median standard error of a finalist's mean, relative; regret: the "
            "pick's validation bpb over the best finalist's, minus 1, at the tuning seeds; push: about how far the two "
            "picks' regrets move the ratio to the reference, (1 + regret) / (1 + the reference's regret) - 1, "
            "+ against the arm):", "",
            "| arm | trials (declared + extended) | tuning runs | per rung | margin | spread | regret | push on / ref "
            "| axes through the pick |", "|---|---|---|---|---|---|---|---|---|"]
    budgets = {e["arm"]: e["tuning"]["tuning_runs"] for e in entries}
    for e in entries:
        t = e["tuning"]
        tr = t.get("transfer") or {}
        axes = ", ".join(f"{k}: {v}" for k, v in t.get("axes", {}).items()) or "-"
        inside = "" if t.get("margin") is None or t.get("seed_spread") is None or t["margin"] > t["seed_spread"] else \
            " (inside the spread)"
        ref_runs = budgets.get(e["ref"])
        diff = "" if ref_runs in (None, t["tuning_runs"]) or e["arm"] == e["ref"] else \
            f" ({t['tuning_runs'] - ref_runs:+d} vs {e['ref']})"
        out.append(f"| {e['arm']} | {t['trials']} ({t['grid_trials']} + {t['trials'] - t['grid_trials']}) | "
                   f"{t['tuning_runs']}{diff} | {' / '.join(map(str, t.get('rungs', [])))} | {_pct(t.get('margin'))}"
                   f"{inside} | {_pct(t.get('seed_spread'))} | {_pct(tr.get('regret'))} | {_signed_pct(t.get('regret_push'))} "
                   f"| {axes} |")


def _render_equal_time(entries: list[dict[str, Any]], out: list[str]) -> None:
    """Each island arm at equal simulated time, from the slower arm retrained to the faster one's finishing time."""
    out += ["", "Equal simulated time, trained (the slower arm retrained with its whole schedule fitted into the faster "
            "one's finishing time, scored on all held-out bytes; ratio: island arm over its reference, paired per "
            "seed):", "", "| arm | retrained | steps | target | its simulated seconds | val bpb per seed | ratio | "
            "status |", "|---|---|---|---|---|---|---|---|"] if entries else []
    for e in entries:
        et = e["equal_time"]
        secs = _mean_of(et.get("sim_wall_clock_s", []))
        vals = " / ".join(f"{v:.4f}" for v in et.get("val_bpb", [])) or "-"
        out.append(f"| {e['arm']} | {et['retrained']} (vs {et['against']}) | {et['steps']:,} | {et['target_s']:.1f} s | "
                   f"{'-' if secs is None else f'{secs:.1f} s'} | {vals} | "
                   f"{_ratio(et.get('ratio_mean'), et.get('ratio_ci95'), et.get('ratio_n', 0))} | {et['status']} |")


def _mean_of(values: list[Any]) -> float | None:
    got = [float(v) for v in values if v is not None]
    return sum(got) / len(got) if got else None
