"""Everything a peer sends is read here: one decoding layer between the wire and the rest of the kit.

A compromised island is the threat the kit's seed warns of, so no value that arrives from another process reaches a
link model, a clock, a tensor index or an allocation before it has been typed, checked finite and bounded, and tied
to its sender. Every refusal is a ``PeerError`` (a ``ValueError``): ``ControlError`` for control messages
(``comm/control.py``: strict JSON, depth, duplicate keys, int64 integers, schema), ``PayloadError`` for the rest. Its
one-line message and its ``peer`` / ``field`` attributes name the sender and what was wrong. What the receiver does
with it is the mode's choice (``comm/torch_dist/``): in lock-step every rank stops; in decoupled mode the
synchroniser drops the island (it is *lost*, as if its process had died; the quorum decides whether merges go on).

Rules, per thing a peer sends:

* **Control messages**: ``read_control`` (= ``control.decode``), against the receiver's own schema.
* **Payloads** (``codecs.encode_bytes``): ``read_payload``. The header must name exactly the codec, numel and block
  size the receiver expects (its own config: the same fragment, the same codec) — checked before anything is sized
  from it — then the length and CRC, then ``Codec.check``: every code on the codec's grid, every top-k index inside
  its own block (not past the block's end, not into the next block) and ascending, no finite block scale that
  overflows float32 once decoded. Only then is it decoded.
  Values are not judged here: a non-finite fp32/bf16 value or block scale is the modelled ``nan`` attack, which the
  defences (``faults/defense.py``) or the divergence check deal with, identically in the simulator.
* **Clocks** a peer reports (a payload's send time, a decoupled contribution's, the clocks merged by the ledger):
  ``read_clock``. A simulated time must be finite, >= 0, at most ``CLOCK_LEAD`` times the receiver's own clock
  plus one second, and at most the run's horizon (``clock_horizon``: fixed from the config when the run starts).
  Honest clocks all start at 0 and, at any one operation, differ by at most the ratio of the islands' step times
  (plus transfer times), far below that factor; a peer that claims to be further ahead would only make every
  receiver idle until its made-up time (``sent_at = 1e30`` would end the run with a 1e30 s wall clock and
  utilisation 0). The relative bound alone compounds: the receiver's clock is one the peer has already pushed, so a
  peer at the limit every sync multiplies it by 1000 each time; the horizon does not move.
* **Weights** (a token count in an all-reduce header): ``read_weight``, finite, >= 0 and at most ``MAX_WEIGHT``, so
  that no sum of them overflows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from islands_kit.comm import control
from islands_kit.comm.codecs import HEADER_BYTES, Payload, decode_bytes, get_codec, read_header
from islands_kit.comm.control import ControlError, PeerError
from islands_kit.comm.link.latency import effective_rate_bps
from islands_kit.config import LinkConfig

__all__ = ["CLOCK_LEAD", "MAX_WEIGHT", "ControlError", "PayloadError", "PayloadSpec", "PeerError", "clock_horizon",
           "message_limits", "read_clock", "read_control", "read_message", "read_payload", "read_weight"]

CLOCK_LEAD = 1000.0  # how far ahead of the receiver a peer's simulated clock may claim to be (a factor)
MAX_WEIGHT = float(2 ** 53)  # token weights: integers that float64 holds exactly; n of them sum to a finite number

read_control = control.decode  # every receive path reads control messages through this module


class PayloadError(PeerError):
    """A payload or payload header from a peer that is malformed, not what the receiver expects, or out of bounds."""


@dataclass(frozen=True)
class PayloadSpec:
    """What the receiver expects a peer's payload to be: its own codec, fragment size and block size."""

    codec: str
    numel: int
    block_size: int

    @classmethod
    def of(cls, p: Payload) -> "PayloadSpec":
        return cls(p.codec, p.numel, p.block_size)

    def wire_bytes(self) -> int:
        """The exact length of such a payload on the wire (``codecs.encode_bytes``: header and data)."""
        return HEADER_BYTES + get_codec(self.codec, self.block_size).nbytes(self.numel)


def message_limits(kind: str, schema: Any, expect: PayloadSpec | None) -> tuple[int, int]:
    """The most bytes a point-to-point message of ``kind`` may announce: (its control part, from the schema
    (``control.limit``); its payload, exactly the expected payload's length, 0 when none is expected)."""
    return control.limit(kind, schema), expect.wire_bytes() if expect is not None else 0


