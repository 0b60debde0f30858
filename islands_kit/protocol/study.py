"""A study written as data: arms, grids, seeds and rows in one TOML file (``benchmarks/studies/*.toml``).

    name = "headline-demo"
    preset = "demo"
    seeds = [0, 1, 2, 3, 4]        # every arm's pick is scored at these seeds (paired across arms)
    tune_seeds = [0]               # the pick: lowest mean final_tune_bpb over these seeds (the tuning split only)
    report = "benchmarks/headline-demo.json"

    [set]                          # every run of the study
    "data.tune_fraction" = "0.05"

    [arms.baseline]
    experiment = "baseline"        # a row of the experiment table
    ref = "baseline"               # the arm its ratios are paired against (itself: the reference)
    fixed = { }                    # settings every trial of the arm keeps
    grid = { batch = ["20", "40"], "optim.lr" = ["3e-3", "4.24e-3"] }

    [[rows]]                       # one change on top of an arm's pick (or a standalone config: experiment + set)
    name = "two_site, H=25"
    arm = "two_site"
    set = { "sync.H" = "25" }
    seeds = [0, 1, 2]

``batch`` is the global batch at fixed training tokens (protocol/batch.py): it moves the per-island batches, the steps
and everything counted in steps together. Every arm tunes over exactly as many trials as its reference (equal
budgets). Errors name the file, the field and the rule, before any run starts.
"""
from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from islands_kit.config import ExperimentConfig, apply_overrides
from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.config.presets import PRESETS, get_preset
from islands_kit.io import read_limited
from islands_kit.protocol.batch import BATCH_KEY
from islands_kit.protocol.extent import extent, protocol3_rules, whole
from islands_kit.protocol.fields import (
    MAX_FILE,
    MAX_LIST,
    SCALARS,
    StudyError,
    allowed,
    check_name,
    check_path,
    check_text,
    count_trials,
    seed_list,
    share_paths,
    strings,
    table_list,
)
from islands_kit.protocol.knobs import KNOBS, resolve

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the 3.10 fallback
    import tomli as tomllib

# what every study run sets besides its own settings and its seed: one thread (bit-reproducible per seed on one
# machine), the tuning split scored, no wandb, no progress lines in the logs
RUN_SETS = {"threads": "1", "data.score_tune": "true", "wandb_mode": "disabled", "progress": "false"}


@dataclass(frozen=True)
class Trial:
    """One setting of an arm: ``label`` as the grid spells it (``batch`` included), ``sets`` the ``--set`` overrides
    it expands to (the arm's fixed settings, the study's, and the batch's derived keys; not the seed)."""

    arm: str
    experiment: str
    label: tuple[tuple[str, str], ...]
    sets: tuple[tuple[str, str], ...]

    @property
    def overrides(self) -> dict[str, str]:
        return dict(self.sets)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.label) or "(defaults)"


@dataclass(frozen=True)
class Arm:
    name: str
    experiment: str
    ref: str
    fixed: dict[str, str]
    grid: dict[str, list[str]]
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)  # how far a numeric axis may be extended
    ladders: dict[str, list[str]] = field(default_factory=dict)  # the values a laddered axis (momentum) steps along

    def n_trials(self) -> int:
        n = 1
        for values in self.grid.values():
            n *= len(values)
        return n


@dataclass(frozen=True)
class Row:
    """One change on top of ``arm``'s pick (``arm`` set) or a standalone config (``experiment`` set); ``control`` names
    another row or arm its ratio is also read against (the row changes one thing from it)."""

    name: str
    arm: str | None
    experiment: str | None
    sets: dict[str, str]
    seeds: list[int]
    control: str | None = None


@dataclass(frozen=True)
class Point:
    """One point of a scaling study: ``axis`` (size | length) and its knob values (``sets``: width,
    tokens_per_active_param, length, lr_scale, or any ``--set`` key); every arm is tuned and scored there."""

    name: str
    axis: str
    sets: dict[str, str]
    arms: tuple[str, ...] | None = None  # the arms run here (each with its reference); None: every arm of the study


AXES = ("size", "length")


