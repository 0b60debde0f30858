"""The byte ledger: one stated cost model per collective (``COST_MODEL``, recorded in result.json), used by the ledger of every
transport and by ``sync.ddp.ddp_equivalent_bytes`` alike. Every byte is counted per channel and per directed link
(src -> dst), from the sizes of the encoded payloads actually handed over (S bytes each):

* ``all_reduce`` among n islands: a **ring all-reduce** (reduce-scatter, then all-gather; the standard accounting for
  data-parallel training). The payload is cut into n chunks (sizes S // n, the first S % n one byte longer); the island
  at ring position k sends its successor (position k + 1 mod n, islands in id order) every chunk but one in each
  phase, ``2 S - c[k+1] - c[k+2]`` bytes (``ring_bytes``), as one transfer leaving at its own clock: 2 (n - 1) S bytes
  in all, ``S`` per direction for two islands. An island's result is ready when the transfer from its predecessor has
  arrived and every member has posted (a ring cannot finish before its last member joins). The *numbers* are not
  those of a ring of quantised partial sums: every island decodes every payload and averages them in island-id order
  (``weighted_mean``), so all replicas are bit-identical on every transport; the ring prices that exchange.
* ``all_gather`` (robust aggregation needs every update, not their sum): each island sends its payload directly to
  each of the n - 1 others, n (n - 1) S bytes in all.
* ``send_recv`` (``exchange`` in ``COST_MODEL``): one payload from each sender to its target, S per direction (a
  pairwise exchange sends one each way).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LedgerEntry:
    bytes: int = 0
    messages: int = 0


@dataclass
class Ledger:
    """Exact byte counts per channel and per directed link, plus the transfer timeline for peak-rate figures."""

    channels: dict[str, LedgerEntry] = field(default_factory=dict)
    links: dict[tuple[int, int], int] = field(default_factory=dict)
    timeline: list[tuple[float, float, int, int, int, str]] = field(default_factory=list)  # (start, end, bytes, src, dst, channel)

    def record(self, channel: str, src: int, dst: int, nbytes: int, start: float, end: float) -> None:
        e = self.channels.setdefault(channel, LedgerEntry())
        e.bytes += nbytes
        e.messages += 1
        self.links[(src, dst)] = self.links.get((src, dst), 0) + nbytes
        self.timeline.append((start, end, nbytes, src, dst, channel))

    def bytes(self, channel: str | None = None) -> int:
        if channel is None:
            return sum(e.bytes for e in self.channels.values())
        return self.channels.get(channel, LedgerEntry()).bytes

    def peak_link_bytes_per_s(self, window_s: float = 1.0) -> float:
        """Highest average rate on any one directed link over a sliding window of ``window_s`` simulated seconds.

        Each transfer's bytes are spread uniformly over [start, end]; windows start at transfer starts. One sweep per
        link: a window sums only the transfers that overlap it (added as the window's end passes their start, dropped
        once it starts after their end), in start order, so the cost is the overlaps, not records squared; equal starts
        are one window and empty transfers add nothing (a peer's zero-byte records cannot make it quadratic)."""
        best = 0.0
        by_link: dict[tuple[int, int], list[tuple[float, float, int]]] = {}
        for s, e, b, src, dst, _ in self.timeline:
            by_link.setdefault((src, dst), []).append((s, e, b))
        for items in by_link.values():
            items.sort()
            flows = [it for it in items if it[2] > 0]
            alive: list[tuple[float, float, int]] = []
            nxt = 0
            for w0 in sorted({s for s, _, _ in items}):
                w1 = w0 + window_s
                while nxt < len(flows) and flows[nxt][0] < w1:
                    alive.append(flows[nxt])
                    nxt += 1
                alive = [it for it in alive if it[1] > w0]
                tot = 0.0
                for s, e, b in alive:
                    tot += b * (min(e, w1) - max(s, w0)) / max(e - s, 1e-12)
                best = max(best, tot / window_s)
        return best

    def durations(self, channel: str | None = None) -> list[float]:
        return [e - s for s, e, _, _, _, c in self.timeline if channel is None or c == channel]

    def to_dict(self) -> dict[str, Any]:
        return {
            "channels": {k: {"bytes": v.bytes, "messages": v.messages} for k, v in sorted(self.channels.items())},
            "links": {f"{s}->{d}": b for (s, d), b in sorted(self.links.items())},
        }

    def state_dict(self) -> dict[str, Any]:
        """Plain lists and dicts (a checkpoint must load with ``torch.load(weights_only=True)``)."""
        return {"channels": {k: [v.bytes, v.messages] for k, v in self.channels.items()},
                "links": [[s, d, b] for (s, d), b in self.links.items()],
                "timeline": [list(t) for t in self.timeline]}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "Ledger":
        led = cls()
        led.channels = {str(k): LedgerEntry(int(b), int(m)) for k, (b, m) in d["channels"].items()}
        led.links = {(int(s), int(t)): int(b) for s, t, b in d["links"]}
        led.timeline = [(float(a), float(b), int(n), int(s), int(t), str(c)) for a, b, n, s, t, c in d["timeline"]]
        return led


COST_MODEL = "all_reduce=ring(2(n-1)S), all_gather=direct(n(n-1)S), exchange=direct(S per direction)"


def ring_bytes(nbytes: int, n: int, position: int) -> int:
    """Bytes the member at ring ``position`` (0..n-1) sends its successor in a ring all-reduce of ``nbytes``-byte
    buffers among ``n`` members: all chunks but ``c[position + 1]`` in the reduce-scatter and all but
    ``c[position + 2]`` in the all-gather (indices mod n), ``c[j] = nbytes // n + (j < nbytes % n)``. Summed over the
    members: exactly ``2 (n - 1) nbytes``."""
    if n < 2:
        return 0
    q, r = divmod(nbytes, n)

    def chunk(j: int) -> int:
        return q + (1 if j % n < r else 0)

    return 2 * nbytes - chunk(position + 1) - chunk(position + 2)
