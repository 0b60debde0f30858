"""Configs people can read, write and find their way in: field help, the commented listing, config files.

* ``field_help(cls)``: one line of help per dataclass field, taken from the comment that ends the field's line in
  ``islands_kit/config/`` (one place to document a field: where it is declared).
* ``format_config(cfg)``: the resolved config as commented YAML, every field with its default and its help; the
  output of ``islands-kit config`` is itself a valid config file.
* ``load_config_file(path)``: a YAML or JSON config (a whole ``result.json`` is accepted: its ``config`` is used);
  ``config_from_file`` lays it over a preset, so a partial file only names what differs.
"""
from __future__ import annotations

import dataclasses
import inspect
import io
import json
import tokenize
import typing
from pathlib import Path
from typing import Any

from islands_kit.config import ConfigError, ExperimentConfig, apply_overrides
from islands_kit.config.experiment_table import EXPERIMENT_TABLE

_HELP: dict[type, dict[str, str]] = {}


def field_help(cls: type) -> dict[str, str]:
    """``{field: help}`` for a config dataclass: the ``# comment`` at the end of each field's line ('' if none)."""
    if cls not in _HELP:
        _HELP[cls] = _parse_help(cls)
    if cls is ExperimentConfig:  # the experiments are the table's rows, those registered later included
        return {**_HELP[cls], "experiment": f"{' | '.join(EXPERIMENT_TABLE)} (config/experiment_table.py)"}
    return _HELP[cls]


def _parse_help(cls: type) -> dict[str, str]:
    src = inspect.getsource(cls)
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    out: dict[str, str] = {}
    lines = src.splitlines()
    names = {f.name for f in dataclasses.fields(cls)}
    for i, line in enumerate(lines, start=1):
        head = line.strip().split(":", 1)[0]
        if head in names and head not in out and i in comments and not line.strip().startswith("#"):
            out[head] = comments[i]
    # a field added to the class after its source was written (a strategy's section of SyncConfig) brings its help
    return {f.name: out.get(f.name) or f.metadata.get("help", "") for f in dataclasses.fields(cls)}


def _yaml_scalar(v: Any) -> str:
    import yaml

    text = yaml.safe_dump(v, default_flow_style=True, width=10_000).strip()
    return text[:-4].rstrip() if text.endswith("\n...") else text


def _default_of(cls: type, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _lines(obj: Any, indent: str) -> list[str]:
    out = []
    cls = type(obj)
    helps = field_help(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            out.append(f"{indent}{f.name}:" + (f"  # {helps[f.name]}" if helps[f.name] else ""))
            out.extend(_lines(v, indent + "  "))
        elif typing.get_origin(hints[f.name]) is list and dataclasses.is_dataclass(typing.get_args(hints[f.name])[0]):
            out.append(f"{indent}{f.name}:" + (f"  # {helps[f.name]}" if helps[f.name] else ""))
            for item in v:
                sub = _lines(item, indent + "    ")
                out.append(indent + "  - " + sub[0].lstrip())
                out.extend(sub[1:])
        else:
            default = _default_of(cls, f.name)
            note = helps[f.name]
            if v != default:
                note = f"{note} [default {_yaml_scalar(default)}]" if note else f"[default {_yaml_scalar(default)}]"
            out.append(f"{indent}{f.name}: {_yaml_scalar(v)}" + (f"  # {note}" if note else ""))
    return out


def format_config(cfg: ExperimentConfig) -> str:
    """``cfg`` as YAML with a comment on every field: its help and, where the value differs, the dataclass default.
    Loading the text back (``load_config_file``) gives ``cfg`` again."""
    return "\n".join(_lines(cfg, "")) + "\n"


def config_rows(cfg: ExperimentConfig) -> list[tuple[str, Any, Any, str]]:
    """``(dotted key, value, default, help)`` for every leaf field (``islands.N.field`` for the islands)."""
    rows: list[tuple[str, Any, Any, str]] = []

    def walk(obj: Any, prefix: str) -> None:
        helps = field_help(type(obj))
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if dataclasses.is_dataclass(v):
                walk(v, f"{prefix}{f.name}.")
            elif isinstance(v, list) and v and all(dataclasses.is_dataclass(x) for x in v):
                for i, item in enumerate(v):
                    walk(item, f"{prefix}{f.name}.{i}.")
            else:
                rows.append((prefix + f.name, v, _default_of(type(obj), f.name), helps[f.name]))

    walk(cfg, "")
    return rows


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A config mapping from a ``.yaml``/``.yml`` or ``.json`` file. A run's ``result.json`` is accepted as is (its
    ``config`` entry is the config), so ``--config runs/x/result.json`` reruns that run."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config: no such file {str(p)!r}")
    text = p.read_text()
    suffix = p.suffix.lower()
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise ConfigError(f"--config: {p} is not valid YAML ({getattr(e, 'problem', None) or e}{where})") from None
    elif suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--config: {p} is not valid JSON ({e})") from None
    else:
        raise ConfigError(f"--config: {p} must end in .yaml, .yml or .json")
    if isinstance(data, dict) and isinstance(data.get("config"), dict) and "final_val_bpb" in data:
        data = data["config"]  # a result.json
    if not isinstance(data, dict):
        raise ConfigError(f"--config: {p} must hold a mapping of config fields (got {type(data).__name__})")
    return data


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> dotted keys; lists (``islands``) stay whole values."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_from_file(data: dict[str, Any], experiment: str | None, preset: str | None) -> ExperimentConfig:
    """``data`` (from ``load_config_file``) laid over ``presets.get_preset(experiment, preset)``.

    ``experiment`` / ``preset`` default to the file's own (preset: then ``smoke``); an experiment given both ways
    must agree. Every key of the file is applied like a ``--set`` (``link.preset`` first sets every link field),
    so a file from ``islands-kit config`` or a ``result.json`` reproduces its config exactly."""
    from islands_kit.config.presets import get_preset

    file_exp = data.get("experiment")
    if experiment and file_exp and experiment != file_exp:
        raise ConfigError(f"experiment: the command names {experiment!r}, the config file {file_exp!r}")
    exp = experiment or file_exp
    if not exp:
        raise ConfigError("experiment: name it on the command line or in the config file (experiment: two_site)")
    base = get_preset(exp, preset or data.get("preset") or "smoke")
    # an ``islands`` list replaces the preset's whole; fields an island leaves out take IslandConfig's defaults
    return apply_overrides(base, flatten(data))
