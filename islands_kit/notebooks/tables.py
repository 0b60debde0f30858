"""What the notebooks print: a few lines on a validated config, a paragraph on a finished run, and plain-text tables
(``format_rows``) of the decoupled pair's and the poisoned-island runs' results."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from islands_kit.compare import ratio_phrase, smoke_note, x_fewer_bytes
from islands_kit.config import ExperimentConfig
from islands_kit.records.tracking import resolve_wandb_mode, wandb_group


def config_summary(cfg: ExperimentConfig) -> str:
    """A few lines that say what this run will do (printed by the notebooks after validation)."""
    s, m, lk = cfg.sync, cfg.model, cfg.link
    global_batch = sum(i.batch_size for i in cfg.islands)
    lines = [
        f"experiment {cfg.experiment} | preset {cfg.preset} | seed {cfg.seed} | corpus {cfg.data.corpus}",
        f"steps {cfg.steps} x global batch {global_batch} x seq_len {m.seq_len} = {cfg.steps * global_batch * m.seq_len:,} "
        f"training tokens; evaluation every {cfg.eval_every} steps",
        f"model: d_model {m.d_model}, {m.n_layers} layers, {m.n_experts} experts top-{m.top_k} (d_expert {m.d_expert}); "
        f"inner optimizer {cfg.optim.name} lr {cfg.optim.lr:g}",
        "islands: " + ", ".join(f"{i.name} (batch {i.batch_size} = {i.dp_ranks} rank(s) x "
                                 f"{i.batch_size // (i.dp_ranks * i.micro_batch_size)} x {i.micro_batch_size}, "
                                 f"{i.n_accelerators} x {i.hardware})" for i in cfg.islands),
    ]
    lines.append("sync: " + s.traits.summarise(s))
    lines.append(f"link: {lk.preset} ({lk.bandwidth_bps / 1e9:g} Gbit/s, rtt {lk.rtt_s * 1e3:g} ms, {lk.method}); "
                 + (f"wandb {resolve_wandb_mode(cfg.wandb_mode)} project {cfg.wandb_project!r} group {wandb_group(cfg)!r}"
                    if resolve_wandb_mode(cfg.wandb_mode) != "disabled" else "wandb off"))
    return "\n".join(lines)


def result_summary(result: Mapping[str, Any]) -> str:
    """One paragraph on a finished run: bpb against the best compressor, bytes on the link, simulated clock."""
    sent = int(result["cross_site_bytes"])
    n_islands = len((result.get("config") or {}).get("islands") or []) or "its"
    if result.get("diverged_at_step") is not None:
        bpb = f"DIVERGED at step {result['diverged_at_step']} ({result.get('diverged_reason')}): no final bpb"
    else:
        bpb = f"final validation bpb {result['final_val_bpb']:.4f} on {result.get('val_bytes', '?')} bytes"
    note = smoke_note([result.get("preset")])
    return ((f"{note}\n" if note else "") + f"{result['experiment']}: {bpb} (xz -9e on the same bytes: {result['compressor_bpb']['xz']:.3f}); "
            f"{result['tokens']:,} training tokens\n"
            f"link: {sent:,} bytes sent, "
            f"{ratio_phrase(x_fewer_bytes(result), f'an fp32 gradient all-reduce every step among {n_islands} islands')} "
            f"would send; peak "
            f"{result['peak_link_bytes_per_s'] / 1e6:,.1f} MB/s\n"
            f"simulated wall-clock {result['sim_wall_clock_s']:.2f} s at {100 * result['compute_utilization']:.1f}% compute "
            f"utilisation; real time {result['wall_time_s']:.1f} s")


def format_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Records as an aligned text table (columns: the given ones, else every key in first-seen order); floats with
    4 significant decimals, missing values blank."""
    cols = list(columns) if columns is not None else list(dict.fromkeys(k for r in rows for k in r))

    def cell(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e-3 or abs(v) >= 1e5 else f"{v:.4f}"
        return str(v)

    lines = [cols] + [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines)


def decoupled_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """A title that says what these runs are (the two_site notebook's side runs: in a comparison's output, where the
    notebook's lines are relayed, they must not read as its rows), then one line per run of the decoupled section
    (label -> result.json): inner steps per island, training tokens, simulated seconds, goodput and final bpb."""
    factor = next(iter(results.values()))["config"].get("faults", {}).get("straggler_factor") if results else None
    title = ("two_site side runs, lock-step vs decoupled" + (f" with site B {factor:g}x slower" if factor else "")
             + " (not rows of any comparison):")
    rows = []
    for label, r in results.items():
        names = [i["name"] for i in r["config"]["islands"]]
        steps = {str(k): v for k, v in r["inner_steps"].items()}
        rows.append({"run": label,
                     "inner steps": ", ".join(f"{names[int(k)]} {steps[k]}" for k in sorted(steps, key=int)),
                     "tokens": f"{r['tokens']:,}", "simulated s": r["sim_wall_clock_s"], "goodput": r["goodput"],
                     "final bpb": r["final_val_bpb"]})
    return title + "\n" + format_rows(rows)


def poisoned_island_table(results: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str]) -> str:
    """One line per run: final bpb, its change against the clean run (or where it diverged) and the number of flags
    the defence raised."""
    clean = results["clean"]["final_val_bpb"]
    rows = []
    for name, r in results.items():
        if r.get("diverged_at_step") is not None:
            vs = f"diverged at step {r['diverged_at_step']}"
        else:
            vs = f"{r['final_val_bpb'] / clean - 1:+.2%}"
        rows.append({"run": labels[name], "final bpb": r["final_val_bpb"], "vs clean": vs,
                     "flags": len(r.get("faults_report", []))})
    return format_rows(rows)
