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
# # A poisoned island
#
# Two sites train one model with Streaming DiLoCo (the `two_site` experiment). From step `attack_start` on, one site
# is compromised and sends a corrupted outer gradient: flipped (`sign_flip`), scaled (`scale`), drowned in noise
# (`noise`), with NaN/Inf written into its payload (`nan`) or a stale message resent bit for bit (`replay`). The
# attacks and the defences are described exactly in `islands_kit/faults.py`.
#
# Three runs of the same configuration:
# 1. **clean**: nobody attacks;
# 2. **attacked, no defence**: the token-weighted mean takes the poisoned update in; nothing complains and the model
#    is silently damaged (a `nan` attack is louder: the run stops at the step the NaN reaches the model, and its
#    result says so with `diverged_at_step` and no final bpb);
# 3. **attacked, with the defence**: every sync checks each update (integrity, replay, norm and direction against the
#    other site and its own history), drops or clips what it does not trust and quarantines the site it caught; the
#    flags say who was caught, when and why.
#
# Run it from the command line (papermill; the executed copy is kept in the output folder):
#
# ```bash
# islands-kit notebook poisoned_island -p preset smoke -p attack sign_flip --out runs/poisoned-smoke
# ```
#
# The next cell holds the parameters (literals only); the one after it validates them through `islands_kit`.

# %% tags=["parameters"]
preset = "demo"  # smoke (seconds, tests) | demo (minutes on 2 CPU cores) | demo-long (2x its steps) | gpu-small | gpu
seed = 0  # one seed for weights, data order, stochastic rounding, the link and the attack
steps = 0  # inner steps per island; 0 means the preset value
attack = "scale"  # sign_flip | scale | noise | nan | replay: what the compromised site sends
attack_island = 1  # the compromised site: 0 is site-a, 1 is site-b
attack_start = -1  # first inner step of the attack; -1 means 40 percent into the run
attack_scale = 100.0  # scale: the factor on its outer gradient
attack_noise_std = 1.0  # noise: standard deviation relative to the honest update's RMS
defense = "auto"  # auto | clip | trimmed_mean | median; auto is clip for two sites
out_dir = ""  # empty means runs/poisoned_island-<preset>-s<seed>; one folder per run inside
wandb_mode = "disabled"  # offline | online | disabled
overrides = {}  # any config field by its --set key, for all three runs, e.g. {"sync.H": 20}

# %%
from islands_kit import plots
from islands_kit.faults import detection_summary
from islands_kit.notebooks import (config_summary, format_rows, load_run, poisoned_island_setup,
                                   poisoned_island_table)

setup = poisoned_island_setup(preset, seed, steps, attack, attack_island, attack_start, attack_scale, attack_noise_std,
                              defense, wandb_mode, out_dir, overrides)
runs, labels, out = setup["runs"], setup["labels"], setup["out"]
print(config_summary(runs["clean"]))
print(f"attack {attack} from island {attack_island} from step {setup['start']} on; defence {defense}")

# %% [markdown]
# ## Train the three runs
# Each writes `result.json` (with the defence's flags under `faults_report`) and `history.jsonl` into its own folder;
# a run that diverges stops early and still writes both.

# %%
from islands_kit.run import run_experiment

results = {}
for name, cfg in runs.items():
    r = results[name] = run_experiment(cfg, out / name)
    if r["diverged_at_step"] is not None:  # a NaN reached the model: the run stopped there, result.json says why
        print(f"{labels[name]}: diverged at step {r['diverged_at_step']}: {r['diverged_reason']}")
    else:
        print(f"{labels[name]}: final bpb {r['final_val_bpb']:.4f}")

# %% [markdown]
# ## Validation bits per byte
# The dotted vertical line is the start of the attack; the y axis is logarithmic (without the defence a curve may
# leave the chart).

# %%
histories = {labels[k]: load_run(out / k)["history"] for k in results}
fig = plots.bpb_curves(histories, x="tokens", title=f"{attack} from site {attack_island}")
ax = fig.axes[0]
ax.axvline(setup["start_tokens"], color="grey", ls=":", label="attack starts")
ax.set_yscale("log")
ax.legend(fontsize=8)
png = plots.show(fig, out / "bpb_curves.png")

# %% [markdown]
# ## Final bpb

# %%
print(poisoned_island_table(results, labels))

# %% [markdown]
# ## What the defence flagged
#
# One row per flag: the sync (`step` it was posted, `fragment`), the `island`, the check that fired (`reason`), the
# measured `value` against its `threshold`, and what was done with the update (`dropped`, `clipped`; a quarantined
# site's updates are dropped). Then, per fragment, whether the attacker was caught at the first sync after the attack
# started (within one sync window).

# %%
defended = results["defended"]
print(format_rows(defended["faults_report"]))

# %%
summary = detection_summary(defended["faults_report"], runs["defended"])
print(format_rows([{"fragment": p, **s} for p, s in summary.items()]))
