"""Topologies as values (``sync/topology.py``) and the transport's directed step (``Transport.send_recv``): every
round is a permutation, the butterfly's rounds are i XOR 2^r, sites of cells with one local pass are the butterfly,
mixing over the rounds reaches the mean (exactly for the butterfly and sites of cells, in the limit for a ring), and
the simulator delivers each island its source's payload, priced once per direction."""
from __future__ import annotations

import pytest
import torch

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.transport import LocalTransport
from islands_kit.sync.butterfly import mixing_matrix
from islands_kit.sync.topology import Topology, butterfly, random_pairing, ring, sites_of_cells


def test_every_round_is_a_permutation_and_a_bad_one_is_refused() -> None:
    for top in (butterfly(8), ring(5), ring(6, hop=-2), random_pairing(7, 4, seed=3), sites_of_cells(4, 2, local=3)):
        for c in range(len(top)):
            assert sorted(top.targets(c).values()) == list(range(top.n))
            assert all(top.targets(c)[top.source(i, c)] == i for i in range(top.n))
    with pytest.raises(ValueError, match=r"topology bad: round 1 must send each of the 3 islands to a different island"):
        Topology("bad", ((1, 2, 0), (1, 1, 0)))
    with pytest.raises(ValueError, match="power-of-two number of cells"):
        butterfly(6)


def test_the_butterfly_is_xor_and_sites_of_cells_with_one_local_pass_is_the_butterfly() -> None:
    top = butterfly(8)
    assert len(top) == 3 and all(top.targets(r)[i] == i ^ (1 << r) for r in range(3) for i in range(8))
    assert all(top.symmetric(r) for r in range(3)) and top.targets(3) == top.targets(0)  # rounds repeat
    assert sites_of_cells(2, 4).rounds == top.rounds
    hier = sites_of_cells(2, 4, local=2)  # cells 0-3 on site 0, 4-7 on site 1: two local passes, then across
    assert len(hier) == 2 * 2 + 1 and all(hier.targets(r)[i] // 4 == i // 4 for r in range(4) for i in range(8))
    assert all(hier.targets(4)[i] == (i + 4) % 8 for i in range(8))
    assert not ring(4).symmetric(0) and ring(2).symmetric(0)


@pytest.mark.parametrize("top", [butterfly(8), sites_of_cells(2, 4, local=2), sites_of_cells(4, 2, local=1)],
                         ids=lambda t: t.name)
def test_equal_weight_merges_over_all_rounds_give_every_island_the_mean(top: Topology) -> None:
    W = mixing_matrix(top.n, list(range(len(top))), top)
    assert torch.allclose(W, torch.full((top.n, top.n), 1.0 / top.n, dtype=torch.float64), atol=1e-12)


def test_a_ring_mixes_towards_the_mean_and_preserves_it() -> None:
    top = ring(5)
    W = mixing_matrix(5, list(range(60)), top)
    assert torch.allclose(W.sum(0), torch.ones(5, dtype=torch.float64)) and torch.allclose(W.sum(1), torch.ones(5, dtype=torch.float64))
    assert (W - 0.2).abs().max() < 1e-3 and (mixing_matrix(5, [0], top) - 0.2).abs().max() > 0.2


def test_random_pairings_are_seeded_matchings() -> None:
    a, b = random_pairing(8, 5, seed=1), random_pairing(8, 5, seed=1)
    assert a == b and a.rounds != random_pairing(8, 5, seed=2).rounds
    assert all(a.symmetric(c) and all(a.targets(c)[i] != i for i in range(8)) for c in range(5))
    odd = random_pairing(5, 3, seed=0)  # one island sits out each round
    assert all(sum(odd.targets(c)[i] == i for i in range(5)) == 1 for c in range(3))


def test_send_recv_delivers_the_sources_payload_priced_once_per_direction() -> None:
    n, codec = 4, get_codec("fp32")
    payloads = {i: codec.encode(torch.full((10,), float(i))) for i in range(n)}
    t = LocalTransport(n)
    h = t.send_recv("ring", payloads, ring(n).targets(0))
    assert [float(h.wait(i)[0]) for i in range(n)] == [3.0, 0.0, 1.0, 2.0]  # island i hears from i - 1
    assert t.ledger.bytes("ring") == n * payloads[0].nbytes
    assert sorted((src, dst) for _, _, _, src, dst, _ in t.ledger.timeline) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    h = t.send_recv("pair", payloads, {0: 1, 1: 0, 2: 2, 3: 3})  # islands 2 and 3 sit out: no bytes, their own back
    assert [float(h.wait(i)[0]) for i in range(n)] == [1.0, 0.0, 2.0, 3.0]
    assert t.ledger.bytes("pair") == 2 * payloads[0].nbytes
    with pytest.raises(ValueError, match=r"send_recv on 'x': targets must map each of the 4 islands to a different"):
        t.send_recv("x", payloads, {0: 1, 1: 1, 2: 3, 3: 0})
