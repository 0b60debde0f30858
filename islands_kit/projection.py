"""Seed-scale projection: compute utilisation of two-site Streaming DiLoCo (lock-step or decoupled) vs synchronous
data parallelism over a wide-area link, *without training* — an event-driven schedule of compute steps and payloads
on the ``LinkModel``.

The schedule (``simulate_schedule``)
------------------------------------
Each island ``i`` runs ``n_steps`` inner steps of ``step_time_s[i]`` seconds back to back. A ``Send`` is posted when
island ``src`` finishes (0-based) step ``step``; the link model times it; island ``dst`` may not *start* step
``deadline_step`` before it has arrived, and waits (idle) if it has not. That wait is the only idle there is: islands
never wait for each other's compute except through payload deadlines (so the faster island of two also idles at
deadlines when the slower one's payloads come late — which counts against utilisation). Payloads whose deadline lies
beyond the run are still sent (their bytes count) but waited for by nobody.

    compute_utilization = sum_i busy_i / (n_islands · sim_wall_clock_s),   busy_i = n_steps · step_time_s[i]

Step convention. ``Send.step = s`` means "after 0-based step s", i.e. after inner step t = s + 1 in the 1-based
counting of ``sync.diloco`` (fragment p syncs after t ≡ offset_p mod H). A sync whose outer result is applied τ
steps later (Streaming DiLoCo's overlap τ) must arrive before step t + τ + 1 starts: ``deadline_step = s + 1 + τ``.
τ = 0 is blocking: the next step waits for the payload. Synchronous data parallelism is blocking every step.

All-reduce = all-gather of encoded payloads, as ``comm.transport.LocalTransport`` does it: each island sends its
payload to each of the n − 1 others, so between two sites each direction carries one payload (a 2-site ring
all-reduce moves the same bytes per direction: 2(n−1)/n · S = S). The reduction itself costs nothing here.

Seed-scale assumptions (``seed_scale_projection``; every number is an argument)
-------------------------------------------------------------------------------
* Model: 32e9 total parameters, 256 routed experts, top-8, 48 layers. Active parameters ≈ 3e9: with ~2e9 outside
  the routed experts and 8/256 of the ~30e9 routed-expert parameters, ~9–10% active — the ratio of Qwen3-30B-A3B
  (30.5B total / 3.3B active, 128 experts top-8); DeepSeek-V3 is sparser (671B / 37B ≈ 5.5%).
* Compute: 6 · N_active FLOPs per token (forward + backward, attention FLOPs ignored), each GPU at MFU 0.4 of its dense
  bf16 peak (H100 989e12 FLOP/s, A100 312e12). Intra-site communication is inside the MFU.
* Sites: 160 GPUs each; global batch 4e6 tokens per inner step split 3:2 between them. With equal GPUs the split
  makes the sites' step times differ (0.683 s vs 0.455 s on H100s), so the faster site idles at every deadline even
  on an infinitely fast link; ``batch_share="balanced"`` splits the batch in proportion to site throughput instead.
  The projection reports the infinite-link utilisation (the compute-balance ceiling) beside the real one, and their
  ratio, ``link_efficiency``, which isolates what the link costs.
* Streaming DiLoCo: H = 50, P = 16 fragments (≈ 3 layers each for 48 layers), τ = 1; a fragment's outer gradient
  crosses the link at 4 bits per parameter plus a 16-bit scale per block of 128: params/P · (4 + 16/128) / 8 bytes.
* Routing statistics: n_layers · n_experts fp32 loads every step, their own channel, applied ``routing_tau`` steps
  late (default 1: the balancing bias uses the loads of the step before; ``routing_tau=0`` — what a blocking
  all-reduce does — makes every step wait one one-way latency).
* DDP: the full fp32 gradient (params · 4 bytes) each direction every step, blocking, no overlap with the backward.

The decoupled schedule (``simulate_decoupled``; Decoupled DiLoCo, Douillard et al., 2026, arXiv 2604.21428)
---------------------------------------------------------------------------------------------------------------
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
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from islands_kit.comm.link import LinkModel, effective_rate_bps, link_config, transfer_time_stats
from islands_kit.comm.transport import Ledger
from islands_kit.config import LinkConfig
from islands_kit.sync.diloco import fragment_offsets

H100_BF16_FLOPS = 989e12
A100_BF16_FLOPS = 312e12


@dataclass(frozen=True)
class Send:
    """A payload posted after ``src`` finishes 0-based ``step``, needed by ``dst`` before it starts ``deadline_step``."""

    step: int
    nbytes: int
    deadline_step: int
    src: int
    dst: int
    channel: str = "fragment"


@dataclass
class ScheduleResult:
    sim_wall_clock_s: float
    busy_s: list[float]
    idle_s: list[float]
    compute_utilization: float
    transfer_p50_s: float
    transfer_p99_s: float
    peak_link_bytes_per_s: float  # highest rate on one directed link over a 1 s window (the run ledger's definition)
    payload_bytes: int
    bytes_on_wire: int  # including resends
    n_transfers: int
    channels: dict[str, dict[str, float]] = field(default_factory=dict)  # transfers, bytes, p50_s, p99_s, idle_s


def all_gather_pairs(n_islands: int) -> list[tuple[int, int]]:
    """(src, dst) pairs of an all-reduce done as an all-gather: every island to every other."""
    return [(s, d) for s in range(n_islands) for d in range(n_islands) if s != d]


def streaming_sends(n_steps: int, H: int, n_fragments: int, tau: int, fragment_bytes: int, n_islands: int,
                    channel: str = "fragment") -> list[Send]:
    """Streaming DiLoCo's payloads: fragment p (P = ``n_fragments``) syncs after inner steps t ≡ offset_p (mod H)
    (``sync.diloco.fragment_offsets``); its result is applied τ = ``tau`` steps later."""
    _positive(H=H, n_fragments=n_fragments, n_islands=n_islands)
    if not (0 <= tau < H):
        raise ValueError(f"tau: must satisfy 0 <= tau < H={H} (got {tau})")
    offs = fragment_offsets(H, n_fragments)
    out = []
    for s in range(n_steps):
        for off in offs:
            if (s + 1) % H == off:
                out += [Send(s, fragment_bytes, s + 1 + tau, a, b, channel) for a, b in all_gather_pairs(n_islands)]
    return out


def ddp_sends(n_steps: int, grad_bytes: int, n_islands: int, channel: str = "ddp") -> list[Send]:
    """Synchronous data parallelism: the whole gradient every step, needed before the next step."""
    _positive(n_islands=n_islands)
    return [Send(s, grad_bytes, s + 1, a, b, channel) for s in range(n_steps) for a, b in all_gather_pairs(n_islands)]


def routing_sends(n_steps: int, nbytes: int, n_islands: int, tau: int = 1, channel: str = "routing") -> list[Send]:
    """MoE routing statistics every step, applied ``tau`` steps late."""
    _positive(n_islands=n_islands)
    return [Send(s, nbytes, s + 1 + tau, a, b, channel) for s in range(n_steps) for a, b in all_gather_pairs(n_islands)]


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


def simulate_schedule(step_time_s: Sequence[float], n_steps: int, sends: Sequence[Send], link: LinkModel) -> ScheduleResult:
    """Run the islands' steps and the payloads on ``link`` in time order (see the module docstring)."""
    n = len(step_time_s)
    if n < 1 or any(not (c > 0 and math.isfinite(c)) for c in step_time_s):
        raise ValueError(f"step_time_s: need one finite step time > 0 per island (got {list(step_time_s)})")
    _positive(n_steps=n_steps)
    posts: dict[tuple[int, int], list[int]] = {}
    needs: dict[tuple[int, int], list[int]] = {}
    for j, m in enumerate(sends):
        if not (0 <= m.src < n and 0 <= m.dst < n and m.src != m.dst):
            raise ValueError(f"sends[{j}]: src and dst must be two different islands in [0, {n}) (got {m.src} -> {m.dst})")
        if not (0 <= m.step < n_steps):
            raise ValueError(f"sends[{j}].step: must be in [0, n_steps={n_steps}) (got {m.step})")
        if m.deadline_step <= m.step:
            raise ValueError(f"sends[{j}].deadline_step: must be > step (it is posted after step {m.step} ends; "
                             f"got {m.deadline_step})")
        posts.setdefault((m.src, m.step), []).append(j)
        if m.deadline_step < n_steps:
            needs.setdefault((m.dst, m.deadline_step), []).append(j)
    arrival: list[float | None] = [None] * len(sends)
    durations: dict[str, list[float]] = {}
    ledger = Ledger()
    wire_bytes = 0
    free_at = [0.0] * n
    next_step = [0] * n
    running = [False] * n
    idle_by_channel: dict[str, float] = {}
    events: list[tuple[float, int, int]] = []  # (finish time, island, step)

    def try_start(i: int) -> None:
        k = next_step[i]
        if running[i] or k >= n_steps:
            return
        need = needs.get((i, k), [])
        at = {j: a for j in need if (a := arrival[j]) is not None}
        if len(at) < len(need):
            return  # a payload it needs has not even been posted yet; retried when it is
        t = free_at[i]
        if need:
            last = max(need, key=at.__getitem__)
            if at[last] > t:
                ch = sends[last].channel
                idle_by_channel[ch] = idle_by_channel.get(ch, 0.0) + at[last] - t
                t = at[last]
        running[i] = True
        heapq.heappush(events, (t + step_time_s[i], i, k))

    for i in range(n):
        try_start(i)
    while events:
        t, i, k = heapq.heappop(events)
        free_at[i], next_step[i], running[i] = t, k + 1, False
        waiting = set()
        for j in posts.get((i, k), []):
            m = sends[j]
            tr = link.transfer(m.nbytes, t, m.src, m.dst)
            arrival[j] = tr.end_s
            durations.setdefault(m.channel, []).append(tr.duration_s)
            ledger.record(m.channel, m.src, m.dst, m.nbytes, tr.start_s, tr.end_s)
            wire_bytes += tr.bytes_on_wire
            waiting.add(m.dst)
        try_start(i)
        for d in sorted(waiting):
            try_start(d)
    if any(s < n_steps for s in next_step):
        raise RuntimeError(f"simulate_schedule: deadlock, islands stopped at steps {next_step}")
    wall = max(free_at)
    busy = [n_steps * c for c in step_time_s]
    st, channels = _channel_stats(durations, ledger)
    for ch, row in channels.items():
        row["idle_s"] = idle_by_channel.get(ch, 0.0)
    return ScheduleResult(
        sim_wall_clock_s=wall, busy_s=busy, idle_s=[max(wall - b, 0.0) for b in busy],
        compute_utilization=sum(busy) / (n * wall), transfer_p50_s=st["p50"], transfer_p99_s=st["p99"],
        peak_link_bytes_per_s=ledger.peak_link_bytes_per_s(), payload_bytes=ledger.bytes(), bytes_on_wire=wire_bytes,
        n_transfers=sum(len(v) for v in durations.values()), channels=channels)


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
        push(t if i == 0 else send(fragment_bytes, t, i, 0, "fragment"), _UP, p, k, i)

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
            push(send(fragment_bytes, t, 0, d, "fragment"), _DOWN, p, k, d)

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


