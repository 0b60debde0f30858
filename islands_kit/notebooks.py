"""Execute the kit's notebooks with papermill, and the helpers the notebooks call (they hold no core logic).

(Over 400 lines on purpose: this is where the notebooks' logic lives — the runner and the few helpers each notebook
calls — so that the notebooks themselves stay parameters, calls and plots.)

``run_notebook("two_site", {"preset": "smoke"}, "runs/x")`` executes ``notebooks/two_site.ipynb`` with those values
injected after its ``parameters`` cell and keeps the executed copy in the output folder (``runs/x/two_site.ipynb``).
A ``ConfigError`` raised inside the notebook (a bad parameter, caught by its validation cell) comes back as a
``ConfigError`` naming the field, so ``islands-kit notebook`` reports it like ``islands-kit run`` does.

Inside the notebooks: ``notebook_config`` turns the parameters cell into a validated ``ExperimentConfig``,
``resolve_out_dir`` picks the output folder, ``load_run`` reads a finished run back, and ``run_comparison`` runs the
three experiment notebooks with shared parameters (the compare notebook), ``decoupled_pair`` / ``decoupled_table``
build and summarise the two_site notebook's lock-step vs decoupled pair, ``poisoned_island_setup`` /
``poisoned_island_table`` build and summarise the poisoned-island notebook's three runs, and ``format_rows`` prints
a list of records as a plain-text table.
"""
from __future__ import annotations

import ast
import json
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from islands_kit.compare import ratio_words, x_fewer_bytes
from islands_kit.config import LINK_PRESETS, ConfigError, ExperimentConfig, _check, apply_overrides
from islands_kit.resources import resource_dir

NOTEBOOK_DIR = resource_dir("notebooks")
EXPERIMENT_NOTEBOOKS = ("baseline", "two_site", "eight_cell")
# the kernel's own log (a warning that its local TCP sockets are unencrypted, "KeyboardInterrupt caught in kernel" at
# shutdown) says nothing about the notebook; in a nested run (the compare notebook) it would land in the outputs
KERNEL_QUIET = ["--IPKernelApp.log_level=CRITICAL"]


def notebook_path(name: str) -> Path:
    p = NOTEBOOK_DIR / f"{name}.ipynb"
    if not p.exists():
        valid = sorted(q.stem for q in NOTEBOOK_DIR.glob("*.ipynb"))
        raise ConfigError(f"notebook: unknown notebook {name!r} (valid: {', '.join(valid)})")
    return p


class NotebookError(RuntimeError):
    """A notebook cell raised something other than a ConfigError; the message names the error, the cell and the
    executed copy (which holds the full traceback)."""


def notebook_parameters(name: str) -> dict[str, Any]:
    """The parameters NAME's ``parameters`` cell declares, with their default values (literals)."""
    import papermill as pm

    declared = pm.inspect_notebook(str(notebook_path(name)))
    return {k: ast.literal_eval(v["default"]) for k, v in declared.items()}


_KINDS: tuple[tuple[type, str], ...] = ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                                        (str, "a string"), (list, "a list"), (dict, "a mapping"))


def _kind(default: Any) -> tuple[tuple[type, ...], str] | None:
    """The types a parameter accepts, from its default: None accepts any literal; an int is not a float's only
    form (3 is a valid float) and a bool is no integer."""
    for tp, words in _KINDS:
        if isinstance(default, tp):
            return ((int, float) if tp is float else (tp,)), words
    return None


def check_parameters(name: str, params: Mapping[str, Any]) -> None:
    """Refuse, before any kernel starts, a parameter NAME does not declare or whose value's type differs from its
    default's (one ConfigError naming the parameter)."""
    declared = notebook_parameters(name)
    for key, value in params.items():
        if key not in declared:
            raise ConfigError(f"notebook {name}: unknown parameter {key!r} (valid: {', '.join(sorted(declared))})")
        kind = _kind(declared[key])
        if kind is not None:
            types, words = kind
            ok = isinstance(value, types) and (bool in types or not isinstance(value, bool))
            _check(ok, key, f"must be {words} (notebook {name}, default {declared[key]!r})", value)


