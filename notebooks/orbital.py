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
# # Orbital islands: a small model pre-trained across satellites with contact windows
#
# The seed's first step towards training in orbit: four training satellites in a ring of nine evenly spaced in one
# low Earth orbit (550 km, 53°, a period of ~95.5 minutes; the other five only relay) and a ground station (ESA's
# Redu, 10° elevation mask) whose island holds the global model. A satellite talks to the ground only during its
# passes, up to ~8 minutes each, 4-6 a day; in the Earth's shadow (37% of each orbit) its compute runs at half
# speed, so the islands run at different paces and sync with **decoupled DiLoCo**: each steps on its own clock, and
# the ground's synchroniser merges what has arrived.
#
# Two ways to reach the ground (`isl`): (a) `False`, each satellite through its own passes only; (b) `True`,
# over optical inter-satellite links (nine satellites are the fewest whose neighbours see each other over the Earth
# and its atmosphere) to whichever satellite of the ring is in a pass. The orbit runs `time_compression` times
# faster than the compute, so that a run spans days of passes (docs/methods.md says why and what the model leaves
# out: power, thermal, radiation beyond bit flips, orbital perturbations). The controls that take the orbit apart
# one effect at a time (the same islands on the ground, then eclipses, then passes, then links) are `overrides`:
# `islands_kit.orbital.settings.CONTROLS`. Real orbits: `overrides={"link.orbit.tle_file":
# "starlink-plane-2025-07-19.tle", "link.orbit.n_satellites": 5}` (the `orbit` extra).
#
# ```bash
# islands-kit notebook orbital -p preset smoke --out runs/orbital-smoke
# islands-kit run baseline --preset demo --out runs/baseline-demo-s0    # the ground baseline, the same token budget
# islands-kit notebook orbital -p preset demo -p baseline_dir runs/baseline-demo-s0
# ```
#
# The next cell holds the parameters (literals only); the one after it validates them through `islands_kit`.

# %% tags=["parameters"]
preset = "demo"  # smoke (seconds, tests) | demo (minutes on 2 CPU cores) | demo-long (2x its steps)
seed = 0  # one seed for weights, data order, stochastic rounding and the link's draws
steps = 0  # ticks of the decoupled schedule; 0 means the preset value
corpus = "shakespeare"  # shakespeare | enwiki | hub:<name>[:<config>] | path or glob of .txt/.parquet files
out_dir = ""  # empty means runs/orbital-<preset>-s<seed>; result.json, history.jsonl and the PNGs land here
wandb_mode = None  # None: the preset's (offline; disabled at smoke, as for `islands-kit run`) | offline | online | disabled
wandb_project = "islands_kit"
wandb_group = ""  # the runs of one comparison share a group
baseline_dir = ""  # a finished ground baseline run (islands-kit run baseline --preset PRESET); empty: no comparison
study_file = ""  # the orbital study's report; empty: benchmarks/orbital-demo.json at the demo preset, when the kit has it
overrides = {}  # any other config field by its --set key, e.g. {"link.orbit.beta_deg": 60.0, "threads": 1}
# orbital knobs; None means the preset value (islands_kit.config.presets, islands_kit/orbital/settings.py)
isl = None  # link.orbit.isl: False for (a) ground passes only, True for (b) relayed over inter-satellite links
time_compression = None  # link.orbit.time_compression: orbital seconds per simulated second
eclipse_throttle = None  # link.orbit.eclipse_throttle: compute speed in shadow (1: no throttle)
H = None  # ticks of the schedule between a fragment's merges
grace_s = None  # sync.grace_s: simulated seconds the synchroniser waits beyond the quorum
corrupt_prob = None  # link.corrupt_prob: chunks hit by an upset in flight (CRC-checked, resent)

# %%
from islands_kit import plots
from islands_kit.plots.figures import standard_figures
from islands_kit.notebooks import config_summary, load_run, notebook_config, resolve_out_dir, result_summary
from islands_kit.train.orbit import orbit_summary

