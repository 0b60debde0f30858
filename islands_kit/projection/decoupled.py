"""Decoupled DiLoCo's schedule priced without training (Douillard et al., 2026, arXiv 2604.21428): each island steps
on its own clock; a synchroniser merges each fragment once a quorum is in. Transfers go through the link model and the ledger that
training uses, but the schedule itself is modelled here, not replayed from ``sync/decoupled.py`` as the lock-step
projection replays training (``projection/lockstep.py``): the two are not pinned equal by a test.

No island waits for another's compute. Each island ``i`` runs inner steps of ``c_i = step_time_s[i]`` back to back.
Fragment p's k-th merge is due on the global schedule at ``t_{k,p} = m · T_ref`` for the k-th schedule step
``m ∈ [1, n_windows·H]`` with ``m ≡ offset_p (mod H)`` (``sync.diloco.fragment_offsets``; i.e. ``(k·H + offset_p)·T_ref``,
the steps at which lock-step streaming syncs p), ``T_ref = min_i c_i``. The run's span is ``[0, n_windows·H·T_ref]``.

* At ``t_{k,p}`` every island sends its fragment-p contribution as of its last completed step: its tokens are those
  of the steps it completed since its previous contribution to p. A synchroniser co-located with island 0 receives
  them (island 0's upload takes no link time; the others cross the ``LinkModel``, ``fragment_bytes`` each).
* The synchroniser merges (p, k) once ``quorum`` contributions have arrived, waiting at most ``grace_s`` more seconds
  for the rest (an arrival exactly at the deadline is in); all n arrived merges at once. A contribution that arrives
  after its merge is *late*: it is folded into the next merge of p that happens after it arrives (late-merged), or
  dropped if p has no later merge. The merged fragment goes back to every other island over the link
  (``fragment_bytes``; island 0 gets it at once): 2(n − 1) payloads per merge, the ring cost model's bytes.
* An island applies a merge at its first step boundary after the broadcast arrives (at once if it is idle).
  Bounded staleness: an island may not send (p, k) before it has applied merge (p, k − 1); if it has not at
  ``t_{k,p}``, it finishes the step in progress (a step ending exactly at ``t_{k,p}`` counts as completed before it,
  and the next one has begun), applies what has arrived, and if (p, k − 1) is still missing it idles until that
  broadcast arrives, then sends (p, k) and resumes. That is the only idle there is.
* Islands keep stepping until the span ends (a step started before the end finishes); an island blocked at the last
  merges still sends after it. Utilisation counts only the span:

      compute_utilization = sum_i busy_i / (n · span),   busy_i = span − idle_i,   idle_i clipped to the span

  goodput = useful tokens / ideal tokens, summed over fragments p and islands i within p's window ``[0, t_last_p]``
  (its last merge's due time): useful are the tokens of the steps i completed in the window that reached a merge of p
  (on time or late-merged); ideal are those of the ``floor(t_last_p / c_i)`` steps i would complete at full speed.
* Routing statistics (``routing_bytes`` > 0) are posted to every other island after every step and never waited
  for (the balancing bias uses the loads that have arrived): they only share the wire. Preemptions and stragglers are
  not modelled here: every island is up for the whole run.
"""
from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from islands_kit.comm.ledger import Ledger
from islands_kit.comm.link import LinkModel, transfer_time_stats
from islands_kit.sync.diloco import fragment_offsets

__all__ = ["DecoupledResult", "Merge", "full_speed_steps", "simulate_decoupled"]


def _positive(**kw: int) -> None:
    for k, v in kw.items():
        if not (isinstance(v, int) and v >= 1):
            raise ValueError(f"{k}: must be an integer >= 1 (got {v!r})")


def _channel_stats(durations: dict[str, list[float]], ledger: Ledger) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """Transfer-time percentiles over every transfer, and per channel: transfers, bytes, p50/p99/max seconds."""
    all_d = [d for v in durations.values() for d in v]
    st = transfer_time_stats(all_d) if all_d else {"p50": 0.0, "p99": 0.0}
    channels: dict[str, dict[str, Any]] = {}
    for ch, v in sorted(durations.items()):
        s = transfer_time_stats(v)
        channels[ch] = {"transfers": len(v), "bytes": ledger.bytes(ch), "p50_s": s["p50"], "p99_s": s["p99"],
                        "max_s": s["max"]}
    return st, channels


