"""Comparisons of finished runs that refuse to mislead (``islands-kit compare``, the compare notebook).

- ``rows``: the checks (same corpus, same token budget), one reference, ratios paired by seed, a note where a run
  trained other tokens than its pair, and the statistics over seeds (``stats``: intervals only from two
  seeds on)
- ``text``: the terminal table fitted to 100 columns (``wide``: every column), Markdown, CSV, JSON, the legend
- ``folders``: which runs a folder stands for, and which it holds that are no row of a comparison (side runs, smoke
  runs beside real ones), each named
"""
from __future__ import annotations

from islands_kit.compare.folders import Selection, curve_groups, expand_run_dirs, run_history, select_runs
from islands_kit.compare.rows import (
    ComparisonError,
    busiest_link_bytes,
    check_comparable,
    compare_table,
    comparison_summary,
    configuration_groups,
    corpus_id,
    format_bytes,
    group_labels,
    n_islands,
    pick_reference,
    ratio_phrase,
    ratio_words,
    run_label,
    seed_summary,
    smoke_note,
    token_budget,
    tokens_note,
    x_fewer_bytes,
    x_fewer_than,
)
from islands_kit.compare.text import FORMATS, RUN_COLUMNS, SEED_COLUMNS, WIDTH, fit, reference_note, render, report

__all__ = [
    "FORMATS", "RUN_COLUMNS", "SEED_COLUMNS", "WIDTH", "ComparisonError", "Selection", "busiest_link_bytes",
    "check_comparable", "compare_table", "comparison_summary", "configuration_groups", "corpus_id", "curve_groups", "expand_run_dirs", "fit",
    "format_bytes", "group_labels", "n_islands", "pick_reference", "ratio_phrase", "ratio_words", "reference_note",
    "render", "report", "run_history", "run_label", "seed_summary", "select_runs", "smoke_note", "token_budget", "tokens_note",
    "x_fewer_bytes", "x_fewer_than",
]
