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
# # Scaling: how the two_site and eight_cell gaps move with training length and model width
#
# DiLoCo-style training is known to lose to synchronous data-parallel training at small scale and to catch up as
# models and runs grow (Charles et al. 2025, "Scaling Laws for DiLoCo"; Douillard et al. 2025, Streaming DiLoCo).
# This notebook trains baseline / two_site / eight_cell on a *cross* of points — several run lengths at one width and
# several widths at one length — and draws each strategy's bpb ratio to the baseline (same seed) against training
# compute, beside the published points.
#
# Finished runs are reused: run it again with more lengths or seeds and only the new points train.
#
# ```bash
# islands-kit notebook scaling -p preset smoke --out runs/scaling-smoke
# islands-kit notebook scaling -p preset demo -p lengths '[300, 1000, 3000]' -p widths '[64, 128, 256]' --out runs/scaling
# ```

# %% tags=["parameters"]
preset = "demo"  # the base preset (its model depth, batches, sync settings): smoke | demo | demo-long | gpu-small | gpu
lengths = [300, 1000, 3000]  # inner steps, at width `width_at`
widths = [64, 128, 256]  # d_model, also d_expert, with width/32 heads; at length `length_at`
width_at = 128  # the width of the length axis
length_at = 300  # the length of the width axis
seeds = [0]  # one seed is acceptable at the expensive points; say so when quoting
out_dir = ""  # empty means runs/scaling-<preset>
overrides = {}  # per experiment: {"two_site": {"optim.lr": 0.003}, ...} (any --set key)

# %%
from pathlib import Path

from islands_kit import plots, scaling
from islands_kit.notebooks import check_scaling_parameters

check_scaling_parameters(preset, lengths, widths, width_at, length_at, seeds, overrides)
out = Path(out_dir or f"runs/scaling-{preset}")
points = scaling.cross(lengths, widths, width_at, length_at)
print(f"{len(points)} points x 3 strategies x {len(seeds)} seed(s) -> {out}")

# %% [markdown]
# ## Train (or reuse) every point
# One progress line per run as it starts and ends, with an estimate of the time left.

# %%
rows = scaling.run_study(out, preset, lengths, widths, width_at, length_at, seeds, overrides)

# %% [markdown]
# ## The table
# FLOPs = 6 x active parameters x training tokens. A ratio above 1 means the strategy ends worse than synchronous
# training at the same seed and tokens.

# %%
print(scaling.table_markdown(rows))

# %% [markdown]
# ## Ratio vs compute, beside the published points
# The published DiLoCo and Streaming DiLoCo points are drawn at 6 x N x 20 N FLOPs (Chinchilla budgets, an assumption).
# Read the trend, not the absolute level: the papers' models are 10^3-10^5 times larger than ours.

# %%
plots.show(plots.scaling_ratios(rows), out / "scaling_ratios.png")
