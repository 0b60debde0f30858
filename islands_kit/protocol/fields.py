"""The rules for the fields of a study file that name things outside it — its own name and its points' (folders),
its report, trend and points' reports (files the kit writes) — and the bounds on its sizes (seeds, lists, trials),
checked before anything is expanded or written (protocol/study.py applies them).

A study file arrives like a pull request does: every name that becomes a folder or a file is checked to stay where
the kit keeps its outputs, every size is bounded before anything is expanded, every type is checked before use.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from islands_kit.io import confined


class StudyError(ValueError):
    """A study file broke a rule; the message names the file, the field and the rule."""


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # a study's or a point's name: one folder, never a path
MAX_SEED = 2 ** 32  # the config's own bound on ``seed``
MAX_LIST = 1000  # seeds per list, rows, points
MAX_TRIALS = 512  # trials of every arm at every point together, counted before any is expanded
MAX_FILE = 1 << 20  # bytes of a study file (the committed ones hold a few KB)
SCALARS = (str, int, float, bool)


def check_text(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise StudyError(f"{where}: must be a string (got {type(v).__name__})")
    return v


def check_name(v: Any, where: str) -> str:
    if not isinstance(v, str) or not NAME.fullmatch(v):
        raise StudyError(f"{where}: {str(v)[:60]!r} must be a name of letters, digits, '.', '-' and '_' (up to 100, "
                         "not starting with '.'): it names a folder")
    return v


def check_path(v: Any, where: str, suffix: str | None) -> str | None:
    """A path the study names (its report, its trend, its points' reports folder): relative, under the folder the kit
    runs in, no '..', no symbolic link along it."""
    if v is None:
        return None
    p = check_text(v, where)
    try:
        confined(Path("."), p, where)
    except ValueError as e:
        raise StudyError(str(e)) from None
    if suffix is not None and not p.endswith(suffix):
        raise StudyError(f"{where}: {p!r} must end in {suffix}")
    return p


def table_list(v: Any, where: str) -> list[Any]:
    if not isinstance(v, list) or len(v) > MAX_LIST:
        raise StudyError(f"{where}: must be a list of at most {MAX_LIST} tables")
    return v


def count_trials(arms: dict[str, Any], points: int, w: str) -> None:
    """StudyError when the grids hold more than ``MAX_TRIALS`` trials over all arms and points, counted from the grid
    sizes alone (a grid of a million trials used to be expanded, trial by trial, before any output)."""
    total = 0
    for name, a in arms.items():
        n = 1
        grid = a.get("grid", {}) if isinstance(a, dict) else {}
        for vs in grid.values() if isinstance(grid, dict) else []:
            n *= len(vs) if isinstance(vs, list) else 1
        total += n * max(1, points)
        if total > MAX_TRIALS:
            raise StudyError(f"{w}arms.{name}.grid: the grids make at least {total:,} trials (grid values multiplied, "
                             f"summed over arms, times points), over the limit of {MAX_TRIALS}; refused before "
                             "expanding any")


MAX_SHARE = 8  # studies one study may take runs from


def share_paths(v: Any, where: str) -> list[str]:
    """``share``: at most ``MAX_SHARE`` distinct study files (relative paths under the folder the kit runs in, each
    ending in .toml); what they hold is checked when runs are shared (protocol/share.py), before any run starts."""
    if not isinstance(v, list) or len(v) > MAX_SHARE:
        raise StudyError(f"{where}: must be a list of at most {MAX_SHARE} study files (got {str(v)[:80]})")
    paths = [check_path(p, f"{where}[{i}]", ".toml") for i, p in enumerate(v)]
    if len(set(paths)) != len(paths):
        raise StudyError(f"{where}: names a study file twice")
    return [p for p in paths if p is not None]


def strings(d: Any, where: str) -> dict[str, str]:
    if not isinstance(d, dict):
        raise StudyError(f"{where}: must be a table of key = value (got {type(d).__name__})")
    bad = [k for k, v in d.items() if not isinstance(v, SCALARS)]
    if bad:
        raise StudyError(f"{where}.{bad[0]}: must be a string, number or true/false (got {type(d[bad[0]]).__name__})")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in d.items()}


def seed_list(v: Any, where: str) -> list[int]:
    if (not isinstance(v, list) or not v or len(v) > MAX_LIST
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < MAX_SEED for s in v)):
        raise StudyError(f"{where}: must be a non-empty list of at most {MAX_LIST} seeds (whole numbers in [0, 2^32)), "
                         f"got {str(v)[:80]}")
    if len(set(v)) != len(v):
        raise StudyError(f"{where}: a seed is listed twice ({v!r})")
    return list(v)


def allowed(d: dict[str, Any], keys: set[str], where: str) -> None:
    extra = sorted(set(d) - keys)
    if extra:
        raise StudyError(f"{where}: unknown field(s) {', '.join(extra)} (allowed: {', '.join(sorted(keys))})")