@dataclass(frozen=True)
class Merge:
    """One synchroniser merge of fragment p: its k-th (1-based), due at ``due_s``, done at ``merged_s``."""

    fragment: int
    k: int
    due_s: float
    merged_s: float
    on_time: tuple[int, ...]  # islands whose (p, k) contribution made it
    late_in: tuple[tuple[int, int], ...]  # (island, k') of earlier late contributions folded in here
    tokens: float  # tokens of every contribution merged here


@dataclass
class DecoupledResult:
    """What ``simulate_decoupled`` measured over the span ``[0, n_windows·H·T_ref]`` (module docstring)."""

    span_s: float
    busy_s: list[float]
    idle_s: list[float]
    compute_utilization: float
    goodput: float
    inner_steps: list[int]  # steps each island completed within the span
    tokens_per_island: list[float]  # their tokens
    merges: list[Merge]
    late_contributions: int  # arrived after their merge
    late_merged: int  # of those, folded into a later merge
    dropped_contributions: int  # of those, never merged (no later merge of their fragment)
    staleness_slack_s: float  # min over islands and merges k >= 2 of t_{k,p} − arrival of merge k−1 (< 0: may idle)
    transfer_p50_s: float
    transfer_p99_s: float
    peak_link_bytes_per_s: float
    payload_bytes: int
    bytes_on_wire: int
    n_transfers: int
    channels: dict[str, dict[str, float]] = field(default_factory=dict)  # transfers, bytes, p50_s, p99_s, max_s


_DOWN, _STEP, _DUE, _UP, _GRACE = range(5)  # event kinds, handled in this order at equal times


