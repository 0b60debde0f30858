"""Sync strategies (pure algorithms over a ``Transport``) and their registry (``registry.py``).

Importing the package registers the built-in strategies, torch-free: each ``*_spec.py`` holds one spec (settings,
rules, traits, the path of its builder), registered here in the order the kit lists them; the algorithms themselves
are imported when a run builds one. Importing ``islands_kit`` imports this package, so every config knows them.
"""
from islands_kit.sync import butterfly_spec, ddp_spec, decoupled_spec, diloco_spec, hierarchical_spec
from islands_kit.sync.registry import register_strategy

for _spec in (ddp_spec.SPEC, diloco_spec.SPEC, butterfly_spec.SPEC, decoupled_spec.SPEC, hierarchical_spec.SPEC):
    register_strategy(_spec)
