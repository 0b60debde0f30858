"""Write notebooks/{baseline,two_site,eight_cell,compare,tour,poisoned_island}.ipynb from the cell texts below (no
outputs).

The notebooks hold a ``parameters`` cell of literals, then calls into ``islands_kit`` and ``islands_kit.plots``;
keeping their source here keeps the three experiment notebooks in step. Run after editing:

    python scripts/make_notebooks.py          # rewrites the six notebooks (cell ids are stable)
    python scripts/make_notebooks.py --check  # exit 1 if a committed notebook differs from this script
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
NB_DIR = ROOT / "notebooks"

COMMON_PARAMS = '''\
preset = "demo"  # smoke (seconds, tests) | demo (minutes on 2 CPU cores) | gpu
seed = 0  # one seed for weights, data order, stochastic rounding and the link's draws
steps = 0  # inner steps per island; 0 means the preset value
corpus = "shakespeare"  # shakespeare | enwiki | hub:<name>[:<config>] | path or glob of .txt/.parquet files
out_dir = ""  # empty means runs/{exp}-<preset>-s<seed>; result.json, history.jsonl and the PNGs land here
wandb_mode = "offline"  # offline | online | disabled
wandb_project = "islands_kit"
wandb_group = ""  # the runs of one comparison share a group
link = "transpacific-25g"  # transpacific-25g | intra-dc | consumer-1g | leo-satellite (islands_kit.comm.link)
'''

EXPERIMENTS = {
    "baseline": dict(
        title="Baseline: fully synchronous data-parallel training",
        intro=(
            "One model trained on the global batch of both sites (24 + 16 sequences per step): every step, the two "
            "sites all-reduce their fp32 gradients across the wide-area link, so they always hold the same weights. "
            "This is the quality reference and the communication worst case: the other experiments report their bytes "
            "as *times less than* this all-reduce."),
        knobs="",
        overrides="",
        extra_cells=[],
    ),
    "two_site": dict(
        title="Two sites: Streaming DiLoCo between heterogeneous islands",
        intro=(
            "Two sites with different batch sizes, parallelism and hardware (site A: 24 sequences as 2 ranks x 12; "
            "site B: 16 sequences as 1 rank x 2 micro-batches of 8) each train their own replica. Every H-step window, "
            "each of the P fragments (strided groups of layers) sends its outer gradient θ_global − θ_i once, at a "
            "staggered offset, through a low-bit codec with stochastic rounding and error feedback; the averaged outer "
            "step (SGD with Nesterov momentum) lands τ steps later and is merged as θ ← α·θ_local + (1−α)·θ_global "
            "(Douillard et al. 2025, Streaming DiLoCo). MoE expert loads are all-reduced every step on their own "
            "small channel. Evaluation scores the global (outer) parameters."),
        knobs='''\
# two_site knobs; None means the preset value (islands_kit.presets)
H = None  # inner steps per window
n_fragments = None  # P: fragments, each synced once per window at its own offset
tau = None  # τ: inner steps between sending a fragment and merging its outer result (overlap)
alpha = None  # merge weight α: θ ← α·θ_local + (1−α)·θ_global
codec = None  # fp32 | bf16 | int8 | fp8_e4m3 | int4 | fp4_e2m1 | int2: outer gradients on the wire
outer_lr = None  # outer SGD-Nesterov learning rate
routing_sync = None  # True: expert loads all-reduced every step on their own channel
''',
        overrides='''\
    "sync.H": H, "sync.n_fragments": n_fragments, "sync.tau": tau, "sync.alpha": alpha, "sync.codec": codec,
    "sync.outer_lr": outer_lr, "sync.routing_sync": routing_sync,
''',
        extra_cells=[
            new_markdown_cell(
                "### When does each fragment sync?\n"
                "Each row is a fragment; ▼ marks the step after which its outer gradient is sent, the bar the τ inner "
                "steps its transfer overlaps, ● the merge. The offsets spread the traffic over the window instead of "
                "one burst per window."),
            new_code_cell(
                "from islands_kit.sync.diloco import streaming_schedule\n\n"
                "s = cfg.sync\n"
                "shown = min(cfg.steps, 2 * s.H)\n"
                "plots.show(plots.fragment_timeline(streaming_schedule(s.H, s.n_fragments, shown), s.n_fragments, s.H,"
                " s.tau, shown),\n"
                "           out / \"fragment_timeline.png\")"),
        ],
    ),
    "eight_cell": dict(
        title="Eight cells: butterfly mixing without any all-reduce",
        intro=(
            "Eight equal cells (5 sequences each) train their own replicas. There is no all-reduce: in round r cell i "
            "pairs with cell i XOR 2^r and the two swap one model fragment; after log2(8) = 3 rounds every cell's "
            "update has reached every other cell (Zhao & Canny 2013, butterfly mixing). Each fragment is exchanged "
            "`exchanges_per_window` times per H steps and merged with equal weight `delay` steps after it was sent, so "
            "the transfer overlaps compute. Evaluation scores cell 0's replica."),
        knobs='''\
# eight_cell knobs; None means the preset value (islands_kit.presets)
H = None  # inner steps per window
exchanges_per_window = None  # how many times each fragment is exchanged per window
delay = None  # a partner's fragment sent after step t is merged after step t + delay
codec = None  # fp32 | bf16 | int8 | fp8_e4m3 | int4 | fp4_e2m1 | int2: fragments on the wire
''',
        overrides='''\
    "sync.H": H, "sync.exchanges_per_window": exchanges_per_window, "sync.delay": delay, "sync.codec": codec,
''',
        extra_cells=[
            new_markdown_cell(
                "### The exchange schedule\n"
                "▼ marks an exchange (colour = butterfly round, i.e. which partner), the bar the `delay` steps until the "
                "partner's fragment is merged."),
            new_code_cell(
                "from islands_kit.sync.butterfly import butterfly_schedule\n\n"
                "s = cfg.sync\n"
                "shown = min(cfg.steps, 2 * s.H)\n"
                "exchanges = butterfly_schedule(len(cfg.islands), s.H, s.exchanges_per_window, s.n_fragments, shown)\n"
                "plots.show(plots.butterfly_timeline(exchanges, s.n_fragments, s.H, s.delay, shown),"
                " out / \"butterfly_timeline.png\")"),
        ],
    ),
}


def _finish(cells: list, name: str) -> nbformat.NotebookNode:
    nb = new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
        "language_info": {"name": "python"},
    })
    for i, c in enumerate(nb.cells):
        c["id"] = f"{name}-{i:02d}"
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    return nb


def _params_cell(src: str) -> nbformat.NotebookNode:
    c = new_code_cell(src.rstrip("\n"))
    c.metadata["tags"] = ["parameters"]
    return c


def experiment_notebook(exp: str) -> nbformat.NotebookNode:
    e = EXPERIMENTS[exp]
    cells = [
        new_markdown_cell(
            f"# {e['title']}\n\n{e['intro']}\n\n"
            "Run it from the command line (papermill; the executed copy is kept in the output folder):\n\n"
            f"```bash\nislands-kit notebook {exp} -p preset smoke --out runs/{exp}-smoke\n```\n\n"
            "The next cell holds the parameters (literals only); the one after it validates them through "
            "`islands_kit` and stops with a `ConfigError` naming the field if one is wrong."),
        _params_cell(COMMON_PARAMS.replace("{exp}", exp) + e["knobs"]),
        new_code_cell(
            "from islands_kit import plots\n"
            "from islands_kit.notebooks import config_summary, ddp_bytes_per_step, load_run, notebook_config, "
            "resolve_out_dir, result_summary\n\n"
            f"cfg = notebook_config(\"{exp}\", preset, seed, steps, {{\n"
            "    \"data.corpus\": corpus, \"link.preset\": link,\n"
            "    \"wandb_mode\": wandb_mode, \"wandb_project\": wandb_project, \"wandb_group\": wandb_group,\n"
            + e["overrides"] +
            "})\n"
            "out = resolve_out_dir(out_dir, cfg)\n"
            "print(config_summary(cfg))"),
        new_markdown_cell("## Train\n`run_experiment` writes `result.json` and `history.jsonl` (one record per "
                          "evaluation) into the output folder, and logs to wandb unless `wandb_mode` is disabled."),
        new_code_cell(
            "from islands_kit.run import run_experiment\n\n"
            "result = run_experiment(cfg, out)\n"
            "print(result_summary(result))"),
        new_markdown_cell("## Validation bits per byte\nAgainst training tokens (the budget every experiment shares) "
                          "and against the simulated wall-clock (where waiting for the link shows). Dashed lines: "
                          "general-purpose compressors on exactly the same validation bytes."),
        new_code_cell(
            "run = load_run(out)\n"
            "runs = {cfg.experiment: run[\"history\"]}\n"
            "floors = run[\"result\"][\"compressor_bpb\"]\n"
            "plots.show(plots.bpb_curves(runs, x=\"tokens\", floors=floors), out / \"bpb_vs_tokens.png\")\n"
            "plots.show(plots.bpb_curves(runs, x=\"sim_time\", floors=floors), out / \"bpb_vs_sim_time.png\")"),
        new_markdown_cell("## Bytes on the link\nCumulative bytes sent across the wide-area link; dotted: what a fp32 "
                          "gradient all-reduce every step would have sent."),
        new_code_cell(
            "plots.show(plots.link_bytes(runs, ddp_bytes_per_step={cfg.experiment: ddp_bytes_per_step(run[\"result\"])},\n"
            "                            timelines={cfg.experiment: run[\"timeline\"]}), out / \"link_bytes.png\")"),
        new_markdown_cell("## Routing load\nLeft: the busiest expert's token count over the mean, per layer (1 = "
                          "perfectly balanced). Middle: the Switch balance score the aux loss minimises. They can "
                          "disagree: the score weighs loads by router probabilities. Right (several replicas): how far "
                          "the replicas' routing drifted apart."),
        new_code_cell("plots.show(plots.routing_load(run[\"history\"]), out / \"routing_load.png\")"),
        *e["extra_cells"],
    ]
    return _finish(cells, exp)


def compare_notebook() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# baseline vs two_site vs eight_cell\n\n"
            "Runs the three experiment notebooks through papermill with the same preset and seed (hence the same "
            "model, global batch and total training tokens), the same corpus and link, in one wandb group; then "
            "reads their `result.json` files and compares them: validation bits per byte, bytes on the wide-area link "
            "(and how many times less than a fp32 all-reduce every step), simulated wall-clock and compute "
            "utilisation.\n\n"
            "```bash\nmake demo   # = islands-kit notebook compare -p preset demo --out runs/demo\n```\n\n"
            "Each experiment lands in `out_dir/<experiment>/` (its `result.json`, `history.jsonl`, PNGs and executed "
            "notebook), so `islands-kit compare runs/demo/baseline runs/demo/two_site runs/demo/eight_cell` prints "
            "the same table afterwards."),
        _params_cell(
            'preset = "demo"  # smoke (seconds, tests) | demo (minutes per experiment on 2 CPU cores) | gpu\n'
            "seed = 0  # shared by every experiment\n"
            "steps = 0  # inner steps per island; 0 means the preset value (shared: equal total tokens)\n"
            'corpus = "shakespeare"  # shakespeare | enwiki | hub:<name>[:<config>] | path or glob\n'
            'out_dir = ""  # empty means runs/compare-<preset>-s<seed>; experiment E goes to out_dir/E/\n'
            'wandb_mode = "offline"  # offline | online | disabled\n'
            'wandb_project = "islands_kit"\n'
            'wandb_group = ""  # empty means compare-<preset>-s<seed>; shared by the three runs\n'
            'link = "transpacific-25g"  # transpacific-25g | intra-dc | consumer-1g | leo-satellite\n'
            'experiments = ["baseline", "two_site", "eight_cell"]'),
        new_code_cell(
            "from islands_kit import plots\n"
            "from islands_kit.notebooks import comparison_report, comparison_setup, ddp_bytes_per_step, load_run, "
            "run_comparison\n\n"
            "shared, out = comparison_setup(experiments, preset, seed, steps, corpus, link, wandb_mode, wandb_project,"
            " wandb_group, out_dir)\n"
            "print(f\"shared parameters: {shared}\\noutput: {out}\")"),
        new_markdown_cell("## Run the three notebooks\nEach executed copy is kept next to its `result.json`."),
        new_code_cell("dirs = run_comparison(experiments, shared, out)"),
        new_markdown_cell("## The comparison table\n`vs base`: bpb over the baseline's (lower is better); `x less than "
                          "DDP`: the fp32 all-reduce-every-step bytes over the bytes actually sent; `util`: the share of "
                          "simulated time the islands spent computing rather than waiting for the link. Also written "
                          "to `compare.json` / `compare.txt`."),
        new_code_cell(
            "runs = {exp: load_run(d) for exp, d in dirs.items()}\n"
            "rows, table = comparison_report([r[\"result\"] for r in runs.values()], out)\n"
            "print(table)"),
        new_markdown_cell("## Curves\nThe same validation bytes for all three; the dashed line is xz -9e on them."),
        new_code_cell(
            "histories = {exp: r[\"history\"] for exp, r in runs.items()}\n"
            "xz = {\"xz -9e\": next(iter(runs.values()))[\"result\"][\"compressor_bpb\"][\"xz\"]}\n"
            "plots.show(plots.bpb_curves(histories, x=\"tokens\", floors=xz), out / \"compare_bpb_vs_tokens.png\")\n"
            "plots.show(plots.bpb_curves(histories, x=\"sim_time\", floors=xz), out / \"compare_bpb_vs_sim_time.png\")"),
        new_code_cell(
            "plots.show(plots.link_bytes(histories, ddp_bytes_per_step={e: ddp_bytes_per_step(r[\"result\"]) for e, r in "
            "runs.items()},\n"
            "                            timelines={e: r[\"timeline\"] for e, r in runs.items()}), "
            "out / \"compare_link_bytes.png\")\n"
            "plots.show(plots.comparison_bars(rows), out / \"compare_summary.png\")"),
    ]
    return _finish(cells, "compare")


def tour_notebook() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# A tour of islands_kit\n\n"
            "Small live examples of every idea the experiments rest on, each computed in seconds with the kit's real "
            "code: bytes and bits per byte, MoE routing and its balance, Shampoo, Streaming DiLoCo's fragment "
            "schedule, butterfly mixing, and the wide-area link model.\n\n"
            "```bash\nislands-kit notebook tour --out runs/tour\n```"),
        _params_cell(
            "seed = 0\n"
            'out_dir = ""  # empty means runs/tour; the figures land here\n'
            'corpus = "shakespeare"  # shakespeare | enwiki | hub:<name>[:<config>] | path or glob\n'
            "tiny_steps = 60  # training steps of the tiny MoE in the routing section\n"
            "race_steps = 150  # optimizer steps in the Shampoo vs Adam race\n"
            "H = 50  # window length for the DiLoCo and butterfly schedules\n"
            "n_fragments = 4  # P\n"
            "tau = 2  # τ: overlap of a fragment's transfer with inner steps\n"
            "n_cells = 8  # butterfly cells (a power of two)\n"
            "exchanges_per_window = 6\n"
            "delay = 2\n"
            'links = ["transpacific-25g", "consumer-1g"]  # any of transpacific-25g, intra-dc, consumer-1g, leo-satellite\n'
            "payload_mb = 64  # one fragment's payload in MiB\n"
            "loss_prob = 0.01  # per-chunk loss probability on the link\n"
            "n_transfers = 300  # transfers per method"),
        new_code_cell(
            "from islands_kit import plots, tour\n"
            "from islands_kit.comm.link import link_config\n"
            "from islands_kit.config import SyncConfig\n"
            "from islands_kit.notebooks import resolve_out_dir\n"
            "from islands_kit.sync.butterfly import check_power_of_two\n\n"
            "# validate the parameters first, through the kit's own checks (a bad one stops here, naming it)\n"
            "for name in links:\n"
            "    link_config(name, loss_prob=loss_prob)\n"
            "SyncConfig(strategy=\"diloco\", H=H, n_fragments=n_fragments, tau=tau)\n"
            "SyncConfig(strategy=\"butterfly\", H=H, exchanges_per_window=exchanges_per_window, delay=delay)\n"
            "check_power_of_two(n_cells)\n"
            "out = resolve_out_dir(out_dir, \"runs/tour\")\n"
            "print(out)"),
        new_markdown_cell(
            "## 1. Bytes, and bits per byte\n"
            "The model reads raw bytes (vocabulary 256), so its loss in bits per byte (bpb) is directly comparable "
            "with a compressor's output size: `8 · compressed / original`. Guessing uniformly costs exactly 8 bpb; "
            "byte n-gram counts get down a ladder; the compressors are computed on exactly the kit's validation "
            "bytes (the last 5%), because they do worse on small inputs."),
        new_code_cell(
            "from islands_kit.data import load_corpus, split_bytes\n\n"
            "corp = load_corpus(corpus)\n"
            "train, val = split_bytes(corp.data, 0.05)\n"
            "print(f\"{corp.name}: {len(corp.data):,} bytes (sha256 {corp.sha256[:12]}…), {len(val):,} validation bytes\")\n"
            "print(bytes(val[:300].numpy()).decode(\"utf-8\", \"replace\"))"),
        new_code_cell(
            "ladder = tour.bpb_ladder(train, val)\n"
            "plots.show(plots.bpb_bars(ladder, title=f\"bits per byte on the {corp.name} validation bytes\"),"
            " out / \"tour_bpb_ladder.png\")"),
        new_markdown_cell(
            "## 2. MoE routing: the balance score is not the load\n"
            "The router sends each token to its top-k experts. The Switch aux loss `E · Σ_e f_e · P_e` (f_e: share "
            "of tokens routed to e, P_e: mean router probability of e) equals 1 at perfect balance, and is what "
            "training minimises. But it weighs loads by probabilities: a *hesitant* router (near-uniform "
            "probabilities, a slight tilt) can send most tokens to one expert while its score looks better than "
            "that of a confident router with a mild imbalance. Both states below are scored by the kit's own "
            "`route` and `switch_balance_loss`."),
        new_code_cell("plots.show(plots.routing_states(tour.routing_example(seed=seed)), out / \"tour_routing_states.png\")"),
        new_markdown_cell(
            "During training of a tiny 8-expert top-2 model, the two figures side by side: the balance score stays "
            "near 1 while the busiest expert's real load can sit far above the mean. This is why every run records "
            "`max_over_mean_load` per layer and why the kit also offers aux-loss-free balancing (a selection bias "
            "nudged toward balance each step, DeepSeek-V3)."),
        new_code_cell(
            "tiny = {\n"
            "    \"Switch aux loss 0.01\": tour.train_tiny_moe(train, tiny_steps, seed, aux_loss_coef=0.01),\n"
            "    \"no balancing\": tour.train_tiny_moe(train, tiny_steps, seed, aux_loss_coef=0.0),\n"
            "    \"aux-loss-free bias (u=0.01)\": tour.train_tiny_moe(train, tiny_steps, seed, aux_loss_coef=0.0,"
            " bias_balancing=True, bias_update_rate=0.01),\n"
            "}\n"
            "plots.show(plots.balance_vs_load(tiny), out / \"tour_balance_vs_load.png\")"),
        new_markdown_cell(
            "## 3. Shampoo against Adam on an ill-conditioned problem\n"
            "Least squares `½·mean((A W B − C)²)` with A, B symmetric positive definite (eigenvalues spread over "
            "[1, 31.6]): the Hessian `(B Bᵀ) ⊗ (Aᵀ A)` is Kronecker-structured with condition number 10⁶ — the "
            "structure Shampoo's left and right preconditioners `L^{-1/4} G R^{-1/4}` approximate. Adam only "
            "rescales coordinates. Each curve is the best of three learning rates. One Shampoo run starts "
            "preconditioning at step 1, when L and R hold a single gradient each (Distributed Shampoo starts "
            "after some steps)."),
        new_code_cell(
            "race = tour.optimizer_race(steps=race_steps, shampoo_starts=(1, 5), seed=seed)\n"
            "plots.show(plots.loss_curves(race, title=\"Shampoo vs Adam: ½·mean((AWB − C)²), condition number 10⁶\"),"
            " out / \"tour_shampoo_vs_adam.png\")"),
        new_markdown_cell(
            "## 4. Streaming DiLoCo: which fragment syncs when\n"
            "The model's blocks are cut into P fragments (strided: block l → fragment l mod P). Fragment p syncs once "
            "per H-step window at its own offset, so the link carries 1/P of the model at a time instead of all of "
            "it at once; its outer result is merged τ steps later, while the inner steps go on."),
        new_code_cell(
            "from islands_kit.sync.diloco import fragment_offsets, streaming_schedule\n\n"
            "print(\"offsets inside the window:\", fragment_offsets(H, n_fragments))\n"
            "plots.show(plots.fragment_timeline(streaming_schedule(H, n_fragments, 2 * H), n_fragments, H, tau, 2 * H),"
            " out / \"tour_fragment_timeline.png\")"),
        new_markdown_cell(
            "## 5. Butterfly mixing\n"
            "No all-reduce: in round r cell i swaps a fragment with cell i XOR 2^r and both keep the mean. Each round "
            "halves the distance to consensus; after log2(n) rounds (with instantaneous merges) every cell holds the "
            "exact average of all of them: the mixing matrix is uniform."),
        new_code_cell(
            "from islands_kit.sync.butterfly import butterfly_schedule\n\n"
            "plots.show(plots.butterfly_timeline(butterfly_schedule(n_cells, H, exchanges_per_window, n_fragments, H),"
            " n_fragments, H, delay, H),\n"
            "           out / \"tour_butterfly_timeline.png\")\n"
            "plots.show(plots.mixing_matrices(tour.butterfly_mixing(n_cells)), out / \"tour_mixing_matrices.png\")"),
        new_markdown_cell(
            "## 6. The link: tails, and why payloads are chunked\n"
            "One payload sent many times over an otherwise idle link. *naive*: one stream, one latency draw; a lost "
            "chunk is noticed at the end and the whole payload is sent again. *chunked*: the payload is cut into "
            "chunks over several warm connections, each with its own latency draw; a lost or very late chunk is "
            "re-requested alone. On the seed's 25 Gbit/s transpacific pipe a 64 MiB payload serialises in about 21 ms, "
            "so latency draws dominate: the chunked transfer waits for the slowest of its chunks and its median can be "
            "higher, while a loss costs the naive one a whole extra round. On a thinner, lossier line the resend of "
            "the whole payload dominates and chunking cuts the tail. Which method wins depends on the link."),
        new_code_cell(
            "from islands_kit.comm.link import transfer_time_stats\n\n"
            "for name in links:\n"
            "    durations, ideal = tour.link_durations(name, payload_mb << 20, n_transfers, seed=seed, loss_prob=loss_prob)\n"
            "    for method, d in durations.items():\n"
            "        print(name, method, {k: round(v * 1e3, 1) for k, v in transfer_time_stats(d).items()}, \"ms\")\n"
            "    plots.show(plots.transfer_times(durations, ideal, title=f\"{payload_mb} MiB on {name} \"\n"
            "                                    f\"({100 * loss_prob:g}% chunk loss)\"), out / f\"tour_link_tails_{name}.png\")"),
    ]
    return _finish(cells, "tour")


def poisoned_island_notebook() -> nbformat.NotebookNode:
    """notebooks/poisoned_island.ipynb: clean vs attacked vs defended two_site runs (islands_kit.faults)."""
    cells = [
        new_markdown_cell('''\
# A poisoned island

Two sites train one model with Streaming DiLoCo (the `two_site` experiment). From step `attack_start` on, one site is compromised and sends a corrupted outer gradient: flipped (`sign_flip`), scaled (`scale`), drowned in noise (`noise`), with NaN/Inf written into its payload (`nan`) or a stale message resent bit for bit (`replay`). The attacks and the defences are described exactly in `islands_kit/faults.py`.

Three runs of the same configuration:
1. **clean**: nobody attacks;
2. **attacked, no defence**: the token-weighted mean takes the poisoned update in; nothing complains and the model is silently damaged (a `nan` attack is louder: the run stops at the step the NaN reaches the model, and its result says so with `diverged_at_step` and no final bpb);
3. **attacked, with the defence**: every sync checks each update (integrity, replay, norm and direction against the other site and its own history), drops or clips what it does not trust and quarantines the site it caught; the flags say who was caught, when and why.

Run it from the command line (papermill; the executed copy is kept in the output folder):

```bash
islands-kit notebook poisoned_island -p preset smoke -p attack sign_flip --out runs/poisoned-smoke
```

The next cell holds the parameters (literals only); the one after it validates them through `islands_kit`.'''),
        _params_cell('''\
preset = "demo"  # smoke (seconds, tests) | demo (minutes on 2 CPU cores) | gpu
seed = 0  # one seed for weights, data order, stochastic rounding, the link and the attack
steps = 0  # inner steps per island; 0 means the preset value
attack = "scale"  # sign_flip | scale | noise | nan | replay: what the compromised site sends
attack_island = 1  # the compromised site: 0 is site-a, 1 is site-b
attack_start = -1  # first inner step of the attack; -1 means 40 percent into the run
attack_scale = 100.0  # scale: the factor on its outer gradient
attack_noise_std = 1.0  # noise: standard deviation relative to the honest update's RMS
defense = "auto"  # auto | clip | trimmed_mean | median; auto is clip for two sites
out_dir = ""  # empty means runs/poisoned_island-<preset>-s<seed>; one folder per run inside
wandb_mode = "disabled"  # offline | online | disabled'''),
        new_code_cell('''\
from pathlib import Path

import pandas as pd

from islands_kit import plots
from islands_kit.faults import detection_summary
from islands_kit.notebooks import config_summary, load_run, notebook_config, resolve_out_dir

common = {"wandb_mode": wandb_mode, "wandb_group": f"poisoned_island-{preset}-s{seed}"}
clean_cfg = notebook_config("two_site", preset, seed, steps, common)
start = attack_start if attack_start >= 0 else int(0.4 * clean_cfg.steps)
faults = {"faults.attack": attack, "faults.attack_island": attack_island, "faults.attack_start": start,
          "faults.attack_scale": attack_scale, "faults.attack_noise_std": attack_noise_std}
runs = {
    "clean": clean_cfg,
    "attacked": notebook_config("two_site", preset, seed, steps, {**common, **faults, "faults.defense": "none"}),
    "defended": notebook_config("two_site", preset, seed, steps, {**common, **faults, "faults.defense": defense}),
}
labels = {"clean": "clean", "attacked": f"{attack} from site {attack_island}, no defence",
          "defended": f"{attack} from site {attack_island}, defence {defense}"}
out = resolve_out_dir(out_dir, Path("runs") / f"poisoned_island-{preset}-s{seed}")
print(config_summary(clean_cfg))
print(f"attack {attack} from island {attack_island} from step {start} on; defence {defense}")'''),
        new_markdown_cell('''\
## Train the three runs
Each writes `result.json` (with the defence's flags under `faults_report`) and `history.jsonl` into its own folder; a run that diverges stops early and still writes both.'''),
        new_code_cell('''\
from islands_kit.run import run_experiment

results = {}
for name, cfg in runs.items():
    r = results[name] = run_experiment(cfg, out / name)
    if r["diverged_at_step"] is not None:  # a NaN reached the model: the run stopped there, result.json says why
        print(f"{labels[name]}: diverged at step {r['diverged_at_step']}: {r['diverged_reason']}")
    else:
        print(f"{labels[name]}: final bpb {r['final_val_bpb']:.4f}")'''),
        new_markdown_cell('''\
## Validation bits per byte
The dotted vertical line is the start of the attack; the y axis is logarithmic (without the defence a curve may leave the chart).'''),
        new_code_cell('''\
histories = {labels[k]: load_run(out / k)["history"] for k in results}
fig = plots.bpb_curves(histories, x="tokens", title=f"{attack} from site {attack_island}")
ax = fig.axes[0]
ax.axvline(start * clean_cfg.model.seq_len * sum(i.batch_size for i in clean_cfg.islands), color="grey", ls=":",
           label="attack starts")
ax.set_yscale("log")
ax.legend(fontsize=8)
png = plots.show(fig, out / "bpb_curves.png")'''),
        new_markdown_cell('''\
## Final bpb'''),
        new_code_cell('''\
clean_bpb = results["clean"]["final_val_bpb"]


def versus_clean(r):
    if r["diverged_at_step"] is not None:
        return f"diverged at step {r['diverged_at_step']}"
    return f"{r['final_val_bpb'] / clean_bpb - 1:+.2%}"


pd.DataFrame([{"run": labels[k], "final bpb": r["final_val_bpb"], "vs clean": versus_clean(r),
               "flags": len(r["faults_report"])} for k, r in results.items()])'''),
        new_markdown_cell('''\
## What the defence flagged

One row per flag: the sync (`step` it was posted, `fragment`), the `island`, the check that fired (`reason`), the measured `value` against its `threshold`, and what was done with the update (`dropped`, `clipped`; a quarantined site's updates are dropped). Then, per fragment, whether the attacker was caught at the first sync after the attack started (within one sync window).'''),
        new_code_cell('''\
defended = results["defended"]
pd.DataFrame(defended["faults_report"])'''),
        new_code_cell('''\
pd.DataFrame(detection_summary(defended["faults_report"], runs["defended"])).T'''),
    ]
    return _finish(cells, "poisoned_island")


def all_notebooks() -> dict[str, nbformat.NotebookNode]:
    nbs = {exp: experiment_notebook(exp) for exp in EXPERIMENTS}
    nbs["compare"] = compare_notebook()
    nbs["tour"] = tour_notebook()
    nbs["poisoned_island"] = poisoned_island_notebook()
    return nbs


def check_parameters(nb: nbformat.NotebookNode, name: str) -> None:
    """Every name assigned in the parameters cell must be one papermill can see (it skips a line holding two '=')."""
    import ast

    from papermill.translators import PythonTranslator

    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assigned = [t.id for node in ast.parse(cell.source).body for t in getattr(node, "targets", [])]
    seen = [p.name for p in PythonTranslator.inspect(cell)]
    if assigned != seen:
        raise SystemExit(f"{name}: papermill sees parameters {seen}, the cell assigns {assigned}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed notebooks instead of writing")
    args = ap.parse_args(argv)
    stale = []
    for name, nb in all_notebooks().items():
        nbformat.validate(nb)
        check_parameters(nb, name)
        path = NB_DIR / f"{name}.ipynb"
        text = nbformat.writes(nb) + "\n"
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("out of date (run python scripts/make_notebooks.py):\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
