"""Typed experiment configuration: dataclasses, eager validation, named links, dotted overrides.

Every field is validated in ``__post_init__`` (or ``ExperimentConfig.validate``) so a bad value fails before any
work starts, with a message that names the field and the rule it broke (``ConfigError``, the scalar type check and
the shared bounds live in ``islands_kit/rules.py``, below this package and ``orbital/``). One file per section:

  model.py       model.*, optim.*
  sync.py        sync.* (what every strategy shares) and the registered strategies' own sections (sync.<key>.*),
                 strategies.py  their traits; a strategy declares both beside its code (sync/*_spec.py)
  link.py        link.* and the named links; link.orbit.* (the orbit behind link.schedule=orbit) is
                 islands_kit/orbital/config.py, torch-free like this package
  data.py, faults.py   data.*, faults.*
  experiment.py  islands, top-level fields and the rules that span sections
  coerce.py      mappings -> dataclasses;  keys.py  did-you-mean;  overrides.py  --set key=value
"""
from islands_kit.config.codec_registry import CODECS
from islands_kit.config.coerce import from_dict
from islands_kit.config.data import DataConfig
from islands_kit.config.experiment import (
    PRECISIONS,
    ExperimentConfig,
    IslandConfig,
    check_device_spelling,
)
from islands_kit.config.experiment_table import EXPERIMENTS
from islands_kit.config.faults import ATTACKS, DEFENSES, FaultConfig
from islands_kit.config.keys import MOVED_KEYS, SYNONYMS
from islands_kit.config.link import LINK_PRESETS, LinkConfig, link_config
from islands_kit.config.model import INNER_OPTIMIZERS, ModelConfig, MuonConfig, OptimConfig, SnooConfig
from islands_kit.config.overrides import apply_overrides, parse_set
from islands_kit.config.sync import Section, SyncConfig
from islands_kit.orbital.config import OrbitConfig, StationConfig
from islands_kit.rules import (
    INT_MAX,
    MAX_CHUNK_FAILURE,
    MAX_LR,
    MAX_SENDS_PER_CHUNK,
    MAX_THREADS,
    SEED_MAX,
    STEPS_MAX,
    ConfigError,
    _check,
)

__all__ = [
    "ATTACKS", "CODECS", "DEFENSES", "EXPERIMENTS", "INT_MAX", "LINK_PRESETS", "MAX_CHUNK_FAILURE", "MAX_LR",
    "MAX_SENDS_PER_CHUNK", "MAX_THREADS", "MOVED_KEYS", "PRECISIONS", "SYNONYMS", "SEED_MAX", "STEPS_MAX",
    "ConfigError", "DataConfig", "ExperimentConfig", "FaultConfig", "IslandConfig",
    "INNER_OPTIMIZERS", "LinkConfig", "ModelConfig", "MuonConfig", "OptimConfig", "OrbitConfig", "Section", "SnooConfig",
    "StationConfig", "SyncConfig", "_check",
    "apply_overrides",
    "check_device_spelling", "from_dict", "link_config", "parse_set",
]
