"""Named presets: one size dial per experiment. ``smoke`` runs in seconds (tests), ``demo`` in minutes on two CPU
cores (the README's main job), ``demo-long`` is the demo at twice its length (2400 steps, about twice the time;
two_site merges by the plain mean there, the tuning split's pick at that length; RESULTS, "The demo at twice its
length"); ``gpu-small`` (quick checks) and ``gpu`` (the full GPU preset) are for one GPU: every island of an
experiment in one process on the same GPU, bf16 autocast, ``device=cuda`` (so a machine without CUDA refuses them
with a ConfigError naming ``device`` instead of training on the CPU; ``--set device=cpu`` overrides).
Their islands carry GPU hardware profiles for the simulated clock (site A: 4 x GB300, site B: 3 x B300, the seed's two
kinds of site, balanced for 3:2 batches; cells: one B300 each). The sizing estimate (FLOPs, memory, per-call costs)
and its status are in benchmarks/RESULTS.md, "GPU presets".

Regime. DiLoCo-family results are measured near compute-optimal training (about 20 tokens per parameter, hundreds of
outer steps: Charles et al. 2025, Douillard et al. 2025); a preset with a handful of outer steps measures the method's warm-up, not
the method. So every non-smoke preset trains >= 20 tokens per active parameter, and gives each fragment >= 24 outer
steps on CPU (demo: H = 50, 1200 steps; demo-long: 2400 steps, 48) and >= 80 on the GPU presets (H = 30, the scaling-law paper's, 2400 steps).
result.json records both (``tokens_per_active_param``, ``outer_steps_per_fragment``).

All three experiments of one preset train the same model for the same number of inner steps with the same global
batch (the sum of the islands' batches), so they are compared at equal total training tokens:
  * baseline — the two sites' batches, gradients all-reduced every step (one model on the summed batch);
  * two_site — site A (3 units of compute, 3/5 of the batch as 2 ranks) and site B (slower units, 2/5 of the batch
    as 1 rank x 2 micro-batches): the seed's 3:2 asymmetry, Streaming DiLoCo between them;
  * eight_cell — eight equal cells of 1/8 of the batch each, butterfly mixing.

``MODEL_SIZES`` is the kit's one table of model sizes (``ModelConfig`` keyword arguments): the three presets' models
plus two controls at the demo size, read through :func:`model_config`:

* ``smoke``: tests and the tour notebook (seconds).
* ``demo``: the CPU demo, width 64, 4 layers, 16 experts top-2 (d_expert 64).
* ``demo-64x2``: the 32x-sparse configuration, 64 experts top-2, same active parameters as ``demo`` (same d_expert;
  only the router is wider).
* ``demo-dense``: the dense control (one SwiGLU MLP, no router) with d_expert 133, chosen so its active parameters
  match ``demo``'s within 0.5% (3 * 64 * 133 = 25,536 vs router + 2 experts = 1,024 + 24,576 = 25,600 per layer).
* ``gpu-small``, ``gpu``: the models for one lent GPU (quick checks; the full GPU preset).
"""
from __future__ import annotations

import copy
import json
from typing import Any

from islands_kit.config import ConfigError, ExperimentConfig, ModelConfig
from islands_kit.config.experiment_table import DEMO_PRESETS, GPU_PRESETS, PRESETS, Hardware, experiment_row

_DEMO: dict[str, Any] = dict(seq_len=128, d_model=64, n_layers=4, n_heads=2, d_expert=64)
MODEL_SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(seq_len=32, d_model=32, n_layers=2, n_heads=2, n_experts=4, top_k=2, d_expert=32),
    "demo": dict(_DEMO, n_experts=16, top_k=2),
    "demo-64x2": dict(_DEMO, n_experts=64, top_k=2),
    "demo-dense": dict(_DEMO, n_experts=1, top_k=1, d_expert=133),
    "gpu-small": dict(seq_len=256, d_model=128, n_layers=4, n_heads=4, n_experts=16, top_k=2, d_expert=128),
    "gpu": dict(seq_len=512, d_model=384, n_layers=6, n_heads=6, n_experts=16, top_k=2, d_expert=384),
}


