"""Decoupled DiLoCo's home beside its algorithm (``sync/decoupled.py``): its settings ``sync.decoupled.*``
(``DecoupledConfig``), the key that moved out of them, the strategy's traits and its spec; it shares
``sync.diloco.*`` with lock-step DiLoCo (``sync/diloco_spec.py``). Torch-free (``sync/registry.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from islands_kit.config.strategies import StrategyTraits
from islands_kit.config.sync import Section
from islands_kit.rules import _check, _check_fields
from islands_kit.sync.diloco_spec import SUMMARY
from islands_kit.sync.registry import StrategySpec


@dataclass
class DecoupledConfig:
    """Decoupled-DiLoCo knobs (``sync.decoupled.*``; Douillard et al. 2026, arXiv 2604.21428), used with
    ``sync.mode=decoupled``: how a merge weighs the outer gradients that made it (``sync.diloco.average`` averages them,
    in both modes), and what happens to one
    that arrived after the merge (``sync.quorum`` and ``sync.grace_s`` decide which arrive in time)."""

    weighting: str = "tokens"  # tokens: w = tokens since the island's last contribution | efficiency: w = tokens x
    #   (tokens per inner step / the largest tokens per step among the contributors), the paper's efficiency weighting
    late: str = "carry"  # carry: a late outer gradient joins the fragment's next merge | drop: it is discarded

    def __post_init__(self) -> None:
        p = "sync.decoupled."
        _check_fields(self, p)
        _check(self.weighting in ("tokens", "efficiency"), p + "weighting", "must be one of tokens|efficiency",
               self.weighting)
        _check(self.late in ("carry", "drop"), p + "late", "must be one of carry|drop", self.late)


def upgrade(sync: dict[str, Any]) -> dict[str, Any]:
    """A result.json or checkpoint that still holds ``sync.decoupled.average``, the decoupled mode's own averaging key
    before both modes shared ``sync.diloco.average``: its value moves there."""
    old = sync.get("decoupled")
    if not (isinstance(old, dict) and "average" in old):
        return sync
    decoupled = dict(old)
    average = decoupled.pop("average")
    diloco = dict(sync.get("diloco") or {})
    if average != "mean":
        diloco["average"] = average
    return {**sync, "decoupled": decoupled, "diloco": diloco}


SECTION = Section("decoupled", DecoupledConfig, "decoupled-only knobs (weighting, late outer gradients)",
                  moved={"sync.decoupled.average": "sync.diloco.average"}, upgrade=upgrade)  # one averaging rule for both modes
TRAITS = StrategyTraits("decoupled", "diloco", "decoupled", "decoupled DiLoCo (own clocks, a quorum merges what arrives in time)",
                        takes_faults=True, global_state=True, own_clocks=True, quorum=True, checkpoints=False,
                        projection="quorum", summary="decoupled streaming DiLoCo (quorum {s.quorum}, grace {s.grace_s} s) " + SUMMARY)
SPEC = StrategySpec(TRAITS, "islands_kit.sync.decoupled:build", (SECTION,))