def parse_cli_parameters(name: str, pairs: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``-p KEY VALUE`` pairs from the command line: VALUE is kept as text for a parameter whose default is a
    string, else read as JSON (``5``, ``true``, ``["a", "b"]``, ``{"optim.lr": 0.003}``), falling back to text."""
    declared = notebook_parameters(name)
    params: dict[str, Any] = {}
    for key, raw in pairs:
        if isinstance(declared.get(key), str):
            params[key] = raw
            continue
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params


def run_notebook(name: str, params: dict[str, Any] | None = None, out_dir: str | Path | None = None,
                 kernel_name: str = "python3", stream: bool = False) -> Path:
    """Execute notebooks/NAME.ipynb with papermill; returns the executed notebook's path (OUT/NAME.ipynb).

    Parameters not declared in the notebook's ``parameters`` cell, or of another type than their default, are
    refused before anything runs (``check_parameters``). ``out_dir`` (default ``runs/notebook-NAME``) is passed to
    the notebook as its ``out_dir`` parameter (absolute) unless given in ``params``, and is the kernel's working
    folder. A ConfigError raised in the notebook is re-raised as a ConfigError, any other error as a one-line
    ``NotebookError``; the executed copy (with the traceback) is kept either way.

    ``stream``: also write the notebook's stdout/stderr here as the cells produce them (the progress lines of a
    training run), so the terminal running ``islands-kit notebook`` follows the run live; they are in the executed
    notebook's output cells either way."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    src = notebook_path(name)
    params = dict(params or {})
    check_parameters(name, params)
    declared = notebook_parameters(name)
    out = Path(out_dir) if out_dir else Path("runs") / f"notebook-{name}"
    out.mkdir(parents=True, exist_ok=True)
    if "out_dir" in declared:
        params.setdefault("out_dir", str(out.resolve()))
    # no WANDB_MODE is set here: the notebook's wandb_mode parameter (default offline) decides, unless the caller's
    # environment sets WANDB_MODE, which wandb lets win
    dst = out / f"{name}.ipynb"
    try:
        pm.execute_notebook(str(src), str(dst), parameters=params, kernel_name=kernel_name, cwd=str(out.resolve()),
                            progress_bar=False, stdout_file=sys.stdout if stream else None,
                            stderr_file=sys.stderr if stream else None, extra_arguments=KERNEL_QUIET)
    except PapermillExecutionError as e:
        where = f"[notebook {name}, cell {e.cell_index}; executed copy: {dst}]"
        if e.ename == "ConfigError":
            raise ConfigError(f"{e.evalue} {where}") from None
        raise NotebookError(f"{e.ename}: {e.evalue} {where}") from None
    return dst


# ---------------------------------------------------------------------------------------------------------------
# Called from inside the notebooks


def notebook_config(experiment: str, preset: str, seed: int, steps: int,
                    named: Mapping[str, Any] | None = None,
                    overrides: Mapping[str, Any] | None = None) -> ExperimentConfig:
    """The validated config of one notebook run: ``presets.get_preset(experiment, preset)``, then ``seed``, ``steps``
    (0 = the preset's), the dotted-path values of the notebook's named parameters (``named``: ``{"sync.H": H,
    "link.preset": link, ...}``) whose value is not None (None = keep the preset's), then the notebook's free-form
    ``overrides`` parameter (any ``--set`` key: ``{"optim.lr": 3e-3, "threads": 1}``). A key set both ways is refused
    (set it in one place). Any bad value raises ConfigError naming the field and the rule; a corpus that names no
    registered corpus, hub dataset or existing file is refused here too, before training."""
    from islands_kit.presets import get_preset

    _check(isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0, "steps",
           "must be an integer >= 0 (0 = the preset's)", steps)
    overrides = check_overrides(overrides)
    cfg = get_preset(experiment, preset)
    ov: dict[str, Any] = {"seed": seed}
    if steps:
        ov["steps"] = steps
    ov.update({k: v for k, v in (named or {}).items() if v is not None})
    for key in overrides:
        _check(key not in ov, "overrides", f"{key!r} is also set by a named parameter of the notebook; set it in "
               "one place", overrides)
    ov.update(overrides)
    cfg = apply_overrides(cfg, ov)
    from islands_kit.data import check_corpus_spec

    check_corpus_spec(cfg.data.corpus)  # a path matching nothing is refused before any work
    return cfg