def model_config(size: str, **overrides: Any) -> ModelConfig:
    """A validated ``ModelConfig`` from a ``MODEL_SIZES`` name plus keyword overrides (ConfigError on a bad value)."""
    if size not in MODEL_SIZES:
        raise ConfigError(f"model size: must be one of {'|'.join(MODEL_SIZES)} (got {size!r})")
    return ModelConfig(**{**MODEL_SIZES[size], **overrides})
_RUN: dict[str, dict[str, Any]] = {
    # steps, eval_every, eval_bytes, warmup, lr (the demo's lr, per experiment: the table's ``demo``)
    "smoke": dict(steps=24, eval_every=12, data=dict(eval_bytes=2048, final_eval_bytes=4096), optim=dict(warmup_steps=4, lr=3e-3)),
    # width 64 for 1200 steps: 30 tokens per active parameter, 24 outer steps per fragment at H = 50 (the scaling
    # study's longest point); the tuning split is held out so that a demo run is the protocol's run (bpb on the same
    # untouched validation bytes); each experiment's inner lr is its protocol winner (the table's ``demo``)
    "demo": dict(steps=1200, eval_every=150, data=dict(eval_bytes=32768, tune_fraction=0.05),
                 optim=dict(warmup_steps=120)),
    # AdamW on the GPU presets: at 2400 steps Shampoo's inverse roots (eight replicas' eigendecompositions) would
    # dominate the time budget; --set optim.name=shampoo switches any preset
    "gpu-small": dict(steps=2400, eval_every=300, data=dict(eval_bytes=65536), device="cuda", precision="bf16",
                      optim=dict(name="adamw", warmup_steps=240, lr=3e-3)),
    "gpu": dict(steps=2400, eval_every=300, data=dict(eval_bytes=262144), device="cuda", precision="bf16",
                optim=dict(name="adamw", warmup_steps=240, lr=1.5e-3)),
}


# the demo at twice the length (61 tokens per active parameter, 48 outer steps per fragment), warm-up and evaluations
# scaled with it, its data settings the demo's: the scaling study's length axis at 2400 steps is this preset
_RUN["demo-long"] = dict(_RUN["demo"], steps=2 * _RUN["demo"]["steps"], eval_every=2 * _RUN["demo"]["eval_every"],
                         optim=dict(warmup_steps=2 * _RUN["demo"]["optim"]["warmup_steps"]))


def _merge(d: dict[str, Any], over: dict[str, Any]) -> None:
    """``over``'s leaves written into ``d`` (nested dicts merged, not replaced)."""
    for k, v in over.items():
        if isinstance(v, dict):
            _merge(d.setdefault(k, {}), v)
        else:
            d[k] = v


# sequences per step, the same in every experiment of a preset: 40 (24 + 16 for two sites, 8 x 5 for cells), x4 on
# the gpu preset so its 2400 steps reach 20 tokens per active parameter
_BATCH_SCALE = {"gpu": 4}


# the hardware profiles of the CPU and the GPU presets: site A has 3 units of the faster CPU profile, site B 4 units
# of the slower one; GPU presets: 4 x GB300 (10 PFLOP/s) against 3 x B300 (6.75 PFLOP/s); a cell one unit of the
# faster profile
_HARDWARE = {False: Hardware("cpu-2core", 3, "cpu-1core", 4, "cpu-2core"), True: Hardware("gb300", 4, "b300", 3, "b300")}


def _islands(experiment: str, preset: str) -> list[dict[str, Any]]:
    """The experiment's islands (its row of the experiment table) on the preset's hardware, the same global batch in
    every experiment (40 sequences a step, times the preset's ``_BATCH_SCALE``)."""
    return experiment_row(experiment).islands(_HARDWARE[preset in GPU_PRESETS], _BATCH_SCALE.get(preset, 1))


# the like-for-like control of eight_cell (``--set`` keys on top of the eight_cell preset): the same eight cells
# synchronised with the DiLoCo all-reduce instead of butterfly exchanges — fp32 payloads, plain averaging (outer lr 1,
# no momentum), the same overlap (tau = the butterfly's delay, the local steps kept) and the same cadence (each
# fragment every H / exchanges_per_window ~ 8 steps); benchmarks/studies/protocol-demo.toml runs it
EIGHT_CELL_ALLREDUCE_CONTROL: dict[str, str] = {
    "sync.strategy": "diloco", "sync.H": "8", "sync.tau": "2", "sync.diloco.merge": "keep_local",
    "sync.diloco.alpha": "0.0", "sync.codec": "fp32", "sync.diloco.outer_lr": "1.0", "sync.diloco.outer_momentum": "0.0",
}

