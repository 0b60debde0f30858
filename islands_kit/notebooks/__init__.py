"""Execute the kit's notebooks with papermill, and the helpers the notebooks call (they hold no core logic), so that
the notebooks themselves stay parameters, calls and plots.

Where each piece lives (import them all from ``islands_kit.notebooks``):

- ``experiment``: what the baseline, two_site and eight_cell notebooks share: ``experiment_setup`` (their config
  and output folder from the parameters) and ``run_and_show`` (the run and the standard figures)
- ``runner``: ``run_notebook`` and ``dry_run_notebook`` (used by ``islands-kit notebook``), its parameter checks
  and the relative paths it reads from the caller's folder (``resolve_path_parameters``)
- ``configs``: ``notebook_config`` turns a notebook's parameters into a validated ``ExperimentConfig``,
  ``resolve_out_dir`` picks the output folder; ``decoupled_pair`` and ``poisoned_island_setup`` validate the runs
  of the two_site and poisoned-island notebooks
- ``tables``: ``config_summary``, ``result_summary`` and the plain-text tables (``format_rows``,
  ``decoupled_table``, ``poisoned_island_table``)
- ``runs``: ``load_run`` reads a finished run back; ``seed_groups``, ``ddp_bytes_per_step`` and ``show_frontier``
  feed the figures
- ``comparison``: the compare notebook's setup, runs (``run_comparison``), report and wandb log
- ``projection``: ``utilisation_curves``, utilisation against bandwidth for the published tables' cases
"""
from __future__ import annotations

from islands_kit.notebooks.comparison import (
    comparison_experiments,
    comparison_report,
    comparison_setup,
    comparison_to_wandb,
    run_comparison,
    sweep_seeds,
    wandb_locations,
)
from islands_kit.notebooks.configs import (
    POISONED_RUNS,
    check_overrides,
    decoupled_pair,
    notebook_config,
    poisoned_island_setup,
    resolve_out_dir,
)
from islands_kit.notebooks.experiment import STANDARD_FIGURES, experiment_setup, run_and_show
from islands_kit.notebooks.projection import utilisation_curves
from islands_kit.notebooks.runner import (
    EXPERIMENT_NOTEBOOKS,
    KERNEL_QUIET,
    NOTEBOOK_DIR,
    NotebookError,
    check_parameters,
    dry_run_notebook,
    notebook_parameters,
    notebook_path,
    parse_cli_parameters,
    path_kind,
    resolve_path_parameters,
    run_notebook,
)
from islands_kit.notebooks.runs import ddp_bytes_per_step, load_run, seed_groups, show_frontier
from islands_kit.notebooks.tables import config_summary, decoupled_table, format_rows, poisoned_island_table, result_summary

__all__ = [
    "EXPERIMENT_NOTEBOOKS", "KERNEL_QUIET", "NOTEBOOK_DIR", "POISONED_RUNS", "STANDARD_FIGURES", "NotebookError",
    "check_overrides", "check_parameters", "comparison_experiments", "comparison_report",
    "comparison_setup", "comparison_to_wandb", "config_summary", "ddp_bytes_per_step", "decoupled_pair",
    "decoupled_table", "dry_run_notebook",
    "experiment_setup", "format_rows", "load_run", "notebook_config", "notebook_parameters", "notebook_path",
    "parse_cli_parameters", "path_kind", "poisoned_island_setup", "poisoned_island_table", "result_summary", "resolve_out_dir",
    "resolve_path_parameters", "run_and_show", "run_comparison", "run_notebook", "seed_groups", "show_frontier", "sweep_seeds",
    "utilisation_curves", "wandb_locations",
]