def check_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """A notebook's ``overrides`` parameter: a mapping of dotted config keys (``--set`` keys) to values."""
    if overrides is None:
        return {}
    _check(isinstance(overrides, Mapping), "overrides",
           'must be a mapping of dotted config keys to values, e.g. {"optim.lr": 0.003}', overrides)
    for key in overrides:
        _check(isinstance(key, str) and key != "", "overrides", "keys must be dotted config keys such as 'sync.H'",
               key)
    return dict(overrides)


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
        lines.append(f"sync: streaming DiLoCo H={s.H}, P={s.n_fragments} fragments, tau={s.tau}, alpha={s.diloco.alpha}, "
                     f"outer lr {s.diloco.outer_lr} (Nesterov {s.diloco.nesterov}, momentum {s.diloco.outer_momentum}), codec {s.codec}, "
                     f"routing sync {s.routing_sync}")
    else:
        lines.append(f"sync: butterfly H={s.H}, P={s.n_fragments} fragments, {s.butterfly.exchanges_per_window} exchanges per "
                     f"window, merge delay tau={s.tau}, codec {s.codec}, routing sync {s.routing_sync}")
    lines.append(f"link: {lk.preset} ({lk.bandwidth_bps / 1e9:g} Gbit/s, rtt {lk.rtt_s * 1e3:g} ms, {lk.method}); "
                 f"wandb {cfg.wandb_mode} project {cfg.wandb_project!r} group {cfg.wandb_group!r}")
    return "\n".join(lines)


def result_summary(result: Mapping[str, Any]) -> str:
    """One paragraph on a finished run: bpb against the best compressor, bytes on the link, simulated clock."""
    sent = int(result["cross_site_bytes"])
    n_islands = len((result.get("config") or {}).get("islands") or []) or "its"
    if result.get("diverged_at_step") is not None:
        bpb = f"DIVERGED at step {result['diverged_at_step']} ({result.get('diverged_reason')}): no final bpb"
    else:
        bpb = f"final validation bpb {result['final_val_bpb']:.4f} on {result.get('val_bytes', '?')} bytes"
    return (f"{result['experiment']}: {bpb} (xz -9e on the same bytes: {result['compressor_bpb']['xz']:.3f}); "
            f"{result['tokens']:,} training tokens\n"
            f"link: {sent:,} bytes sent, {ratio_words(x_fewer_bytes(result))} than an fp32 gradient all-reduce every "
            f"step among {n_islands} islands would send; peak "
            f"{result['peak_link_bytes_per_s'] / 1e6:,.1f} MB/s\n"
            f"simulated wall-clock {result['sim_wall_clock_s']:.2f} s at {100 * result['compute_utilization']:.1f}% compute "
            f"utilisation; real time {result['wall_time_s']:.1f} s")


def load_run(out_dir: str | Path) -> dict[str, Any]:
    """A finished run read back: ``{"dir", "result", "history", "timeline"}``.

    history: the ``history.jsonl`` records; timeline: ledger transfers ``(start_s, end_s, bytes, src, dst,
    channel)`` from ``link_timeline.jsonl`` when the run wrote one, else None."""
    from islands_kit.tracking import load_result

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


