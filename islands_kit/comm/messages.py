"""The point-to-point messages of decoupled DiLoCo (``sync/decoupled.py``): their kinds and the schemas every receiver
checks them against (``comm/control.py``, ``comm/peer.py``). Both transports carry them with ``Transport.post`` /
``Transport.receive``: ``LocalTransport`` through an in-process queue, ``TorchDistTransport`` over a gloo pair group;
either way a message is encoded to bytes by the sender and decoded and checked by the receiver, so the simulator and
torchrun run the same code on the same bytes.

Island 0's process holds the synchroniser; every other island talks to it:

* ``CONTRIBUTION`` (island -> synchroniser, at every due (tick, fragment) and at the end): the island's status (fresh,
  absent, not ready), its encoded outer gradient when fresh (the payload; its own codec, error feedback and random
  stream), c^tok, c^steps, its send time and its inner steps so far. The synchroniser prices each upload itself
  (``Transport.send``: the seeded link model, so arrivals, holes and ledger are the same in every process layout) and
  decides the round;
* ``DECISION`` (synchroniser -> every other island): the round's merge time (None: no merge, at the end only);
* ``APPLY`` (synchroniser -> every other island, when the merge is applied: the first tick at or after its merge
  time): the outer gradient as broadcast (the payload, when the quorum was met) and, to a contributor, when the
  broadcast lands. Every process takes the same outer step on its own copy of the global fragments, so they stay
  identical; the islands in the synchroniser's own process share its copy.

An island whose process dies (its sockets close), stays silent past ``ISLANDS_KIT_DIST_TIMEOUT_S`` or sends what the
wire or the protocol refuses is *lost*: it is absent from that round and every later one, the run goes on if the
quorum holds, and otherwise every later merge is skipped (its contributions carried) until the final merge, which
needs no quorum, with a warning; the report names it (``lost_islands``) and result.json counts the inner steps it last
reported. The synchroniser itself is not replaceable: islands wait for it at most (n + 1) times the timeout and then
stop with an error naming it.
"""
from __future__ import annotations

import math
from typing import Any

from islands_kit.comm import peer
from islands_kit.comm.codecs import Payload
from islands_kit.comm.control import Int, Num, OneOf, Opt
from islands_kit.comm.transport import Transport

SYNCER = 0  # the synchroniser sits with island 0

CONTRIBUTION = "decoupled.contribution"
FRESH, ABSENT, NOT_READY = "fresh", "absent", "not_ready"
MAX_COUNT = 2 ** 53  # token and step counts: integers float64 holds exactly (they become merge weights)
CONTRIBUTION_SCHEMA = {"tick": Int(0), "fragment": Int(0), "round": Int(0), "status": OneOf(FRESH, ABSENT, NOT_READY),
                       "sent_s": Num(0), "tokens": Int(0, MAX_COUNT), "steps": Int(0, MAX_COUNT),
                       "inner_steps": Int(0, MAX_COUNT)}
DECISION = "decoupled.decision"
DECISION_SCHEMA = {"fragment": Int(0), "round": Int(0), "merge_s": Opt(Num(0))}
APPLY = "decoupled.apply"
APPLY_SCHEMA = {"fragment": Int(0), "round": Int(0), "merge_s": Num(0), "outer_step": bool, "landing_s": Opt(Num(0))}


def contribution_fault(body: dict[str, Any], payload: Payload | None, island: int, due: tuple[int, int, int],
                       now: float, final: bool, horizon: float = math.inf, latest: float = math.inf) -> str | None:
    """Why the synchroniser refuses island ``island``'s ``CONTRIBUTION`` (already through the wire's checks) to the
    round ``due`` = (tick, fragment, round) due at schedule time ``now``, in one line; None when it is sound. The
    protocol's rules: the send time within the wire's clock bound and the run's ``horizon``, the round it names, a
    payload exactly when fresh, a fresh one trained (tokens and steps >= 1: a merge of zero weight has no mean), no
    ``not_ready`` at the end, a send time that is a time of this round (``now`` in a
    regular round; at the end, no earlier than ``now`` and no later than ``latest``: an island sends its last parts
    once its last merges have landed, and the synchroniser priced every one of those landings on the link, so a
    later time is made up — it would hold the final merge, and the run's clock, until then), and step counts the
    schedule allows: an island takes at most one inner step per tick (the tick is the fastest island's step), so by
    tick t at most t (one more of slack for rounding), and its steps since the last contribution are among them."""
    tick, p, k = due
    where = f"sync.mode=decoupled: island {island}'s {CONTRIBUTION} for tick {tick}, fragment {p}, round {k}"
    try:
        peer.read_clock(float(body["sent_s"]), now, island, "sent_s", where, horizon)
    except peer.PeerError as e:
        return str(e)
    if (body["tick"], body["fragment"], body["round"]) != due:
        why = f"round: names tick {body['tick']}, fragment {body['fragment']}, round {body['round']}"
    elif (body["status"] == FRESH) != (payload is not None):
        why = f"status: {body['status']} with{'' if payload is not None else 'out'} a payload"
    elif body["status"] == FRESH and not (body["tokens"] >= 1 and body["steps"] >= 1):
        why = (f"tokens: a fresh contribution of {body['tokens']} tokens in {body['steps']} steps (one is fresh only "
               "after it trained: at least one step, and its tokens weigh it in the merge)")
    elif final and body["status"] == NOT_READY:
        why = "status: not_ready in the final merge"
    elif not (body["sent_s"] == now or (final and now < body["sent_s"] <= max(now, latest))):
        end = f", or at the end up to {max(now, latest)!r}, when the last merge sent to it lands" if final else ""
        why = f"sent_s: {body['sent_s']!r} is not a send time of this round (due at {now!r}{end})"
    elif body["inner_steps"] > tick + 1:
        why = f"inner_steps: {body['inner_steps']} is more than the {tick + 1} the schedule allows by tick {tick}"
    elif body["steps"] > body["inner_steps"]:
        why = f"steps: {body['steps']} since the last contribution is more than its inner_steps {body['inner_steps']}"
    else:
        return None
    return f"{where}: {why}"


