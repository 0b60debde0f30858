"""Hierarchical islands' home beside its algorithm (``sync/hierarchical.py``): its settings ``sync.hierarchical.*``
(``HierarchicalConfig``), the rules they obey, the strategy's traits and its spec (with its two-link model,
``sync/hierarchical.py: site_links``). Torch-free (``sync/registry.py``); the WAN level shares ``sync.diloco.*``.

S sites of C cells (``islands`` in order: island s·C + c is cell c of site s): inside a site the cells sync every
H₁ = ``site_every`` steps over the site's fast link (``site_link``), across sites DiLoCo's fragments sync every
H₂ = ``sync.H`` steps over the WAN (``link.*``) with ``sync.diloco``'s outer optimizer and ``sync.codec``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from islands_kit.config.link import LINK_PRESETS
from islands_kit.config.strategies import StrategyTraits
from islands_kit.config.sync import Section
from islands_kit.rules import _check, _check_fields
from islands_kit.sync.diloco_spec import SUMMARY
from islands_kit.sync.registry import StrategySpec

SITE_MODES = ("mean", "pairwise")


def power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


@dataclass
class HierarchicalConfig:
    """Hierarchical-only knobs (``sync.hierarchical.*``; Lin et al. 2018, arXiv 1808.07217; HALoS, arXiv
    2506.04531): C = cells_per_site, H₁ = site_every, how a site sync mixes its cells and the intra-site link."""

    cells_per_site: int = 4  # C: consecutive islands form a site (island s·C + c is cell c of site s); a power of two
    site_every: int = 10  # H₁: every H₁ inner steps the cells of each site sync their whole replica (fp32)
    site_mode: str = "mean"  # mean: log2 C butterfly rounds, every cell ends with the site mean | pairwise: one round
    #   per sync (the partner c XOR 2^r, r cycling), each cell averaging with one other: gossip, cheaper, not exact
    site_link: str = "intra-dc"  # the intra-site link, a named link (config/link.py LINK_PRESETS); the WAN is link.*

    def __post_init__(self) -> None:
        p = "sync.hierarchical."
        _check_fields(self, p)
        _check(isinstance(self.cells_per_site, int) and power_of_two(self.cells_per_site), p + "cells_per_site",
               "must be a power of two >= 1 (the site's butterfly rounds)", self.cells_per_site)
        _check(self.site_every >= 1, p + "site_every", "must be >= 1", self.site_every)
        _check(self.site_mode in SITE_MODES, p + "site_mode", "must be one of " + "|".join(SITE_MODES), self.site_mode)
        _check(self.site_link in LINK_PRESETS, p + "site_link", "must be one of " + "|".join(LINK_PRESETS),
               self.site_link)


def check_run(cfg: Any) -> None:
    """The rules between ``sync.hierarchical`` and the rest of an ExperimentConfig (run for every config; they bind
    only when the strategy is hierarchical)."""
    if cfg.sync.traits.name != "hierarchical":
        return
    h, d = cfg.sync.hierarchical, cfg.sync.diloco
    n, c = len(cfg.islands), h.cells_per_site
    _check(n % c == 0 and power_of_two(n // c), "sync.hierarchical.cells_per_site",
           f"must divide the {n} islands into a power-of-two number of sites", c)
    if c == 1:  # one cell a site: the strategy is DiLoCo between the sites, every DiLoCo setting holds
        return
    batches = sorted({i.batch_size for i in cfg.islands})
    _check(len(batches) == 1, "islands[*].batch_size",
           "must be equal on every cell with sync.hierarchical.cells_per_site > 1 (sites and cells are averaged with "
           "equal weights)", batches)
    _check(d.average == "mean", "sync.diloco.average", "must be mean with sync.hierarchical.cells_per_site > 1 (the "
           "hierarchical all-reduce sums, it does not gather)", d.average)
    _check(not d.eager and d.warm_start_steps == 0, "sync.diloco",
           "eager updates and the warm start are not hierarchical: not with sync.hierarchical.cells_per_site > 1",
           "eager" if d.eager else "warm_start_steps")
    _check(cfg.link.schedule == "periodic", "link.schedule", "must be periodic with sync.strategy=hierarchical",
           cfg.link.schedule)


SECTION = Section("hierarchical", HierarchicalConfig, "hierarchical-only knobs (cells per site, H1, site sync, site link)",
                  check_run=check_run)
TRAITS = StrategyTraits("hierarchical", "hierarchical", "lockstep",
                        "hierarchical islands (cells synced inside a site often, DiLoCo across sites rarely)",
                        checkpoints=False,
                        summary="hierarchical: {s.hierarchical.cells_per_site} cells a site synced ({s.hierarchical.site_mode}) "
                        "every H1={s.hierarchical.site_every} steps over {s.hierarchical.site_link}; across sites "
                        "streaming DiLoCo " + SUMMARY)
SPEC = StrategySpec(TRAITS, "islands_kit.sync.hierarchical:build", (SECTION,), link="islands_kit.sync.hierarchical:site_links",
                    step_keys=("sync.hierarchical.site_every",))
