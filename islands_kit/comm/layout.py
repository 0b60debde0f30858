"""Which global ranks hold which island (``RankLayout``): one process per island or one per data-parallel rank."""
from __future__ import annotations

from dataclasses import dataclass

from islands_kit.config import ConfigError, ExperimentConfig


@dataclass(frozen=True)
class RankLayout:
    """Which global ranks hold which island: island i owns ``ranks_per_island[i]`` contiguous ranks, its first is its
    leader."""

    ranks_per_island: tuple[int, ...]

    @property
    def world_size(self) -> int:
        return sum(self.ranks_per_island)

    def first_rank(self, island: int) -> int:
        return sum(self.ranks_per_island[:island])

    def ranks_of(self, island: int) -> list[int]:
        lo = self.first_rank(island)
        return list(range(lo, lo + self.ranks_per_island[island]))

    def island_of(self, rank: int) -> int:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank: must be in [0, {self.world_size}) (got {rank})")
        for i in range(len(self.ranks_per_island)):
            if rank < self.first_rank(i) + self.ranks_per_island[i]:
                return i
        raise AssertionError("unreachable")

    @property
    def leaders(self) -> list[int]:
        return [self.first_rank(i) for i in range(len(self.ranks_per_island))]

    @classmethod
    def for_world(cls, cfg: ExperimentConfig, world_size: int) -> "RankLayout":
        """One process per island when ``world_size == len(islands)`` (dp_ranks folded into micro-batches), else one
        process per data-parallel rank when ``world_size == sum(dp_ranks)``; anything else is a ConfigError."""
        n = len(cfg.islands)
        per_rank = tuple(isl.dp_ranks for isl in cfg.islands)
        if world_size == n:
            return cls((1,) * n)
        if world_size == sum(per_rank):
            return cls(per_rank)
        raise ConfigError(
            f"islands[*].dp_ranks: WORLD_SIZE must equal len(islands) = {n} (one process per island, dp_ranks folded "
            f"into micro-batches) or sum(islands[*].dp_ranks) = {sum(per_rank)} (one process per data-parallel rank, "
            f"dp_ranks = {list(per_rank)}) (got WORLD_SIZE={world_size})")
