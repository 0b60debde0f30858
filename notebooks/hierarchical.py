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
# # Hierarchical islands: cells inside sites, synced often inside a site and rarely across the WAN
#
# Two sites of four cells (5 sequences each: the baseline's 40 a step). Inside a site the cells share a fast local
# network: every H1 = `site_every` steps they average their replicas over it (`site_mode = "mean"`: log2 4 = 2
# butterfly rounds, every cell ends with its site's mean; `"pairwise"`: one round, each cell with one partner).
# Across the sites, Streaming DiLoCo's fragments sync every H2 = `H` steps over the WAN with two_site's outer step
# and int4 codec, through a hierarchical all-reduce: the cells reduce-scatter their outer gradients inside the site,
# each cell sends its quarter across the WAN to the same cell of the other site, and the quarters are all-gathered
# inside the site again. So the WAN carries what it carries between two monolithic sites, and the site link the rest.
# Hierarchical local SGD (Lin et al. 2018) and HALoS (Kim et al. 2025) are the published versions of this idea;
# docs/methods.md says what is modelled and what is left out.
#
# Run it from the command line (papermill; the executed copy is kept in the output folder):
#
# ```bash
# islands-kit notebook hierarchical -p preset smoke --out runs/hierarchical-smoke
# ```
#
# The next cell holds the parameters (literals only); the one after it validates them through `islands_kit` and stops
# with a `ConfigError` naming the field if one is wrong.

# %% tags=["parameters"]
preset = "demo"  # smoke (seconds, tests) | demo (minutes on 2 CPU cores) | demo-long (2x its steps) | gpu-small | gpu
seed = 0  # one seed for weights, data order, stochastic rounding and the link's draws
steps = 0  # inner steps per island; 0 means the preset value
corpus = "shakespeare"  # shakespeare | enwiki | hub:<name>[:<config>] | path or glob of .txt/.parquet files
out_dir = ""  # empty means runs/hierarchical-<preset>-s<seed>; result.json, history.jsonl and the PNGs land here
wandb_mode = None  # None: the preset's (offline; disabled at smoke, as for `islands-kit run`) | offline | online | disabled
wandb_project = "islands_kit"
wandb_group = ""  # the runs of one comparison share a group
link = "transpacific-25g"  # the WAN between the sites: transpacific-25g | intra-dc | consumer-1g | leo-satellite
overrides = {}  # any other config field by its --set key, e.g. {"optim.lr": 0.003, "threads": 1}
# hierarchical knobs; None means the preset value (islands_kit.config.presets)
H = None  # H2: inner steps per WAN window (each fragment syncs across the sites once per window)
site_every = None  # H1 (sync.hierarchical.site_every): the cells of a site average every H1 steps
site_mode = None  # mean (every cell gets the site mean) | pairwise (one butterfly round per site sync)
site_link = None  # the link inside a site: intra-dc | consumer-1g | transpacific-25g | leo-satellite
codec = None  # fp32 | bf16 | int8 | fp8_e4m3 | int4 | fp4_e2m1 | int2: outer gradients on the WAN

# %%
from islands_kit import plots
from islands_kit.notebooks import experiment_setup, run_and_show

knobs = {"sync.H": H, "sync.hierarchical.site_every": site_every, "sync.hierarchical.site_mode": site_mode,
         "sync.hierarchical.site_link": site_link, "sync.codec": codec}
cfg, out = experiment_setup("hierarchical", preset, seed, steps, corpus, out_dir, wandb_mode, wandb_project, wandb_group,
                            link, overrides, knobs)

# %% [markdown]
# ## Train, then the standard figures
# `run_and_show` trains: `result.json` and `history.jsonl` (one record per evaluation) land in the output folder, and
# wandb logs unless `wandb_mode` is disabled. Then the figures the CLI and wandb save:
# * **validation bits per byte** against training tokens (the budget every experiment shares) and against the
#   simulated wall-clock (where waiting for the link shows); dashed lines: general-purpose compressors on exactly the
#   same validation bytes;
# * **bytes on the link**: cumulative bytes on both link kinds (the ledger keeps them apart: `site` and `fragments`);
#   dotted: what a fp32 gradient all-reduce every step would have sent;
# * **routing load**: left, the busiest expert's token count over the mean, per layer (1 = perfectly balanced);
#   middle, the Switch balance score the aux loss minimises; right, how far the eight replicas' routing drifted apart.

# %%
result = run_and_show(cfg, out)

# %% [markdown]
# ## The two levels on the simulated clock
# One lane per link kind: a bar wherever a transfer was on that link (simulated seconds), ▼ at each H1 site sync. The
# site link's syncs take microseconds; the WAN's fragment syncs take the round trip and overlap `sync.tau` inner
# steps. The table gives each link kind's bytes and its transfers' seconds in flight, summed over transfers that
# overlap (several cells send at once), so a total can exceed the run's simulated time.

# %%
from islands_kit.notebooks import load_run

run = load_run(out)
h = run["result"]["hierarchical"]
plots.show(plots.hierarchical_schedule(run["result"], run["timeline"]), out / "hierarchical_schedule.png")
# each total sums its transfers' seconds, and transfers overlap (two cells' at once): it can exceed the run's time
print(f"site link: {h['site_syncs']} H1 syncs, {h['site_bytes']:,} bytes, {h['site_transfer_s']:.3g} s of transfers "
      f"summed (they overlap; the run took {run['result']['sim_wall_clock_s']:.3g} simulated s)")
print(f"WAN:       {h['wan_syncs']} fragment syncs, {h['wan_bytes']:,} bytes, {h['wan_transfer_s']:.3g} s of transfers "
      "summed")
print(f"every byte on each link kind (the MoE routing statistics included): site links {h['site_link_bytes']:,}, "
      f"WAN {h['wan_link_bytes']:,}")

# %% [markdown]
# ## What the fast link buys, measured under the comparison protocol
# `benchmarks/studies/hierarchical-h1.toml` runs this experiment at its tuned pick (from the headline study: batch 40,
# inner lr 4.24e-3, outer momentum 0.5) with the cells averaged every H1 = 1, 10 and 50 steps at H2 = 50, 3 paired
# seeds each, beside the baseline and two_site at their own picks. The next cell prints the recorded report
# (`benchmarks/hierarchical-h1.json`; it re-runs nothing): each row's ratio to the H1 = 10 arm and to the baseline,
# at equal tokens and at equal simulated time, with 95% intervals, and where each arm's simulated time and bytes went
# (the `site` channel is the site link, `fragments` the WAN).

# %%
import json

from islands_kit.resources import resource_file
from islands_kit.protocol.tables import render

recorded = resource_file("benchmarks/hierarchical-h1.json")
if recorded.is_file():
    print(render(json.loads(recorded.read_text())))
else:
    print(f"{recorded} is not here (a wheel without the benchmarks): see benchmarks/RESULTS.md in the repository")
