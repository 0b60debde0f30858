"""``Experiment``: everything one run holds, and the one training loop that drives it to the end.

Every step of the global schedule the driver (``train/drivers.py``) steps the islands this process holds through
whatever strategy the config names; the loop checks the losses, reports progress, logs train records every
``log_every`` steps, evaluates every ``eval_every`` steps (the strategy's evaluation parameters: the global model for
DiLoCo) and checkpoints every ``checkpoint_every`` steps. At the end every transfer in flight completes and the final
model is scored on *all* validation bytes.
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from islands_kit.comm import peer
from islands_kit.comm.codecs import NonFiniteError
from islands_kit.comm.transport import COST_MODEL, LocalTransport, Transport
from islands_kit.config import ConfigError, ExperimentConfig
from islands_kit.data import BatchStream, eval_windows, load_data_corpus, split_bytes
from islands_kit.device import check_precision, resolve_device
from islands_kit.device import describe as describe_device
from islands_kit.model import ByteTransformer as MoETransformer
from islands_kit.model import moe
from islands_kit.optim.build import optimizer_groups
from islands_kit.records.tracking import Tracker
from islands_kit.sync.ddp import ddp_equivalent_bytes
from islands_kit.sync.registry import link_model
from islands_kit.train.checkpoint import check_state, check_world_size, part, save_checkpoint
from islands_kit.train.evaluation import Evaluator
from islands_kit.train.features import run_hooks
from islands_kit.train.islands import Island, step_seconds
from islands_kit.train.metrics import compressor_bpb
from islands_kit.train.progress import Progress
from islands_kit.train.result import Diverged, Result, git_sha, versions
from islands_kit.train.strategies import build_driver, driver_class


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
        tune_windows = None
        if cfg.data.tune_fraction > 0:  # the tuning split: held out of training, just before the validation tail
            n_tune = round(len(self.corpus.data) * cfg.data.tune_fraction)
            if not 2 <= n_tune < self.train.numel() - T:
                raise ConfigError(f"data.tune_fraction: leaves {n_tune} tuning bytes of {self.train.numel()} training "
                                  f"bytes; must leave both more than model.seq_len={T} (got {cfg.data.tune_fraction})")
            tune = self.train[-n_tune:].clone()
            self.train = self.train[:-n_tune].clone()
            if cfg.data.score_tune:  # only a tuner reads final_tune_bpb: otherwise the split is held out, not scored
                tx, ty = eval_windows(tune, T, cfg.data.final_eval_bytes)
                tune_windows = (tx.to(self.device), ty.to(self.device))
        self.final_tune_bpb: float | None = None
        ex, ey = (w.to(self.device) for w in eval_windows(self.val, T, cfg.data.eval_bytes))
        final_x, final_y = eval_windows(self.val, T, cfg.data.final_eval_bytes)
        self.scored_bytes = bytes(final_y.to(torch.uint8).flatten().numpy().tobytes())  # what final_val_bpb scores
        self.val_bytes = int(final_y.numel())
        self.eval_bytes = int(ey.numel())  # what every evaluation during training scores (the curve's subset)
        # -- transport -------------------------------------------------------------------------------------------
        n = len(cfg.islands)
        self.transport = transport or LocalTransport(n, link_model(cfg))  # the strategy's link model (sync/registry.py)
        # faults, a bit flip, the orbit's eclipses and report: each feature on the run's hook points (train/features.py)
        self.hooks = run_hooks(cfg, self.transport.local_islands)
        # -- islands: identical initial weights, separate data streams -------------------------------------------
        torch.manual_seed(cfg.seed)
        base = MoETransformer(cfg.model).to(self.device)  # initialised on the CPU: the same weights on every device
        self.params_total = base.num_params()
        self.params_active = base.num_active_params()
        self.optim_groups = optimizer_groups(base, cfg.optim)  # optim.name=muon: which parameter takes which rule
        # each island's step time at full speed (its hardware; no straggler factor): the ideal rate goodput counts
        self.nominal_step_s = {j: step_seconds(ic, cfg.model, self.params_active) for j, ic in enumerate(cfg.islands)}
        # every island's step time with its straggler factor (its Island's compute_s); T_ref of the decoupled schedule
        # is the fastest, the same on every process
        self.step_s = {j: (cfg.faults.straggler_factor if cfg.faults.straggler_island == j else 1.0) * t
                       for j, t in self.nominal_step_s.items()}
        self.tick_s = min(self.step_s.values())
        # no peer's clock may pass what this config allows, however far it has pushed the receiver's (comm/peer.py)
        self.transport.horizon_s = peer.clock_horizon(cfg.steps, max(self.step_s.values()), cfg.link,
                                                      4 * self.params_total, n)
        drive = driver_class(cfg)
        self.islands: dict[int, Island] = {}
        for i in self.transport.local_islands:
            icfg = cfg.islands[i]
            stream = BatchStream(self.train, icfg.batch_size, T, seed=cfg.seed, stream_id=i)
            self.islands[i] = Island(i, icfg, copy.deepcopy(base), cfg.optim, stream, cfg.steps, self.step_s[i],
                                     process_group=self.transport.island_group, precision=cfg.precision,
                                     lr_position=drive.lr_position(self.transport.clock, self.tick_s, i))
            if cfg.model.compile:
                moe.run_eagerly_under_compile()
                self.islands[i].model.compile()  # in place: parameter names (fragments, checkpoints) unchanged
        self.evaluator = Evaluator(base, cfg.precision, (ex, ey), (final_x.to(self.device), final_y.to(self.device)),
                                   tune_windows)
        self.driver = build_driver(cfg, self.islands, self.transport, self.step_s, self.tick_s, self.hooks)
        self.strategy = self.driver.strategy
        self.tokens_per_step = sum(ic.batch_size for ic in cfg.islands) * T
        self.step = 0
        self.elapsed_before = 0.0  # wall seconds spent before a resume
        self.cpu_before = 0.0  # this run's process CPU seconds before a resume
        self.history: list[dict[str, Any]] = []
        self.diverged_at_step: int | None = None  # set when the run stops on NaN/inf (see run())
        self.diverged_reason: str | None = None
        self.val_curve: list[list[float]] = []
        self.wall_start = time.time()
        self.cpu_start = time.process_time()
        self.progress: Progress | None = None  # set by run_experiment: live progress lines
        # the one process that writes outputs (under torch.distributed: rank 0, which holds island 0)
        self.is_writer = min(self.islands) == 0 and self.transport.is_writer
        self.link_timeline: list[list[Any]] = []

    # -- evaluation ---------------------------------------------------------------------------------------------
    @property
    def first(self) -> Island:
        return self.islands[min(self.islands)]

    def deployed_model(self) -> MoETransformer:
        """The model a site would deploy now (the strategy's evaluation parameters)."""
        return self.evaluator.deployed(self.strategy, self.first.model)

    def evaluate(self, final: bool = False) -> float:
        """bpb of the deployed model on the validation windows; at the end also on the tuning split when there is
        one (``final_tune_bpb``: what hyperparameter choices are made on)."""
        ev = self.evaluator
        ev.check(self.strategy)
        m = self.deployed_model()
        if final and ev.tune_windows is not None:
            self.final_tune_bpb = ev.bpb(m, ev.tune_windows)
        return ev.bpb(m, ev.final_windows if final else ev.eval_windows)

    def evaluate_subset(self) -> float:
        """bpb of the deployed model on the curve's subset (``data.eval_bytes``): at the end, the point that keeps the
        validation curve one quantity to its end, beside ``final_val_bpb`` on every held-out byte."""
        return self.evaluator.bpb(self.deployed_model(), self.evaluator.eval_windows)

    def evaluate_replica(self) -> float:
        """bpb of the first local island's own replica, beside the deployed model that ``evaluate`` scores."""
        return self.evaluator.replica(self.first.model)

    def routing_drift(self) -> dict[str, float] | None:
        return self.evaluator.routing_drift({i: isl.model for i, isl in self.islands.items()})

    # -- counts ---------------------------------------------------------------------------------------------------
    @property
    def inner_steps(self) -> dict[int, int]:
        """Inner steps per island (every process counts every island; tokens follow from them)."""
        return self.driver.inner_steps

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
        T = self.cfg.model.seq_len
        ideal_rate = sum(ic.batch_size * T / self.nominal_step_s[j] for j, ic in enumerate(self.cfg.islands))
        span = max(self.transport.clock.now.values())
        return (self.tokens_total - self.strategy.unmerged_tokens()) / (ideal_rate * span) if span > 0 else 0.0

    def elapsed_s(self) -> float:
        return self.elapsed_before + time.time() - self.wall_start

    def outer_records(self) -> list[dict[str, Any]]:
        """Every outer step so far: the strategy's (DiLoCo's global fragments) and the first local island's SNOO
        steps (``optim.snoo``; fragment "snoo", or "snoo<p>" with several fragments)."""
        snoo = self.first.snoo
        if snoo is None:
            return self.strategy.outer_records()
        one = len(snoo.outer) == 1
        return self.strategy.outer_records() + [{**r, "fragment": "snoo" if one else f"snoo{r['group']}"}
                                                for r in snoo.records]

    def cpu_s(self) -> float:
        """CPU seconds this run's process has spent on it (every thread; set-up included): on a shared machine, where
        wall time also counts the other jobs, what the run really cost."""
        return self.cpu_before + time.process_time() - self.cpu_start

    # -- the loop -----------------------------------------------------------------------------------------------
    def train_step(self) -> dict[int, float]:
        """One step of the global schedule (a decoupled run: one tick); the loss of each local island that stepped."""
        self.step += 1
        losses = self.driver.step(self.step)
        self.hooks.after_step(self.step, {i: isl.model for i, isl in self.islands.items()})
        return losses

    def run(self, tracker: Tracker | None = None) -> Result:
        cfg = self.cfg
        progress = self.progress
        try:
            while self.step < cfg.steps:
                losses = self.train_step()
                bad = {i: v for i, v in losses.items() if not math.isfinite(v)}
                if bad:
                    raise Diverged("training loss is not finite on island(s) " +
                                   ", ".join(f"{i} ({v})" for i, v in sorted(bad.items())))
                if progress is not None:
                    progress.update(self.step, self.tokens_total, sum(losses.values()) / max(1, len(losses)))
                if tracker is not None and self.step % cfg.log_every == 0:
                    tracker.log_train(self.train_record(losses))
                    tracker.log_outer(self.outer_records())
                if self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                    self.evaluator.check(self.strategy)
                    with self.transport.world_view():
                        self._record_eval(losses, final=False, tracker=tracker)
                if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and self.step < cfg.steps and self.out_dir:
                    save_checkpoint(self.state_dict(), self.out_dir, self.transport)
            self.driver.finish(self.step)
        except (Diverged, NonFiniteError) as e:
            self._diverged(e)
        losses = {i: isl.last_loss for i, isl in self.islands.items()}
        with self.transport.world_view():  # a collective under torch.distributed (comm/torch_dist/)
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

    # -- records ------------------------------------------------------------------------------------------------
    def _routing_balance(self) -> dict[str, list[float]]:
        """The first local island's routing balance (MoE only), at full precision: records are data (a fixture
        compares them within a measured tolerance), and whoever displays them rounds."""
        stats = self.first.last_stats
        if stats is None or self.cfg.model.n_experts == 1:
            return {}
        return {"balance_loss": [float(v) for v in stats.balance_loss],
                "max_over_mean_load": [float(v) for v in stats.max_over_mean]}

    def train_record(self, losses: dict[int, float]) -> dict[str, Any]:
        """What the tracker logs every ``log_every`` steps: loss (mean and per island), tokens, simulated clock,
        cumulative link bytes per channel (this process's ledger) and the first local island's routing balance."""
        rec: dict[str, Any] = {
            "step": self.step, "tokens": self.tokens_total, "train_loss": sum(losses.values()) / max(1, len(losses)),
            "island_loss": dict(losses), "sim_time_s": max(self.transport.clock.now.values()),
            "link_bytes": {ch: e.bytes for ch, e in self.transport.ledger.channels.items()},
        }
        rec.update(self._routing_balance())
        return rec

    def _record_eval(self, losses: dict[int, float], final: bool, tracker: Tracker | None) -> None:
        # other ranks would only repeat the evaluation; a diverged model has no bpb
        scores = self.is_writer and self.diverged_at_step is None
        bpb = self.evaluate(final=final) if scores else math.nan
        tokens = self.tokens_total
        rec: dict[str, Any] = {
            "step": self.step, "tokens": tokens, "val_bpb": bpb, "final": final,
            "train_loss": sum(losses.values()) / max(1, len(losses)),
            "sim_time_s": max(self.transport.clock.now.values()),
            "cross_site_bytes": self.transport.ledger.bytes(),
        }
        rec.update(self._routing_balance())
        if not self.strategy.deploys_own_replica and scores:
            rec["val_bpb_replica"] = self.evaluate_replica()
        drift = self.routing_drift()
        if drift is not None:
            rec.update(drift)
        if final:  # the curve's own quantity at its end; scored last, after every record above was read
            rec["val_bpb_subset"] = self.evaluate_subset() if scores else math.nan
        self.history.append(rec)
        self.val_curve.append([tokens, bpb])
        if tracker is not None:
            tracker.log_eval(rec)
        if self.progress is not None and math.isfinite(bpb):
            self.progress.eval(self.step, bpb)

    def _final_subset(self) -> float | None:
        final = [h for h in self.history if h.get("final")]
        return final[-1].get("val_bpb_subset") if final else None

    def result(self) -> Result:
        """result.json; every transfer on the link goes to its own file (``link_timeline``) rather than into it."""
        cfg = self.cfg
        led = self.transport.ledger
        clock = self.transport.clock
        n = len(cfg.islands)
        self.link_timeline = [list(row) for row in led.timeline]
        return Result(
            experiment=cfg.experiment, preset=cfg.preset, seed=cfg.seed, corpus=self.corpus.name,
            corpus_sha256=self.corpus.sha256, tokens=self.tokens_total, steps=self.step,
            params_total=self.params_total, params_active=self.params_active,
            # the regime: training tokens per active parameter, and the syncs each fragment actually took
            tokens_per_active_param=self.tokens_total / self.params_active,
            outer_steps_per_fragment=self.strategy.outer_steps_per_fragment(),
            final_val_bpb=self.val_curve[-1][1], val_curve=self.val_curve, val_bytes=self.val_bytes,
            # the final model on the curve's subset: val_curve's earlier points score these bytes, its last all of them
            final_val_bpb_subset=self._final_subset(), eval_bytes=self.eval_bytes,
            final_tune_bpb=self.final_tune_bpb,
            # the floors on exactly the bytes final_val_bpb scores, and on the whole validation split
            compressor_bpb=compressor_bpb(self.scored_bytes),
            compressor_bpb_all_val=compressor_bpb(bytes(self.val.numpy().tobytes())),
            cross_site_bytes=led.bytes(), fragment_bytes=led.bytes("fragments"),
            gradient_bytes=led.bytes("gradients"),
            ddp_equivalent_bytes=ddp_equivalent_bytes(self.params_total, n, self.step), cost_model=COST_MODEL,
            routing_sync_bytes=led.bytes("routing"), peak_link_bytes_per_s=led.peak_link_bytes_per_s(),
            ledger=led.to_dict(), transfer_time_s=self.transport.transfer_stats("fragments"),
            sim_wall_clock_s=max(clock.now.values()), compute_utilization=clock.utilization(),
            island_busy_s=dict(clock.busy), island_idle_s=dict(clock.idle),
            wall_time_s=self.elapsed_s(), cpu_time_s=self.cpu_s(),
            # device, precision, GPU name and count, CUDA and NCCL versions (GPU fields null on the CPU)
            **describe_device(self.device, cfg.precision),
            versions=versions(), git_sha=git_sha(), config=cfg.to_dict(), n_islands=n, strategy=cfg.sync.strategy,
            link=cfg.link.preset,
            diverged_at_step=self.diverged_at_step, diverged_reason=self.diverged_reason,
            sync_mode=cfg.sync.mode, inner_steps=dict(self.inner_steps), tokens_per_island=dict(self.tokens_per_island),
            goodput=self.goodput(), outer_log=self.outer_records(), **self.strategy.result_fields(),
            **({"optim_groups": self.optim_groups} if self.optim_groups else {}),
            **self.hooks.result(led.timeline, max(clock.now.values())),  # the features' fields (faults, the orbit)
        )

    # -- checkpoints --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A checkpoint of this process's part of the run (``checkpoint.py`` writes and checks it)."""
        transport = self.transport.state_dict()  # under torch.distributed a collective: completes what is in flight
        return {
            "config": self.cfg.to_dict(), "step": self.step, "tokens_total": self.tokens_total,
            "islands": {i: isl.state_dict() for i, isl in self.islands.items()},
            **self.driver.state_dict(),
            **{name: owner.state_dict() if owner is not None else None for name, owner in self.hooks.state.items()},
            "history": self.history, "val_curve": self.val_curve,
            "torch_rng": torch.get_rng_state(), "elapsed_s": self.elapsed_s(), "cpu_s": self.cpu_s(),
            "transport": transport,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a checkpoint of this same configuration into a freshly built Experiment, after ``check_state``."""
        check_state(self.cfg, state, sorted(self.islands))
        self.step = state["step"]
        for i, isl in self.islands.items():
            with part(f"islands.{i}"):
                isl.load_state_dict(state["islands"][i])
        with part("strategy"):
            self.driver.load_state_dict(state)
        for name, owner in self.hooks.state.items():  # the features' state (the adversary's, the defence's)
            if owner is not None and state.get(name) is not None:
                with part(name):
                    owner.load_state_dict(state[name])
        check_world_size(state, self.transport)
        self.history = list(state["history"])
        self.val_curve = [list(v) for v in state["val_curve"]]
        torch.set_rng_state(state["torch_rng"])
        self.elapsed_before = float(state["elapsed_s"])
        cpu = state.get("cpu_s", 0.0)  # a checkpoint written before CPU time was kept, or a bad value: start from 0
        self.cpu_before = float(cpu) if isinstance(cpu, (int, float)) and math.isfinite(cpu) and cpu >= 0 else 0.0
