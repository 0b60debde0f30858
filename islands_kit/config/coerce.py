"""Config dataclasses from mappings (files, ``--set`` strings): each value coerced to its field's annotated type."""
from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import fields
from typing import Any

from islands_kit.config.keys import nearest
from islands_kit.rules import ConfigError, _check, _finite, _show


def _coerce(tp: Any, value: Any, path: str) -> Any:
    """Coerce ``value`` to the annotated type ``tp`` (bool/int/float/str, lists of dataclasses) or raise ConfigError."""
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        _check(isinstance(value, dict), path, f"must be a mapping of {tp.__name__} fields", value)
        return build(tp, value, path + ".")
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if isinstance(value, str):  # from the command line: --set 'islands=[{"batch_size": 40, ...}]'
            try:
                value = json.loads(value)
            except ValueError:
                raise ConfigError(f"{path}: must be a list (on the command line a JSON list) (got {value!r})") from None
        _check(isinstance(value, (list, tuple)), path, "must be a list", value)
        return [_coerce(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        _check(isinstance(value, bool), path, "must be a boolean (true/false)", value)
        return value
    if tp is int or tp is float:
        what = "an integer" if tp is int else "a number"
        if isinstance(value, str):  # from the command line
            try:
                value = tp(value)
            except ValueError:
                raise ConfigError(f"{path}: must be {what} (got {_show(value)})") from None
        ok = (int,) if tp is int else (int, float)
        _check(isinstance(value, ok) and not isinstance(value, bool), path, f"must be {what}", value)
        _check(tp is int or _finite(value), path, "must be a finite number", value)
        return tp(value)
    if tp is str:
        _check(isinstance(value, str), path, "must be a string", value)
        return value
    return value


def from_dict(cls: type, d: dict[str, Any], prefix: str = "") -> Any:
    """A config dataclass ``cls`` from a mapping read from a file: unknown keys, wrong types and broken rules raise
    ConfigError naming ``prefix`` + the field."""
    return build(cls, d, prefix)


_HINTS: dict[type, tuple[Any, dict[str, Any]]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """``cls``'s field types, resolved once per class (resolving the string annotations is most of a config's build),
    and again when its annotations are replaced (a registered sync section re-makes SyncConfig's, config/sync.py)."""
    annotations = cls.__dict__.get("__annotations__")
    kept = _HINTS.get(cls)
    if kept is None or kept[0] is not annotations:  # the kept dict stays referenced, so identity cannot be reused
        kept = _HINTS[cls] = (annotations, typing.get_type_hints(cls))
    return kept[1]


def build(cls: type, d: dict[str, Any], prefix: str) -> Any:
    hints = _hints(cls)
    names = {f.name for f in fields(cls) if f.init}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown key{nearest(unknown[0], names, prefix)} "
                          f"(valid keys: {', '.join(sorted(names))})")
    kwargs = {k: _coerce(hints[k], v, prefix + k) for k, v in d.items()}
    return cls(**kwargs)