def codec_bytes(n_params: float, bits: int, block_size: int = 128, scale_bits: int = 16) -> int:
    """Bytes of ``n_params`` values at ``bits`` each plus one ``scale_bits`` scale per block of ``block_size``."""
    n = int(n_params)
    return math.ceil(n * bits / 8) + math.ceil(n / block_size) * scale_bits // 8


def ideal_link() -> LinkConfig:
    """A link with (practically) infinite bandwidth and no latency, jitter, tail or loss: the compute-only ceiling."""
    return link_config("intra-dc", bandwidth_bps=1e18, rtt_s=0.0, jitter_sigma=0.0, tail_prob=0.0, loss_prob=0.0,
                       corrupt_prob=0.0)


def seed_scale_projection(link_preset: str = "transpacific-25g", tau: int = 1, H: int = 50, n_fragments: int = 16, *,
                          params_total: float = 32e9, params_active: float = 3e9, n_layers: int = 48,
                          n_experts: int = 256, top_k: int = 8, gpus: Sequence[int] = (160, 160),
                          peak_flops: Sequence[float] = (H100_BF16_FLOPS, H100_BF16_FLOPS), mfu: float = 0.4,
                          global_batch_tokens: float = 4e6, batch_share: Sequence[float] | str = (0.6, 0.4),
                          codec_bits: int = 4, codec_block_size: int = 128, scale_bits: int = 16,
                          routing_tau: int = 1, n_windows: int = 4, ddp_steps: int = 6, seed: int = 0,
                          link_overrides: dict[str, Any] | None = None, quorum: int | None = None,
                          grace_s: float = 0.0,
                          schedules: Sequence[str] = ("streaming", "ddp", "decoupled")) -> dict[str, Any]:
    """Utilisation of two-site Streaming DiLoCo (H, P = ``n_fragments``, τ = ``tau``) in lock-step, of the same
    fragments merged by Decoupled DiLoCo (``quorum``, ``grace_s``; τ does not apply), and of DDP, on the same link.

    Symbols as in Streaming DiLoCo (Douillard et al., 2025). Returns step times, payload sizes, and for each schedule
    the utilisation, the infinite-link ceiling, link_efficiency = utilisation / ceiling, transfer times and peak rate;
    for the decoupled one also goodput, inner steps and tokens per island, and late / dropped contributions.
    ``schedules`` picks which of "streaming", "ddp" and "decoupled" to simulate (DDP's 128 GB payloads are the slow
    part).
    """
    unknown = sorted(set(schedules) - {"streaming", "ddp", "decoupled"})
    if unknown or not schedules:
        raise ValueError(f"schedules: must be a non-empty subset of streaming|ddp|decoupled (got {list(schedules)})")
    n = len(gpus)
    if len(peak_flops) != n:
        raise ValueError(f"peak_flops: need one per site ({n}), got {len(peak_flops)}")
    throughput = [g * p * mfu for g, p in zip(gpus, peak_flops)]  # achieved FLOP/s per site
    if batch_share == "balanced":
        share = [t / sum(throughput) for t in throughput]
    elif isinstance(batch_share, str):
        raise ValueError(f"batch_share: must be a list of fractions or 'balanced' (got {batch_share!r})")
    else:
        share = [float(x) / sum(batch_share) for x in batch_share]
        if len(share) != n:
            raise ValueError(f"batch_share: need one per site ({n}), got {len(share)}")
    tokens = [global_batch_tokens * s for s in share]
    step_time = [6.0 * params_active * tok / thr for tok, thr in zip(tokens, throughput)]
    frag = codec_bytes(params_total / n_fragments, codec_bits, codec_block_size, scale_bits)
    routing = n_layers * n_experts * 4
    grad = int(params_total) * 4
    cfg = link_config(link_preset, **(link_overrides or {}))
    n_stream = n_windows * H
    stream = (streaming_sends(n_stream, H, n_fragments, tau, frag, n)
              + routing_sends(n_stream, routing, n, routing_tau))
    ddp = ddp_sends(ddp_steps, grad, n) + routing_sends(ddp_steps, routing, n, 0)

    def run(sends: list[Send], steps: int) -> dict[str, Any]:
        real = simulate_schedule(step_time, steps, sends, LinkModel(cfg, seed))
        ceiling = simulate_schedule(step_time, steps, sends, LinkModel(ideal_link(), seed)).compute_utilization
        return {"compute_utilization": real.compute_utilization, "utilization_infinite_link": ceiling,
                "link_efficiency": real.compute_utilization / ceiling, "n_steps": steps,
                "sim_wall_clock_s": real.sim_wall_clock_s, "idle_s": real.idle_s,
                "payload_bytes_per_step": real.payload_bytes / steps, "bytes_on_wire": real.bytes_on_wire,
                "peak_link_bytes_per_s": real.peak_link_bytes_per_s, "channels": real.channels}

    def run_decoupled() -> dict[str, Any]:
        def sim(c: LinkConfig) -> DecoupledResult:
            return simulate_decoupled(step_time, tokens, n_windows, H, n_fragments, frag, LinkModel(c, seed),
                                      quorum=quorum, grace_s=grace_s, routing_bytes=routing)
        real, ceiling = sim(cfg), sim(ideal_link()).compute_utilization
        return {"compute_utilization": real.compute_utilization, "utilization_infinite_link": ceiling,
                "link_efficiency": real.compute_utilization / ceiling, "goodput": real.goodput,
                "span_s": real.span_s, "idle_s": real.idle_s, "inner_steps": real.inner_steps,
                "tokens_per_island": real.tokens_per_island, "n_merges": len(real.merges),
                "late_contributions": real.late_contributions, "late_merged": real.late_merged,
                "dropped_contributions": real.dropped_contributions, "staleness_slack_s": real.staleness_slack_s,
                "bytes_on_wire": real.bytes_on_wire,
                "payload_bytes": real.payload_bytes, "peak_link_bytes_per_s": real.peak_link_bytes_per_s,
                "channels": real.channels}

    streaming = run(stream, n_stream) if "streaming" in schedules else None
    sync = run(ddp, ddp_steps) if "ddp" in schedules else None
    decoupled = run_decoupled() if "decoupled" in schedules else None
    return {
        "link": asdict(cfg),
        "link_rate_bps": effective_rate_bps(cfg),
        "assumptions": {
            "params_total": params_total, "params_active": params_active, "n_layers": n_layers,
            "n_experts": n_experts, "top_k": top_k, "flops_per_token": 6.0 * params_active, "gpus": list(gpus),
            "peak_flops": list(peak_flops), "mfu": mfu, "global_batch_tokens": global_batch_tokens,
            "batch_share": share, "H": H, "n_fragments": n_fragments, "tau": tau, "codec_bits": codec_bits,
            "codec_block_size": codec_block_size, "scale_bits": scale_bits, "routing_tau": routing_tau, "seed": seed,
            "quorum": n if quorum is None else quorum, "grace_s": grace_s,
        },
        "tokens_per_step": tokens,
        "step_time_s": step_time,
        "fragment_bytes": frag,
        "routing_bytes": routing,
        "ddp_bytes_per_direction": grad,
        "streaming": streaming,
        "ddp": sync,
        "decoupled": decoupled,
        "utilization_ratio": (streaming["compute_utilization"] / sync["compute_utilization"]
                              if streaming and sync else None),
    }


__all__ = ["DecoupledResult", "Merge", "Send", "ScheduleResult", "all_gather_pairs", "codec_bytes", "ddp_sends",
           "fragment_offsets", "full_speed_steps", "ideal_link", "routing_sends", "seed_scale_projection",
           "simulate_decoupled", "simulate_schedule", "streaming_sends"]
