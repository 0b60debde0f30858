"""``run_experiment(config) -> Result``: the one training loop for baseline, two_site and eight_cell.
(Over 400 lines on purpose: one loop drives every strategy, checkpoints, faults and torch.distributed alike, and it
is read top to bottom in one place — the ``Experiment`` state, a step, an evaluation, the result.)

Per inner step, for every island this process holds:
  forward/backward on its own batch (micro-batched) → simulated compute time on its hardware profile →
  routing statistics synced on their own channel → [ddp: gradients all-reduced] → inner optimizer step →
  sync strategy (DiLoCo fragments / butterfly exchanges) → evaluation every ``eval_every`` steps.
Evaluation scores the strategy's evaluation parameters (the global model for DiLoCo) on fixed held-out bytes.
At the end every transfer in flight completes, the final model is scored on *all* validation bytes, and
``result.json`` + ``history.jsonl`` are written. Along the way the writer process prints progress lines
(``progress.Progress``) and logs to wandb (``tracking.Tracker``: train records every ``log_every`` steps, every
evaluation, and at the end the summary, figures and artifact).
"""
from __future__ import annotations

import contextlib
import copy
import math
import platform
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

import islands_kit
from islands_kit import kernels
from islands_kit.comm.codecs import NonFiniteError
from islands_kit.comm.link import LinkModel
from islands_kit.comm.transport import COST_MODEL, LocalTransport, Transport
from islands_kit.config import ConfigError, ExperimentConfig
from islands_kit.data import BatchStream, eval_windows, load_data_corpus, split_bytes
from islands_kit.device import autocast, check_precision, resolve_device
from islands_kit.device import describe as describe_device
from islands_kit.io import atomic_write_bytes
from islands_kit.islands import Island, lr_lambda, step_seconds
from islands_kit.metrics import compressor_bpb, evaluate_bpb
from islands_kit.model import ByteTransformer as MoETransformer
from islands_kit.progress import Progress, describe
from islands_kit.sync.base import SyncStrategy, strided_fragments
from islands_kit.sync.butterfly import Butterfly
from islands_kit.sync.ddp import DDP, ddp_equivalent_bytes
from islands_kit.sync.decoupled import DecoupledDiLoCo
from islands_kit.sync.diloco import DiLoCo, qsr_windows, sync_schedule
from islands_kit.sync.routing import RoutingSync, js_divergence, topk_overlap
from islands_kit.tracking import Tracker, dumps_strict, write_json_atomic


class Diverged(RuntimeError):
    """Training produced NaN/inf: the run stops where it was detected and reports it (``diverged_at_step``)."""


class Result(dict):
    """result.json as a dict with attribute access (``result.final_val_bpb``)."""

    def __getattr__(self, k: str) -> Any:
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k) from None


def git_sha() -> str | None:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except Exception:
        return None


def build_strategy(cfg: ExperimentConfig, models: dict[int, MoETransformer], transport: Transport,
                   tick_s: float = 0.0) -> SyncStrategy:
    """The sync strategy of ``cfg.sync``; ``tick_s`` is the decoupled schedule's step T_ref (sync.mode=decoupled)."""
    s = cfg.sync
    m0 = next(iter(models.values()))
    modules: dict[int, nn.Module] = dict(models)  # the strategies see plain modules
    if s.strategy == "ddp":
        return DDP(modules, transport)
    frags = strided_fragments(m0.block_param_names(), m0.extra_param_names(), s.n_fragments)
    schedule = diloco_schedule(cfg) if s.diloco.h_schedule != "constant" else None
    if s.strategy == "diloco" and s.mode == "decoupled":
        return DecoupledDiLoCo(modules, transport, frags, s, cfg.seed, tick_s, schedule)
    if s.strategy == "diloco":
        return DiLoCo(modules, transport, frags, s, cfg.seed, schedule)
    return Butterfly(modules, transport, frags, s, cfg.seed)