cfg = notebook_config("orbital", preset, seed, steps, {
    "data.corpus": corpus, "wandb_mode": wandb_mode, "wandb_project": wandb_project, "wandb_group": wandb_group,
    "link.orbit.isl": isl, "link.orbit.time_compression": time_compression,
    "link.orbit.eclipse_throttle": eclipse_throttle, "sync.H": H, "sync.grace_s": grace_s,
    "link.corrupt_prob": corrupt_prob,
}, overrides)
out = resolve_out_dir(out_dir, cfg)
print(config_summary(cfg))

# %% [markdown]
# ## Train
# `run_experiment` writes `result.json` (with its `orbit` section), `history.jsonl` and `link_timeline.jsonl` (every
# transfer: posted, arrived, bytes, link) into the output folder.

# %%
from islands_kit.run import run_experiment

result = run_experiment(cfg, out)
print(result_summary(result))
print(orbit_summary(result))

# %% [markdown]
# ## Contact windows and the syncs on them
# One row per satellite: its windows with the ground station (bars) over simulated time; each outer gradient going up
# (▲) and each merged fragment coming down (▼) is a line from when it was posted to when it arrived. A line that
# crosses a gap waited for the next window — the waiting the `window wait` figures count.

# %%
run = load_run(out)
figs = standard_figures(run["result"], run["history"], run["timeline"])  # the figures the CLI and wandb save
plots.show(figs["contact_windows.png"], out / "contact_windows.png")

# %% [markdown]
# ## Validation bits per byte, and each island's clock
# The deployed model is the ground's global one. Against simulated time, and each island's inner steps against it
# (the satellites fall behind the ground island in every eclipse).

# %%
plots.show(figs["bpb_vs_tokens.png"], out / "bpb_vs_tokens.png")
plots.show(figs["bpb_vs_sim_time.png"], out / "bpb_vs_sim_time.png")
plots.show(plots.decoupled_clocks(run["result"]), out / "decoupled_clocks.png")

# %% [markdown]
# ## Against the ground baseline
# With `baseline_dir` set: the compare table (bpb paired by seed, bytes; `--wide` columns such as the window wait in
# `compare.txt`) and the figure `islands-kit compare --plot FILE.png` draws. The orbital run plans the baseline's
# token budget; its satellites process fewer tokens in eclipse, which the row's note says (its tokens over the
# baseline's); the study below plans equal processed tokens instead.

# %%
from islands_kit.notebooks import comparison_report, seed_groups

if baseline_dir:
    base = load_run(baseline_dir)
    _rows, table = comparison_report([base["result"], run["result"]], out)
    print(table)
    plots.show(plots.comparison_curves(seed_groups({"ground": base, "orbit": run})), out / "compare.png")
else:
    print("no baseline_dir: run `islands-kit run baseline --preset " + preset + "` and pass its folder to compare")

# %% [markdown]
# ## What each effect of the orbit costs (the study)
# The orbital study (`benchmarks/studies/orbital-demo.toml`) measures the controls one effect at a time, every row at
# the baseline's processed tokens and paired per seed: (i) the same islands on the ground, (ii) + eclipses, (iii)
# ground passes only, (iv) + the inter-satellite links in sight, and (iii) on real orbits. Each row's ratio against
# its control is what the one effect it adds costs; against the baseline, all of them up to it; each with its 95%
# interval over seeds. Then each orbital row in orbital time: days of orbit, bytes over the ground link and the
# inter-satellite links, and the days of orbit to reach the ground baseline's quality.

# %%
import json
from pathlib import Path

from islands_kit.resources import resource_dir
from islands_kit.orbital.report import effect_lines, effects

report_path = study_file or (str(resource_dir("benchmarks") / "orbital-demo.json") if preset == "demo" else "")
if report_path and Path(report_path).is_file():
    study = json.loads(Path(report_path).read_text())
    print("\n".join(effect_lines(study)))
    plots.show(plots.study_effects(effects(study)), out / "orbital_effects.png")
else:
    print("no study report" + (f" at {report_path}" if report_path else f" at preset {preset}") + ": "
          "islands-kit study run benchmarks/studies/orbital-demo.toml, then study report --write")
