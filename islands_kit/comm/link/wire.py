"""One direction of the link: the serialiser's busy calendar under the contact windows (``Wire``) and the sender that
puts one transfer's bytes on it under its congestion window (``Sender``)."""
from __future__ import annotations

import bisect
import math

import numpy as np

from islands_kit.comm.link.contact import Schedule


class Wire:
    """One direction's serialiser: sorted, disjoint busy intervals plus its contact schedule (``contact.py``)."""

    def __init__(self, rate_bps: float, contact: Schedule, why_down: str = "") -> None:
        self.rate_bps = rate_bps
        self.contact = contact
        self.why_down = why_down  # said when a transfer meets a link that is never up again
        self.starts: list[float] = []
        self.ends: list[float] = []

    def last_end(self) -> float:
        return self.ends[-1] if self.ends else -math.inf

    def _in_contact(self, t: float) -> tuple[float, float]:
        """Earliest time >= t inside a contact window, and that window's end."""
        s, e = self.contact.next_up(t)
        if s == math.inf:
            raise RuntimeError(f"link: no contact window at or after t = {t:.6g} s on this direction; its bytes "
                               "would never leave" + (f" ({self.why_down})" if self.why_down else ""))
        return s, e

    def free_span(self, t: float) -> tuple[float, float]:
        """Earliest time s >= t when the wire is free and in contact, and when that free span ends."""
        while True:
            t, contact_end = self._in_contact(t)
            i = bisect.bisect_right(self.starts, t) - 1  # the busy interval starting at or before t, if any
            if i >= 0 and self.ends[i] > t:
                t = self.ends[i]
                continue
            nxt = self.starts[i + 1] if i + 1 < len(self.starts) else math.inf
            return t, min(contact_end, nxt)

    def reserve(self, a: float, b: float) -> None:
        """Mark [a, b) busy; callers only reserve free time, so neighbours can only touch, not overlap."""
        if b <= a:
            return
        i = bisect.bisect_left(self.starts, a)
        merge_prev = i > 0 and self.ends[i - 1] == a
        merge_next = i < len(self.starts) and self.starts[i] == b
        if merge_prev and merge_next:
            self.ends[i - 1] = self.ends[i]
            del self.starts[i], self.ends[i]
        elif merge_prev:
            self.ends[i - 1] = b
        elif merge_next:
            self.starts[i] = a
        else:
            self.starts.insert(i, a)
            self.ends.insert(i, b)


class Sender:
    """Puts one transfer's bytes on a wire in FIFO order, under its congestion window and the contact windows.

    Inside a run of back-to-back bytes (a *segment*) the end of each piece is ``seg_t0 + bits_so_far / rate``, not a
    running sum of durations, so long transfers carry no accumulated rounding and ``send_many`` (vectorised) and
    ``send`` (one piece at a time) give identical times."""

    def __init__(self, wire: Wire, rtt_s: float, window_bytes: float, bdp_bytes: float) -> None:
        self.wire = wire
        self.rate = wire.rate_bps
        self.rtt = rtt_s
        self.window = window_bytes
        self.bdp = bdp_bytes
        self.full = window_bytes >= bdp_bytes
        self.round_start: float | None = None
        self.round_sent = 0.0  # bytes sent in the current slow-start round
        self.free_at = -math.inf  # when this sender's previous piece left
        self.seg_t0 = math.nan
        self.seg_bits = 0.0
        self.seg_end = math.nan

    def send(self, nbytes: int, ready: float) -> float:
        """Serialise ``nbytes`` no earlier than ``ready``; return when the last byte leaves."""
        t = max(ready, self.free_at)
        remaining = float(nbytes) * 8.0
        if remaining == 0.0:
            t, _ = self.wire.free_span(t)
            self.free_at = t
            return t
        while remaining > 1e-6:
            piece = remaining
            if not self.full:
                cap = (self.window - self.round_sent) * 8.0
                if cap <= 1e-6:  # window used up: the next round opens one RTT after this round's first byte
                    t = max(t, (self.round_start if self.round_start is not None else t) + self.rtt)
                    self.window *= 2.0
                    self.round_sent = 0.0
                    self.round_start = None
                    self.full = self.window >= self.bdp
                    continue
                piece = min(remaining, cap)
            s, span_end = self.wire.free_span(t)
            if s != self.seg_end:
                self.seg_t0, self.seg_bits = s, 0.0
            end = self.seg_t0 + (self.seg_bits + piece) / self.rate
            if end > span_end:  # the piece does not fit before a busy interval or the end of contact
                end = span_end
                piece = min(piece, max((span_end - self.seg_t0) * self.rate - self.seg_bits, 0.0))
            if not self.full and self.round_start is None:
                self.round_start = s
            self.wire.reserve(s, end)
            self.seg_bits += piece
            self.seg_end = end
            self.round_sent += piece / 8.0
            remaining -= piece
            t = end
        self.free_at = t
        return t

    def can_vectorise(self, ready: float) -> bool:
        return self.full and self.wire.contact.always_up and ready >= self.wire.last_end() and ready >= self.free_at

    def send_many(self, sizes: np.ndarray, ready: float) -> np.ndarray:
        """Back-to-back chunks on a free, full-window, always-in-contact wire: last-byte times in one cumsum.
        The plain reference is ``[self.send(b, ready) for b in sizes]`` (tests check they agree)."""
        assert self.can_vectorise(ready)
        ends = ready + np.cumsum(sizes.astype(np.float64) * 8.0) / self.rate
        self.seg_t0, self.seg_bits = ready, float(sizes.sum()) * 8.0
        self.seg_end = float(ends[-1])
        self.wire.reserve(ready, self.seg_end)
        self.free_at = self.seg_end
        return ends
