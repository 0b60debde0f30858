"""The published bandwidth tables, priced on the kit's wire: the Gbit/s each method needs for a target compute
utilisation (CU), as Douillard et al. 2025 (Streaming DiLoCo, arXiv 2501.18512, Table 4) and Charles et al. 2025
(arXiv 2503.09799 v1, Table 6) print them, with what the kit says under their assumptions and under its own.

Their simulator (Streaming DiLoCo, section 3.1): a DAG per step with, per layer, a forward node, backward nodes and a
reduction node; reductions overlap the backward pass; only the bandwidth between sites counts; step time from the
FLOPs rule of Kaplan et al. The kit prices that schedule on training's own wire (``comm.transport.LocalTransport``:
``SimClock``, ring all-reduce, ledger, ``LinkModel``), in ``overlapped_window``; training's lock-step driver has no
overlap inside a step (a step computes, then reduces), so the schedule is written here, on the same wire, and with the
overlap off it equals the lock-step replay the seed-scale projection runs (tests/test_published.py):

* M = ``N_SITES`` = 2 sites, one replica each, joined by one link of W Gbit/s each way.
* A synchronising step: the forward takes ``FORWARD_SHARE`` = 1/3 of the step (2N of Kaplan's 6N FLOPs per token), the
  backward the rest in ``n_layers`` equal slices; each slice's share of the payload is ring all-reduced as soon as
  its slice ends (the wire serialises them in order); the step ends when its compute and the last reduction are
  done. Data-parallel: every step is one (the gradient). DiLoCo: H - 1 steps of compute, then one (the outer
  gradient); the steady state is one window, since the window ends with the wire drained.
* Assumptions the papers leave unstated, chosen once for all rows (``PAPER``): payloads in bf16 (16 bits per
  parameter), no latency (only bandwidth counts), and the bandwidth grid ``GRID_GBPS`` = 50 points log-spaced from
  0.1 to 1000 Gbit/s (ratio 10^(4/49) = 1.2068), on which every printed value lies (tests/test_published.py).
* Charles et al.'s Table 6 is reproduced at ``T6_STEP_FACTOR`` = 1.25 x its printed step times (equivalently 0.8 x the
  payload, 12.8 bits per parameter at the printed times): its 10B row is the Streaming DiLoCo paper's 1B-at-0.1 s row
  (16 Gbit per 0.1 s, 0.8 x the 10B-at-0.8 s ratio), and the same factor reproduces its 405B and 671B rows (every
  cell within one grid step but the one ``EXPLAINED`` names). At the printed step times the kit reproduces the
  Streaming DiLoCo paper's own 10B rows instead.

With ``overlap=False`` the step computes, then reduces the whole payload: Appendix A's closed form of Charles et al.
(``closed_form_window_s``), which the kit's clock equals to float precision (tests/test_published.py).

The kit's fuller model on the same cases (``EFFECTS``), each effect alone, then together: Streaming DiLoCo's fragments
landing tau steps late and sites that never wait for each other (the seed-scale projection's code path,
``projection/lockstep.py`` and ``projection/decoupled.py``), the int4 codec and a heavy-tailed lossy link repaired by
forward error correction (the papers' schedule above, with that one change); ``full``: the lock-step replay with all
three.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.link import LinkModel, link_config
from islands_kit.comm.transport import LocalTransport
from islands_kit.config import LinkConfig, SyncConfig
from islands_kit.projection.decoupled import DecoupledPlan, price_decoupled
from islands_kit.projection.lockstep import LockStepPlan, price_lock_step
from islands_kit.projection.seed_scale import ideal_link, site_step_times
from islands_kit.sync.diloco_spec import DiLoCoConfig

__all__ = ["CASES", "CU_TARGETS", "EFFECTS", "EXPLAINED", "GRID_GBPS", "METHODS", "N_SITES", "PAPER", "PUBLISHED",
           "T6_STEP_FACTOR", "Case", "Published", "closed_form_window_s", "effect_utilisation", "grid_steps",
           "overlapped_window", "paper_utilisation", "quiet_link", "required_gbps"]

CU_TARGETS = (0.5, 0.8, 0.9, 0.95, 0.99)
GRID_GBPS: tuple[float, ...] = tuple(10 ** (-1 + 4 * k / 49) for k in range(50))
GRID_RATIO = 10 ** (4 / 49)
N_SITES = 2
FORWARD_SHARE = 1 / 3
T6_STEP_FACTOR = 1.25
METHODS = ((1, "data-parallel"), (10, "DiLoCo H=10"), (50, "DiLoCo H=50"), (100, "DiLoCo H=100"),
           (300, "DiLoCo H=300"))  # (H, label); H = 1 is data-parallel


@dataclass(frozen=True)
class Assumptions:
    """What the papers leave unstated: payload bits per parameter, one-way latency (s), the reductions' overlap."""

    payload_codec: str = "bf16"
    latency_s: float = 0.0
    overlap: bool = True


