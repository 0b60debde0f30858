"""Lock-step training priced without tensors: training's own driver and strategy, run on stand-ins.

``price_lock_step`` runs ``train.drivers.LockstepDriver`` over the strategy a lock-step config builds through its
registry spec (``sync.ddp.DDP`` for data parallelism, ``sync.diloco.DiLoCo`` for Streaming DiLoCo) on stand-in islands
that cost their step time and train nothing (``projection/standin.py``), on a ``LocalTransport`` whose clock, ledger,
ring all-reduce and ``LinkModel`` are training's and whose payloads are priced at the plan's sizes. The driver's step
is the schedule (compute; routing statistics all-reduced and used ``routing_delay`` steps late; the gradient
all-reduce; the fragments due, landing τ steps later; ``DiLoCo.finalize`` at the end), so the simulated wall clock,
the utilisation and the ledger are those of a training run with the same plan (tests/test_projection.py).
``plan_for_config`` reads the plan of a lock-step DiLoCo or DDP config off the model that would train it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from islands_kit.comm.codecs import Payload, get_codec
from islands_kit.comm.link import LinkModel, transfer_time_stats
from islands_kit.comm.transport import LocalTransport
from islands_kit.config import ExperimentConfig, SyncConfig
from islands_kit.model import MoETransformer
from islands_kit.projection.standin import SizedWire, config_for, stand_ins
from islands_kit.sync.base import LockstepStrategy, strided_fragments
from islands_kit.sync.diloco_spec import DiLoCoConfig
from islands_kit.sync.routing import RoutingSync
from islands_kit.train.drivers import LockstepDriver
from islands_kit.train.islands import step_seconds


@dataclass(frozen=True)
class LockStepPlan:
    """What a lock-step run puts on the wire, in sizes: each island's step time, and per channel the payload bytes
    and when they go: fragment p syncs after every step t ≡ offset_p (mod ``H``) (``sync.schedule``; 1-based steps;
    H = 0: no fragment syncs), a data-parallel run all-reduces ``gradient_bytes`` every step."""

    step_s: list[float]
    steps: int
    fragment_bytes: list[int] = field(default_factory=list)  # encoded size of each fragment's outer gradient
    H: int = 0
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
        if bool(self.fragment_bytes) != (self.H > 0) or (self.fragment_bytes and self.gradient_bytes):
            raise ValueError(f"H, fragment_bytes: fragments need a window H >= 1 and no gradient_bytes, H = 0 no "
                             f"fragments (got H={self.H}, {len(self.fragment_bytes)} fragments, gradient_bytes="
                             f"{self.gradient_bytes})")
        if self.final_fragment_bytes is not None and len(self.final_fragment_bytes) != len(self.fragment_bytes):
            raise ValueError(f"final_fragment_bytes: need one size per fragment ({len(self.fragment_bytes)}), got "
                             f"{len(self.final_fragment_bytes)}")
        if not (self.tau >= 0 and self.routing_delay >= 0):
            raise ValueError(f"tau, routing_delay: must be >= 0 (got {self.tau}, {self.routing_delay})")

    def sync(self) -> SyncConfig:
        """The sync settings that put this plan on the wire (stand-in payloads are fp32; the wire prices them at
        the plan's sizes). Without fragments or gradients: DiLoCo with a window longer than the run (no syncs)."""
        strategy = "ddp" if self.gradient_bytes else "diloco"
        return SyncConfig(strategy=strategy, H=self.H or self.steps + 1, n_fragments=max(1, len(self.fragment_bytes)),
                          tau=self.tau, codec="fp32", routing_sync=self.routing_bytes > 0,
                          diloco=DiLoCoConfig(final_codec=""))


def price_lock_step(plan: LockStepPlan, link: LinkModel | None) -> LocalTransport:
    """Run ``plan`` (module docstring) on a fresh wire over ``link``; its clock and ledger hold the result."""
    n = len(plan.step_s)
    cfg = config_for(plan.sync(), n, plan.steps, 0)
    P = cfg.sync.n_fragments
    sizes = {"fragments": dict(enumerate(plan.fragment_bytes, start=1)),  # stand-in fragment p has p + 1 values
             "gradients": {P * (P + 1) // 2: plan.gradient_bytes}, "routing": {1: plan.routing_bytes}}

    def price(channel: str, payload: Payload) -> int:
        return sizes[channel][payload.numel]

    wire = SizedWire(n, link, price)
    islands, strategy = stand_ins(cfg, plan.step_s, [1] * n, wire)
    routing = RoutingSync(wire, plan.routing_bytes > 0, plan.routing_delay)
    driver = LockstepDriver(cfg, islands, wire, dict(enumerate(plan.step_s)), cast(LockstepStrategy, strategy), routing)
    for t in range(1, plan.steps + 1):
        driver.step(t)
    if plan.final_fragment_bytes is not None:
        sizes["fragments"] = dict(enumerate(plan.final_fragment_bytes, start=1))
        driver.finish(plan.steps)
    return wire


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
    return LockStepPlan(step_s, cfg.steps, [codec.nbytes(k) for k in numels], s.H, s.tau, [final.nbytes(k) for k in numels],
                        routing)
