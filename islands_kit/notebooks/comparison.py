"""The compare notebook: validate every experiment's config with shared parameters, run the experiment notebooks
(once per seed), write the comparison table and log it to wandb, and say where the wandb runs are."""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

from islands_kit.config import _check
from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.notebooks.configs import check_overrides, notebook_config, resolve_out_dir
from islands_kit.notebooks.runner import EXPERIMENT_NOTEBOOKS, NotebookError, run_notebook
from islands_kit.records.tracking import load_result
from islands_kit.train.progress import format_duration


def comparison_experiments(experiments: Sequence[str]) -> list[str]:
    """``experiments``, or when empty every experiment of the table with a notebook that runs on the link a
    comparison shares (a row that sets its own link, the orbit's, is compared on its own) and that the table puts
    in the default comparison (``ExperimentRow.compare``)."""
    return list(experiments) or [r.name for r in EXPERIMENT_TABLE.values()
                                 if r.notebook and r.compare and "link" not in r.settings]


def comparison_setup(experiments: Sequence[str], preset: str, seed: int, steps: int, corpus: str, link: str,
                     wandb_mode: str | None, wandb_project: str, wandb_group: str, out_dir: str | Path,
                     overrides: Mapping[str, Any] | None = None,
                     seeds: Sequence[int] | None = None) -> tuple[dict[str, Any], Path]:
    """Validate a comparison before any training: every experiment's config is built with the shared values (same
    preset, hence the same total tokens) for every seed (``seeds``, or ``[seed]`` when empty), so a bad value fails
    here naming its field. Returns the shared notebook parameters (``overrides``, any dotted config key, passed to
    every experiment notebook) and the output folder (default ``runs/compare-<preset>-s<seed>``, or
    ``...-seeds-<s1>-<s2>...`` for a sweep).

    ``wandb_group`` defaults to ``compare-<preset>-<date>-<time>``: one group per comparison run (one ``make demo``),
    so two invocations never mix in wandb's grouped view. ``wandb_mode`` None means the preset's (offline; disabled
    at smoke), the rule of ``islands-kit run``; the shared parameters carry the mode it resolved to."""
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
            cfg = notebook_config(exp, preset, s, steps, {"data.corpus": corpus, "link.preset": link,
                                                          "wandb_mode": wandb_mode, "wandb_project": wandb_project,
                                                          "wandb_group": group}, shared["overrides"])
            shared["wandb_mode"] = cfg.wandb_mode  # the preset's when not given: every experiment's preset agrees
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


# one experiment notebook in a child process (``run_comparison`` with several jobs): its lines come back on stdout
_CHILD = ("import json, sys\n"
          "from islands_kit.notebooks.runner import run_notebook\n"
          "from islands_kit.notebooks.stopping import stop_on_signals\n"
          "with stop_on_signals():\n"
          "    run_notebook(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], kernel_name=sys.argv[4], stream=True)\n")


# what an experiment notebook runs besides its run, said as it starts (the compare notebook's time includes it)
SIDE_RUNS = {"two_site": "then two short side runs: lock-step vs decoupled islands beside a slow site B, in "
                         "two_site/decoupled/"}


def comparison_jobs(jobs: int, n_runs: int) -> int:
    """How many experiment notebooks run at once: ``jobs``, or with 0 every run at once up to two per CPU core
    (runs with one torch thread each share the cores without spinning against each other)."""
    _check(isinstance(jobs, int) and not isinstance(jobs, bool) and jobs >= 0, "jobs",
           "must be an integer >= 0 (0: every run at once, up to two per CPU core)", jobs)
    return max(1, min(n_runs, jobs or 2 * (os.cpu_count() or 1)))


def run_comparison(experiments: Sequence[str], shared: Mapping[str, Any], out_dir: str | Path,
                   kernel_name: str = "python3", seeds: Sequence[int] | None = None, jobs: int = 1) -> dict[str, Path]:
    """Run each experiment notebook with the same ``shared`` parameters, once per seed (``seeds``; default the
    shared seed), into ``out_dir/<experiment>/`` (one seed) or ``out_dir/<experiment>/s<seed>/`` (several).
    Streams each notebook's output (its progress lines, labelled with the run) and prints a line as each run starts
    and ends. ``jobs`` > 1 (``comparison_jobs``): that many notebooks at once, each in its own process with one torch
    thread (``threads=1``: the numbers are then those of any one-thread run of the same seed); 1: one after another
    with the config's threads (one unless overridden). Returns label (``experiment``, or ``experiment s<seed>``) -> output folder
    (result.json, history.jsonl, PNGs and the executed notebook), in the order of ``experiments`` and ``seeds``."""
    out = Path(out_dir)
    seeds = sweep_seeds(shared["seed"], seeds)
    runs: list[tuple[str, str, int, Path]] = []
    for exp in experiments:
        for s in seeds:
            label, d = (exp, out / exp) if len(seeds) == 1 else (f"{exp} s{s}", out / exp / f"s{s}")
            runs.append((label, exp, s, d.resolve()))
    jobs = comparison_jobs(jobs, len(runs))
    overrides = {"threads": 1, **shared["overrides"]} if jobs > 1 else shared["overrides"]  # a user's threads win
    lock = threading.Lock()

    def one(k: int, label: str, exp: str, s: int, d: Path) -> None:
        params = dict(shared, seed=s, out_dir=str(d), overrides=overrides)
        side = f" ({SIDE_RUNS[exp]})" if exp in SIDE_RUNS else ""
        with lock:
            print(f"=== [{k + 1}/{len(runs)}] {label}: notebooks/{exp}.ipynb -> {d}{side}", flush=True)
        t0 = time.perf_counter()
        if jobs == 1:
            run_notebook(exp, params, d, kernel_name=kernel_name, stream=True)
        else:
            _run_child(label, exp, params, d, kernel_name, lock)
        res = load_result(d)
        bpb = (f"diverged at step {res['diverged_at_step']}" if res.get("diverged_at_step") is not None
               else f"final val bpb {res['final_val_bpb']:.4f}")
        with lock:
            print(f"=== [{k + 1}/{len(runs)}] {label} done in {format_duration(time.perf_counter() - t0)}: {bpb}",
                  flush=True)

    if jobs == 1:
        for k, run in enumerate(runs):
            one(k, *run)
    else:  # the runs start together (up to jobs of them), so their headers come together: say why, first
        print(f"=== {len(runs)} runs, {jobs} at a time side by side, one torch thread each; each starts with its "
              "=== line, and their progress lines interleave, each labelled", flush=True)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(one, k, *run) for k, run in enumerate(runs)]
            errors = [f.exception() for f in futures]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
    return {label: d for label, _, _, d in runs}


