"""Sync strategies (pure algorithms over a ``Transport``) and their registry (``registry.py``).

Importing the package registers every built-in strategy: each module registers its own spec.
"""
from islands_kit.sync import butterfly, ddp, decoupled, diloco  # noqa: F401  (each registers its StrategySpec)
