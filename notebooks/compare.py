# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # baseline vs two_site vs eight_cell
#
# Runs the three experiment notebooks through papermill with the same preset and seed (hence the same model, global
# batch and total training tokens), the same corpus and link, in one wandb group; then reads their `result.json` files
# and compares them: validation bits per byte, bytes on the wide-area link (absolute, then against the baseline's
# bytes and against an all-reduce among the run's own islands), simulated wall-clock and compute utilisation. With a
# list of `seeds` every experiment runs once per seed and the comparison reports the mean ± spread over seeds and the
# ratios paired by seed; the curves draw the spread as a band.
#
# ```bash
# make demo   # = islands-kit notebook compare -p preset demo --out runs/demo
# ```
#
# Each experiment lands in `out_dir/<experiment>/` (its `result.json`, `history.jsonl`, PNGs and executed notebook),
# so `islands-kit compare runs/demo/baseline runs/demo/two_site runs/demo/eight_cell` prints the same table
# afterwards.

# %% tags=["parameters"]
preset = "demo"  # smoke (seconds, tests) | demo (minutes per experiment on 2 CPU cores) | demo-long (2x) | gpu-small | gpu
seed = 0  # shared by every experiment
seeds = []  # a seed sweep, e.g. [0, 1, 2]: every experiment once per seed (empty means [seed])
steps = 0  # inner steps per island; 0 means the preset value (shared: equal total tokens)
corpus = "shakespeare"  # shakespeare | enwiki | hub:<name>[:<config>] | path or glob
out_dir = ""  # empty means runs/compare-<preset>-s<seed>; experiment E goes to out_dir/E/ (a sweep: out_dir/E/s<seed>/)
wandb_mode = None  # None: the preset's (offline; disabled at smoke, as for `islands-kit run`) | offline | online | disabled
wandb_project = "islands_kit"
wandb_group = ""  # empty means compare-<preset>-<date>-<time>: one group per comparison
link = "transpacific-25g"  # transpacific-25g | intra-dc | consumer-1g | leo-satellite
experiments = []  # which experiments; empty means every one on the shared link (baseline, two_site, eight_cell)
overrides = {}  # any config field by its --set key, for every experiment, e.g. {"optim.lr": 0.003}
jobs = 0  # notebooks run at once, each in its own process with one torch thread; 0: all, up to 2 per core; 1: in turn

# %%
from islands_kit import plots
from islands_kit.notebooks import (comparison_experiments, comparison_report, comparison_setup, comparison_to_wandb,
                                   ddp_bytes_per_step, load_run, run_comparison, seed_groups)

experiments = comparison_experiments(experiments)
shared, out = comparison_setup(experiments, preset, seed, steps, corpus, link, wandb_mode, wandb_project, wandb_group,
                               out_dir, overrides, seeds)
print(f"shared parameters: {shared}\noutput: {out}")

# %% [markdown]
# ## Run the three notebooks
# Each executed copy is kept next to its `result.json`; each run's progress lines appear below as it trains (with
# `jobs` other than 1 the runs train side by side, one torch thread each, so their lines interleave: each is labelled).

# %%
dirs = run_comparison(experiments, shared, out, seeds=seeds, jobs=jobs)

# %% [markdown]
# ## The comparison table
# This notebook runs the demo's defaults (batch 40, untuned); the tuned comparison, every arm at its own batch and lr
# over 5 paired seeds with 95% intervals, is `benchmarks/headline-demo.json` (README, "What it finds").
# Rows are labelled by run folder. `bpb / baseline`: bpb over the baseline run with the same seed (lower is better).
# Bytes come first as absolute numbers: `link bytes` (every byte on the wide-area link), `per island` and `busiest
# link` (one direction). Then two ratios, each headed by its reference: `bytes vs baseline` (against the baseline
# run's bytes) and `bytes vs own all-reduce` (against an fp32 gradient all-reduce every step among the row's *own*
# islands). Both are needed: eight cells send fewer bytes than their own 8-island all-reduce, yet more than the
# two-island baseline. `sim s`: simulated wall-clock seconds; `util`: the share of that simulated time the islands
# spent computing rather than waiting for the link. The legend under the table says the same. Runs on different
# corpora or token budgets are refused. Also written to `compare.{json,txt,md,csv}`.

# %%
runs = {exp: load_run(d) for exp, d in dirs.items()}
rows, table = comparison_report([r["result"] for r in runs.values()], out)
print(table)

# %% [markdown]
# ## Curves
# The figure `islands-kit compare --plot FILE.png` draws, from the same function: validation bpb over training
# tokens and the bytes each put on the link, on a log axis. What is scored: every point of a curve scores one sample
# of the held-out bytes (`data.eval_bytes` of them, the same sample for all three), the final model's point included;
# the hollow diamond at each curve's end is the final model on all held-out bytes (`final_val_bpb`, the table's
# figure), which reads a little apart from the sample's: a sample, not overfitting. With several seeds: the mean over
# seeds, and the 95% interval of that mean as a band. Then bpb against the simulated wall-clock (band: ± one standard
# deviation), where waiting for the link shows; the dashed line is xz -9e on all held-out bytes (the diamonds').

# %%
histories = {exp: r["history"] for exp, r in runs.items()}
groups = seed_groups(runs)
plots.show(plots.comparison_curves(groups), out / "compare.png")
xz = {"xz -9e": next(iter(runs.values()))["result"]["compressor_bpb"]["xz"]}
plots.show(plots.bpb_band(groups, x="sim_time", floors=xz), out / "compare_bpb_vs_sim_time.png")

# %%
plots.show(plots.link_bytes(histories, ddp_bytes_per_step={e: ddp_bytes_per_step(r["result"]) for e, r in runs.items()},
                            timelines={e: r["timeline"] for e, r in runs.items()}), out / "compare_link_bytes.png")
plots.show(plots.comparison_bars(rows), out / "compare_summary.png")

# %% [markdown]
# ## wandb
# The comparison itself becomes a run of the same group (`job_type="comparison"`): the table as a `wandb.Table`, the
# figures above as images, `compare.*` as an artifact. Offline runs stay on disk until `wandb sync` uploads them.

# %%
print(comparison_to_wandb(rows, shared, out))
