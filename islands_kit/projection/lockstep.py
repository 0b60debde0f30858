"""Lock-step training priced without tensors: the run loop's clock and wire, replayed with payload sizes.

``price_lock_step`` walks the same steps as ``run.Experiment.train_step`` and ``sync.diloco.DiLoCo`` do, on the same
pieces: a ``LocalTransport`` (its ``SimClock``, its ``Ledger`` and the ``LinkModel``) prices every collective with
``price_all_reduce`` — the ring all-reduce training uses, transfer for transfer, in the same order — and a
``PendingQueue`` holds the outer results in flight. Per inner step t (1-based), as training does it:

1. every island computes for its step time (``islands.step_seconds``);
2. routing statistics (fp32 expert loads) are all-reduced, and the message posted ``routing_delay`` steps earlier is
   waited for (``sync.routing.RoutingSync``);
3. data parallelism: the fp32 gradient is all-reduced and waited for at once (``sync.ddp.DDP``);
4. Streaming DiLoCo: the outer results due at t are waited for, the fragments of ``schedule`` due at t are posted
   (``sync.schedule.sync_schedule``), landing after step t + τ, and those due at once (τ = 0) are waited for.

At the end (``final_fragment_bytes``) every result in flight is waited for and every fragment with steps since its
last sync goes once more and is waited for (``DiLoCo.finalize``). Only waiting idles an island, so the simulated wall
clock, the utilisation and the ledger are those of a training run with the same plan. ``plan_for_config`` reads the
plan of a lock-step DiLoCo or DDP config off the model that would train it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from islands_kit.comm.clock import Handle
from islands_kit.comm.codecs import get_codec
from islands_kit.comm.link import LinkModel, transfer_time_stats
from islands_kit.comm.transport import LocalTransport
from islands_kit.config import ExperimentConfig
from islands_kit.islands import step_seconds
from islands_kit.model import MoETransformer
from islands_kit.sync.base import PendingQueue, strided_fragments
from islands_kit.sync.schedule import sync_schedule


@dataclass(frozen=True)
class LockStepPlan:
    """What a lock-step run puts on the wire, in sizes: each island's step time, and per channel the payload bytes
    and when they go (``schedule``: the (step, fragment) syncs, 1-based steps)."""

    step_s: list[float]
    steps: int
    fragment_bytes: list[int] = field(default_factory=list)  # encoded size of each fragment's outer gradient
    schedule: list[tuple[int, int]] = field(default_factory=list)
    tau: int = 0
    final_fragment_bytes: list[int] | None = None  # the closing sync of every fragment (None: the run goes on)
    routing_bytes: int = 0  # fp32 expert loads per step (0: no routing channel)
    routing_delay: int = 1
    gradient_bytes: int = 0  # fp32 gradient all-reduced every step (0: not data-parallel)

    def __post_init__(self) -> None:
        if len(self.step_s) < 1 or any(not c > 0 for c in self.step_s):
            raise ValueError(f"step_s: need one step time > 0 per island (got {self.step_s})")
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"steps: must be an integer >= 1 (got {self.steps!r})")
        bad = [(t, p) for t, p in self.schedule if not (1 <= t <= self.steps and 0 <= p < len(self.fragment_bytes))]
        if bad:
            raise ValueError(f"schedule: (step, fragment) pairs must have 1 <= step <= steps={self.steps} and a "
                             f"fragment with a size in fragment_bytes (got {bad[:3]})")
        if self.final_fragment_bytes is not None and len(self.final_fragment_bytes) != len(self.fragment_bytes):
            raise ValueError(f"final_fragment_bytes: need one size per fragment ({len(self.fragment_bytes)}), got "
                             f"{len(self.final_fragment_bytes)}")
        if not (self.tau >= 0 and self.routing_delay >= 0):
            raise ValueError(f"tau, routing_delay: must be >= 0 (got {self.tau}, {self.routing_delay})")


def _post(transport: LocalTransport, channel: str, nbytes: int) -> Handle:
    arrival, _ = transport.price_all_reduce(channel, {i: nbytes for i in transport.local_islands})
    return Handle({i: None for i in arrival}, arrival, transport.clock)


def _wait(handle: Handle) -> None:
    for i in handle.arrival:
        handle.wait(i)


def price_lock_step(plan: LockStepPlan, link: LinkModel | None) -> LocalTransport:
    """Replay ``plan`` on a fresh ``LocalTransport`` over ``link`` (module docstring); its clock and ledger hold the
    result."""
    tr = LocalTransport(len(plan.step_s), link)
    due: dict[int, list[int]] = {}
    for t, p in plan.schedule:
        due.setdefault(t, []).append(p)
    pending = PendingQueue()
    routing: list[Handle] = []
    last_sync = [0] * len(plan.fragment_bytes)
    for t in range(1, plan.steps + 1):
        for i, c in enumerate(plan.step_s):
            tr.compute(i, c)
        if plan.routing_bytes:
            routing.append(_post(tr, "routing", plan.routing_bytes))
            if len(routing) > plan.routing_delay:
                _wait(routing.pop(0))
        if plan.gradient_bytes:
            _wait(_post(tr, "gradients", plan.gradient_bytes))
        for pend in pending.due(t):
            _wait(pend.handle)
        for p in sorted(due.get(t, [])):
            pending.push(t + plan.tau, p, _post(tr, "fragments", plan.fragment_bytes[p]), sent_at=t)
            last_sync[p] = t
        for pend in pending.due(t):
            _wait(pend.handle)
    if plan.final_fragment_bytes is not None:
        for pend in pending.drain():
            _wait(pend.handle)
        for p, nbytes in enumerate(plan.final_fragment_bytes):
            if last_sync[p] < plan.steps:
                pending.push(plan.steps, p, _post(tr, "fragments", nbytes), sent_at=plan.steps)
        for pend in pending.due(plan.steps):
            _wait(pend.handle)
    return tr


def summary(tr: LocalTransport) -> dict[str, Any]:
    """The figures a run's result.json reports for the same clock and ledger, plus per-channel transfer times."""
    led, clock = tr.ledger, tr.clock
    channels = {}
    for ch in sorted(led.channels):
        st = transfer_time_stats(led.durations(ch))
        channels[ch] = {"transfers": led.channels[ch].messages, "bytes": led.bytes(ch), "p50_s": st["p50"],
                        "p99_s": st["p99"], "max_s": st["max"]}
    return {"sim_wall_clock_s": max(clock.now.values()), "compute_utilization": clock.utilization(),
            "busy_s": [clock.busy[i] for i in tr.local_islands], "idle_s": [clock.idle[i] for i in tr.local_islands],
            "payload_bytes": led.bytes(), "peak_link_bytes_per_s": led.peak_link_bytes_per_s(),
            "links": dict(led.links), "channels": channels}