PAPER = Assumptions()


@dataclass(frozen=True)
class Case:
    """One model of the tables: parameters, step time (s), layers (the reductions' granularity)."""

    name: str
    params: float
    step_s: float
    n_layers: int
    note: str


def _reference_step_s() -> float:
    """The seed-scale projection's step, its two sites balanced (the papers' sites are identical)."""
    return site_step_times(batch_share="balanced")[0]


CASES: dict[str, Case] = {
    "10B": Case("10B", 10e9, 0.8, 48, "Chinchilla-style 10B at 0.8 s per step (48 layers: not stated, assumed)"),
    "405B": Case("405B", 405e9, 26.0, 126, "Llama3 405B at 26 s per step (126 layers)"),
    "671B": Case("671B", 671e9, 20.0, 61, "DeepSeek-V3 671B at 20 s per step (61 layers)"),
    "32B-MoE": Case("32B-MoE", 32e9, _reference_step_s(), 48,
                    "the reference design: 32B MoE, 160 + 160 H100, the seed-scale projection's step, balanced sites"),
}


@dataclass(frozen=True)
class Published:
    """A published row: Gbit/s for CU = 50 / 80 / 90 / 95 / 99% (None: beyond the grid, printed "1000+")."""

    source: str
    gbps: tuple[float | None, ...]


T6 = "Charles et al. 2025, Table 6"
T4 = "Douillard et al. 2025 (Streaming DiLoCo), Table 4"
PUBLISHED: dict[tuple[str, int], list[Published]] = {
    ("10B", 1): [Published(T6, (104.8, 184.2, 222.3, 222.3, 390.7)), Published(T4, (104.8, 222.3, 222.3, 268.3, 471.5))],
    ("10B", 10): [Published(T6, (16.0, 49.4, 86.8, 152.6, 222.3))],
    ("10B", 50): [Published(T6, (3.0, 11.0, 23.3, 41.0, 126.5))],
    ("10B", 100): [Published(T6, (1.4, 6.2, 13.3, 23.3, 86.8)), Published(T4, (1.7, 7.5, 16.0, 33.9, 104.8))],
    ("10B", 300): [Published(T6, (0.5, 2.0, 4.3, 9.1, 41.0))],
    ("405B", 1): [Published(T6, (126.5, 222.3, 268.3, 323.8, 323.8))],
    ("405B", 10): [Published(T6, (19.3, 72.0, 126.5, 184.2, 268.3))],
    ("405B", 50): [Published(T6, (3.6, 13.3, 28.1, 59.6, 184.2))],
    ("405B", 100): [Published(T6, (2.0, 7.5, 16.0, 33.9, 126.5))],
    ("405B", 300): [Published(T6, (0.7, 3.0, 6.2, 13.3, 59.6))],
    ("671B", 1): [Published(T6, (323.8, 569.0, 686.6, 686.6, None))],
    ("671B", 10): [Published(T6, (49.4, 152.6, 268.3, 390.7, 686.6))],
    ("671B", 50): [Published(T6, (7.5, 33.9, 72.0, 126.5, 390.7))],
    ("671B", 100): [Published(T6, (4.3, 16.0, 41.0, 72.0, 268.3))],
    ("671B", 300): [Published(T6, (1.7, 6.2, 13.3, 28.1, 126.5))],
}


