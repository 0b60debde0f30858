"""Who sends to whom in which round, as a value: a ``Topology`` is a list of rounds, each a permutation of the
islands (``rounds[r][i]``: the island i sends to in round r); a strategy's c-th step uses round c mod R.

The transport carries a round as one directed step (``Transport.send_recv``): every island sends its payload to its
target and receives the payload of the island that targets it, priced per direction. A round that is its own
inverse (i -> j and j -> i) is a pairwise exchange; an island that targets itself sends nothing that round. So a new
pairing is data handed to a strategy, not a new strategy:

    butterfly(n)              round r: i -> i XOR 2^r, R = log2 n (Zhao & Canny 2013; after R rounds of equal-weight
                              merges every island holds the mean)
    ring(n, hop)              one round: i -> (i + hop) mod n, so i receives from i - hop
    random_pairing(n, R, seed)  R rounds, each a seeded random perfect matching (odd n: one island sits out a round)
    sites_of_cells(S, C, local)  S sites of C cells (island s C + c): ``local`` passes of butterfly rounds among each
                              site's cells, then butterfly rounds among the sites, cell c with cell c

Pure integers, no torch: the projection, the plots and the tests read the same values.
"""
from __future__ import annotations

import random
from dataclasses import dataclass


def check_power_of_two(n: int) -> int:
    """Number of rounds R = log2(n); a cell count that is not a power of two >= 2 is an error."""
    if n < 2 or n & (n - 1):
        raise ValueError(f"islands: butterfly mixing needs a power-of-two number of cells >= 2 (got {n})")
    return n.bit_length() - 1


def partner(cell: int, round_: int) -> int:
    """The butterfly partner of ``cell`` in round ``round_``: cell XOR 2^round."""
    return cell ^ (1 << round_)


@dataclass(frozen=True)
class Topology:
    """Rounds of targets (module doc): ``rounds[r][i]`` is where island i sends in round r, a permutation of
    0..n-1 in every round (a ValueError naming the round otherwise)."""

    name: str
    rounds: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.rounds:
            raise ValueError(f"topology {self.name}: needs at least one round")
        n = len(self.rounds[0])
        for r, targets in enumerate(self.rounds):
            if sorted(targets) != list(range(n)):
                raise ValueError(f"topology {self.name}: round {r} must send each of the {n} islands to a different "
                                 f"island (a permutation of 0..{n - 1}; got {list(targets)})")

    @property
    def n(self) -> int:
        return len(self.rounds[0])

    def __len__(self) -> int:
        return len(self.rounds)

    def targets(self, step: int) -> dict[int, int]:
        """Island -> the island it sends to, at the strategy's ``step``-th exchange (round step mod R)."""
        return dict(enumerate(self.rounds[step % len(self.rounds)]))

    def source(self, island: int, step: int) -> int:
        """The island whose payload ``island`` receives at the ``step``-th exchange."""
        return self.rounds[step % len(self.rounds)].index(island)

    def symmetric(self, step: int) -> bool:
        """Is that round a pairwise exchange (every island receives from the island it sends to)?"""
        t = self.rounds[step % len(self.rounds)]
        return all(t[t[i]] == i for i in range(len(t)))


def butterfly(n: int) -> Topology:
    """Round r pairs island i with i XOR 2^r, r = 0 .. log2(n) − 1."""
    return Topology("butterfly", tuple(tuple(partner(i, r) for i in range(n)) for r in range(check_power_of_two(n))))


def ring(n: int, hop: int = 1) -> Topology:
    """One round: island i sends to i + hop (mod n) and receives from i − hop."""
    if n < 2 or hop % n == 0:
        raise ValueError(f"ring: needs n >= 2 islands and a hop that is not a multiple of n (got n={n}, hop={hop})")
    return Topology(f"ring{hop:+d}", (tuple((i + hop) % n for i in range(n)),))


def random_pairing(n: int, rounds: int, seed: int) -> Topology:
    """``rounds`` rounds, each a perfect matching drawn with ``seed`` (the same on every process); with odd n the
    island left over sends nothing that round."""
    if n < 2 or rounds < 1:
        raise ValueError(f"random_pairing: needs n >= 2 islands and rounds >= 1 (got n={n}, rounds={rounds})")
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        order = list(range(n))
        rng.shuffle(order)
        targets = list(range(n))
        for a, b in zip(order[0::2], order[1::2]):
            targets[a], targets[b] = b, a
        out.append(tuple(targets))
    return Topology(f"random_pairing(seed={seed})", tuple(out))


def sites_of_cells(n_sites: int, cells: int, local: int = 1) -> Topology:
    """Island s·C + c is cell c of site s (both counts powers of two): ``local`` passes of the butterfly among each
    site's cells, then the butterfly among the sites pairing equal cell indices. With local = 1 it is the butterfly
    over all n = S·C islands, in that round order."""
    if local < 1:
        raise ValueError(f"sites_of_cells: local must be >= 1 (got {local})")
    inside = [tuple(s * cells + partner(c, r) for s in range(n_sites) for c in range(cells))
              for r in range(check_power_of_two(cells))]
    across = [tuple(partner(s, r) * cells + c for s in range(n_sites) for c in range(cells))
              for r in range(check_power_of_two(n_sites))]
    return Topology(f"sites_of_cells({n_sites}x{cells}, local={local})", tuple(inside * local + across))
