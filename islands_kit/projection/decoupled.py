"""Decoupled DiLoCo priced without training: training's own driver and synchroniser, run on stand-ins.

``price_decoupled`` runs ``train.drivers.DecoupledDriver`` over the strategy a ``sync.mode=decoupled`` config builds
through its registry spec (``sync.decoupled.DecoupledDiLoCo``: its rounds and the messages of ``comm/messages.py`` on
the in-process wire, the quorum rule of ``sync/quorum.py``, landing at step boundaries and bounded staleness, the
final merge) on stand-in islands that cost their step time and train nothing (``projection/standin.py``): in tick t
every island takes the inner steps that end by t · T_ref on its own clock, as in training. The wire prices each
fragment payload at the size its codec gives the real fragment (``Codec.nbytes``), so the clock, the ledger and the
merge log are a training run's with the same plan, to the last bit (tests/test_projection.py). Decoupled islands
sync no routing statistics (the driver's rule), so neither does this.

The seed-scale projection (``projection/seed_scale.py``) prices the steady state: ``final=False`` stops at the last
tick, without the closing merges.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, cast

from islands_kit.comm.codecs import Payload, get_codec
from islands_kit.comm.link import LinkModel, transfer_time_stats
from islands_kit.comm.transport import Ledger
from islands_kit.config import ExperimentConfig, SyncConfig
from islands_kit.model import MoETransformer
from islands_kit.projection.lockstep import summary
from islands_kit.projection.standin import SizedWire, config_for, stand_ins
from islands_kit.sync.base import ClockedStrategy, strided_fragments
from islands_kit.train.drivers import DecoupledDriver
from islands_kit.train.islands import step_seconds

__all__ = ["DecoupledPlan", "DecoupledResult", "decoupled_plan_for_config", "price_decoupled"]


@dataclass(frozen=True)
class DecoupledPlan:
    """What a decoupled run does, in sizes: each island's step time (with any straggler factor) and tokens per step,
    the ticks of the global schedule, each fragment's number of values, and the sync settings (``sync.mode`` must be
    decoupled; constant H). ``nominal_step_s``: the full-speed step times goodput counts against (default
    ``step_s``)."""

    step_s: list[float]
    tokens_per_step: list[int]
    steps: int
    fragment_numel: list[int]
    sync: SyncConfig
    seed: int = 0
    nominal_step_s: list[float] | None = None

    def __post_init__(self) -> None:
        n = len(self.step_s)
        if n < 2 or any(not c > 0 for c in self.step_s):
            raise ValueError(f"step_s: need one step time > 0 per island, at least 2 (got {self.step_s})")
        if len(self.tokens_per_step) != n or any(not (isinstance(k, int) and k >= 0) for k in self.tokens_per_step):
            raise ValueError(f"tokens_per_step: need one integer >= 0 per island ({n}), got {self.tokens_per_step}")
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"steps: must be an integer >= 1 (got {self.steps!r})")
        if len(self.fragment_numel) != self.sync.n_fragments or any(k < 1 for k in self.fragment_numel):
            raise ValueError(f"fragment_numel: need one size >= 1 per fragment (sync.n_fragments="
                             f"{self.sync.n_fragments}), got {self.fragment_numel}")
        if self.sync.traits.projection != "quorum" or self.sync.diloco.h_schedule != "constant":
            raise ValueError(f"sync: the plan prices decoupled diloco with a constant H (got mode={self.sync.mode!r}, "
                             f"strategy={self.sync.strategy!r}, h_schedule={self.sync.diloco.h_schedule!r})")
        if not 1 <= self.sync.quorum <= n:
            raise ValueError(f"sync.quorum: must be in [1, {n}] (got {self.sync.quorum})")


@dataclass
class DecoupledResult:
    """A priced decoupled run, in training's terms (result.json's ``decoupled`` section, clock and ledger)."""

    span_s: float  # the schedule's span: steps x T_ref
    sim_wall_clock_s: float  # the latest island clock (training's sim_wall_clock_s)
    busy_s: list[float]
    idle_s: list[float]
    compute_utilization: float
    goodput: float  # useful (merged) tokens per simulated second against every island at full speed
    inner_steps: list[int]
    tokens_per_island: list[int]
    merges: list[dict[str, Any]]  # the synchroniser's merge log
    late_contributions: int
    dropped_contributions: int
    dropped_tokens: float
    not_ready_rounds: int
    skipped_merges: int
    ledger: Ledger
    transfer_p50_s: float
    transfer_p99_s: float
    peak_link_bytes_per_s: float
    payload_bytes: int
    n_transfers: int
    channels: dict[str, dict[str, float]] = field(default_factory=dict)  # transfers, bytes, p50_s, p99_s, max_s


def price_decoupled(plan: DecoupledPlan, link: LinkModel | None, final: bool = True) -> DecoupledResult:
    """Run ``plan`` (module doc) on ``link`` (None: transfers take no time); ``final``: end with the closing
    merges, as training does."""
    n = len(plan.step_s)
    cfg = config_for(plan.sync, n, plan.steps, plan.seed)

    def price(channel: str, payload: Payload) -> int:  # stand-in fragment p has p + 1 values
        return get_codec(payload.codec, payload.block_size).nbytes(plan.fragment_numel[payload.numel - 1])

    wire = SizedWire(n, link, price)
    islands, strategy = stand_ins(cfg, plan.step_s, plan.tokens_per_step, wire)
    driver = DecoupledDriver(cfg, islands, wire, dict(enumerate(plan.step_s)), cast(ClockedStrategy, strategy))
    for t in range(1, plan.steps + 1):
        driver.step(t)
    if final:
        driver.finish(plan.steps)
    rep = strategy.result_fields()["decoupled"]  # the synchroniser's report, as result.json holds it
    steps = [driver.inner_steps[i] for i in range(n)]
    tokens = [k * tok for k, tok in zip(steps, plan.tokens_per_step)]
    nominal = plan.nominal_step_s or plan.step_s
    priced = summary(wire)  # the clock's and the ledger's figures, as the lock-step replay reports them
    span = priced["sim_wall_clock_s"]
    ideal_rate = sum(tok / c for tok, c in zip(plan.tokens_per_step, nominal))
    goodput = (sum(tokens) - rep["dropped_tokens"]) / (ideal_rate * span) if span > 0 else 0.0
    every = wire.ledger.durations()
    st = transfer_time_stats(every) if every else {"p50": 0.0, "p99": 0.0}
    return DecoupledResult(
        span_s=plan.steps * driver.tick_s, sim_wall_clock_s=span, busy_s=priced["busy_s"], idle_s=priced["idle_s"],
        compute_utilization=priced["compute_utilization"], goodput=goodput, inner_steps=steps, tokens_per_island=tokens,
        merges=rep["merges"], late_contributions=rep["late_contributions"],
        dropped_contributions=rep["dropped_contributions"], dropped_tokens=rep["dropped_tokens"],
        not_ready_rounds=rep["not_ready_rounds"], skipped_merges=rep["skipped_merges"], ledger=wire.ledger,
        transfer_p50_s=st["p50"], transfer_p99_s=st["p99"], peak_link_bytes_per_s=priced["peak_link_bytes_per_s"],
        payload_bytes=priced["payload_bytes"], n_transfers=len(every), channels=priced["channels"])


def decoupled_plan_for_config(cfg: ExperimentConfig, model: MoETransformer) -> DecoupledPlan:
    """The plan of a ``sync.mode=decoupled`` run of ``cfg``, sized on ``model`` (built from ``cfg.model``): step
    times from the islands' hardware and the straggler factor, fragment sizes from the strided fragments, as
    training computes them. No preemption (the run would differ from the plan)."""
    if cfg.faults.preempt_island >= 0 and cfg.faults.preempt_steps > 0:
        raise ValueError("faults.preempt_island: the projection prices runs without preemption")
    active = model.num_active_params()
    nominal = [step_seconds(ic, cfg.model, active) for ic in cfg.islands]
    f = cfg.faults
    step_s = [(f.straggler_factor if f.straggler_island == j else 1.0) * t for j, t in enumerate(nominal)]
    params = dict(model.named_parameters())
    frags = strided_fragments(model.block_param_names(), model.extra_param_names(), cfg.sync.n_fragments)
    return DecoupledPlan(step_s, [ic.batch_size * cfg.model.seq_len for ic in cfg.islands], cfg.steps,
                         [sum(params[name].numel() for name in names) for names in frags],
                         dataclasses.replace(cfg.sync), cfg.seed, nominal)