# Published cells the kit misses by more than one grid step under the reading that reproduces their table, and why
EXPLAINED: dict[tuple[str, int, float], str] = {
    ("671B", 1, 0.99): "Table 6 prints 1000+; at 1.25x the step the kit reaches 99% at 828.6 Gbit/s, two grid steps "
                       "below. The cell is set by the last layer's reduction, exposed after the backward, so by the "
                       "layer granularity (61 equal layers assumed; not stated). At the printed step time the kit "
                       "needs 1000 Gbit/s, within one step, and the whole 671B data-parallel row is within one step.",
}


def quiet_link(gbps: float, latency_s: float = 0.0) -> LinkConfig:
    """A link of ``gbps`` Gbit/s each way with one-way latency ``latency_s`` and no jitter, tail or loss."""
    return link_config("intra-dc", bandwidth_bps=gbps * 1e9, rtt_s=2 * latency_s, jitter_sigma=0.0, tail_prob=0.0,
                       loss_prob=0.0, corrupt_prob=0.0, method="naive")


def _buckets(nbytes: int, n: int) -> list[int]:
    q, r = divmod(nbytes, n)
    return [q + (1 if j < r else 0) for j in range(n)]


def overlapped_window(payload_bytes: int, step_s: float, H: int, n_layers: int, link: LinkConfig, *,
                      overlap: bool = True, n_sites: int = N_SITES, seed: int = 0) -> LocalTransport:
    """One sync window of the papers' schedule (module docstring) on a fresh wire over ``link``: H - 1 steps of
    compute, then a step whose ``payload_bytes`` are ring all-reduced per layer as the backward goes (``overlap``) or
    whole after it. Returns the wire; its clock holds the utilisation."""
    if not (H >= 1 and n_layers >= 1 and step_s > 0 and payload_bytes >= 0):
        raise ValueError(f"H, n_layers, step_s, payload_bytes: need H >= 1, n_layers >= 1, step_s > 0, bytes >= 0 "
                         f"(got {H}, {n_layers}, {step_s}, {payload_bytes})")
    wire = LocalTransport(n_sites, LinkModel(link, seed))
    ids = wire.local_islands
    channel = "gradients" if H == 1 else "fragments"
    for i in ids:
        wire.compute(i, (H - 1) * step_s)
    if not overlap:
        for i in ids:
            wire.compute(i, step_s)
        ready, _ = wire.price_all_reduce(channel, {i: payload_bytes for i in ids})
    else:
        forward = FORWARD_SHARE * step_s
        for i in ids:
            wire.compute(i, forward)
        ready = {i: 0.0 for i in ids}
        for layer, nbytes in enumerate(_buckets(payload_bytes, n_layers), start=1):
            slice_end = (H - 1) * step_s + forward + (step_s - forward) * layer / n_layers
            for i in ids:  # to the slice's end, not by a slice's length: no drift over many slices
                wire.compute(i, slice_end - wire.clock.busy[i])
            arrival, _ = wire.price_all_reduce(channel, {i: nbytes for i in ids})
            ready = {i: max(ready[i], arrival[i]) for i in ids}
    for i in ids:
        wire.clock.wait_until(i, ready[i])
    return wire


