"""Routing statistics along the butterfly: each cell balances against the mean of its own and its round partner's
distributions (one step late), one message per cell per step instead of an all-reduce among all cells."""
from __future__ import annotations

import pytest
import torch

from islands_kit.comm.transport import LocalTransport
from islands_kit.config import ConfigError, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.sync.routing import RoutingSync


def test_butterfly_routing_averages_with_the_round_partner():
    n, L, E = 8, 2, 4
    rs = RoutingSync(LocalTransport(n), enabled=True, butterfly=True)
    g = torch.Generator().manual_seed(0)
    sent = []
    outs = []
    for _ in range(4):
        loads = {i: torch.randint(1, 50, (L, E), generator=g).float() for i in range(n)}
        sent.append({i: l / l.sum(-1, keepdim=True) for i, l in loads.items()})
        outs.append(rs.sync(loads, {i: 5 for i in range(n)}))
    assert outs[0] is None  # one step late
    for c in range(3):  # message c (round c mod 3) is consumed at call c + 1
        r = c % 3
        for i in range(n):
            j = i ^ (1 << r)
            torch.testing.assert_close(outs[c + 1][i], 0.5 * (sent[c][i] + sent[c][j]))
    # one fp32 message per cell per call, never to more than one peer
    led = rs.transport.ledger
    assert led.to_dict()["channels"]["routing"]["messages"] == 4 * n


def test_state_round_trip_mid_flight():
    n = 4
    a = RoutingSync(LocalTransport(n), enabled=True, butterfly=True)
    loads = {i: torch.full((1, 3), float(i + 1)) for i in range(n)}
    a.sync(loads, {i: 1 for i in range(n)})
    b = RoutingSync(LocalTransport(n), enabled=True, butterfly=True)
    b.load_state_dict(a.state_dict())
    nxt = {i: torch.tensor([[1.0, 2.0, 3.0]]) * (i + 1) for i in range(n)}
    out_a, out_b = a.sync(nxt, {i: 1 for i in range(n)}), b.sync(nxt, {i: 1 for i in range(n)})
    assert all(torch.equal(out_a[i], out_b[i]) for i in range(n)) and b.calls == a.calls == 2


def test_butterfly_routing_needs_a_power_of_two():
    from islands_kit.config import ExperimentConfig
    from islands_kit.config.presets import preset_dict

    d = preset_dict("two_site", "smoke")
    d["islands"] = d["islands"] + [d["islands"][0]]  # three islands
    d["sync"]["routing_sync_mode"] = "butterfly"
    with pytest.raises(ConfigError, match="islands: butterfly mixing needs a power-of-two"):
        ExperimentConfig.from_dict(d)
    with pytest.raises(ConfigError, match="sync.routing_sync_mode"):
        apply_overrides(get_preset("two_site", "smoke"), {"sync.routing_sync_mode": "gossip"})
