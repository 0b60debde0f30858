"""Execute the kit's notebooks with papermill, and the helpers the notebooks call (they hold no core logic).

``run_notebook("two_site", {"preset": "smoke"}, "runs/x")`` executes ``notebooks/two_site.ipynb`` with those values
injected after its ``parameters`` cell and keeps the executed copy in the output folder (``runs/x/two_site.ipynb``).
A ``ConfigError`` raised inside the notebook (a bad parameter, caught by its validation cell) comes back as a
``ConfigError`` naming the field, so ``islands-kit notebook`` reports it like ``islands-kit run`` does.

Inside the notebooks: ``notebook_config`` turns the parameters cell into a validated ``ExperimentConfig``,
``resolve_out_dir`` picks the output folder, ``load_run`` reads a finished run back, and ``run_comparison`` runs the
three experiment notebooks with shared parameters (the compare notebook).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from islands_kit.config import ConfigError, ExperimentConfig, _check, apply_overrides

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
EXPERIMENT_NOTEBOOKS = ("baseline", "two_site", "eight_cell")


def notebook_path(name: str) -> Path:
    p = NOTEBOOK_DIR / f"{name}.ipynb"
    if not p.exists():
        valid = sorted(q.stem for q in NOTEBOOK_DIR.glob("*.ipynb"))
        raise ConfigError(f"notebook: unknown notebook {name!r} (valid: {', '.join(valid)})")
    return p


def run_notebook(name: str, params: dict[str, Any] | None = None, out_dir: str | Path | None = None,
                 kernel_name: str = "python3") -> Path:
    """Execute notebooks/NAME.ipynb with papermill; returns the executed notebook's path (OUT/NAME.ipynb).

    Parameters not declared in the notebook's ``parameters`` cell are refused before anything runs. ``out_dir``
    (default ``runs/notebook-NAME``) is passed to the notebook as its ``out_dir`` parameter (absolute) unless given
    in ``params``, and is the kernel's working folder. A ConfigError raised in the notebook is re-raised as a
    ConfigError (other failures as papermill's ``PapermillExecutionError``); the executed copy is kept either way."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    src = notebook_path(name)
    params = dict(params or {})
    declared = pm.inspect_notebook(str(src))
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ConfigError(f"notebook {name}: unknown parameter {unknown[0]!r} (valid: {', '.join(sorted(declared))})")
    out = Path(out_dir) if out_dir else Path("runs") / f"notebook-{name}"
    out.mkdir(parents=True, exist_ok=True)
    if "out_dir" in declared:
        params.setdefault("out_dir", str(out.resolve()))
    # no WANDB_MODE is set here: the notebook's wandb_mode parameter (default offline) decides, unless the caller's
    # environment sets WANDB_MODE, which wandb lets win
    dst = out / f"{name}.ipynb"
    try:
        pm.execute_notebook(str(src), str(dst), parameters=params, kernel_name=kernel_name, cwd=str(out.resolve()),
                            progress_bar=False)
    except PapermillExecutionError as e:
        if e.ename == "ConfigError":
            raise ConfigError(f"{e.evalue} [notebook {name}, cell {e.cell_index}; executed copy: {dst}]") from None
        raise
    return dst


# ---------------------------------------------------------------------------------------------------------------
# Called from inside the notebooks


def notebook_config(experiment: str, preset: str, seed: int, steps: int,
                    overrides: Mapping[str, Any] | None = None) -> ExperimentConfig:
    """The validated config of one notebook run: ``presets.get_preset(experiment, preset)``, then ``seed``, ``steps``
    (0 = the preset's) and dotted-path ``overrides`` (``{"sync.H": 50, "link.preset": "intra-dc", ...}``) whose
    value is not None (None = keep the preset's). Any bad value raises ConfigError naming the field and the rule;
    a corpus that names no registered corpus, hub dataset or existing file is refused here too, before training."""
    from islands_kit.presets import get_preset

    _check(isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0, "steps",
           "must be an integer >= 0 (0 = the preset's)", steps)
    cfg = get_preset(experiment, preset)
    ov: dict[str, Any] = {"seed": seed}
    if steps:
        ov["steps"] = steps
    ov.update({k: v for k, v in (overrides or {}).items() if v is not None})
    cfg = apply_overrides(cfg, ov)
    from islands_kit.data import check_corpus_spec

    check_corpus_spec(cfg.data.corpus)  # a path matching nothing is refused before any work
    return cfg


def resolve_out_dir(out_dir: str | Path, default: str | Path | ExperimentConfig) -> Path:
    """``out_dir`` made absolute and created; when empty, ``default`` (for a config:
    ``runs/<experiment>-<preset>-s<seed>``)."""
    if isinstance(default, ExperimentConfig):
        default = Path("runs") / f"{default.experiment}-{default.preset}-s{default.seed}"
    out = Path(out_dir if str(out_dir) else default).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return out


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
    if s.strategy == "ddp":
        lines.append("sync: ddp (gradients all-reduced every step, fp32)")
    elif s.strategy == "diloco":
        lines.append(f"sync: streaming DiLoCo H={s.H}, P={s.n_fragments} fragments, tau={s.tau}, alpha={s.alpha}, "
                     f"outer lr {s.outer_lr} (Nesterov {s.nesterov}, momentum {s.outer_momentum}), codec {s.codec}, "
                     f"routing sync {s.routing_sync}")
    else:
        lines.append(f"sync: butterfly H={s.H}, P={s.n_fragments} fragments, {s.exchanges_per_window} exchanges per "
                     f"window, merge delay {s.delay}, codec {s.codec}, routing sync {s.routing_sync}")
    lines.append(f"link: {lk.preset} ({lk.bandwidth_bps / 1e9:g} Gbit/s, rtt {lk.rtt_s * 1e3:g} ms, {lk.method}); "
                 f"wandb {cfg.wandb_mode} project {cfg.wandb_project!r} group {cfg.wandb_group!r}")
    return "\n".join(lines)


def result_summary(result: Mapping[str, Any]) -> str:
    """One paragraph on a finished run: bpb against the best compressor, bytes on the link, simulated clock."""
    sent = int(result["cross_site_bytes"])
    ratio = result["ddp_equivalent_bytes"] / sent if sent else float("inf")
    if result.get("diverged_at_step") is not None:
        bpb = f"DIVERGED at step {result['diverged_at_step']} ({result.get('diverged_reason')}): no final bpb"
    else:
        bpb = f"final validation bpb {result['final_val_bpb']:.4f} on {result.get('val_bytes', '?')} bytes"
    return (f"{result['experiment']}: {bpb} (xz -9e on the same bytes: {result['compressor_bpb']['xz']:.3f}); "
            f"{result['tokens']:,} training tokens\n"
            f"link: {sent:,} bytes sent, {ratio:,.1f}x less than a fp32 all-reduce every step; peak "
            f"{result['peak_link_bytes_per_s'] / 1e6:,.1f} MB/s\n"
            f"simulated wall-clock {result['sim_wall_clock_s']:.2f} s at {100 * result['compute_utilization']:.1f}% compute "
            f"utilisation; real time {result['wall_time_s']:.1f} s")


def load_run(out_dir: str | Path) -> dict[str, Any]:
    """A finished run read back: ``{"dir", "result", "history", "timeline"}``.

    history: the ``history.jsonl`` records; timeline: ledger transfers ``(start_s, end_s, bytes, src, dst,
    channel)`` when the run recorded them (``result["link_timeline"]``), else None."""
    from islands_kit.tracking import load_result

    d = Path(out_dir)
    result = load_result(d)
    hist_path = d / "history.jsonl"
    if not hist_path.exists():
        raise FileNotFoundError(f"load_run: no history.jsonl in {d}")
    history = [json.loads(line) for line in hist_path.read_text().splitlines() if line.strip()]
    return {"dir": d, "result": result, "history": history, "timeline": result.get("link_timeline")}


def ddp_bytes_per_step(result: Mapping[str, Any]) -> float:
    """Bytes a fp32 gradient all-reduce would send per step (the ledger's data-parallel reference)."""
    return float(result["ddp_equivalent_bytes"]) / max(int(result["steps"]), 1)


def comparison_setup(experiments: Sequence[str], preset: str, seed: int, steps: int, corpus: str, link: str,
                     wandb_mode: str, wandb_project: str, wandb_group: str,
                     out_dir: str | Path) -> tuple[dict[str, Any], Path]:
    """Validate a comparison before any training: every experiment's config is built with the shared values (same
    preset and seed, hence the same total tokens), so a bad value fails here naming its field. Returns the shared
    notebook parameters (``wandb_group`` defaulting to ``compare-<preset>-s<seed>``) and the output folder
    (default ``runs/compare-<preset>-s<seed>``)."""
    _check(isinstance(experiments, (list, tuple)) and len(experiments) >= 1, "experiments",
           "must be a non-empty list", experiments)
    for exp in experiments:
        _check(exp in EXPERIMENT_NOTEBOOKS, "experiments", "each must be one of " + "|".join(EXPERIMENT_NOTEBOOKS), exp)
    shared = dict(preset=preset, seed=seed, steps=steps, corpus=corpus, link=link, wandb_mode=wandb_mode,
                  wandb_project=wandb_project, wandb_group=wandb_group or f"compare-{preset}-s{seed}")
    for exp in experiments:
        notebook_config(exp, preset, seed, steps, {"data.corpus": corpus, "link.preset": link, "wandb_mode": wandb_mode,
                                                   "wandb_project": wandb_project, "wandb_group": shared["wandb_group"]})
    return shared, resolve_out_dir(out_dir, Path("runs") / f"compare-{preset}-s{seed}")


def run_comparison(experiments: Sequence[str], shared: Mapping[str, Any], out_dir: str | Path,
                   kernel_name: str = "python3") -> dict[str, Path]:
    """Run each experiment notebook with the same ``shared`` parameters into ``out_dir/<experiment>/``.

    Returns experiment -> its output folder (result.json, history.jsonl, PNGs and the executed notebook)."""
    out = Path(out_dir)
    dirs = {}
    for exp in experiments:
        d = (out / exp).resolve()
        print(f"running notebooks/{exp}.ipynb -> {d}", flush=True)
        run_notebook(exp, dict(shared, out_dir=str(d)), d, kernel_name=kernel_name)
        dirs[exp] = d
    return dirs


def comparison_report(results: Sequence[Mapping[str, Any]], out_dir: str | Path) -> tuple[list[dict[str, Any]], str]:
    """``tracking.compare_table`` rows and their text table, also written to ``out_dir/compare.json`` and
    ``compare.txt``. Runs trained on different numbers of tokens (or seeds) are not comparable: ValueError."""
    from islands_kit.tracking import compare_table, format_table, write_json_atomic

    _check(len(results) >= 1, "results", "need at least one result", len(results))
    for key in ("tokens", "seed", "preset"):
        vals = {r["experiment"]: r[key] for r in results}
        if len(set(vals.values())) > 1:
            raise ValueError(f"{key}: the runs of a comparison must share it (got {vals})")
    rows = compare_table([dict(r) for r in results])
    text = format_table(rows)
    out = Path(out_dir)
    write_json_atomic(out / "compare.json", rows)
    (out / "compare.txt").write_text(text + "\n")
    return rows, text