def closed_form_window_s(n_values: float, bits: int, n_nodes: int, bandwidth_bps: float, latency_s: float,
                         compute_s: float, H: int) -> float:
    """Charles et al., Appendix A (no overlap): a window of H steps costs H compute steps plus one all-reduce of
    n_values values of ``bits`` bits among ``n_nodes`` nodes, at least 2 N / W (1 - 1/R) + eps. Data-parallel:
    H = 1. DiLoCo: the outer all-reduce every H steps (the inner one is inside a site, in the kit's MFU)."""
    return H * compute_s + 2 * n_values * bits / bandwidth_bps * (1 - 1 / n_nodes) + latency_s


def paper_utilisation(case: Case, H: int, gbps: float, step_factor: float = 1.0,
                      assume: Assumptions = PAPER) -> float:
    """CU of ``case`` with window H on a W = ``gbps`` link under the papers' schedule and ``assume``."""
    payload = get_codec(assume.payload_codec).nbytes(int(case.params))
    wire = overlapped_window(payload, case.step_s * step_factor, H, case.n_layers, quiet_link(gbps, assume.latency_s),
                             overlap=assume.overlap)
    return wire.clock.utilization()


# --- the kit's fuller model: the seed-scale projection's code path ----------------------------------------------------

N_FRAGMENTS = 16  # Streaming DiLoCo's P (the seed-scale projection's)
TAU = 1
N_WINDOWS = 2  # windows priced per point; utilisation is their cumulative figure
FULL_CODEC = "int4"
LOSSY = dict(preset="transpacific-25g", loss_prob=0.01, fec_group=32, fec_parity=4, chunk_bytes=64 << 20)


def lossy_link(gbps: float) -> LinkConfig:
    """The seed's transpacific link (145 ms round trip, log-normal jitter, a 1% Pareto tail) at ``gbps``, with 1%
    chunk loss repaired by FEC 32 + 4 and resends (64 MiB chunks: the payloads here are tens of GB to TB)."""
    over = {k: v for k, v in LOSSY.items() if k != "preset"}
    return link_config(str(LOSSY["preset"]), bandwidth_bps=gbps * 1e9, **over)


@dataclass(frozen=True)
class Effect:
    """One modelled effect (or all together) priced on ``case``, window H, at ``gbps``; None where it does not apply."""

    name: str
    what: str
    price: Callable[[Case, int, float], float | None]
    data_parallel: bool  # whether it applies to data-parallel (H = 1)