def _refusal(kind: str, field: str, why: str) -> peer.ControlError:
    """An island's refusal of what the synchroniser (rank 0) sent: the run cannot go on without it."""
    return peer.ControlError(f"sync.mode=decoupled: control message {kind!r} from rank {SYNCER} (the "
                             f"synchroniser): {field}: {why}", SYNCER, field)


def _syncer_clock(wire: Transport, island: int, t: float, kind: str, field: str) -> float:
    """A time the synchroniser sent, held to the wire's clock bound against the island's clock."""
    return peer.read_clock(t, wire.clock.now[island], SYNCER, field, f"control message {kind!r}", wire.horizon_s)


def read_contribution(wire: Transport, island: int, due: tuple[int, int, int], now: float, final: bool,
                      expect: peer.PayloadSpec, latest: float = math.inf) -> tuple[dict[str, Any], Payload | None] | None:
    """Island ``island``'s ``CONTRIBUTION`` to round ``due`` = (tick, fragment, round), read by the synchroniser
    through the wire's checks (``comm.peer``: its payload must match ``expect``) and then the protocol's
    (:func:`contribution_fault`; ``latest``: the last landing time the synchroniser sent it). An island that breaks
    one is dropped, like a dead one: None."""
    got = wire.receive(SYNCER, island, CONTRIBUTION, CONTRIBUTION_SCHEMA, expect)
    if got is None:
        return None
    body, payload = got
    why = contribution_fault(body, payload, island, due, now, final, wire.horizon_s, latest)
    if why is None:
        return body, payload
    wire.drop(island, why)
    return None


def syncer_timeout(wire: Transport) -> float:
    """An island waits for the synchroniser longer than the synchroniser waits for all the others together."""
    return wire.timeout_s * (wire.n_islands + 1)


def read_decision(wire: Transport, island: int, due: tuple[int, int], final: bool) -> float | None:
    """The merge time of round ``due`` = (fragment, round) that the synchroniser sent ``island`` (``DECISION``;
    None: no merge, at the end only). Anything else ends the run with an error naming the field."""
    p, k = due
    got = wire.receive(island, SYNCER, DECISION, DECISION_SCHEMA, timeout_s=syncer_timeout(wire), required=True)
    assert got is not None
    body, _ = got
    if (body["fragment"], body["round"]) != due:
        raise _refusal(DECISION, "round", f"decided fragment {body['fragment']}, round {body['round']} where "
                                          f"fragment {p}, round {k} was due: the processes are out of step")
    if body["merge_s"] is None:
        if not final:  # a regular round always decides (a skipped merge is a merge without delta)
            raise _refusal(DECISION, "merge_s", f"none for fragment {p}, round {k}, a regular round")
        return None
    return _syncer_clock(wire, island, float(body["merge_s"]), DECISION, "merge_s")


def read_apply(wire: Transport, island: int, merge: tuple[float, int, int],
               expect: peer.PayloadSpec) -> tuple[Payload | None, float | None]:
    """The synchroniser's ``APPLY`` of ``merge`` = (merge_s, fragment, round), the island's next announced merge:
    (the outer gradient as broadcast, None when the quorum was not met; the island's landing time, None when it did
    not contribute). Anything else ends the run with an error naming the field."""
    merge_s, p, k = merge
    got = wire.receive(island, SYNCER, APPLY, APPLY_SCHEMA, expect, timeout_s=syncer_timeout(wire), required=True)
    assert got is not None
    body, payload = got
    if (body["fragment"], body["round"], float(body["merge_s"])) != (p, k, merge_s):
        raise _refusal(APPLY, "round", f"applied fragment {body['fragment']}, round {body['round']} at "
                                       f"{body['merge_s']} where fragment {p}, round {k} at {merge_s} was next: the "
                                       "processes are out of step")
    if body["outer_step"] != (payload is not None):
        raise _refusal(APPLY, "outer_step", f"{body['outer_step']} with{'' if payload is not None else 'out'} a payload")
    landing = None if body["landing_s"] is None else _syncer_clock(wire, island, float(body["landing_s"]), APPLY,
                                                                   "landing_s")
    return payload, landing