def diloco_schedule(cfg: ExperimentConfig) -> list[tuple[int, int]]:
    """The (step, fragment) syncs of a DiLoCo run (``sync.diloco.h_schedule``; decoupled: steps of the schedule).
    QSR reads the lr of the warm-up as the peak: the rule governs the decay (Gu et al. apply it after warm-up)."""
    s = cfg.sync
    windows = None
    if s.diloco.h_schedule == "qsr":
        o = cfg.optim
        windows = qsr_windows(s.H, s.diloco.qsr_alpha,
                              lambda t: o.lr * lr_lambda(max(t, o.warmup_steps), o, cfg.steps), cfg.steps)
    return sync_schedule(s.H, s.n_fragments, cfg.steps, windows)


class Experiment:
    """Everything one run holds; ``run()`` trains to the end. Split from ``run_experiment`` so that checkpointing,
    fault injection and torch.distributed can drive the same loop."""

    def __init__(self, cfg: ExperimentConfig, out_dir: str | Path | None = None, transport: Transport | None = None) -> None:
        cfg.validate()
        self.cfg = cfg
        self.out_dir = Path(out_dir) if out_dir else None
        # every tensor of the run lives here (islands_kit/device.py); an unavailable GPU fails now, naming the field
        self.device = resolve_device(cfg.device)
        check_precision(cfg.precision, self.device)
        torch.manual_seed(cfg.seed)
        # -- data: the corpus and batch streams stay on the CPU; evaluation windows go to the device once ------------
        self.corpus = load_data_corpus(cfg.data)
        self.train, self.val = split_bytes(self.corpus.data, cfg.data.val_fraction)
        T = cfg.model.seq_len
        self.tune_windows: tuple[torch.Tensor, torch.Tensor] | None = None
        if cfg.data.tune_fraction > 0:  # the tuning split: held out of training, just before the validation tail
            n_tune = round(len(self.corpus.data) * cfg.data.tune_fraction)
            if not 2 <= n_tune < self.train.numel() - T:
                raise ConfigError(f"data.tune_fraction: leaves {n_tune} tuning bytes of {self.train.numel()} training "
                                  f"bytes; must leave both more than model.seq_len={T} (got {cfg.data.tune_fraction})")
            tune = self.train[-n_tune:].clone()
            self.train = self.train[:-n_tune].clone()
            if cfg.data.score_tune:  # only a tuner reads final_tune_bpb: otherwise the split is held out, not scored
                tx, ty = eval_windows(tune, T, cfg.data.final_eval_bytes)
                self.tune_windows = (tx.to(self.device), ty.to(self.device))
        self.final_tune_bpb: float | None = None
        self.eval_x, self.eval_y = (w.to(self.device) for w in eval_windows(self.val, T, cfg.data.eval_bytes))
        final_x, final_y = eval_windows(self.val, T, cfg.data.final_eval_bytes)
        self.scored_bytes = bytes(final_y.to(torch.uint8).flatten().numpy().tobytes())  # what final_val_bpb scores
        self.final_x, self.final_y = final_x.to(self.device), final_y.to(self.device)
        self.val_bytes = int(self.final_y.numel())
        # -- transport -------------------------------------------------------------------------------------------
        n = len(cfg.islands)
        self.transport = transport or LocalTransport(n, LinkModel(cfg.link, seed=cfg.seed))
        # -- islands: identical initial weights, separate data streams -------------------------------------------
        torch.manual_seed(cfg.seed)
        base = MoETransformer(cfg.model).to(self.device)  # initialised on the CPU: the same weights on every device
        self.params_total = base.num_params()
        self.params_active = base.num_active_params()
        # each island's step time at full speed (its hardware; no straggler factor): the ideal rate goodput counts
        self.nominal_step_s = {j: step_seconds(ic, cfg.model, self.params_active) for j, ic in enumerate(cfg.islands)}
        self.decoupled = cfg.sync.mode == "decoupled"
        # every island's step time with its straggler factor (its Island's compute_s); T_ref of the decoupled schedule
        # is the fastest, the same on every process
        self.step_s = {j: (cfg.faults.straggler_factor if cfg.faults.straggler_island == j else 1.0) * t
                       for j, t in self.nominal_step_s.items()}
        self.islands: dict[int, Island] = {}
        for i in self.transport.local_islands:
            icfg = cfg.islands[i]
            stream = BatchStream(self.train, icfg.batch_size, T, seed=cfg.seed, stream_id=i)
            self.islands[i] = Island(i, icfg, copy.deepcopy(base), cfg.optim, stream, cfg.steps, self.step_s[i],
                                     process_group=self.transport.island_group,
                                     precision=cfg.precision)
            if cfg.model.compile:
                self.islands[i].model.compile()  # in place: parameter names (fragments, checkpoints) unchanged
        self.eval_model = copy.deepcopy(base)
        self.models = {i: isl.model for i, isl in self.islands.items()}
        self.tick_s = min(self.step_s.values())
        if self.decoupled:
            if len(self.islands) != n and not (len(self.islands) == 1 and self.transport.world_size == n):
                raise ConfigError("sync.mode: decoupled runs every island in one process (the simulator) or one "
                                  "island per process (torchrun with WORLD_SIZE = len(islands))")
            for i, isl in self.islands.items():  # the learning rate follows the island's clock on the global schedule
                isl.scheduler = torch.optim.lr_scheduler.LambdaLR(isl.optimizer, self._clock_lr(i))
        # inner steps per island (every process counts every island from the config; tokens follow from them)
        self.inner_steps = {j: 0 for j in range(n)}
        self.settled_lost: set[int] = set()  # decoupled under torch.distributed: lost islands already counted down
        self.strategy = build_strategy(cfg, self.models, self.transport, self.tick_s)
        from islands_kit.faults import install

        self.adversary, self.defense = install(self.strategy, cfg)  # (None, None) unless cfg.faults asks
        # decoupled islands balance their experts on their own loads: a per-step collective would lock-step them
        self.routing = RoutingSync(self.transport, cfg.sync.routing_sync and cfg.model.n_experts > 1 and not self.decoupled,
                                   butterfly=cfg.sync.routing_sync_mode == "butterfly")
        self.tokens_per_step = sum(ic.batch_size for ic in cfg.islands) * T
        self.step = 0
        self.elapsed_before = 0.0  # wall seconds spent before a resume
        self.history: list[dict[str, Any]] = []
        self.diverged_at_step: int | None = None  # set when the run stops on NaN/inf (see run())
        self.diverged_reason: str | None = None
        self.val_curve: list[list[float]] = []
        self.wall_start = time.time()
        self.progress: Progress | None = None  # set by run_experiment: live progress lines
        self.probe_x = self.eval_x[: min(8, len(self.eval_x))]
        # the one process that writes outputs (under torch.distributed: rank 0, which holds island 0)
        self.is_writer = min(self.islands) == 0 and self.transport.is_writer

    # -- evaluation ---------------------------------------------------------------------------------------------
    @torch.no_grad()
    def _load_eval_model(self) -> MoETransformer:
        first = self.islands[min(self.islands)].model
        self.eval_model.load_state_dict(first.state_dict())  # buffers (expert bias) come from the first local island
        self.eval_model.load_state_dict(self.strategy.eval_state(), strict=False)
        self.eval_model.eval()
        return self.eval_model

    def check_eval_state(self) -> None:
        """Raise :class:`Diverged` when the parameters to evaluate hold NaN/inf. Cheap, and called on every process
        at every evaluation step: for DiLoCo they are the global parameters, identical on every rank, so all ranks
        stop at the same step (only the writer scores them)."""
        bad = [n for n, t in self.strategy.eval_state().items() if not bool(torch.isfinite(t).all())]
        if bad:
            raise Diverged(f"evaluation parameters hold NaN/inf ({len(bad)} tensors, first {bad[0]})")

    def evaluate(self, final: bool = False) -> float:
        """bpb of the deployed model (the strategy's evaluation parameters) on the validation windows; at the end
        also on the tuning split when ``data.score_tune`` asks (``final_tune_bpb``: what hyperparameter choices are
        made on; None otherwise)."""
        self.check_eval_state()
        m = self._load_eval_model()
        x, y = (self.final_x, self.final_y) if final else (self.eval_x, self.eval_y)
        with autocast(self.device, self.cfg.precision):
            if final and self.tune_windows is not None:
                self.final_tune_bpb = evaluate_bpb(lambda xb: m(xb).logits, *self.tune_windows, batch_size=64)
            return evaluate_bpb(lambda xb: m(xb).logits, x, y, batch_size=64)

    @torch.no_grad()
    def evaluate_replica(self) -> float:
        """bpb of the first local island's own replica on the evaluation windows: what that site holds between syncs,
        beside the deployed (global) model that ``evaluate`` scores."""
        m = self.islands[min(self.islands)].model
        was_training = m.training
        m.eval()
        try:
            with autocast(self.device, self.cfg.precision):  # as evaluate() scores the deployed model
                return evaluate_bpb(lambda xb: m(xb).logits, self.eval_x, self.eval_y, batch_size=64)
        finally:
            m.train(was_training)

    @torch.no_grad()
    def routing_drift(self) -> dict[str, float] | None:
        """How far the local islands' routers have drifted apart, on a fixed probe batch, averaged over layers and
        over the pairs (island 0, island i): ``routing_js_bits``, the Jensen-Shannon divergence (bits) between their
        routing distributions (expert loads / tokens), and ``routing_topk_overlap``, the mean fraction of each token's
        top-k experts that both choose (1 = identical routing). Only where this process holds several islands."""
        ids = sorted(self.islands)
        if len(ids) < 2 or self.cfg.model.n_experts == 1:
            return None
        dists, topk = [], []
        for i in ids:
            m = self.islands[i].model
            m.eval()
            m(self.probe_x)
            loads = m.routing_stats().loads
            dists.append(loads / loads.sum(-1, keepdim=True))
            topk.append(m.routing_topk())
        js = torch.stack([js_divergence(dists[0], d).mean() for d in dists[1:]]).mean()
        overlap = [topk_overlap(a, b) for other in topk[1:] for a, b in zip(topk[0], other)]
        return {"routing_js_bits": float(js), "routing_topk_overlap": sum(overlap) / len(overlap)}

    # -- the loop -----------------------------------------------------------------------------------------------
    def preempted(self, island: int, step: int) -> bool:
        """Is ``island`` away (preempted) during inner step ``step``? Synchronous data parallelism never trains
        without an island (``stall_for_preemption``), so under ddp nobody is ever away."""
        f = self.cfg.faults
        if self.cfg.sync.strategy == "ddp":
            return False
        return f.preempt_island == island and f.preempt_start < step <= f.preempt_start + f.preempt_steps

    def stall_for_preemption(self, step: int) -> None:
        """Synchronous data parallelism under a preemption: the global batch needs every island, so when the
        preempted island leaves (before inner step preempt_start + 1) the whole job waits for it — every island
        idles for preempt_steps of the slowest island's step time — and training then goes on with nothing missed.
        (DiLoCo goes on without the island instead; ``preempted``.)"""
        f = self.cfg.faults
        if not (self.cfg.sync.strategy == "ddp" and f.preempt_island >= 0 and f.preempt_steps > 0
                and step == f.preempt_start + 1):
            return
        clock = self.transport.clock
        outage = f.preempt_steps * max(self.step_s.values())
        until = max(clock.now[i] for i in self.islands) + outage
        for i in self.islands:
            clock.wait_until(i, until)

    def train_step(self) -> dict[int, float]:
        self.step += 1
        t = self.step
        self.stall_for_preemption(t)
        tokens: dict[int, int] = {}
        losses: dict[int, float] = {}
        active = {}
        for i, isl in self.islands.items():
            away = self.preempted(i, t)
            self.strategy.set_present(i, not away)  # away: syncs go on without it; back: it rejoins first
            if away:
                self.transport.clock.wait_until(i, self.transport.clock.now[i] + isl.compute_s)  # lost time
                continue
            active[i] = isl
            losses[i] = isl.forward_backward()
            self.transport.compute(i, isl.compute_s)
            tokens[i] = isl.tokens_per_step
        # every process counts every island's tokens from the config, so the total needs no communication
        for j in range(len(self.cfg.islands)):
            if not self.preempted(j, t):
                self.inner_steps[j] += 1
        if self.cfg.model.n_experts > 1 and self.cfg.model.bias_balancing:
            loads: dict[int, torch.Tensor] = {}
            for i, isl in active.items():
                assert isl.last_loads is not None  # set by forward_backward above
                loads[i] = isl.last_loads
            synced = self.routing.sync(loads, tokens)
            if synced is not None:
                for i, isl in active.items():
                    isl.model.update_expert_bias(synced[i])
        self.strategy.reduce_gradients(t, tokens)
        for isl in active.values():
            isl.optimizer_step()
        self.strategy.after_inner_step(t, tokens)
        return losses

    def _clock_lr(self, island: int) -> Callable[[int], float]:
        """The decoupled learning-rate multiplier of ``island``: warm-up and cosine over the global schedule, read at
        the island's clock (``schedule_position``) rather than at its own step count."""
        def factor(_step: int) -> float:
            return lr_lambda(self.schedule_position(island), self.cfg.optim, self.cfg.steps)
        return factor

    def schedule_position(self, island: int) -> int:
        """Global-schedule steps (ticks of T_ref) that have passed on ``island``'s clock: its learning-rate step in
        decoupled mode, so every island follows the same schedule in simulated time (equal speeds: lock-step's)."""
        return int(self.transport.clock.now[island] / self.tick_s + 1e-6)

    def train_tick(self) -> dict[int, float]:
        """Decoupled mode (``sync.decoupled``): one tick of the global schedule. Every island takes the inner steps
        that end by t · T_ref on its own clock — landing any merged fragment that has reached it before each — then
        the synchroniser posts the merges due at t and applies those decided by then. Returns the mean loss of each
        island that stepped."""
        self.step += 1
        t = self.step
        end_s = t * self.tick_s * (1 + 1e-9)
        strategy = self.strategy
        assert isinstance(strategy, DecoupledDiLoCo)
        clock = self.transport.clock
        losses: dict[int, float] = {}
        lost = strategy.lost_islands()
        for j in range(len(self.cfg.islands)):  # another process's island: its clock and counts follow the config
            if j in self.islands or j in lost:
                continue
            if self.preempted(j, t):
                clock.wait_until(j, t * self.tick_s)
                continue
            while clock.now[j] + self.step_s[j] <= end_s:
                clock.compute(j, self.step_s[j])
                self.inner_steps[j] += 1
        for i, isl in self.islands.items():
            away = self.preempted(i, t)
            strategy.set_present(i, not away)
            if away:
                clock.wait_until(i, t * self.tick_s)  # lost time
                continue
            got = []
            while clock.now[i] + isl.compute_s <= end_s:
                strategy.land(i, clock.now[i])
                got.append(isl.forward_backward())
                self.transport.compute(i, isl.compute_s)
                if self.cfg.model.n_experts > 1 and self.cfg.model.bias_balancing:
                    assert isl.last_loads is not None
                    isl.model.update_expert_bias(isl.last_loads)
                isl.optimizer_step()
                strategy.island_step_done(i, isl.tokens_per_step)
                self.inner_steps[i] += 1
            if got:
                losses[i] = sum(got) / len(got)
                isl.last_loss = losses[i]
        strategy.after_tick(t)
        self._settle_lost()
        return losses

    def _settle_lost(self) -> None:
        """torch.distributed, decoupled: an island whose process the synchroniser lost counts the inner steps (and
        their tokens) it last reported, not what the config would have had it do since."""
        if not isinstance(self.strategy, DecoupledDiLoCo):
            return
        for j in self.strategy.lost_islands() - self.settled_lost:
            self.inner_steps[j] = self.strategy.inner_steps[j]
            self.settled_lost.add(j)

    @property
    def tokens_per_island(self) -> dict[int, int]:
        """Tokens each island processed: its inner steps times its batch of sequences."""
        T = self.cfg.model.seq_len
        return {j: n * self.cfg.islands[j].batch_size * T for j, n in self.inner_steps.items()}

    @property
    def tokens_total(self) -> int:
        return sum(self.tokens_per_island.values())

    def goodput(self) -> float:
        """Useful tokens per simulated second against the ideal: every island at its full speed (its hardware, no
        straggler or preemption) for the whole run. Useful = processed and merged (decoupled drops are not)."""
        dropped = self.strategy.dropped_tokens if isinstance(self.strategy, DecoupledDiLoCo) else 0
        T = self.cfg.model.seq_len
        ideal_rate = sum(ic.batch_size * T / self.nominal_step_s[j] for j, ic in enumerate(self.cfg.islands))
        span = max(self.transport.clock.now.values())
        return (self.tokens_total - dropped) / (ideal_rate * span) if span > 0 else 0.0

    def elapsed_s(self) -> float:
        return self.elapsed_before + time.time() - self.wall_start

    def train_record(self, losses: dict[int, float]) -> dict[str, Any]:
        """What the tracker logs every ``log_every`` steps: loss (mean and per island), tokens, simulated clock,
        cumulative link bytes per channel (this process's ledger) and the first local island's routing balance."""
        stats = self.islands[min(self.islands)].last_stats
        rec: dict[str, Any] = {
            "step": self.step, "tokens": self.tokens_total, "train_loss": sum(losses.values()) / max(1, len(losses)),
            "island_loss": dict(losses), "sim_time_s": max(self.transport.clock.now.values()),
            "link_bytes": {ch: e.bytes for ch, e in self.transport.ledger.channels.items()},
        }
        if stats is not None and self.cfg.model.n_experts > 1:
            rec["balance_loss"] = [float(v) for v in stats.balance_loss]
            rec["max_over_mean_load"] = [float(v) for v in stats.max_over_mean]
        return rec

    def run(self, tracker: Tracker | None = None) -> Result:
        cfg = self.cfg
        progress = self.progress
        try:
            while self.step < cfg.steps:
                losses = self.train_tick() if self.decoupled else self.train_step()
                bad = {i: v for i, v in losses.items() if not math.isfinite(v)}
                if bad:
                    raise Diverged("training loss is not finite on island(s) " +
                                   ", ".join(f"{i} ({v})" for i, v in sorted(bad.items())))
                if progress is not None:
                    progress.update(self.step, self.tokens_total, sum(losses.values()) / max(1, len(losses)))
                if tracker is not None and self.step % cfg.log_every == 0:
                    tracker.log_train(self.train_record(losses))
                if self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                    self.check_eval_state()
                    with self.transport.world_view():
                        self._record_eval(losses, final=False, tracker=tracker)
                if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and self.step < cfg.steps and self.out_dir:
                    from islands_kit.checkpoint import save_checkpoint

                    save_checkpoint(self, self.out_dir)
            self.strategy.finalize(self.step)
            self._settle_lost()  # an island lost in the final merge
        except (Diverged, NonFiniteError) as e:
            self._diverged(e)
        losses = {i: isl.last_loss for i, isl in self.islands.items()}
        with self.transport.world_view():  # a collective under torch.distributed (comm/torch_dist.py)
            try:
                self._record_eval(losses, final=True, tracker=tracker)
            except Diverged as e:  # the final flush brought the NaN in
                self._diverged(e)
                self._record_eval(losses, final=True, tracker=tracker)
            return self.result()

    def _diverged(self, e: Exception) -> None:
        """An undefended NaN/inf (a poisoned island, a blown-up learning rate) stops the run rather than crashing
        it: the result records where and why, its bpb is NaN (``null`` in result.json), and the outputs are still
        written. Under torch.distributed a NaN that reaches the global (DiLoCo) state stops every rank at the same
        step, since that state is identical on every rank; a NaN confined to one rank's replica (an inner optimizer
        blowing up on one island) is seen by that rank alone, and the ranks then wait on different collectives until
        they end with a DistributedError (ISLANDS_KIT_DIST_TIMEOUT_S) instead of a result: agreeing on the step
        would cost a blocking round trip every step."""
        self.diverged_at_step, self.diverged_reason = self.step, f"{type(e).__name__}: {e}"
        warnings.warn(f"{self.cfg.experiment}: diverged at step {self.step}: {e}", RuntimeWarning, stacklevel=3)

    def _record_eval(self, losses: dict[int, float], final: bool, tracker: Tracker | None) -> None:
        # other ranks would only repeat the evaluation; a diverged model has no bpb
        bpb = self.evaluate(final=final) if self.is_writer and self.diverged_at_step is None else math.nan
        tokens = self.tokens_total
        stats = self.islands[min(self.islands)].last_stats
        rec: dict[str, Any] = {
            "step": self.step, "tokens": tokens, "val_bpb": bpb, "final": final,
            "train_loss": sum(losses.values()) / max(1, len(losses)),
            "sim_time_s": max(self.transport.clock.now.values()),
            "cross_site_bytes": self.transport.ledger.bytes(),
        }
        if stats is not None and self.cfg.model.n_experts > 1:
            rec["balance_loss"] = [round(float(v), 6) for v in stats.balance_loss]
            rec["max_over_mean_load"] = [round(float(v), 4) for v in stats.max_over_mean]
        if not self.strategy.deploys_own_replica and self.is_writer and self.diverged_at_step is None:
            rec["val_bpb_replica"] = self.evaluate_replica()
        drift = self.routing_drift()
        if drift is not None:
            rec.update(drift)
        self.history.append(rec)
        self.val_curve.append([tokens, bpb])
        if tracker is not None:
            tracker.log_eval(rec)
        if self.progress is not None and math.isfinite(bpb):
            self.progress.eval(self.step, bpb)

    def result(self) -> Result:
        cfg = self.cfg
        led = self.transport.ledger
        clock = self.transport.clock
        n = len(cfg.islands)
        # every transfer on the link, written to its own file (LINK_TIMELINE) rather than into result.json
        self.link_timeline = [[round(a, 6), round(b, 6), n, s, d, c] for a, b, n, s, d, c in led.timeline]
        fragments_stats = self.transport.transfer_stats("fragments")
        res = Result(
            experiment=cfg.experiment, preset=cfg.preset, seed=cfg.seed, corpus=self.corpus.name,
            corpus_sha256=self.corpus.sha256, tokens=self.tokens_total, steps=self.step,
            params_total=self.params_total, params_active=self.params_active,
            final_val_bpb=self.val_curve[-1][1], val_curve=self.val_curve, val_bytes=self.val_bytes,
            final_tune_bpb=self.final_tune_bpb,
            # the floors on exactly the bytes final_val_bpb scores, and on the whole validation split
            compressor_bpb=compressor_bpb(self.scored_bytes),
            compressor_bpb_all_val=compressor_bpb(bytes(self.val.numpy().tobytes())),
            cross_site_bytes=led.bytes(), fragment_bytes=led.bytes("fragments"),
            gradient_bytes=led.bytes("gradients"),
            ddp_equivalent_bytes=ddp_equivalent_bytes(self.params_total, n, self.step), cost_model=COST_MODEL,
            routing_sync_bytes=led.bytes("routing"), peak_link_bytes_per_s=led.peak_link_bytes_per_s(),
            ledger=led.to_dict(), transfer_time_s=fragments_stats,
            sim_wall_clock_s=max(clock.now.values()), compute_utilization=clock.utilization(),
            island_busy_s=dict(clock.busy), island_idle_s=dict(clock.idle),
            wall_time_s=self.elapsed_s(),
            # device, precision, GPU name and count, CUDA and NCCL versions (GPU fields null on the CPU)
            **describe_device(self.device, cfg.precision),
            # torch's CPU kernels split reductions by thread: results are bit-reproducible per seed *and* thread count
            versions={"python": platform.python_version(), "torch": torch.__version__,
                      "torch_threads": torch.get_num_threads(),
                      "islands_kit": islands_kit.__version__},
            git_sha=git_sha(), config=cfg.to_dict(), n_islands=n, strategy=cfg.sync.strategy,
            link=cfg.link.preset,
            faults_report=self.defense.report() if self.defense is not None else [],
            diverged_at_step=self.diverged_at_step, diverged_reason=self.diverged_reason,
            sync_mode=cfg.sync.mode, inner_steps=dict(self.inner_steps), tokens_per_island=dict(self.tokens_per_island),
            goodput=self.goodput(),
        )
        if isinstance(self.strategy, DecoupledDiLoCo):
            res["decoupled"] = self.strategy.report()
        return res


