"""Each rank's share of the world's ledger and clock in lock-step (``TorchDistTransport.gather_world``): how large it
may be, and how the receiver reads and merges the shares.

A share is a rank's account of itself, so the receiver holds it to what its own run allows before anything is
merged (a refusal names the rank and the field, as ``comm/peer.py`` does):

* **identity**: the island is the one the rank layout gives that rank, and it claims to lead exactly when it is that
  island's first rank; its clock names its own island and no other (rank 2 cannot become island 0's leader and
  replace island 0's clock);
* **records** (inbound transfers, kept by each island's leader only): at most ``ops × (n - 1)`` of them (``ops``
  collectives were posted, each brings a leader at most one message from every other island), each naming an
  operation already posted, a link into the sender's own island from another island of the run, a channel this rank
  posted on too (every rank posts every collective in lock-step), at most twice the largest payload this rank sent on
  it (a ring all-reduce's share is below 2 S; every island's payload on a channel has the same size), no (operation,
  link) twice, and times inside the run's clock bounds (``peer.read_clock``, the config's horizon included);
* **bytes handed over** (``sent``): only channels this rank posted on, at most what ``ops`` operations could carry;
* **size**: the whole share within ``share_limit`` bytes, announced before a byte of it is received.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from islands_kit.comm import peer
from islands_kit.comm.clock import SimClock
from islands_kit.comm.control import PeerError
from islands_kit.comm.layout import RankLayout
from islands_kit.comm.ledger import Ledger

RECORD_JSON_BYTES = 192  # one record but its channel: 7 int64s (<= 20 characters), 2 floats (<= 24), brackets, commas


def share_limit(ops: int, n_islands: int, channels: list[str]) -> int:
    """The most bytes one rank's share may take as a control message, from the receiver's own count of operations
    and channels (the same on every rank in lock-step)."""
    quoted = max((len(json.dumps(c)) for c in channels), default=2)
    records = ops * max(n_islands - 1, 0)
    return 4096 + records * (RECORD_JSON_BYTES + quoted) + len(channels) * (quoted + 32) + n_islands * 3 * 64


@dataclass(frozen=True)
class WorldRules:
    """What the receiver's own run allows: its layout, the operations posted so far, the largest payload it sent per
    channel, its clock and the run's horizon."""

    layout: RankLayout
    ops: int
    widest: dict[str, int]
    now: float
    horizon: float


def _show(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


def _refuse(rank: int, field: str, why: str) -> PeerError:
    return PeerError(f"control message 'ledger' from rank {rank}: {field}: {why}", rank, field)


def _check_identity(r: int, o: dict[str, Any], rules: WorldRules) -> int:
    island = rules.layout.island_of(r)
    if o["island"] != island:
        raise _refuse(r, "island", f"claims island {o['island']}; the run's layout puts rank {r} in island {island} "
                                   "(a rank describes only itself)")
    leads = r == rules.layout.first_rank(island)
    if o["leader"] != leads:
        raise _refuse(r, "leader", f"claims {'' if o['leader'] else 'not '}to lead island {island}; its leader is "
                                   f"rank {rules.layout.first_rank(island)}")
    for f in ("now", "busy", "idle"):
        if not set(o["clock"][f]) <= {str(island)}:
            raise _refuse(r, f"clock.{f}", f"names islands {sorted(o['clock'][f])}; rank {r} may report only its own "
                                           f"island {island}")
    return island


def _read_records(r: int, o: dict[str, Any], island: int, rules: WorldRules, seen: set[tuple[int, int, int]]) -> None:
    n = len(rules.layout.ranks_per_island)
    recs = o["records"]
    most = rules.ops * (n - 1) if o["leader"] else 0
    if len(recs) > most:
        raise _refuse(r, "records", f"{len(recs)} records; {rules.ops} operations bring "
                                    f"{'its island at most' if o['leader'] else 'a rank that does not lead none'} {most}")
    for j, ((seq, src, dst), (start, end, nbytes, src2, dst2, channel)) in enumerate(recs):
        where = f"records[{j}]"
        if not seq < rules.ops:
            raise _refuse(r, where, f"operation #{seq} was never posted ({rules.ops} so far)")
        if (src2, dst2) != (src, dst) or dst != island or not (0 <= src < n and src != dst):
            raise _refuse(r, where, f"link {src2}->{dst2} (listed as {src}->{dst}) is not a link into island {island} "
                                    f"from another of the run's {n} islands")
        if channel not in rules.widest:
            raise _refuse(r, where, f"channel {_show(channel)} is not one this run posted on")
        if nbytes > 2 * rules.widest[channel]:
            raise _refuse(r, where, f"{nbytes} bytes on {channel!r}, over twice its largest payload "
                                    f"{rules.widest[channel]}")
        if (seq, src, dst) in seen:
            raise _refuse(r, where, f"operation #{seq} on link {src}->{dst} recorded twice")
        seen.add((seq, src, dst))
        for f, t in (("start", start), ("end", end)):
            peer.read_clock(float(t), rules.now, r, f"{where}.{f}", "control message 'ledger'", rules.horizon)
        if end < start:
            raise _refuse(r, where, f"ends at {end!r} s before it starts at {start!r} s")
    for ch, b in o["sent"].items():
        if ch not in rules.widest or b > rules.ops * 2 * rules.widest[ch] * n:
            raise _refuse(r, f"sent[{_show(ch)}]", f"{b} bytes on a channel this run did not post on "
                                                                 "or more than its operations could carry")


def merge_world(objs: list[dict[str, Any]], rules: WorldRules) -> tuple[Ledger, SimClock, dict[str, int]]:
    """The merged ledger (records in LocalTransport's order), the clock over all islands (each island's leader's) and
    the bytes every rank says it handed over per channel, from every rank's share in rank order; a ``PeerError``
    naming the first rank whose share breaks a rule of the module docstring."""
    n = len(rules.layout.ranks_per_island)
    seen: set[tuple[int, int, int]] = set()
    clock = SimClock(list(range(n)))
    sent: dict[str, int] = {}
    for r, o in enumerate(objs):
        island = _check_identity(r, o, rules)
        _read_records(r, o, island, rules, seen)
        for ch, b in o["sent"].items():
            sent[ch] = sent.get(ch, 0) + b
        if o["leader"]:
            c, k = o["clock"], str(island)
            if not all(k in c[f] for f in ("now", "busy", "idle")):
                raise _refuse(r, "clock", f"no clock for its island {island}")
            clock.now[island], clock.busy[island], clock.idle[island] = (
                peer.read_clock(float(c[f][k]), rules.now, r, f"clock.{f}", "control message 'ledger'", rules.horizon)
                for f in ("now", "busy", "idle"))
    ledger = Ledger()
    for _, (start, end, nbytes, src, dst, channel) in sorted(rec for o in objs for rec in o["records"]):
        ledger.record(channel, src, dst, nbytes, start, end)
    return ledger, clock, sent