def full_speed_steps(t: float, step_time_s: float) -> int:
    """Steps an island with step time c completes by time t when it never idles: max j with j·c <= t (the same
    products the simulation uses, so a step ending exactly at t counts)."""
    j = max(int(t // step_time_s), 0)
    while (j + 1) * step_time_s <= t:
        j += 1
    while j > 0 and j * step_time_s > t:
        j -= 1
    return j


def simulate_decoupled(step_time_s: Sequence[float], tokens_per_step: Sequence[float], n_windows: int, H: int,
                       n_fragments: int, fragment_bytes: int, link: LinkModel, *, quorum: int | None = None,
                       grace_s: float = 0.0, routing_bytes: int = 0) -> DecoupledResult:
    """Decoupled DiLoCo's schedule of steps, contributions, merges and broadcasts (see the module docstring).

    H and P = ``n_fragments`` as in Streaming DiLoCo; ``quorum`` (default: every island) contributions start the
    merge, which waits at most ``grace_s`` seconds more for the others."""
    n = len(step_time_s)
    if n < 2 or any(not (c > 0 and math.isfinite(c)) for c in step_time_s):
        raise ValueError(f"step_time_s: need one finite step time > 0 per island, at least 2 (got {list(step_time_s)})")
    if len(tokens_per_step) != n or any(not (x >= 0 and math.isfinite(x)) for x in tokens_per_step):
        raise ValueError(f"tokens_per_step: need one finite count >= 0 per island ({n}), got {list(tokens_per_step)}")
    _positive(n_windows=n_windows, H=H, n_fragments=n_fragments)
    q = n if quorum is None else quorum
    if not (isinstance(q, int) and 1 <= q <= n):
        raise ValueError(f"quorum: must be an integer in [1, n_islands={n}] (got {quorum!r})")
    if not grace_s >= 0:
        raise ValueError(f"grace_s: must be >= 0 (inf: wait for every island) (got {grace_s!r})")
    c = list(step_time_s)
    t_ref = min(c)
    span = n_windows * H * t_ref
    offs = fragment_offsets(H, n_fragments)
    due = [[m for m in range(1, n_windows * H + 1) if m % H == off] for off in offs]  # schedule steps of each (p, k)

    events: list[tuple[float, int, int, tuple[int, ...]]] = []  # (time, kind, seq, data)
    seq = 0

    def push(t: float, kind: int, *data: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, kind, seq, data))
        seq += 1

    durations: dict[str, list[float]] = {}
    ledger = Ledger()
    wire_bytes = 0

    def send(nbytes: int, t: float, src: int, dst: int, channel: str) -> float:
        nonlocal wire_bytes
        tr = link.transfer(nbytes, t, src, dst)
        durations.setdefault(channel, []).append(tr.duration_s)
        ledger.record(channel, src, dst, nbytes, tr.start_s, tr.end_s)
        wire_bytes += tr.bytes_on_wire
        return tr.end_s

    # islands: a run of steps since seg_start[i] (step j of it ends at seg_start + j·c_i); idle while not running
    seg_start, seg_j = [0.0] * n, [0] * n
    running = [True] * n
    idle_since: list[float | None] = [None] * n
    idle = [0.0] * n
    steps, steps_in_span = [0] * n, [0] * n
    arrived = [[0] * n_fragments for _ in range(n)]  # merges of p whose broadcast reached island i
    applied = [[0] * n_fragments for _ in range(n)]
    sent_steps = [[0] * n_fragments for _ in range(n)]  # steps done at i's last contribution to p
    step_ends: list[list[float]] = [[] for _ in range(n)]
    pending: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # (p, k) held back by bounded staleness
    # synchroniser
    got: dict[tuple[int, int], dict[int, tuple[int, int]]] = {}  # (p, k) -> island -> steps, arrived in time
    merged_at: dict[tuple[int, int], float] = {}
    late_pool: list[list[tuple[int, int, tuple[int, int]]]] = [[] for _ in range(n_fragments)]  # (island, k, steps)
    merges: list[Merge] = []
    merged_steps: list[list[list[tuple[int, int]]]] = [[[] for _ in range(n_fragments)] for _ in range(n)]
    down_at: dict[tuple[int, int, int], float] = {}  # (island, p, k) -> when merge (p, k) reached the island
    n_late = 0

    up_steps: dict[tuple[int, int, int], tuple[int, int]] = {}  # (p, k, island) -> its steps (lo, hi], on the way

    def contribute(i: int, p: int, k: int, t: float) -> None:
        up_steps[(p, k, i)] = (sent_steps[i][p], steps[i])
        sent_steps[i][p] = steps[i]
        push(t if i == 0 else send(fragment_bytes, t, i, 0, "fragments"), _UP, p, k, i)

    def flush(i: int, t: float) -> None:
        """Send the held-back contributions whose previous merge island i has now applied."""
        keep = []
        for p, k in pending[i]:
            if applied[i][p] >= k - 1:
                contribute(i, p, k, t)
            else:
                keep.append((p, k))
        pending[i] = keep

    def stop(i: int, t: float) -> None:
        running[i], idle_since[i] = False, t

    def resume(i: int, t: float) -> None:
        s = idle_since[i]
        assert s is not None
        idle[i] += max(min(t, span) - min(s, span), 0.0)
        idle_since[i] = None
        if t < span:
            running[i], seg_start[i], seg_j[i] = True, t, 1
            push(t + c[i], _STEP, i)
        else:
            idle_since[i] = t  # the span is over: stays stopped (no more idle counted)

    def merge(p: int, k: int, t: float) -> None:
        merged_at[(p, k)] = t
        on_time = got.pop((p, k))
        late = late_pool[p]
        late_pool[p] = []
        parts = list(on_time.items()) + [(i, r) for i, _, r in late]
        for i, r in parts:
            merged_steps[i][p].append(r)
        merges.append(Merge(p, k, due[p][k - 1] * t_ref, t, tuple(sorted(on_time)), tuple((i, kk) for i, kk, _ in late),
                            sum((hi - lo) * tokens_per_step[i] for i, (lo, hi) in parts)))
        push(t, _DOWN, p, k, 0)
        for d in range(1, n):
            push(send(fragment_bytes, t, 0, d, "fragments"), _DOWN, p, k, d)

    for p in range(n_fragments):
        for k, m in enumerate(due[p], start=1):
            push(m * t_ref, _DUE, p, k)
    for i in range(n):
        seg_j[i] = 1
        push(c[i], _STEP, i)

    while events:
        t, kind, _, data = heapq.heappop(events)
        if kind == _STEP:
            (i,) = data
            steps[i] += 1
            step_ends[i].append(t)
            if t <= span:
                steps_in_span[i] += 1
            for d in range(n):
                if routing_bytes and d != i:
                    send(routing_bytes, t, i, d, "routing")
            applied[i] = list(arrived[i])
            flush(i, t)
            if pending[i] or t >= span:
                stop(i, t)
            else:
                seg_j[i] += 1
                push(seg_start[i] + seg_j[i] * c[i], _STEP, i)
        elif kind == _DUE:
            p, k = data
            got[(p, k)] = {}
            for i in range(n):
                if applied[i][p] >= k - 1:
                    contribute(i, p, k, t)
                else:
                    pending[i].append((p, k))
        elif kind == _UP:
            p, k, i = data
            r = up_steps.pop((p, k, i))
            if (p, k) in merged_at:
                late_pool[p].append((i, k, r))
                n_late += 1
                continue
            g = got[(p, k)]
            g[i] = r
            if len(g) == n:
                merge(p, k, t)
            elif len(g) == q and math.isfinite(grace_s):
                push(t + grace_s, _GRACE, p, k)
        elif kind == _GRACE:
            p, k = data
            if (p, k) not in merged_at:
                merge(p, k, t)
        else:  # _DOWN
            p, k, i = data
            down_at[(i, p, k)] = t
            arrived[i][p] = max(arrived[i][p], k)
            if not running[i]:  # at a step boundary: applies it now
                applied[i] = list(arrived[i])
                flush(i, t)
                if not pending[i]:
                    resume(i, t)
    missing = [(p, k) for p in range(n_fragments) for k in range(1, len(due[p]) + 1) if (p, k) not in merged_at]
    if missing:
        raise RuntimeError(f"simulate_decoupled: merges never happened: {missing[:5]}")
    for i in range(n):
        s = idle_since[i]
        if s is not None and s < span:
            idle[i] += span - s
    dropped = sum(len(pool) for pool in late_pool)
    slack = min((due[p][k - 1] * t_ref - down_at[(i, p, k - 1)] for i in range(n) for p in range(n_fragments)
                 for k in range(2, len(due[p]) + 1)), default=math.inf)
    useful = ideal = 0.0
    for p in range(n_fragments):  # fragment p's window: [0, its last merge's due time]
        t_last = due[p][-1] * t_ref if due[p] else 0.0
        for i in range(n):
            done = bisect.bisect_right(step_ends[i], t_last)  # steps i completed by then
            useful += sum(max(min(hi, done) - lo, 0) for lo, hi in merged_steps[i][p]) * tokens_per_step[i]
            ideal += full_speed_steps(t_last, c[i]) * tokens_per_step[i]
    busy = [span - x for x in idle]
    st, channels = _channel_stats(durations, ledger)
    return DecoupledResult(
        span_s=span, busy_s=busy, idle_s=idle, compute_utilization=sum(busy) / (n * span),
        goodput=useful / ideal if ideal > 0 else 1.0, inner_steps=steps_in_span,
        tokens_per_island=[s3 * x for s3, x in zip(steps_in_span, tokens_per_step)], merges=merges,
        late_contributions=n_late, late_merged=n_late - dropped, dropped_contributions=dropped, staleness_slack_s=slack,
        transfer_p50_s=st["p50"], transfer_p99_s=st["p99"], peak_link_bytes_per_s=ledger.peak_link_bytes_per_s(),
        payload_bytes=ledger.bytes(), bytes_on_wire=wire_bytes, n_transfers=sum(len(v) for v in durations.values()), channels=channels)
