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
# and compares them: validation bits per byte, bytes on the wide-area link (and how many times less than a fp32
# all-reduce every step), simulated wall-clock and compute utilisation.
#
# ```bash
# make demo   # = islands-kit notebook compare -p preset demo --out runs/demo
# ```
#
# Each experiment lands in `out_dir/<experiment>/` (its `result.json`, `history.jsonl`, PNGs and executed notebook),
# so `islands-kit compare runs/demo/baseline runs/demo/two_site runs/demo/eight_cell` prints the same table
# afterwards.

# %% tags=["parameters"]
preset = "demo"  # smoke (seconds, tests) | demo (minutes per experiment on 2 CPU cores) | gpu
seed = 0  # shared by every experiment
steps = 0  # inner steps per island; 0 means the preset value (shared: equal total tokens)
corpus = "shakespeare"  # shakespeare | enwiki | hub:<name>[:<config>] | path or glob
out_dir = ""  # empty means runs/compare-<preset>-s<seed>; experiment E goes to out_dir/E/
wandb_mode = "offline"  # offline | online | disabled
wandb_project = "islands_kit"
wandb_group = ""  # empty means compare-<preset>-s<seed>; shared by the three runs
link = "transpacific-25g"  # transpacific-25g | intra-dc | consumer-1g | leo-satellite
experiments = ["baseline", "two_site", "eight_cell"]
overrides = {}  # any config field by its --set key, for every experiment, e.g. {"optim.lr": 0.003}

# %%
from islands_kit import plots
from islands_kit.notebooks import comparison_report, comparison_setup, ddp_bytes_per_step, load_run, run_comparison

shared, out = comparison_setup(experiments, preset, seed, steps, corpus, link, wandb_mode, wandb_project, wandb_group,
                               out_dir, overrides)
print(f"shared parameters: {shared}\noutput: {out}")

# %% [markdown]
# ## Run the three notebooks
# Each executed copy is kept next to its `result.json`.

# %%
dirs = run_comparison(experiments, shared, out)

# %% [markdown]
# ## The comparison table
# `vs base`: bpb over the baseline's (lower is better); `x less than DDP`: the fp32 all-reduce-every-step bytes over
# the bytes actually sent; `util`: the share of simulated time the islands spent computing rather than waiting for the
# link. Also written to `compare.json` / `compare.txt`.

# %%
runs = {exp: load_run(d) for exp, d in dirs.items()}
rows, table = comparison_report([r["result"] for r in runs.values()], out)
print(table)

# %% [markdown]
# ## Curves
# The same validation bytes for all three; the dashed line is xz -9e on them.

# %%
histories = {exp: r["history"] for exp, r in runs.items()}
xz = {"xz -9e": next(iter(runs.values()))["result"]["compressor_bpb"]["xz"]}
plots.show(plots.bpb_curves(histories, x="tokens", floors=xz), out / "compare_bpb_vs_tokens.png")
plots.show(plots.bpb_curves(histories, x="sim_time", floors=xz), out / "compare_bpb_vs_sim_time.png")

# %%
plots.show(plots.link_bytes(histories, ddp_bytes_per_step={e: ddp_bytes_per_step(r["result"]) for e, r in runs.items()},
                            timelines={e: r["timeline"] for e, r in runs.items()}), out / "compare_link_bytes.png")
plots.show(plots.comparison_bars(rows), out / "compare_summary.png")