def show_frontier(frontier_file: str | Path, out_dir: str | Path, experiment: str = "two_site") -> bool:
    """Draw the protocol's measured bpb-vs-bytes points of ``experiment`` (``benchmarks/frontier-*.json``, written by
    ``benchmarks/protocol.py --write-results``; a relative path is read from the installed wheel, which carries them,
    or the checkout) with ``plots.frontier``, saved as OUT_DIR/frontier.png. Without the file, say how to measure it
    and return False."""
    from islands_kit import plots
    from islands_kit.resources import resource_file

    path = resource_file(frontier_file)
    if not path.exists():
        print(f"{path} not found: run benchmarks/protocol.py --write-results in a checkout to measure the frontier")
        return False
    plots.show(plots.frontier(json.loads(path.read_text()), experiment=experiment), Path(out_dir) / "frontier.png")
    return True


def ddp_bytes_per_step(result: Mapping[str, Any]) -> float:
    """Bytes a fp32 gradient all-reduce would send per step (the ledger's data-parallel reference)."""
    return float(result["ddp_equivalent_bytes"]) / max(int(result["steps"]), 1)


def decoupled_pair(cfg: ExperimentConfig, windows: int, straggler_factor: float,
                   link: str = "") -> dict[str, ExperimentConfig]:
    """The two runs of the two_site notebook's decoupled section, built (and so validated) before anything trains.

    Both are ``cfg`` with site B (island 1) a ``straggler_factor``x straggler (``faults.straggler_*``), the named
    ``link`` (empty: ``cfg``'s) and one evaluation at the end: ``lockstep`` (``sync.mode=lockstep``) takes ``windows``
    x H inner steps, every one waiting for site B; ``decoupled`` (``sync.mode=decoupled``) runs round(that x
    ``straggler_factor``) ticks of the global schedule: site A takes a step every tick, site B one every
    ``straggler_factor`` ticks, as many as in lock-step (the same simulated time when the link never holds lock-step
    up; ``benchmarks/decoupled.py``'s equal-time arm)."""
    _check(isinstance(windows, int) and not isinstance(windows, bool) and windows >= 1, "decoupled_windows",
           "must be an integer >= 1 (the section's length in H-step windows)", windows)
    _check(isinstance(straggler_factor, (int, float)) and not isinstance(straggler_factor, bool)
           and straggler_factor >= 1, "straggler_factor", "must be a number >= 1 (site B's step time multiplier)",
           straggler_factor)
    _check(link == "" or link in LINK_PRESETS, "decoupled_link", "must be empty (the notebook's link) or one of "
           + "|".join(LINK_PRESETS), link)
    _check(len(cfg.islands) >= 2, "islands", "the decoupled section needs a site B (island 1)", len(cfg.islands))
    steps = windows * cfg.sync.H
    ticks = round(steps * straggler_factor)
    slow: dict[str, Any] = {"faults.straggler_island": 1, "faults.straggler_factor": float(straggler_factor)}
    if link:
        slow["link.preset"] = link
    return {"lockstep": apply_overrides(cfg, {**slow, "sync.mode": "lockstep", "steps": steps, "eval_every": steps}),
            "decoupled": apply_overrides(cfg, {**slow, "sync.mode": "decoupled", "steps": ticks,
                                               "eval_every": ticks})}