def _refuse(who: str, peer: int, field: str, why: str) -> PayloadError:
    return PayloadError(f"{who} from rank {peer}: {field}: {why}", peer, field)


def read_payload(raw: bytes, expect: PayloadSpec, peer: int, who: str = "payload") -> Payload:
    """The payload a peer (rank ``peer``) serialised in ``raw``, checked as the module docstring says; ``who`` names
    the message in errors. Raises ``PayloadError``; nothing is allocated from the header before it matches
    ``expect``."""
    try:
        name, numel, block_size = read_header(raw)
    except ValueError as e:
        raise _refuse(who, peer, "header", str(e)) from None
    got = PayloadSpec(name, numel, block_size)
    if got != expect:
        field = next(f for f in ("codec", "numel", "block_size") if getattr(got, f) != getattr(expect, f))
        raise _refuse(who, peer, field, f"{name} numel={numel} block_size={block_size} where this rank expects "
                                        f"{expect.codec} numel={expect.numel} block_size={expect.block_size}")
    try:
        p = decode_bytes(raw)
    except ValueError as e:  # length or checksum
        raise _refuse(who, peer, "data", str(e)) from None
    err = get_codec(name, block_size).check(p)
    if err:  # "field: rule"
        raise PayloadError(f"{who} from rank {peer}: {err}", peer, err.split(":")[0])
    return p


def read_message(raw: bytes, payload_raw: bytes, kind: str, schema: Any, expect: PayloadSpec | None, peer: int,
                 who: str) -> tuple[Any, Payload | None]:
    """A point-to-point message (decoupled mode): the control body of ``kind`` against ``schema`` and, when bytes
    follow it, a payload matching ``expect`` (a message whose receiver expects no payload may carry none). The
    control part is held to its kind's limit; the payload's header is checked before its length (exact)."""
    body = read_control(raw, kind, schema, peer)
    if not payload_raw:
        return body, None
    if expect is None:
        raise _refuse(who, peer, "payload", f"{len(payload_raw)} payload bytes where this message carries none")
    return body, read_payload(payload_raw, expect, peer, who)


def clock_horizon(steps: int, slowest_step_s: float, link: LinkConfig, model_bytes: int, n_islands: int) -> float:
    """The latest simulated time any clock of an honest run may show, from the config alone: ``CLOCK_LEAD`` times
    what ``steps`` steps of the slowest island take if every step also waited for the worst transfer the kit could
    make (an fp32 copy of the whole model from every island, a round trip, a tail draw at its scale and a whole
    contact period), plus one second. Generous by design: it is there so that no peer can move it."""
    per_step = (slowest_step_s + link.rtt_s + link.tail_scale_s + link.contact_period_s
                + 8.0 * model_bytes * max(n_islands, 1) / effective_rate_bps(link))
    return CLOCK_LEAD * (max(steps, 1) * per_step + 1.0)


def read_clock(t: float, now: float, peer: int, field: str, who: str = "message", horizon: float = math.inf) -> float:
    """A simulated time ``t`` a peer reported, refused unless finite, >= 0, <= CLOCK_LEAD · (now + 1 s), where
    ``now`` is the receiver's own clock, and <= ``horizon`` (the run's ``clock_horizon``; module docstring)."""
    bound = CLOCK_LEAD * (max(now, 0.0) + 1.0)
    rule = f"{CLOCK_LEAD:g} x (this rank's clock {now:g} s + 1 s)"
    if horizon < bound:
        bound, rule = horizon, "the run's horizon from its config"
    if not (isinstance(t, float) and math.isfinite(t) and 0.0 <= t <= bound):
        raise _refuse(who, peer, field, f"simulated time {t!r} must be finite, >= 0 and <= {bound:g} s ({rule})")
    return t


def read_weight(w: float, peer: int, field: str, who: str = "message") -> float:
    """A token weight a peer reported: finite, >= 0 and <= MAX_WEIGHT (a peer may lie about it, not break the mean)."""
    if not (isinstance(w, float) and math.isfinite(w) and 0.0 <= w <= MAX_WEIGHT):
        raise _refuse(who, peer, field, f"weight {w!r} must be finite and in [0, 2^53]")
    return w
