"""The study file's tuning rules (protocol/tuning.py applies them): each arm's ``bounds`` and ``ladders`` — how far a
grid axis may be extended past a pick on its edge — and protocol 3's rules on seeds and axes."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from islands_kit.protocol.fields import StudyError


def whole(v: Any, where: str, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise StudyError(f"{where}: must be a whole number from {lo} to {hi} (got {v!r})")
    return v


def extent(a: dict[str, Any], grid: dict[str, list[str]], aw: str) -> tuple[dict[str, tuple[float, float]],
                                                                             dict[str, list[str]]]:
    """An arm's ``bounds`` (numeric axes: ``[low, high]``, the grid inside) and ``ladders`` (the values a laddered
    axis steps along, the grid's among them), each for an axis of its grid."""
    bounds: dict[str, tuple[float, float]] = {}
    ladders: dict[str, list[str]] = {}
    for field_name, raw in (("bounds", a.get("bounds", {})), ("ladders", a.get("ladders", {}))):
        if not isinstance(raw, dict):
            raise StudyError(f"{aw}.{field_name}: must be a table of axis = [values]")
        for k, vs in raw.items():
            kw = f"{aw}.{field_name}.{k}"
            if k not in grid:
                raise StudyError(f"{kw}: not an axis of the arm's grid ({', '.join(grid) or 'none'})")
            try:
                nums = [float(str(v)) for v in vs] if isinstance(vs, list) else []
            except ValueError:
                nums = []
            if not nums or not all(math.isfinite(x) for x in nums) or len(nums) != len(vs):
                raise StudyError(f"{kw}: must be a list of numbers (got {vs!r})")
            if field_name == "bounds":
                if len(nums) != 2 or not 0 < nums[0] <= nums[1]:
                    raise StudyError(f"{kw}: must be [low, high] with 0 < low <= high (got {vs!r})")
                outside = [v for v in grid[k] if not nums[0] * (1 - 1e-9) <= float(v) <= nums[1] * (1 + 1e-9)]
                if outside:
                    raise StudyError(f"{kw}: the grid's {', '.join(outside)} lies outside [{vs[0]}, {vs[1]}]")
                bounds[k] = (nums[0], nums[1])
            else:
                if nums != sorted(nums) or len(set(nums)) != len(nums):
                    raise StudyError(f"{kw}: a ladder lists distinct values in increasing order (got {vs!r})")
                missing = [v for v in grid[k] if not any(math.isclose(float(v), x, rel_tol=1e-9) for x in nums)]
                if missing:
                    raise StudyError(f"{kw}: the grid's {', '.join(missing)} is not on the ladder")
                ladders[k] = [str(v) for v in vs]
    both = sorted(set(bounds) & set(ladders))
    if both:
        raise StudyError(f"{aw}: {', '.join(both)} has both bounds and a ladder (one says how far it may go)")
    return bounds, ladders


def protocol3_rules(seeds: list[int], tune_seeds: list[int], rows: Sequence[Any], arms: Mapping[str, Any], w: str) -> None:
    """The third pass's rules: two or more tuning seeds, none of them a scoring seed, and every grid axis with a
    bound or a ladder to be extended along."""
    if len(tune_seeds) < 2:
        raise StudyError(f"{w}tune_seeds: protocol 3 tunes on two or more seeds (got {tune_seeds!r})")
    for where, ss in [("seeds", seeds)] + [(f"rows '{r.name}'.seeds", r.seeds) for r in rows]:
        shared = sorted(set(ss) & set(tune_seeds))
        if shared:
            raise StudyError(f"{w}{where}: {', '.join(map(str, shared))} is also a tuning seed (protocol 3 scores on "
                             "other seeds than it tunes on)")
    for name, a in arms.items():
        loose = [k for k in a.grid if k not in a.bounds and k not in a.ladders]
        if loose:
            raise StudyError(f"{w}arms.{name}: {', '.join(loose)} needs bounds = [low, high] or a ladder (protocol 3 "
                             "extends an axis past a pick on its edge, up to the bound the study declares)")
