# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The scaling trend: each arm's loss against model size, fitted by laws that can say "not identifiable", beside the published grid
#
# Charles et al. 2025 ("Scaling Laws for DiLoCo", the per-size table) tuned data-parallel training and DiLoCo with
# M = 1, 2, 4, 8 replicas at seven sizes from 35M to 2.4B parameters; with two replicas DiLoCo is +0.7% behind at 35M
# and -0.1% at 2.4B, with eight +3.9% and +1.1%. Our models are two to three decades smaller. This notebook fits each
# arm's validation loss against size (L = A N^-alpha, and L = E + A N^-alpha with E per arm or shared) and the gap's
# own laws (power law, power law + offset), compares them by chi^2 and AIC, and gives the size where an island arm
# reaches its baseline (two_site: the crossing; eight_cell: parity) with a profile-likelihood interval, or says the
# points cannot place it. The published losses are fitted with the same laws ("this kit's fit to published values")
# and, with ours, in one joint law with a term for the setting. Both x-axes are shown: active and total parameters
# (the MoE holds every expert).
#
# At `demo` it reads the recorded trend (`benchmarks/scaling-trend.json`, made by the commands in
# `benchmarks/studies/scaling-size.toml` and `scaling-length.toml`); at `smoke` it runs tiny versions of the two
# studies here, in seconds (their numbers mean nothing: they show the machinery).
#
# ```bash
# islands-kit notebook scaling -p preset smoke --out runs/scaling-smoke
# islands-kit notebook scaling -p preset demo
# ```

# %% tags=["parameters"]
preset = "demo"  # demo: the recorded trend | smoke: the smoke studies, run here
out_dir = ""  # empty means runs/scaling-<preset>

# %%
from islands_kit import plots
from islands_kit.notebooks import resolve_out_dir
from islands_kit.scaling.figure import scaling_trend
from islands_kit.scaling.trend import notebook_trend

if preset not in ("demo", "smoke"):
    raise ValueError(f"preset: must be demo (the recorded trend) or smoke (run here), got {preset!r}")
out = resolve_out_dir(out_dir, f"runs/scaling-{preset}")
print(f"scaling trend at {preset} -> {out}")

# %% [markdown]
# ## The points and the fits
# One line per point (the arm's tuned pick and the baseline's, paired over the seeds, its regime and what it cost),
# then per axis and x-axis each law's chi^2 and AIC, the crossing or parity size each gives (95% profile likelihood, or
# "not identifiable"), the verdict in words, the published grid fitted the same way, the joint fits and the recorded
# prediction at the next width. At `demo` this is the block in `benchmarks/RESULTS.md`, rendered from the same file.

# %%
from islands_kit.scaling.trend import render_trend

doc = notebook_trend(preset, out)
print(render_trend(doc))

# %% [markdown]
# ## The figure
# Top: each island arm's gap against active parameters with the laws, the prediction at the next width and the
# verdict. Middle: the same gaps at active (filled) and total (open) parameters beside the published M = 2 and M = 8
# columns (dense: active = total) and this kit's fit to them. Bottom: the two-site gap against training tokens.

# %%
plots.show(scaling_trend(doc), out / "scaling_trend.png")