# SparseLoCo as published (Sarfi et al. 2025; the algorithm in ``sync/diloco.py``), as ``--set`` keys on top of
# two_site: top-k per chunk of 4096 values (the 64 x 64 tiles of the authors' code) keeping 1 in 64 (k = 64, 1.56 %),
# 2-bit values with one scale per chunk rounded to nearest (the authors' quantiser rounds; the error feedback carries
# the rounding), the error-feedback buffer decayed by beta = 0.95 and no outer momentum (the buffer is the momentum),
# the replicas' compressed outer gradients averaged (mean, not two_site's radial-directional merge),
# outer lr alpha = 1 and H = 15 inner steps (the authors' 512M settings); the last sync is an ordinary one (the paper
# has no final flush).
SPARSELOCO: dict[str, str] = {
    "sync.codec": "ctop64_int2", "sync.codec_block_size": "4096", "sync.stochastic_rounding": "false",
    "sync.error_feedback": "true", "sync.diloco.error_feedback_decay": "0.95", "sync.diloco.outer_momentum": "0.0",
    "sync.diloco.outer_lr": "1.0", "sync.H": "15", "sync.diloco.final_codec": "", "sync.diloco.average": "mean",
}


def two_site_m1_control(preset: str = "demo") -> dict[str, str]:
    """DiLoCo with M = 1 (``--set`` keys on top of the two_site preset): site A alone with the whole global batch
    (40 on the CPU presets: its 2 ranks x 20), every sync setting of two_site kept (H, fragments, tau, codec, outer lr and momentum). One
    replica has no one to average with, so what it measures against the baseline is the outer optimizer alone (the
    DiLoCo scaling-law paper finds M = 1 with Nesterov ahead of synchronous training); no byte crosses a link."""
    sites = _islands("two_site", preset)
    batch = sum(s["batch_size"] for s in sites)  # the global batch (x the preset's _BATCH_SCALE)
    site_a = dict(sites[0], batch_size=batch, micro_batch_size=batch // sites[0]["dp_ranks"])
    return {"islands": json.dumps([site_a])}


TWO_SITE_M1_CONTROL = two_site_m1_control("demo")  # the CPU presets' site A (smoke and demo share its hardware)


def preset_dict(experiment: str, preset: str = "smoke") -> dict[str, Any]:
    row = experiment_row(experiment)  # a ConfigError naming the experiments if there is none
    if preset not in PRESETS:
        raise ConfigError(f"preset: unknown preset (valid: {', '.join(PRESETS)}) (got {preset!r})")
    size = "demo" if preset in DEMO_PRESETS else preset  # MODEL_SIZES names the model, not the length
    d: dict[str, Any] = {"experiment": experiment, "preset": preset, "model": dict(MODEL_SIZES[size]),
                         "islands": _islands(experiment, preset), "sync": copy.deepcopy(row.sync)}
    for k, v in _RUN[preset].items():
        d[k] = dict(v) if isinstance(v, dict) else v
    _merge(d, copy.deepcopy(row.settings))
    if preset == "smoke":
        d["sync"]["H"] = min(d["sync"].get("H", 50), 8)
        hier = d["sync"].get("hierarchical")
        if hier is not None:  # the sites sync (H1) more often than the WAN (H2), as at every other size
            hier["site_every"] = min(hier.get("site_every", 10), d["sync"]["H"] // 2)
        bf = d["sync"].setdefault("butterfly", {})
        bf["exchanges_per_window"] = min(bf.get("exchanges_per_window", 6), 3)
        d["wandb_mode"] = "disabled"
        d["progress"] = False
    if preset in DEMO_PRESETS:
        _merge(d, row.demo)
    if preset == "demo-long":
        _merge(d, row.demo_long)
    if preset in GPU_PRESETS:  # the scaling-law paper's H: 80 outer steps per fragment in 2400 steps
        d["sync"]["H"] = 30
    return d


def get_preset(experiment: str, preset: str = "smoke") -> ExperimentConfig:
    """The named preset as a validated ExperimentConfig."""
    return ExperimentConfig.from_dict(preset_dict(experiment, preset))