def decoupled_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per run of the decoupled section (label -> result.json): inner steps per island, training tokens,
    simulated seconds, goodput and final validation bpb."""
    rows = []
    for label, r in results.items():
        names = [i["name"] for i in r["config"]["islands"]]
        steps = {str(k): v for k, v in r["inner_steps"].items()}
        rows.append({"run": label,
                     "inner steps": ", ".join(f"{names[int(k)]} {steps[k]}" for k in sorted(steps, key=int)),
                     "tokens": f"{r['tokens']:,}", "simulated s": r["sim_wall_clock_s"], "goodput": r["goodput"],
                     "final bpb": r["final_val_bpb"]})
    return format_rows(rows)


def comparison_setup(experiments: Sequence[str], preset: str, seed: int, steps: int, corpus: str, link: str,
                     wandb_mode: str, wandb_project: str, wandb_group: str, out_dir: str | Path,
                     overrides: Mapping[str, Any] | None = None,
                     seeds: Sequence[int] | None = None) -> tuple[dict[str, Any], Path]:
    """Validate a comparison before any training: every experiment's config is built with the shared values (same
    preset, hence the same total tokens) for every seed (``seeds``, or ``[seed]`` when empty), so a bad value fails
    here naming its field. Returns the shared notebook parameters (``overrides``, any dotted config key, passed to
    every experiment notebook) and the output folder (default ``runs/compare-<preset>-s<seed>``, or
    ``...-seeds-<s1>-<s2>...`` for a sweep).

    ``wandb_group`` defaults to ``compare-<preset>-<date>-<time>``: one group per comparison run (one ``make demo``),
    so two invocations never mix in wandb's grouped view."""
    _check(isinstance(experiments, (list, tuple)) and len(experiments) >= 1, "experiments",
           "must be a non-empty list", experiments)
    for exp in experiments:
        _check(exp in EXPERIMENT_NOTEBOOKS, "experiments", "each must be one of " + "|".join(EXPERIMENT_NOTEBOOKS), exp)
    seeds = sweep_seeds(seed, seeds)
    group = wandb_group or f"compare-{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    shared: dict[str, Any] = dict(preset=preset, seed=seeds[0], steps=steps, corpus=corpus, link=link,
                                  wandb_mode=wandb_mode, wandb_project=wandb_project, wandb_group=group,
                                  overrides=check_overrides(overrides))
    for exp in experiments:
        for s in seeds:
            notebook_config(exp, preset, s, steps, {"data.corpus": corpus, "link.preset": link, "wandb_mode": wandb_mode,
                                                    "wandb_project": wandb_project, "wandb_group": group},
                            shared["overrides"])
    tag = f"s{seeds[0]}" if len(seeds) == 1 else "seeds-" + "-".join(map(str, seeds))
    return shared, resolve_out_dir(out_dir, Path("runs") / f"compare-{preset}-{tag}")


def sweep_seeds(seed: int, seeds: Sequence[int] | None) -> list[int]:
    """The seeds of a comparison: ``seeds`` (a non-empty list of distinct integers >= 0) or else ``[seed]``."""
    if not seeds:
        return [seed]
    _check(isinstance(seeds, (list, tuple)) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                     for s in seeds), "seeds", "must be a list of integers >= 0", seeds)
    _check(len(set(seeds)) == len(seeds), "seeds", "must not repeat a seed", seeds)
    return list(seeds)


def run_comparison(experiments: Sequence[str], shared: Mapping[str, Any], out_dir: str | Path,
                   kernel_name: str = "python3", seeds: Sequence[int] | None = None) -> dict[str, Path]:
    """Run each experiment notebook with the same ``shared`` parameters, once per seed (``seeds``; default the
    shared seed), into ``out_dir/<experiment>/`` (one seed) or ``out_dir/<experiment>/s<seed>/`` (several).

    Streams each notebook's output (its progress lines) and prints a line as each run starts and ends. Returns
    label (``experiment``, or ``experiment s<seed>``) -> output folder (result.json, history.jsonl, PNGs and the
    executed notebook)."""
    out = Path(out_dir)
    seeds = sweep_seeds(shared["seed"], seeds)
    dirs: dict[str, Path] = {}
    total = len(experiments) * len(seeds)
    for exp in experiments:
        for s in seeds:
            label, d = (exp, out / exp) if len(seeds) == 1 else (f"{exp} s{s}", out / exp / f"s{s}")
            d = d.resolve()
            print(f"=== [{len(dirs) + 1}/{total}] {label}: notebooks/{exp}.ipynb -> {d}", flush=True)
            t0 = time.perf_counter()
            run_notebook(exp, dict(shared, seed=s, out_dir=str(d)), d, kernel_name=kernel_name, stream=True)
            from islands_kit.progress import format_duration
            from islands_kit.tracking import load_result

            res = load_result(d)
            bpb = (f"diverged at step {res['diverged_at_step']}" if res.get("diverged_at_step") is not None
                   else f"final val bpb {res['final_val_bpb']:.4f}")
            print(f"=== [{len(dirs) + 1}/{total}] {label} done in {format_duration(time.perf_counter() - t0)}: {bpb}",
                  flush=True)
            dirs[label] = d
    return dirs