def plan_for_config(cfg: ExperimentConfig, model: MoETransformer) -> LockStepPlan:
    """The plan of a lock-step ``diloco`` or ``ddp`` run of ``cfg``, sized on ``model`` (built from ``cfg.model``):
    step times from the islands' hardware, fragment sizes from the strided fragments and the codec, as training
    computes them. Constant H only; no warm start, faults or preemption (the run would differ from the plan)."""
    s = cfg.sync
    kind = s.traits.projection  # every_step (gradients) | fragments | quorum (projection/decoupled.py) | "" (none)
    if kind not in ("every_step", "fragments") or s.routing_sync_mode != "all_reduce":
        raise ValueError(f"sync.strategy, sync.mode, sync.routing_sync_mode: the projection prices lockstep diloco|ddp "
                         f"with all-reduced routing (got {s.strategy}, {s.mode}, {s.routing_sync_mode})")
    if kind == "fragments" and (s.diloco.h_schedule != "constant" or s.diloco.warm_start_steps):
        raise ValueError("sync.diloco: the projection prices the constant H schedule without a warm start "
                         f"(got h_schedule={s.diloco.h_schedule!r}, warm_start_steps={s.diloco.warm_start_steps})")
    if cfg.faults.preempt_island >= 0 or cfg.faults.straggler_island >= 0:
        raise ValueError("faults: the projection prices runs without preemption or stragglers")
    active = model.num_active_params()
    step_s = [step_seconds(ic, cfg.model, active) for ic in cfg.islands]
    n = len(cfg.islands)
    balanced = cfg.model.n_experts > 1 and cfg.model.bias_balancing and s.routing_sync and n > 1
    routing = get_codec("fp32").nbytes(cfg.model.n_layers * cfg.model.n_experts) if balanced else 0
    if kind == "every_step":
        grad = get_codec("fp32").nbytes(model.num_params()) if n > 1 else 0
        return LockStepPlan(step_s, cfg.steps, routing_bytes=routing, gradient_bytes=grad)
    params = dict(model.named_parameters())
    frags = strided_fragments(model.block_param_names(), model.extra_param_names(), s.n_fragments)
    numels = [sum(params[name].numel() for name in names) for names in frags]
    codec = get_codec(s.codec, s.codec_block_size)
    final = get_codec(s.diloco.final_codec, s.codec_block_size) if s.diloco.final_codec else codec
    return LockStepPlan(step_s, cfg.steps, [codec.nbytes(k) for k in numels], sync_schedule(s.H, s.n_fragments, cfg.steps),
                        s.tau, [final.nbytes(k) for k in numels], routing)