def _run_child(label: str, exp: str, params: dict[str, Any], d: Path, kernel_name: str, lock: threading.Lock) -> None:
    """``run_notebook`` in a child process, its lines relayed here as they come; a failure is a one-line
    ``NotebookError`` naming the run and ending with the child's last line (the kit's own one-line error)."""
    d.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", _CHILD, exp, json.dumps(params), str(d), kernel_name]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    assert proc.stdout is not None
    tail: collections.deque[str] = collections.deque(maxlen=1)
    for line in proc.stdout:
        if line.strip():
            tail.append(line.strip())
        with lock:
            sys.stdout.write(line)
            sys.stdout.flush()
    if proc.wait() != 0:
        raise NotebookError(f"{label}: notebooks/{exp}.ipynb failed (executed copy in {d}): "
                            f"{tail[0] if tail else f'exit status {proc.returncode}'}")


def comparison_report(results: Sequence[Mapping[str, Any]], out_dir: str | Path, reference: str | None = None,
                      allow_mismatch: bool = False) -> tuple[list[dict[str, Any]], str]:
    """``compare.compare_table`` rows and the text of the table as ``islands-kit compare`` prints it (fitted to 100
    columns, with the statistics over seeds when the runs hold several seeds), also written to
    ``out_dir/compare.{json,txt,md,csv}`` with every column (and ``compare_seeds.json`` for a sweep). Runs on
    different corpora or token budgets are refused (``compare.ComparisonError``, a ValueError) unless
    ``allow_mismatch``."""
    from islands_kit.compare import report
    from islands_kit.records.tracking import write_json_atomic

    _check(len(results) >= 1, "results", "need at least one result", len(results))
    res = [dict(r) for r in results]
    rows, seeds, text = report(res, "table", reference, allow_mismatch)
    out = Path(out_dir)
    write_json_atomic(out / "compare.json", rows)
    if seeds:
        write_json_atomic(out / "compare_seeds.json", seeds)
    (out / "compare.txt").write_text(report(res, "table", reference, allow_mismatch, wide=True)[2] + "\n")
    (out / "compare.md").write_text(report(res, "markdown", reference, allow_mismatch)[2] + "\n")
    (out / "compare.csv").write_text(report(res, "csv", reference, allow_mismatch)[2] + "\n")
    return rows, text


def comparison_to_wandb(rows: list[dict[str, Any]], shared: Mapping[str, Any], out_dir: str | Path) -> str:
    """Log the comparison as its own wandb run (``job_type="comparison"``, the shared group): the table (and the
    seed summary) as ``wandb.Table``, every ratio with its interval and n in the run's summary,
    ``out_dir/compare_*.png`` as images, ``compare.*`` as an artifact. Returns the
    lines that say where every offline run of the comparison is and the command that uploads them all."""
    from islands_kit.compare import comparison_summary
    from islands_kit.records.tracking import log_comparison, resolve_wandb_mode

    out = Path(out_dir)
    seeds_file = out / "compare_seeds.json"
    seed_rows = json.loads(seeds_file.read_text()) if seeds_file.exists() else []
    files = [p for p in (out / f"compare.{ext}" for ext in ("json", "txt", "md", "csv")) if p.exists()]
    files += [seeds_file] if seed_rows else []
    info = log_comparison(rows, shared["wandb_project"], shared["wandb_group"], shared["wandb_mode"], out,
                          figures=sorted(out.glob("compare_*.png")), files=files, seed_rows=seed_rows,
                          summary=comparison_summary(rows, seed_rows))
    return wandb_locations(out, shared["wandb_project"], shared["wandb_group"],
                           resolve_wandb_mode(shared["wandb_mode"]), info.get("id"))


def wandb_locations(out_dir: str | Path, project: str, group: str, mode: str, compare_id: str | None = None) -> str:
    """Where the wandb runs under ``out_dir`` are, and how to upload them (offline) or find them (online)."""
    from islands_kit.records.tracking import offline_runs_hint

    if mode == "disabled":
        return "wandb: disabled (wandb_mode=disabled or WANDB_MODE=disabled): no wandb runs were written"
    where = f"project {project!r}, group {group!r}"
    if mode == "online":
        return f"wandb: online runs in {where}" + (f" (comparison run {compare_id})" if compare_id else "")
    hint = offline_runs_hint([Path(out_dir)]) or f"wandb: no offline runs under {out_dir}"
    return hint.replace(" under:", f" ({where}) under:", 1)