@dataclass
class Study:
    name: str
    preset: str
    seeds: list[int]
    tune_seeds: list[int]
    sets: dict[str, str]
    arms: dict[str, Arm]
    rows: list[Row] = field(default_factory=list)
    report: str | None = None
    description: str = ""
    path: Path | None = None
    points: list[Point] = field(default_factory=list)
    point_reports: str | None = None  # the folder of the points' reports and ledgers
    trend: str | None = None  # the scaling trend's JSON (islands_kit/scaling/trend.py)
    protocol: int = 2  # 3: tuning seeds apart from the scoring seeds, rungs, edges extended, equal time trained
    halving: int = 1  # successive halving's factor over the tuning seeds (protocol/tuning.py); 1: every trial at each
    equal_time: bool = False  # train each island arm's reference to the island arm's finishing simulated time
    executor: dict[str, Any] = field(default_factory=dict)  # where the runs are made (protocol/executor.py checks it)
    share: list[str] = field(default_factory=list)  # study files whose identical runs this one takes (protocol/share.py)

    @property
    def extends(self) -> bool:
        """Whether a pick on a grid's edge extends that axis (protocol 3)."""
        return self.protocol >= 3

    # -- expansion -----------------------------------------------------------------------------------------------
    def base_config(self, experiment: str) -> ExperimentConfig:
        return get_preset(experiment, self.preset)

    def expand(self, experiment: str, settings: dict[str, str]) -> dict[str, str]:
        """The ``--set`` overrides of the study's and ``settings``' (``batch`` and the scaling knobs resolved into
        their keys: protocol/knobs.py), checked against the config."""
        merged = {**self.sets, **settings}
        knobs = {k: v for k, v in merged.items() if k in KNOBS or k == BATCH_KEY}
        plain = {k: v for k, v in merged.items() if k not in knobs}
        base = self.base_config(experiment)
        out = resolve(base, self.preset, {**RUN_SETS, **plain}, knobs)
        apply_overrides(base, out)  # the moved keys must make a valid config too
        return out

    def at_point(self, point: Point) -> Study:
        """The study at one of its points: its arms and grids with the point's knobs set, tuned and scored on their
        own (runs under ``<root>/<point>``, report ``<reports>/<study>-<point>.json``)."""
        report = f"{self.point_reports}/{self.name}-{point.name}.json" if self.point_reports else None
        arms = self.arms if point.arms is None else {n: a for n, a in self.arms.items() if n in point.arms}
        return Study(f"{self.name}-{point.name}", self.preset, self.seeds, self.tune_seeds, {**self.sets, **point.sets},
                     arms, [], report, f"{self.description} (point {point.name})", self.path,
                     protocol=self.protocol, halving=self.halving, equal_time=self.equal_time)

    def trials(self, arm: str) -> list[Trial]:  # the grid as declared (extensions past its edges: tuning.py)
        a = self.arms[arm]
        keys = sorted(a.grid)
        out = []
        for values in itertools.product(*(a.grid[k] for k in keys)):
            label = dict(zip(keys, values))
            sets = self.expand(a.experiment, {**a.fixed, **label})
            out.append(Trial(arm, a.experiment, tuple(label.items()), tuple(sorted(sets.items()))))
        return out

    def row_trial(self, row: Row, picks: dict[str, Trial]) -> Trial:
        """The row's config: its settings on top of its arm's pick (which must be known), or standalone."""
        if row.arm is not None:
            base = picks[row.arm]
            label = {**dict(base.label), **row.sets}
            settings = {**self.arms[row.arm].fixed, **label}
            return Trial(row.name, base.experiment, tuple(label.items()),
                         tuple(sorted(self.expand(base.experiment, settings).items())))
        assert row.experiment is not None
        return Trial(row.name, row.experiment, tuple(row.sets.items()),
                     tuple(sorted(self.expand(row.experiment, row.sets).items())))

    def check_budgets(self) -> dict[str, int]:
        """Trials per arm; StudyError unless every arm tunes over exactly as many settings as its reference (a bigger
        grid is a bigger tuning budget: the comparison would favour the arm that had it)."""
        n = {name: a.n_trials() for name, a in self.arms.items()}
        for name, a in self.arms.items():
            if n[name] != n[a.ref]:
                raise StudyError(f"{self._where()}arms.{name}.grid: {n[name]} trials against {n[a.ref]} for its "
                                 f"reference {a.ref}: every arm gets its reference's tuning budget")
        return n

    def _where(self) -> str:
        return f"{self.path}: " if self.path else ""


# -- loading ---------------------------------------------------------------------------------------------------------
def _points(raw: Any, w: str, arms: dict[str, Arm]) -> list[Point]:
    if not isinstance(raw, list) or len(raw) > MAX_LIST:
        raise StudyError(f"{w}points: must be a list of at most {MAX_LIST} tables ([[points]])")
    out = []
    for i, p in enumerate(raw):
        pw = f"{w}points[{i}]"
        if not isinstance(p, dict):
            raise StudyError(f"{pw}: must be a table")
        allowed(p, {"name", "axis", "set", "arms"}, pw)
        if "name" not in p or p.get("axis") not in AXES:
            raise StudyError(f"{pw}: needs a name and an axis ({' | '.join(AXES)}), got {p.get('axis')!r}")
        out.append(Point(check_name(p["name"], f"{pw}.name"), str(p["axis"]), strings(p.get("set", {}), f"{pw}.set"),
                         _point_arms(p["arms"], f"{pw}.arms", arms) if "arms" in p else None))
    if len({p.name for p in out}) != len(out):
        raise StudyError(f"{w}points: two points share a name")
    unused = sorted(set(arms) - {a for p in out for a in (arms if p.arms is None else p.arms)})
    if out and unused:
        raise StudyError(f"{w}points: arm(s) {', '.join(unused)} run at no point (list them in a point's arms, or "
                         "leave arms out to run every arm there)")
    return out


