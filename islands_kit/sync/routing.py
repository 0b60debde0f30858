"""MoE routing-statistics sync: every step the islands' expert loads go through an all-reduce on their own small
channel, so every replica nudges its aux-loss-free balancing bias with the *same* global loads and selects experts
with the same balancing state. Also: routing-drift diagnostics between replicas.
"""
from __future__ import annotations

import math

import torch

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.transport import Handle, Transport
from islands_kit.sync import topology


class RoutingSync:
    """``sync(loads)`` returns, per local island, the loads that island should balance against.

    Enabled: the token-weighted mean of every island's routing distribution (loads / tokens routed), one step late —
    the all-reduce posted after step t is consumed after step t + ``delay`` (default 1), so the small message overlaps
    a step of compute instead of stalling every step for a round trip (on a 145 ms link that stall would cost more
    than a quarter of the compute at seed scale). Every island applies the same mean at the same step, so the
    balancing biases stay identical across replicas. Disabled: each island balances on its own loads at once and no
    bytes are sent."""

    channel = "routing"

    def __init__(self, transport: Transport, enabled: bool, delay: int = 1, butterfly: bool = False) -> None:
        """``butterfly``: instead of an all-reduce, the c-th message goes to the butterfly partner of round
        c mod log2(n) (cell i XOR 2^r) and each cell balances against the equal-weight mean of its own and its
        partner's distributions — no collective among all cells, as the eight-cell experiment promises; the cells'
        balancing states then differ (as their replicas do) and information spreads over log2(n) steps."""
        self.transport = transport
        self.enabled = enabled and transport.n_islands > 1
        self.delay = delay
        self.butterfly = butterfly
        if butterfly:
            self.topology = topology.butterfly(transport.n_islands)
            self.fp32 = get_codec("fp32")
        self.calls = 0
        self.in_flight: list[tuple[Handle, torch.Size]] = []
        self.own: list[dict[int, torch.Tensor]] = []  # butterfly: each in-flight message's own distributions

    def _post(self, fracs: dict[int, torch.Tensor], tokens: dict[int, int]) -> Handle:
        if not self.butterfly:
            return self.transport.all_reduce_tensor(self.channel, fracs, {i: float(tokens[i]) for i in fracs})
        self.own.append({i: f.reshape(-1).clone() for i, f in fracs.items()})
        return self.transport.send_recv(self.channel, {i: self.fp32.encode(f.reshape(-1)) for i, f in fracs.items()},
                                        self.topology.targets(self.calls))

    def sync(self, loads: dict[int, torch.Tensor], tokens: dict[int, int]) -> dict[int, torch.Tensor] | None:
        if not self.enabled:
            return loads
        shape = next(iter(loads.values())).shape
        # loads are token counts: turn them into per-island fractions so the mean is a proper routing distribution
        fracs = {i: l / l.sum(dim=-1, keepdim=True).clamp_min(1.0) for i, l in loads.items()}
        self.in_flight.append((self._post(fracs, tokens), shape))
        self.calls += 1
        if len(self.in_flight) <= self.delay:
            return None
        h, shape = self.in_flight.pop(0)
        if self.butterfly:
            own = self.own.pop(0)
            return {i: (0.5 * (own[i].to(loads[i].device) + h.wait(i).to(loads[i].device))).view(shape)
                    for i in loads if i in h.arrival}
        out = {i: h.wait(i).view(shape).to(loads[i].device) for i in loads if i in h.arrival}
        if out:  # an island back from preemption this step was not in that message; the mean is the same for all
            any_mean = next(iter(out.values()))
            out.update({i: any_mean for i in loads if i not in out})
        return out or None

    def state_dict(self) -> dict:
        return {"in_flight": [(*h.state(), tuple(s)) for h, s in self.in_flight], "calls": self.calls,
                "own": [{i: t.clone() for i, t in o.items()} for o in self.own]}

    def load_state_dict(self, d: dict) -> None:
        self.in_flight = [(Handle.from_state(r, a, self.transport.clock), torch.Size(s)) for r, a, s in d["in_flight"]]
        self.calls = int(d["calls"])
        self.own = [{int(i): t.clone() for i, t in o.items()} for o in d["own"]]


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (bits) between routing distributions along the last dim; p, q: (..., E)."""
    p = p.clamp_min(1e-12)
    q = q.clamp_min(1e-12)
    m = 0.5 * (p + q)
    kl = lambda a, b: (a * (a.log() - b.log())).sum(-1)
    return (0.5 * kl(p, m) + 0.5 * kl(q, m)) / math.log(2)


def topk_overlap(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean fraction of shared experts between two top-k selections; a, b: (..., k) expert indices."""
    k = a.shape[-1]
    shared = (a.unsqueeze(-1) == b.unsqueeze(-2)).any(-1).sum(-1).float()
    return float((shared / k).mean())