def _lockstep(case: Case, H: int, gbps: float, *, codec: str, link: LinkConfig, streaming: bool,
              ddp_codec: str = "bf16") -> float:
    step = [case.step_s] * N_SITES
    if H == 1:
        plan = LockStepPlan(step, N_WINDOWS, gradient_bytes=get_codec(ddp_codec).nbytes(int(case.params)))
    else:
        P = _fragments(H) if streaming else 1
        frag = get_codec(codec).nbytes(int(case.params) // P)
        plan = LockStepPlan(step, N_WINDOWS * H, [frag] * P, H, TAU if streaming else 0)
    return price_lock_step(plan, LinkModel(link, 0)).clock.utilization()


def _fragments(H: int) -> int:
    """Streaming DiLoCo's P: ``N_FRAGMENTS``, fewer for a window shorter than that (each needs its own offset)."""
    return min(N_FRAGMENTS, H)


def _streaming(case: Case, H: int, gbps: float) -> float | None:
    return None if H == 1 else _lockstep(case, H, gbps, codec="bf16", link=quiet_link(gbps), streaming=True)


def _codec(case: Case, H: int, gbps: float) -> float | None:
    return None if H == 1 else paper_utilisation(case, H, gbps, assume=Assumptions(payload_codec=FULL_CODEC))


def _lossy(case: Case, H: int, gbps: float) -> float | None:
    payload = get_codec(PAPER.payload_codec).nbytes(int(case.params))
    return overlapped_window(payload, case.step_s, H, case.n_layers, lossy_link(gbps)).clock.utilization()


def _decoupled_merges(case: Case, H: int, link: LinkConfig | None) -> int:
    P = _fragments(H)
    sync = SyncConfig(strategy="diloco", mode="decoupled", H=H, n_fragments=P, codec="bf16",
                      routing_sync=False, quorum=N_SITES, diloco=DiLoCoConfig(final_codec=""))
    plan = DecoupledPlan([case.step_s] * N_SITES, [1] * N_SITES, N_WINDOWS * H, [int(case.params) // P] * P, sync)
    return len(price_decoupled(plan, LinkModel(link or ideal_link(), 0), final=False).merges)


def _decoupled(case: Case, H: int, gbps: float) -> float | None:
    """A decoupled site never waits (its utilisation is 1 on any link): what bandwidth buys is merges. The figure is
    the share of the merges an infinitely fast link applies in the same span that this link applies."""
    if H == 1:
        return None
    return _decoupled_merges(case, H, quiet_link(gbps)) / _ideal_merges(case, H)


@functools.cache
def _ideal_merges(case: Case, H: int) -> int:
    return _decoupled_merges(case, H, None)


def _full(case: Case, H: int, gbps: float) -> float | None:
    """Lock-step Streaming DiLoCo with int4 fragments on the lossy link; data-parallel as the kit trains it (the fp32
    gradient all-reduced after the step, no overlap with the backward) on the same link."""
    return _lockstep(case, H, gbps, codec=FULL_CODEC, link=lossy_link(gbps), streaming=True, ddp_codec="fp32")


EFFECTS: dict[str, Effect] = {
    "streaming": Effect("streaming", f"P = {N_FRAGMENTS} fragments (H at most), each landing tau = {TAU} step late "
                        "(bf16, no backward overlap)",
                        _streaming, False),
    "int4": Effect("int4", "the papers' schedule with int4 outer gradients (one fp32 scale per 128)", _codec, False),
    "lossy_fec": Effect("lossy_fec", "the papers' schedule on the transpacific link: 145 ms, jitter, 1% Pareto tail, "
                        "1% chunk loss, FEC 32 + 4", _lossy, True),
    "decoupled": Effect("decoupled", f"Decoupled DiLoCo, P = {N_FRAGMENTS} bf16 fragments, neither site waiting: "
                        "the share of an infinite link's merges applied, not utilisation (always 1)", _decoupled, False),
    "full": Effect("full", "the kit's model: streaming + int4 + the lossy link (data-parallel: fp32, no overlap)",
                   _full, True),
}


def effect_utilisation(effect: str, case: Case, H: int, gbps: float) -> float | None:
    if effect not in EFFECTS:
        raise ValueError(f"effect: must be one of {'|'.join(EFFECTS)} (got {effect!r})")
    return EFFECTS[effect].price(case, H, gbps)


def required_gbps(cu: Callable[[float], float], targets: tuple[float, ...] = CU_TARGETS,
                  grid: tuple[float, ...] = GRID_GBPS) -> list[float | None]:
    """The smallest grid bandwidth whose utilisation ``cu(gbps)`` reaches each target (None: not on the grid), found
    by bisection over the grid (utilisation rises with bandwidth); each point is priced once."""
    seen: dict[int, float] = {}

    def at(k: int) -> float:
        if k not in seen:
            seen[k] = cu(grid[k])
        return seen[k]

    out: list[float | None] = []
    for target in targets:
        if at(len(grid) - 1) < target:
            out.append(None)
            continue
        lo, hi = -1, len(grid) - 1  # at(hi) reaches the target; lo is below the grid or does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if at(mid) >= target:
                hi = mid
            else:
                lo = mid
        out.append(grid[hi])
    return out


def grid_steps(ours: float | None, theirs: float | None) -> int | None:
    """How many grid steps ``ours`` lies above ``theirs`` (None beyond the grid counts as one step past its end)."""
    end = GRID_GBPS[-1] * GRID_RATIO
    a, b = (end if ours is None else ours), (end if theirs is None else theirs)
    return round(math.log(a / b) / math.log(GRID_RATIO))
