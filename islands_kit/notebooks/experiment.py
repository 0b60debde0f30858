"""What the three experiment notebooks (baseline, two_site, eight_cell) share: their config from the parameters cell,
the run, and the standard figures, so that a notebook holds only what is its own (its knobs, its extra figures).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from islands_kit import plots
from islands_kit.config import ExperimentConfig
from islands_kit.notebooks.configs import notebook_config, resolve_out_dir
from islands_kit.notebooks.runs import load_run
from islands_kit.notebooks.tables import config_summary, result_summary
from islands_kit.plots.figures import standard_figures
from islands_kit.run import run_experiment
from islands_kit.train.result import Result

# the figures the CLI and wandb save, shown in this order: bpb against training tokens and against the simulated wall
# clock, cumulative bytes on the link, the routing load
STANDARD_FIGURES = ("bpb_vs_tokens.png", "bpb_vs_sim_time.png", "link_bytes.png", "routing_load.png")


def experiment_setup(experiment: str, preset: str, seed: int, steps: int, corpus: str, out_dir: str, wandb_mode: str | None,
                     wandb_project: str, wandb_group: str, link: str, overrides: Mapping[str, Any],
                     knobs: Mapping[str, Any] | None = None) -> tuple[ExperimentConfig, Path]:
    """The validated config of an experiment notebook's parameters (in its parameters cell's order; ``knobs``: the
    notebook's own, by ``--set`` key, None meaning the preset's value, as for ``wandb_mode``) and its output folder;
    prints the config's summary. A wrong parameter stops here with a ``ConfigError`` naming the field."""
    cfg = notebook_config(experiment, preset, seed, steps, {
        "data.corpus": corpus, "link.preset": link,
        "wandb_mode": wandb_mode, "wandb_project": wandb_project, "wandb_group": wandb_group, **(knobs or {}),
    }, overrides)
    out = resolve_out_dir(out_dir, cfg)
    print(config_summary(cfg))
    return cfg, out


def run_and_show(cfg: ExperimentConfig, out: Path) -> Result:
    """Train ``cfg`` into ``out`` (``result.json``, ``history.jsonl``, wandb unless disabled), print the result's
    summary and show the standard figures (``STANDARD_FIGURES``, saved into ``out``, from the run as read back)."""
    result = run_experiment(cfg, out)
    print(result_summary(result))
    run = load_run(out)
    figs = standard_figures(run["result"], run["history"], run["timeline"])
    for name in STANDARD_FIGURES:
        plots.show(figs[name], out / name)
    return result