def seed_groups(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[Any]]:
    """experiment -> the histories of its runs (one per seed), from ``load_run`` records: what ``plots.bpb_band``
    draws as mean and spread."""
    groups: dict[str, list[Any]] = {}
    for r in runs.values():
        groups.setdefault(r["result"]["experiment"], []).append(r["history"])
    return groups


def comparison_report(results: Sequence[Mapping[str, Any]], out_dir: str | Path, reference: str | None = None,
                      allow_mismatch: bool = False) -> tuple[list[dict[str, Any]], str]:
    """``compare.compare_table`` rows and the text of the table (with the mean ± spread over seeds when the runs
    hold several seeds), also written to ``out_dir/compare.{json,txt,md,csv}`` (and ``compare_seeds.json`` for a
    sweep). Runs on different corpora or token budgets are refused (``compare.ComparisonError``, a ValueError) unless
    ``allow_mismatch``."""
    from islands_kit.compare import report
    from islands_kit.tracking import write_json_atomic

    _check(len(results) >= 1, "results", "need at least one result", len(results))
    res = [dict(r) for r in results]
    rows, seeds, text = report(res, "table", reference, allow_mismatch)
    out = Path(out_dir)
    write_json_atomic(out / "compare.json", rows)
    if seeds:
        write_json_atomic(out / "compare_seeds.json", seeds)
    (out / "compare.txt").write_text(text + "\n")
    (out / "compare.md").write_text(report(res, "markdown", reference, allow_mismatch)[2] + "\n")
    (out / "compare.csv").write_text(report(res, "csv", reference, allow_mismatch)[2] + "\n")
    return rows, text


def comparison_to_wandb(rows: list[dict[str, Any]], shared: Mapping[str, Any], out_dir: str | Path) -> str:
    """Log the comparison as its own wandb run (``job_type="comparison"``, the shared group): the table (and the
    seed summary) as ``wandb.Table``, ``out_dir/compare_*.png`` as images, ``compare.*`` as an artifact. Returns the
    lines that say where every offline run of the comparison is and the command that uploads them all."""
    from islands_kit.tracking import log_comparison, resolve_wandb_mode

    out = Path(out_dir)
    seeds_file = out / "compare_seeds.json"
    seed_rows = json.loads(seeds_file.read_text()) if seeds_file.exists() else []
    files = [p for p in (out / f"compare.{ext}" for ext in ("json", "txt", "md", "csv")) if p.exists()]
    files += [seeds_file] if seed_rows else []
    info = log_comparison(rows, shared["wandb_project"], shared["wandb_group"], shared["wandb_mode"], out,
                          figures=sorted(out.glob("compare_*.png")), files=files, seed_rows=seed_rows)
    return wandb_locations(out, shared["wandb_project"], shared["wandb_group"],
                           resolve_wandb_mode(shared["wandb_mode"]), info.get("id"))


def wandb_locations(out_dir: str | Path, project: str, group: str, mode: str, compare_id: str | None = None) -> str:
    """Where the wandb runs under ``out_dir`` are, and how to upload them (offline) or find them (online)."""
    from islands_kit.tracking import offline_runs_hint

    if mode == "disabled":
        return "wandb: disabled (wandb_mode=disabled or WANDB_MODE=disabled): no wandb runs were written"
    where = f"project {project!r}, group {group!r}"
    if mode == "online":
        return f"wandb: online runs in {where}" + (f" (comparison run {compare_id})" if compare_id else "")
    hint = offline_runs_hint([Path(out_dir)]) or f"wandb: no offline runs under {out_dir}"
    return hint.replace(" under:", f" ({where}) under:", 1)


