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
# # Baseline: fully synchronous data-parallel training
#
# One model trained on the global batch of both sites (24 + 16 sequences per step): every step, the two sites
# all-reduce their fp32 gradients across the wide-area link, so they always hold the same weights. This is the quality
# reference and the communication worst case: the other experiments report their bytes as *times less than* this
# all-reduce.
#
# Run it from the command line (papermill; the executed copy is kept in the output folder):
#
# ```bash
# islands-kit notebook baseline -p preset smoke --out runs/baseline-smoke
# ```
#
# The next cell holds the parameters (literals only); the one after it validates them through `islands_kit` and stops
# with a `ConfigError` naming the field if one is wrong.

# %% tags=["parameters"]
preset = "demo"  # smoke (seconds, tests) | demo (minutes on 2 CPU cores) | demo-long (2x its steps) | gpu-small | gpu
seed = 0  # one seed for weights, data order, stochastic rounding and the link's draws
steps = 0  # inner steps per island; 0 means the preset value
corpus = "shakespeare"  # shakespeare | enwiki | hub:<name>[:<config>] | path or glob of .txt/.parquet files
out_dir = ""  # empty means runs/baseline-<preset>-s<seed>; result.json, history.jsonl and the PNGs land here
wandb_mode = None  # None: the preset's (offline; disabled at smoke, as for `islands-kit run`) | offline | online | disabled
wandb_project = "islands_kit"
wandb_group = ""  # the runs of one comparison share a group
link = "transpacific-25g"  # transpacific-25g | intra-dc | consumer-1g | leo-satellite (islands_kit.comm.link)
overrides = {}  # any other config field by its --set key, e.g. {"optim.lr": 0.003, "threads": 1}

# %%
from islands_kit.notebooks import experiment_setup, run_and_show

cfg, out = experiment_setup("baseline", preset, seed, steps, corpus, out_dir, wandb_mode, wandb_project, wandb_group, link,
                            overrides)

# %% [markdown]
# ## Train, then the standard figures
# `run_and_show` trains: `result.json` and `history.jsonl` (one record per evaluation) land in the output folder, and
# wandb logs unless `wandb_mode` is disabled. Then the figures the CLI and wandb save:
# * **validation bits per byte** against training tokens (the budget every experiment shares) and against the
#   simulated wall-clock (where waiting for the link shows); dashed lines: general-purpose compressors on exactly the
#   same validation bytes;
# * **bytes on the link**: cumulative bytes sent across the wide-area link; dotted: what a fp32 gradient all-reduce
#   every step would have sent;
# * **routing load**: left, the busiest expert's token count over the mean, per layer (1 = perfectly balanced);
#   middle, the Switch balance score the aux loss minimises (they can disagree: the score weighs loads by router
#   probabilities); right (several replicas), how far the replicas' routing drifted apart.

# %%
result = run_and_show(cfg, out)