def run_experiment(cfg: ExperimentConfig, out_dir: str | Path | None = None,
                   transport: Transport | None = None, resume: str | Path | None = None) -> Result:
    """Train one experiment end to end; with ``out_dir`` write result.json and history.jsonl there.

    ``resume``: a folder (or file) holding a checkpoint of this same configuration; training continues from it and
    the result is bit-identical to an uninterrupted run. The checkpoint is read and checked before any work starts."""
    check_precision(cfg.precision, resolve_device(cfg.device))  # device=cuda without CUDA fails before any work
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    state = None
    if resume is not None:
        from islands_kit.checkpoint import load_checkpoint

        state = load_checkpoint(resume, transport)
    # model.kernels = torch|triton forces the expert-GEMM and codec paths for this run only; auto leaves the choice to
    # $ISLANDS_KIT_KERNELS and to what the machine has
    backend = contextlib.nullcontext() if cfg.model.kernels == "auto" else kernels.set_backend(cfg.model.kernels)
    with backend:
        return _run(cfg, out_dir, transport, state, resume)


def _run(cfg: ExperimentConfig, out_dir: str | Path | None, transport: Transport | None,
         state: dict[str, Any] | None, resume: str | Path | None = None) -> Result:
    exp = Experiment(cfg, out_dir, transport)
    if state is not None:
        from islands_kit.checkpoint import restore

        restore(exp, state)
    is_writer = exp.is_writer
    progress = exp.progress = Progress(f"{cfg.experiment} s{cfg.seed}", cfg.steps, exp.tokens_per_step, exp.step,
                                       quiet=not (cfg.progress and is_writer), eval_every=cfg.eval_every)
    tracker = Tracker(cfg, out_dir, resume=resume) if (out_dir and is_writer) else None
    progress.start(describe(cfg, out_dir))
    failed = True
    try:
        res = exp.run(tracker)
        if out_dir and is_writer:
            write_outputs(Path(out_dir), res, exp.history, exp.link_timeline)
        if out_dir:  # the final weights: every island's replica and the deployed model (islands_kit.sampling)
            from islands_kit.sampling import save_final_models

            save_final_models(exp, out_dir)
        if tracker is not None:
            tracker.finish(res, exp.history)
        failed = False
    finally:
        if tracker is not None:
            sync = tracker.info().get("sync")
            tracker.close(failed)
    bpb = (f"diverged at step {res['diverged_at_step']}" if res.get("diverged_at_step") is not None
           else f"final val bpb {res['final_val_bpb']:.4f} (xz on the same bytes {res['compressor_bpb']['xz']:.3f})")
    progress.end(bpb + (f" | wandb offline run: {sync}" if tracker is not None and sync else ""))
    return res


LINK_TIMELINE = "link_timeline.jsonl"  # one transfer per line: [start_s, end_s, bytes, src, dst, channel]


def write_outputs(out: Path, res: Result, history: list[dict[str, Any]],
                  link_timeline: list[list[Any]] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "result.json", dict(res))
    atomic_write_bytes(out / "history.jsonl", "".join(dumps_strict(rec) + "\n" for rec in history).encode())
    if link_timeline is not None:
        atomic_write_bytes(out / LINK_TIMELINE, "".join(dumps_strict(r) + "\n" for r in link_timeline).encode())