# ---------------------------------------------------------------------------------------------------------------
# Plain-text tables and the poisoned-island notebook


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


POISONED_RUNS = ("clean", "attacked", "defended")


def poisoned_island_setup(preset: str, seed: int, steps: int, attack: str, attack_island: int, attack_start: int,
                          attack_scale: float, attack_noise_std: float, defense: str, wandb_mode: str,
                          out_dir: str | Path, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The poisoned-island notebook's three validated two_site configs, before any training.

    ``clean`` (no attack), ``attacked`` (``faults.attack`` from ``attack_island`` from step ``attack_start``, no
    defence) and ``defended`` (the same attack, ``faults.defense = defense``); ``attack_start`` -1 means 40% into
    the run. ``overrides`` (any dotted config key) apply to all three. Returns ``{"runs": {name: cfg}, "labels":
    {name: legend}, "start": step, "start_tokens": training tokens before the attack, "out": folder}``."""
    _check(isinstance(attack_start, int) and attack_start >= -1, "attack_start",
           "must be an integer >= 0, or -1 (40% into the run)", attack_start)
    common = {"wandb_mode": wandb_mode, "wandb_group": f"poisoned_island-{preset}-s{seed}"}
    clean = notebook_config("two_site", preset, seed, steps, common, overrides)
    start = attack_start if attack_start >= 0 else int(0.4 * clean.steps)
    faults = {"faults.attack": attack, "faults.attack_island": attack_island, "faults.attack_start": start,
              "faults.attack_scale": attack_scale, "faults.attack_noise_std": attack_noise_std}
    runs = {
        "clean": clean,
        "attacked": notebook_config("two_site", preset, seed, steps, {**common, **faults, "faults.defense": "none"},
                                    overrides),
        "defended": notebook_config("two_site", preset, seed, steps, {**common, **faults, "faults.defense": defense},
                                    overrides),
    }
    labels = {"clean": "clean", "attacked": f"{attack} from site {attack_island}, no defence",
              "defended": f"{attack} from site {attack_island}, defence {defense}"}
    tokens_per_step = clean.model.seq_len * sum(i.batch_size for i in clean.islands)
    out = resolve_out_dir(out_dir, Path("runs") / f"poisoned_island-{preset}-s{seed}")
    return {"runs": runs, "labels": labels, "start": start, "start_tokens": start * tokens_per_step, "out": out}


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


def check_scaling_parameters(preset: str, lengths: Sequence[int], widths: Sequence[int], width_at: int,
                             length_at: int, seeds: Sequence[int], overrides: Mapping[str, Any] | None) -> None:
    """The scaling notebook's parameters, each refused in one line naming it before anything trains: the preset, the
    cross (``scaling.cross``), the seeds, and per-experiment overrides — every point's config is built once."""
    from islands_kit import scaling
    from islands_kit.presets import PRESETS

    _check(preset in PRESETS, "preset", "must be one of " + "|".join(PRESETS), preset)
    for name, v in (("width_at", width_at), ("length_at", length_at)):
        _check(isinstance(v, int) and not isinstance(v, bool) and v >= 1, name, "must be an integer >= 1", v)
    _check(isinstance(seeds, (list, tuple)) and len(seeds) >= 1 and all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds), "seeds",
        "must be a non-empty list of integers >= 0", seeds)
    ov = overrides or {}
    _check(isinstance(ov, Mapping) and all(k in scaling.EXPERIMENTS and isinstance(v, Mapping) for k, v in ov.items()),
           "overrides", "must map experiment names (" + "|".join(scaling.EXPERIMENTS) + ") to {--set key: value}", ov)
    for p in scaling.cross(list(lengths), list(widths), width_at, length_at):
        for e in scaling.EXPERIMENTS:
            scaling.point_config(e, preset, p, seeds[0], ov.get(e))
