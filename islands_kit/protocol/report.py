"""A study's report, made from its runs' result.json files alone: one JSON document (``benchmarks/<study>.json``) and
the markdown table rendered from that document (never from the runs: a test re-renders every table in
benchmarks/RESULTS.md from its JSON and fails on any difference).

Per arm: its pick (made on the tuning split), the whole grid with both splits' bpb, the pick's validation bpb per seed,
and against its reference arm, paired per seed: the ratio at equal tokens and at equal simulated wall-clock (its
validation curve read at the reference's finishing time), each with a paired t interval (islands_kit/stats.py), and the
bytes it sent. Runs made on different machines or kernel sets are never paired (the entry's ``unpaired`` names them):
the report holds one set of entries per machine that made runs (the most complete first), and ``across_machines``
says how far the same pick's same seed moved from one machine to another.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from islands_kit.orbital import report as orbital_report
from islands_kit.protocol.equal_time import equal_time_trial
from islands_kit.protocol.runs import Run, machines
from islands_kit.protocol.study import Study, Trial
from islands_kit.protocol.tuning import Tuning, margin, tune, tune_value, tuned_pick
from islands_kit.stats import RatioStat, paired_ratio, pick_regret, rank_correlation

SCHEMA = 3


def machine_of(res: dict[str, Any]) -> str:
    return str(res.get("versions", {}).get("machine", "unknown"))


def bpb_at_time(res: dict[str, Any], t: float) -> float | None:
    """The run's validation bpb at simulated time ``t`` (linear between evaluations); its final bpb when it finished
    before ``t``; None before its first evaluation."""
    pts = [(float(h["sim_time_s"]), float(h["val_bpb"])) for h in res.get("history", [])
           if "val_bpb" in h and isinstance(h.get("val_bpb"), (int, float)) and math.isfinite(h["val_bpb"])]
    if not pts:
        return None
    if t >= pts[-1][0]:
        return float(res["final_val_bpb"])
    if t < pts[0][0]:
        return None
    for (t0, b0), (t1, b1) in zip(pts, pts[1:]):
        if t0 <= t <= t1:
            return b0 if t1 == t0 else b0 + (b1 - b0) * (t - t0) / (t1 - t0)
    return None


def _scored(study: Study, trial: Trial, seeds: list[int], root: Path) -> dict[int, dict[str, Any]]:
    """Finished runs of ``trial`` by seed (with their evaluation history attached)."""
    out = {}
    for s in seeds:
        run = Run(trial, s, study.preset, root, "score")
        res = run.result()
        if res is not None:
            out[s] = {**res, "history": run.history()}
    return out


def _pair(a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]], unpaired: list[str]) -> list[int]:
    """The seeds both have, made on one machine and kernel set; the others are named in ``unpaired`` (never paired:
    a 1200-step run moves by up to a seed's spread between kernel sets)."""
    seeds = []
    for s in sorted(set(a) & set(b)):
        ma, mb = machine_of(a[s]), machine_of(b[s])
        if ma != mb or ma == "unknown":
            unpaired.append(f"seed {s}: made on different machines or kernel sets ({ma} vs {mb})")
        else:
            seeds.append(s)
    return seeds


def restored(res: dict[str, Any]) -> bool:
    """Whether a run's result was restored from a study's ledger (made elsewhere) rather than made on this checkout."""
    return bool(res.get("restored_from"))


def shared_from(res: dict[str, Any]) -> str | None:
    """The study a shared run was made under (protocol/share.py), or None for a run of this study's own."""
    v = res.get("shared_from")
    return v.split(":", 1)[0] if isinstance(v, str) and ":" in v else None


def _ratio_fields(arm: dict[int, dict[str, Any]], ref: dict[int, dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
    if not seeds:
        return {"ratio_mean": None, "ratio_ci95": None, "ratio_n": 0, "resolved": False, "ratio_restored_n": 0,
                "time_ratio_mean": None, "time_ratio_ci95": None, "time_ratio_n": 0}
    tok = paired_ratio([arm[s]["final_val_bpb"] for s in seeds], [ref[s]["final_val_bpb"] for s in seeds])
    # equal simulated wall-clock: both curves read when the first of the two finishes (the faster run's final bpb
    # against the slower one's bpb at that moment)
    pairs = []
    for s in seeds:
        t = min(float(arm[s]["sim_wall_clock_s"]), float(ref[s]["sim_wall_clock_s"]))
        pairs.append((bpb_at_time(arm[s], t), bpb_at_time(ref[s], t)))
    pairs_ok = [(a, b) for a, b in pairs if a is not None and b is not None]
    tim: RatioStat | None = paired_ratio([a for a, _ in pairs_ok], [b for _, b in pairs_ok]) if pairs_ok else None
    return {"ratio_mean": tok.mean, "ratio_ci95": tok.interval(), "ratio_n": tok.n, "resolved": tok.resolved,
            "ratios": list(tok.ratios),
            # seeds whose pair holds a run restored from a ledger: the rest were both made on this checkout
            "ratio_restored_n": sum(1 for s in seeds if restored(arm[s]) or restored(ref[s])),
            "time_ratio_mean": None if tim is None else tim.mean, "time_ratio_ci95": None if tim is None else tim.interval(),
            "time_ratio_n": 0 if tim is None else tim.n}


def _bytes(arm: dict[int, dict[str, Any]], ref: dict[int, dict[str, Any]]) -> dict[str, Any]:
    if not arm:
        return {"cross_site_bytes": None, "bytes_vs_ddp": None, "bytes_vs_ref": None}
    r = arm[min(arm)]
    out: dict[str, Any] = {"cross_site_bytes": r["cross_site_bytes"],
                           "bytes_vs_ddp": r["ddp_equivalent_bytes"] / max(1, r["cross_site_bytes"])}
    out["bytes_vs_ref"] = (ref[min(ref)]["cross_site_bytes"] / max(1, r["cross_site_bytes"])) if ref else None
    return out


def _where(mine: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Where the scored runs' simulated time and bytes went: per seed the simulated wall-clock and the compute
    utilisation, and the first seed's bytes per ledger channel (the same at every seed of a lock-step schedule)."""
    seeds = sorted(mine)
    led = mine[seeds[0]].get("ledger") if seeds else None  # None: a ledger line from before the ledger kept it
    return {"sim_wall_clock_s": [mine[s]["sim_wall_clock_s"] for s in seeds],
            "compute_utilization": [mine[s].get("compute_utilization") for s in seeds],
            "bytes_by_channel": None if led is None else {ch: int(v["bytes"]) for ch, v in
                                                          sorted(led.get("channels", {}).items()) if v.get("bytes")}}


def grid_edges(grid: dict[str, list[str]], label: dict[str, str]) -> list[str]:
    """The grid axes (of 3 or more numeric values) on whose smallest or largest value the pick sits (protocol 2's
    flag; protocol 3 reads every axis through the pick instead: ``tuning.Tuning.axes``)."""
    out = []
    for key, values in grid.items():
        try:
            nums = sorted(float(v) for v in values)
            mine = float(label[key])
        except (KeyError, ValueError):
            continue
        if len(nums) >= 3 and mine in (nums[0], nums[-1]):
            out.append(f"{key}={label[key]} ({'smallest' if mine == nums[0] else 'largest'} of the grid)")
    return out


def _grid(tuning: Tuning, n_declared: int, n_seeds: int, protocol: int) -> list[dict[str, Any]]:
    """Every trial of the tuning (the declared grid, then its extensions) with the seeds it ran at and its means over
    them on both splits (protocol 2: only a trial that ran at every tuning seed has means)."""
    out = []
    for i, trial in enumerate(tuning.trials):
        done = tuning.results.get(trial, {})
        seeds = sorted(done)
        have = bool(seeds) if protocol >= 3 else len(seeds) == n_seeds
        tune_mean = sum(tune_value(done[s]) for s in seeds) / len(seeds) if have else None
        val_mean = sum(float(done[s]["final_val_bpb"]) for s in seeds) / len(seeds) if have else None
        row = {"label": dict(trial.label), "overrides": trial.overrides, "runs": len(seeds),
               "restored": sum(1 for x in seeds if restored(done[x])),
               "shared": sum(1 for x in seeds if shared_from(done[x])),
               "shared_with": sorted({f for x in seeds if (f := shared_from(done[x]))}), "final_tune_bpb": tune_mean,
               "final_val_bpb": val_mean}
        if protocol >= 3:
            row.update({"tune_seeds_run": seeds, "extension": i >= n_declared})
        out.append(row)
    return out


def _tuning_fields(study: Study, arm: str, tuning: Tuning) -> dict[str, Any]:
    """What the tuning spent and how sure its pick is: trials and runs, the pick's margin over the runner-up against
    the tuning seeds' spread, the pick's validation regret among the trials that ran at every tuning seed, and each
    axis' state through the pick."""
    n = len(study.tune_seeds)
    final = [t for t in tuning.finalists(n) if math.isfinite(tuning.mean(t))]
    out: dict[str, Any] = {"trials": len(tuning.trials), "grid_trials": study.arms[arm].n_trials(),
                           "tuning_runs": sum(len(tuning.results.get(t, {})) for t in tuning.trials),
                           "rungs": tuning.rungs, "halving": study.halving, "axes": dict(tuning.axes),
                           **margin(tuning, n)}
    if len(final) >= 1:
        vals = [sum(float(r["final_val_bpb"]) for r in tuning.results[t].values()) / n for t in final]
        tunes = [tuning.mean(t) for t in final]
        out["transfer"] = {"spearman": rank_correlation(tunes, vals), "regret": pick_regret(tunes, vals),
                           "pick_wins_on_val": vals[0] == min(vals), "trials": len(final)}
    return out


def arm_entry(study: Study, arm: str, root: Path, picks: dict[str, Trial], tuned_on: Path | None = None,
              equal: dict[str, Any] | None = None) -> dict[str, Any]:
    """``arm``'s entry from this machine's runs (``root``); its grid from the machine it was tuned on (``tuned_on``,
    default this one); ``equal``: its equal-time entry (``equal_time_entry``), if the study trains one."""
    a = study.arms[arm]
    tuning = tune(study, arm, tuned_on or root)
    entry: dict[str, Any] = {"kind": "arm", "arm": arm, "experiment": a.experiment, "preset": study.preset,
                             "ref": a.ref, "picked_on": "tune", "tune_seeds": study.tune_seeds,
                             "grid": _grid(tuning, a.n_trials(), len(study.tune_seeds), study.protocol),
                             "fixed": dict(a.fixed),
                             "machine": root.name, "tuned_on": (tuned_on or root).name}
    entry["tuning_restored"] = sum(g["restored"] for g in entry["grid"])
    entry["tuning_shared"] = sum(g["shared"] for g in entry["grid"])  # of the restored: made by another study
    entry["shared_with"] = sorted({f for g in entry["grid"] for f in g["shared_with"]})
    if study.protocol >= 3:
        entry["tuning"] = _tuning_fields(study, arm, tuning)
    chosen = picks.get(arm)
    if chosen is None:
        return {**entry, "overrides": None, "label": None, "seeds": [], "val_bpb": [], "status": "tuning"}
    mine = _scored(study, chosen, study.seeds, root)
    ref_pick = picks.get(a.ref)
    ref = _scored(study, ref_pick, study.seeds, root) if ref_pick is not None else {}
    unpaired: list[str] = []
    seeds = _pair(mine, ref, unpaired)
    edges = (grid_edges(a.grid, dict(chosen.label)) if study.protocol < 3 else
             [f"{k}={dict(chosen.label)[k]}: {v}" for k, v in tuning.axes.items() if v != "interior"])
    entry["shared_with"] = sorted({*entry["shared_with"], *(f for s in mine.values() if (f := shared_from(s)))})
    entry.update({"overrides": chosen.overrides, "label": dict(chosen.label), "seeds": sorted(mine),
                  "pick_at_grid_edge": edges,
                  "val_bpb": [mine[s]["final_val_bpb"] for s in sorted(mine)],
                  "tokens": [mine[s].get("tokens") for s in sorted(mine)],
                  "restored_seeds": [s for s in sorted(mine) if restored(mine[s])],
                  "shared_seeds": [s for s in sorted(mine) if shared_from(mine[s])],
                  **_where(mine),
                  "machine_fingerprint": machine_of(mine[min(mine)]) if mine else None,
                  "status": "done" if len(mine) == len(study.seeds) else f"{len(mine)}/{len(study.seeds)} seeds",
                  "unpaired": unpaired})
    entry.update(_ratio_fields(mine, ref, seeds) if arm != a.ref else
                 {"ratio_mean": 1.0, "ratio_ci95": None, "ratio_n": len(mine), "resolved": False})
    entry.update(_bytes(mine, ref if arm != a.ref else {}))
    if study.protocol < 3:
        fin = [t for t in tuning.trials if len(tuning.results.get(t, {})) == len(study.tune_seeds)]
        if fin and len(fin) == len(tuning.trials):
            tunes = [tuning.mean(t) for t in fin]
            vals = [sum(float(r["final_val_bpb"]) for r in tuning.results[t].values()) / len(study.tune_seeds)
                    for t in fin]
            if all(math.isfinite(x) for x in tunes):
                entry["transfer"] = {"spearman": rank_correlation(tunes, vals), "regret": pick_regret(tunes, vals),
                                     "pick_wins_on_val": vals[tunes.index(min(tunes))] == min(vals)}
    else:
        entry["transfer"] = entry["tuning"].get("transfer")
    if equal is not None:
        entry["equal_time"] = equal
    return entry


def equal_time_entry(study: Study, arm: str, root: Path, picks: dict[str, Trial],
                     tuned_on: dict[str, Path]) -> dict[str, Any] | None:
    """``arm`` against its reference at equal simulated time, from trained runs (protocol/equal_time.py): the
    retrained arm's tokens, simulated seconds and validation bpb per seed, and the island arm over the reference
    paired per seed (whichever of the two was retrained)."""
    et = equal_time_trial(study, arm, picks, tuned_on)
    if et is None:
        return None
    retrained = _scored(study, et.trial, study.seeds, root)
    other = _scored(study, picks[et.faster], study.seeds, root)
    island, ref = (other, retrained) if et.slower == study.arms[arm].ref else (retrained, other)
    unpaired: list[str] = []
    seeds = _pair(island, ref, unpaired)
    out: dict[str, Any] = {"retrained": et.slower, "retrained_as": et.trial.arm, "against": et.faster,
                           "overrides": et.trial.overrides, "steps": et.steps, "target_s": et.target_s,
                           "seeds": sorted(retrained), "tokens": [retrained[s].get("tokens") for s in sorted(retrained)],
                           "sim_wall_clock_s": [retrained[s]["sim_wall_clock_s"] for s in sorted(retrained)],
                           "val_bpb": [retrained[s]["final_val_bpb"] for s in sorted(retrained)],
                           "status": "done" if len(retrained) == len(study.seeds) else
                           f"{len(retrained)}/{len(study.seeds)} seeds", "unpaired": unpaired}
    if seeds:
        r = paired_ratio([island[s]["final_val_bpb"] for s in seeds], [ref[s]["final_val_bpb"] for s in seeds])
        out.update({"ratio_mean": r.mean, "ratio_ci95": r.interval(), "ratio_n": r.n, "resolved": r.resolved,
                    "ratios": list(r.ratios),
                    "ratio_restored_n": sum(1 for x in seeds if restored(island[x]) or restored(ref[x]))})
    else:
        out.update({"ratio_mean": None, "ratio_ci95": None, "ratio_n": 0, "resolved": False})
    return out


def row_entry(study: Study, row_i: int, root: Path, picks: dict[str, Trial]) -> dict[str, Any]:
    row = study.rows[row_i]
    entry: dict[str, Any] = {"kind": "row", "row": row.name, "arm": row.arm, "control": row.control,
                             "set": row.sets, "preset": study.preset}
    if row.arm is not None and row.arm not in picks:
        return {**entry, "status": "waiting for its arm's pick", "seeds": [], "val_bpb": []}
    t = study.row_trial(row, picks)
    mine = _scored(study, t, row.seeds, root)
    entry.update({"experiment": t.experiment, "overrides": t.overrides, "seeds": sorted(mine),
                  "val_bpb": [mine[s]["final_val_bpb"] for s in sorted(mine)],
                  "restored_seeds": [s for s in sorted(mine) if restored(mine[s])],
                  "tokens": [mine[s].get("tokens") for s in sorted(mine)], **_where(mine),
                  "status": "done" if len(mine) == len(row.seeds) else f"{len(mine)}/{len(row.seeds)} seeds"})
    # against the arm it changes one thing of (or its control), and against the study's reference arm
    refs: dict[str, Trial] = {}
    if row.arm is not None:
        refs["vs_arm"] = picks[row.arm]
    if row.control is not None:
        ctl = picks.get(row.control) or next((study.row_trial(r, picks) for r in study.rows if r.name == row.control
                                              and (r.arm is None or r.arm in picks)), None)
        if ctl is not None:
            refs["vs_control"] = ctl
    base_arm = study.arms[row.arm].ref if row.arm is not None else next(iter(study.arms))
    if base_arm in picks:
        refs["vs_ref"] = picks[base_arm]
    unpaired: list[str] = []
    for key, trial in refs.items():
        other = _scored(study, trial, row.seeds, root)
        entry[key] = _ratio_fields(mine, other, _pair(mine, other, unpaired))
    entry["unpaired"] = sorted(set(unpaired))
    entry.update(_bytes(mine, {}))
    entry.update(orbital_report.row_fields(mine, _scored(study, refs["vs_ref"], row.seeds, root) if "vs_ref" in refs else {}))
    return entry


def _machine_entries(study: Study, base: Path, machine: str) -> list[dict[str, Any]]:
    found = {arm: f for arm in study.arms if (f := tuned_pick(study, arm, base, machine)) is not None}
    picks = {arm: f[0] for arm, f in found.items()}
    tuned_on = {arm: base / f[1] for arm, f in found.items()}
    root = base / machine
    arms = [arm_entry(study, arm, root, picks, tuned_on.get(arm), equal_time_entry(study, arm, root, picks, tuned_on))
            for arm in study.arms]
    regret_push(arms)
    rows = [{**row_entry(study, i, root, picks), "machine": machine} for i in range(len(study.rows))]
    return arms + rows + pair_entries(study, root, picks)


def regret_push(arms: list[dict[str, Any]]) -> None:
    """Each arm's ``tuning.regret_push``: about how far the two picks' validation regrets move its ratio to its
    reference, (1 + its regret) / (1 + the reference's) - 1. Positive: selection noise makes the arm read worse than
    at both arms' validation-best finalists; negative: better. The regrets are measured at the tuning seeds, so this
    is the direction and rough size of the bias, not a correction to apply to the scored ratio."""
    by = {e["arm"]: e for e in arms}
    for e in arms:
        ref = by.get(e["ref"])
        if e["arm"] == e["ref"] or ref is None or "tuning" not in e:
            continue
        mine, theirs = (((x.get("tuning") or {}).get("transfer") or {}).get("regret") for x in (e, ref))
        if mine is not None and theirs is not None:
            e["tuning"]["regret_push"] = (1.0 + mine) / (1.0 + theirs) - 1.0


def pair_entries(study: Study, root: Path, picks: dict[str, Trial]) -> list[dict[str, Any]]:
    """Every two arms that are not the reference, read against each other at their picks (the later arm over the
    earlier, paired per seed on this machine, at equal tokens and equal simulated time): whether one beats the other
    is a question of its own, not the difference of their ratios to the reference."""
    others = [a for a in study.arms if study.arms[a].ref != a and a in picks]
    out = []
    for i, b in enumerate(others):
        for a in others[i + 1:]:
            mine, theirs = _scored(study, picks[a], study.seeds, root), _scored(study, picks[b], study.seeds, root)
            unpaired: list[str] = []
            seeds = _pair(mine, theirs, unpaired)
            out.append({"kind": "pair", "arms": [a, b], "machine": root.name, "seeds": seeds,
                        "unpaired": unpaired, **_ratio_fields(mine, theirs, seeds)})
    return out


def _finished(entries: list[dict[str, Any]]) -> int:
    return sum(len(e.get("seeds", [])) for e in entries if e["kind"] in ("arm", "row"))


def across_machines(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For every arm scored with one pick on two machines: per shared seed its validation bpb on each, and the
    relative move (second / first - 1) — how far the same run lands from one CPU to the next."""
    out = []
    arms = [e for e in entries if e["kind"] == "arm" and e.get("overrides")]
    for i, a in enumerate(arms):
        for b in arms[i + 1:]:
            if a["arm"] != b["arm"] or a["overrides"] != b["overrides"]:
                continue
            va, vb = dict(zip(a["seeds"], a["val_bpb"])), dict(zip(b["seeds"], b["val_bpb"]))
            seeds = sorted(set(va) & set(vb))
            if seeds:
                moves = [vb[s] / va[s] - 1.0 for s in seeds]
                out.append({"arm": a["arm"], "machines": [a["machine"], b["machine"]], "seeds": seeds,
                            "val_bpb": [[va[s], vb[s]] for s in seeds], "moves": moves,
                            "max_abs_move": max(abs(m) for m in moves)})
    return out


def make_report(study: Study, base: Path, command: str) -> dict[str, Any]:
    """The study's JSON document from the runs under ``base`` (one folder per machine): every machine's entries, the
    machine with the most finished scored runs first, and how far shared runs moved between machines."""
    groups = [(m, _machine_entries(study, base, m)) for m in machines(base)]
    groups.sort(key=lambda g: -_finished(g[1]))
    entries = [e for _, es in groups for e in es]
    fingerprints = {m: next((e["machine_fingerprint"] for e in es if e.get("machine_fingerprint")), None) for m, es in groups}
    return {"schema": SCHEMA, "study": study.name, "preset": study.preset, "description": study.description,
            "command": command, "seeds": study.seeds, "tune_seeds": study.tune_seeds,
            "machines": [{"machine": m, "fingerprint": fingerprints[m]} for m, _ in groups],
            "entries": entries, "across_machines": across_machines(entries)}
