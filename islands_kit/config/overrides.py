"""Dotted-path overrides (``--set sync.H=100``) applied to a config and re-validated."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from islands_kit.config.experiment import ExperimentConfig
from islands_kit.config.keys import dotted_keys, nearest
from islands_kit.config.link import link_config
from islands_kit.rules import ConfigError, _check


def apply_overrides(cfg: ExperimentConfig, overrides: dict[str, Any]) -> ExperimentConfig:
    """Apply dotted-path overrides such as ``{"sync.H": "100"}`` and re-validate; unknown keys and bad types raise."""
    d = cfg.to_dict()
    if "link.preset" in overrides:  # a named link first sets every link field; explicit link.* overrides then apply
        d["link"] = asdict(link_config(str(overrides["link.preset"])))
        overrides = {k: v for k, v in overrides.items() if k != "link.preset"}
    for key, value in overrides.items():
        node: Any = d
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            if isinstance(node, list):
                _check(part.isdigit() and int(part) < len(node), ".".join(parts[: i + 1]), "must index an existing list item", part)
                node = node[int(part)]
            else:
                if not (isinstance(node, dict) and part in node):
                    raise ConfigError(f"{key}: unknown key{nearest(key, dotted_keys(d))}")
                node = node[part]
        last = parts[-1]
        if isinstance(node, list):
            _check(last.isdigit() and int(last) < len(node), key, "must index an existing list item", last)
            node[int(last)] = value
        else:
            if not (isinstance(node, dict) and last in node):
                raise ConfigError(f"{key}: unknown key{nearest(key, dotted_keys(d))}")
            node[last] = value
    return ExperimentConfig.from_dict(d)


def parse_set(items: list[str]) -> dict[str, str]:
    """Parse CLI ``--set key=value`` items."""
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: must have the form key=value, one word (e.g. --set sync.H=100)")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out