def _point_arms(v: Any, where: str, arms: dict[str, Arm]) -> tuple[str, ...]:
    """A point's ``arms``: a non-empty list of the study's arms, each with its reference."""
    if not isinstance(v, list) or not v or not all(isinstance(a, str) for a in v) or len(set(v)) != len(v):
        raise StudyError(f"{where}: must be a non-empty list of distinct arm names (got {v!r})")
    for a in v:
        if a not in arms:
            raise StudyError(f"{where}: {a!r} is not an arm of this study ({', '.join(arms)})")
        if arms[a].ref not in v:
            raise StudyError(f"{where}: {a!r} is read against {arms[a].ref!r}, which must run at this point too")
    return tuple(a for a in arms if a in v)


# what expanding a trial may raise on a bad value (a knob of ``inf`` overflows, a zero divides), each one line
EXPANSION_ERRORS = (ValueError, OverflowError, ZeroDivisionError, TypeError)


def parse_study(doc: dict[str, Any], path: Path | None = None) -> Study:
    """A study from a parsed TOML document; every field checked, every trial expanded once (so a bad key or value
    fails here, naming it, before any run)."""
    w = f"{path}: " if path else ""
    allowed(doc, {"name", "description", "preset", "seeds", "tune_seeds", "set", "arms", "rows", "report", "points",
                   "point_reports", "trend", "protocol", "halving", "equal_time", "executor", "share"},
             w.rstrip(": ") or "study")
    if not isinstance(doc.get("executor", {}), dict):
        raise StudyError(f"{w}executor: must be a table ([executor]: kind, partition, account, time_min, ...)")
    for req in ("name", "preset", "seeds", "arms"):
        if req not in doc:
            raise StudyError(f"{w}{req}: missing (a study names itself, its preset, its seeds and its arms)")
    check_name(doc["name"], f"{w}name")
    if not isinstance(doc["preset"], str) or doc["preset"] not in PRESETS:
        raise StudyError(f"{w}preset: {doc['preset']!r} is not a preset (one of {', '.join(PRESETS)})")
    seeds = seed_list(doc["seeds"], f"{w}seeds")
    tune_seeds = seed_list(doc.get("tune_seeds", [seeds[0]]), f"{w}tune_seeds")
    arms: dict[str, Arm] = {}
    if not isinstance(doc["arms"], dict) or not doc["arms"]:
        raise StudyError(f"{w}arms: must hold at least one arm table ([arms.NAME])")
    count_trials(doc["arms"], len(doc.get("points", [])) if isinstance(doc.get("points"), list) else 0, w)
    for name, a in doc["arms"].items():
        aw = f"{w}arms.{name}"
        if not isinstance(a, dict):
            raise StudyError(f"{aw}: must be a table")
        allowed(a, {"experiment", "ref", "fixed", "grid", "bounds", "ladders"}, aw)
        exp = a.get("experiment")
        if not isinstance(exp, str) or exp not in EXPERIMENT_TABLE:
            raise StudyError(f"{aw}.experiment: {exp!r} is not an experiment (one of {', '.join(EXPERIMENT_TABLE)})")
        grid_raw = a.get("grid", {})
        if not isinstance(grid_raw, dict):
            raise StudyError(f"{aw}.grid: must be a table of key = [values]")
        grid: dict[str, list[str]] = {}
        for k, vs in grid_raw.items():
            if (not isinstance(vs, list) or not vs or not all(isinstance(v, SCALARS) for v in vs)
                    or len(set(map(str, vs))) != len(vs)):
                raise StudyError(f"{aw}.grid.{k}: must be a non-empty list of distinct values (got {str(vs)[:80]})")
            grid[str(k)] = [str(v) for v in vs]
        bounds, ladders = extent(a, grid, aw)
        arms[name] = Arm(name, exp, check_text(a.get("ref", name), f"{aw}.ref"), strings(a.get("fixed", {}), f"{aw}.fixed"),
                         grid, bounds, ladders)
    for name, a in arms.items():
        if a.ref not in arms:
            raise StudyError(f"{w}arms.{name}.ref: {a.ref!r} is not an arm of this study ({', '.join(arms)})")
    rows = []
    for i, r in enumerate(table_list(doc.get("rows", []), f"{w}rows")):
        rw = f"{w}rows[{i}]"
        if not isinstance(r, dict):
            raise StudyError(f"{rw}: must be a table")
        allowed(r, {"name", "arm", "experiment", "set", "seeds", "control"}, rw)
        if "name" not in r or ("arm" in r) == ("experiment" in r):
            raise StudyError(f"{rw}: needs a name and exactly one of arm (on top of its pick) or experiment (standalone)")
        for k in ("name", "arm", "experiment", "control"):
            if k in r:
                check_text(r[k], f"{rw}.{k}")
        if "arm" in r and r["arm"] not in arms:
            raise StudyError(f"{rw}.arm: {r['arm']!r} is not an arm of this study ({', '.join(arms)})")
        if "experiment" in r and r["experiment"] not in EXPERIMENT_TABLE:
            raise StudyError(f"{rw}.experiment: {r['experiment']!r} is not an experiment")
        rows.append(Row(str(r["name"]), r.get("arm"), r.get("experiment"), strings(r.get("set", {}), f"{rw}.set"),
                        seed_list(r.get("seeds", [seeds[0]]), f"{rw}.seeds"), r.get("control")))
    names = [r.name for r in rows]
    for r in rows:
        if r.control is not None and r.control not in arms and r.control not in names:
            raise StudyError(f"{w}rows '{r.name}'.control: {r.control!r} is neither an arm nor a row of this study")
    if len(set(names)) != len(names):
        raise StudyError(f"{w}rows: two rows share a name")
    protocol = whole(doc.get("protocol", 2), f"{w}protocol", 2, 3)
    halving = whole(doc.get("halving", 2 if protocol >= 3 else 1), f"{w}halving", 1, 8)
    equal_time = doc.get("equal_time", protocol >= 3)
    if not isinstance(equal_time, bool):
        raise StudyError(f"{w}equal_time: must be true or false (got {equal_time!r})")
    if protocol >= 3:
        protocol3_rules(seeds, tune_seeds, rows, arms, w)
    study = Study(str(doc["name"]), str(doc["preset"]), seeds, tune_seeds, strings(doc.get("set", {}), f"{w}set"),
                  arms, rows, check_path(doc.get("report"), f"{w}report", ".json"),
                  check_text(doc.get("description", ""), f"{w}description"), path,
                  _points(doc.get("points", []), w, arms), check_path(doc.get("point_reports"), f"{w}point_reports", None),
                  check_path(doc.get("trend"), f"{w}trend", ".json"), protocol, halving, equal_time,
                  dict(doc.get("executor", {})), share_paths(doc.get("share", []), f"{w}share"))
    study.check_budgets()
    if study.points:
        if rows or study.report:
            raise StudyError(f"{w}points: a study with points has no rows and no report of its own (each point's "
                             "report goes to point_reports)")
        if study.share:
            raise StudyError(f"{w}share: a study with points takes no runs from others (its points are studies of "
                             "their own)")
        for pt in study.points:  # every trial at every point: a knob that cannot be made (or leaves the regime) fails now
            sub = study.at_point(pt)
            for name in sub.arms:
                try:
                    sub.trials(name)
                except EXPANSION_ERRORS as e:
                    raise StudyError(f"{w}points '{pt.name}', arms.{name}: {e}") from None
        return study
    stand_in = {}
    for name in arms:
        try:
            stand_in[name] = study.trials(name)[0]
        except StudyError:
            raise
        except EXPANSION_ERRORS as e:  # a config rule, named by the config's own message
            raise StudyError(f"{w}arms.{name}: {e}") from None
    for row in rows:  # on its arm's first trial until the pick is known: a bad key fails now, not hours in
        try:
            study.row_trial(row, stand_in)
        except EXPANSION_ERRORS as e:
            raise StudyError(f"{w}rows '{row.name}': {e}") from None
    return study


def load_study(path: str | Path) -> Study:
    p = Path(path)
    if not p.is_file():
        raise StudyError(f"{p}: no such study file")
    try:
        doc = tomllib.loads(read_limited(p, MAX_FILE, "a study file").decode())
    except tomllib.TOMLDecodeError as e:
        raise StudyError(f"{p}: not valid TOML ({e})") from None
    except UnicodeDecodeError as e:
        raise StudyError(f"{p}: not UTF-8 text ({e})") from None
    except RecursionError:  # tomllib recurses once per nested array or table
        raise StudyError(f"{p}: nested too deeply to be a study file") from None
    except ValueError as e:  # over MAX_FILE
        raise StudyError(str(e)) from None
    return parse_study(doc, p)
