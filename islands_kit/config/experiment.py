"""The whole experiment: its top-level fields, the islands, and the rules that span sections."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from islands_kit.config.coerce import build
from islands_kit.config.data import DataConfig
from islands_kit.config.experiment_table import EXPERIMENT_TABLE, PRESETS
from islands_kit.config.faults import FaultConfig
from islands_kit.config.link import LinkConfig
from islands_kit.config.model import ModelConfig, OptimConfig
from islands_kit.config.strategies import strategies_that
from islands_kit.config.sync import SECTIONS, SyncConfig
from islands_kit.rules import MAX_THREADS, SEED_MAX, STEPS_MAX, _check, _check_fields


@dataclass
class IslandConfig:
    """One island: its batch, how it splits the batch (dp_ranks x micro-batches) and its hardware profile."""

    name: str = "island"  # label in results and plots
    batch_size: int = 32  # sequences per inner step
    micro_batch_size: int = 32  # sequences per forward/backward on one rank
    dp_ranks: int = 1  # data-parallel ranks inside the island
    hardware: str = "h100"  # profile name from islands_kit.train.islands.HARDWARE
    n_accelerators: int = 1  # accelerators per island used by the simulated clock

    def validate(self, where: str) -> None:
        _check_fields(self, where + ".")
        _check(isinstance(self.batch_size, int) and self.batch_size >= 1, where + ".batch_size", "must be an integer >= 1", self.batch_size)
        _check(self.micro_batch_size >= 1, where + ".micro_batch_size", "must be >= 1", self.micro_batch_size)
        _check(self.dp_ranks >= 1, where + ".dp_ranks", "must be >= 1", self.dp_ranks)
        _check(self.batch_size % (self.dp_ranks * self.micro_batch_size) == 0, where + ".batch_size",
               f"must split into dp_ranks x micro_batch_size = {self.dp_ranks}x{self.micro_batch_size} "
               "(gradient accumulation needs a whole number of micro-batches)", self.batch_size)
        _check(self.n_accelerators >= 1, where + ".n_accelerators", "must be >= 1", self.n_accelerators)


@dataclass
class ExperimentConfig:
    experiment: str = "baseline"  # a row of config/experiment_table.py (field_help lists them all)
    preset: str = "smoke"  # the preset this config started from (islands_kit.config.presets: smoke | demo | demo-long | gpu-small | gpu)
    seed: int = 0  # one seed for weights, data order, stochastic rounding and the link's draws
    device: str = "auto"  # auto | cpu | cuda | cuda:N (auto: the local GPU if there is one; see islands_kit/device.py)
    precision: str = "fp32"  # fp32 | bf16 (bf16 autocast for forward/backward; fp32 weights, optimizer and sync state)
    steps: int = 100  # inner steps per island (lock-step); decoupled: length of the global schedule (fastest island)
    eval_every: int = 50  # evaluate on the validation windows every N steps (and at the end)
    data: DataConfig = field(default_factory=DataConfig)  # corpus, validation split and evaluation bytes
    model: ModelConfig = field(default_factory=ModelConfig)  # the byte-level MoE transformer
    optim: OptimConfig = field(default_factory=OptimConfig)  # the inner optimizer of every island
    sync: SyncConfig = field(default_factory=SyncConfig)  # how the islands synchronise
    link: LinkConfig = field(default_factory=LinkConfig)  # the wide-area link between islands (simulated clock)
    islands: list[IslandConfig] = field(default_factory=lambda: [IslandConfig()])  # one entry per island
    faults: FaultConfig = field(default_factory=FaultConfig)  # injected faults, an adversarial island and the defences
    threads: int = 1  # torch intra-op threads (1: the same numbers on every machine; 0 = torch's default, machine-dependent)
    checkpoint_every: int = 0  # write DIR/checkpoint.pt every N steps (0 = never); resume with --resume DIR
    wandb_mode: str = "offline"  # offline | online | disabled
    wandb_project: str = "islands_kit"  # wandb project name
    wandb_group: str = ""  # wandb group; the runs of one comparison share one
    progress: bool = True  # live progress lines (step, tokens, tokens/s, ETA, eval bpb); false = quiet
    log_every: int = 10  # train loss, throughput, link bytes and routing balance to wandb every N inner steps

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        _check_fields(self, "")
        _check(self.experiment in EXPERIMENT_TABLE, "experiment", "must be one of " + "|".join(EXPERIMENT_TABLE),
               self.experiment)
        # the default run folder is runs/EXPERIMENT-PRESET-sSEED: a preset is a name from the table, never a path
        _check(self.preset in PRESETS, "preset", "must be one of " + "|".join(PRESETS), self.preset)
        _check(isinstance(self.seed, int) and 0 <= self.seed <= SEED_MAX, "seed", "must be an integer >= 0 and <= 2^32 - 1",
               self.seed)
        check_device_spelling(self.device)
        _check(self.precision in PRECISIONS, "precision", "must be one of " + "|".join(PRECISIONS), self.precision)
        _check(isinstance(self.steps, int) and 1 <= self.steps <= STEPS_MAX, "steps", f"must be an integer >= 1 and <= "
               f"{STEPS_MAX:.0e}", self.steps)
        _check(isinstance(self.eval_every, int) and self.eval_every >= 1, "eval_every", "must be an integer >= 1", self.eval_every)
        _check(len(self.islands) >= 1, "islands", "must list at least one island", self.islands)
        for i, isl in enumerate(self.islands):
            isl.validate(f"islands[{i}]")
        _check(self.wandb_mode in ("offline", "online", "disabled"), "wandb_mode", "must be one of offline|online|disabled", self.wandb_mode)
        n = len(self.islands)
        traits = self.sync.traits
        if traits.pairwise or self.sync.routing_sync_mode == "butterfly":
            _check(n >= 2 and (n & (n - 1)) == 0, "islands", "butterfly mixing needs a power-of-two number of cells >= 2", n)
        if self.link.schedule == "orbit":
            o = self.link.orbit
            _check(n <= len(o.stations) + o.n_satellites, "islands", "link.schedule=orbit: islands are the orbit's "
                   f"{len(o.stations)} ground station(s) then its {o.n_satellites} satellites; an island beyond them "
                   "has no link at all", n)
        _check(0 <= self.threads <= MAX_THREADS, "threads", f"must be >= 0 and <= {MAX_THREADS} (0 = torch default)",
               self.threads)
        _check(isinstance(self.log_every, int) and self.log_every >= 1, "log_every", "must be an integer >= 1",
               self.log_every)
        _check(self.checkpoint_every >= 0, "checkpoint_every", "must be >= 0 (0 = never)", self.checkpoint_every)
        f = self.faults
        for name in ("preempt_island", "straggler_island", "upset_island"):
            v = getattr(f, name)
            _check(v == -1 or 0 <= v < n, "faults." + name, f"must be -1 (none) or an island index < {n}", v)
        if f.attack != "none":
            _check(0 <= f.attack_island < n, "faults.attack_island", f"must be an island index < {n}", f.attack_island)
        if f.attack != "none" or f.defense != "none":
            _check(traits.takes_faults, "faults.attack" if f.attack != "none" else "faults.defense",
                   f"attacks and defences need sync.strategy={strategies_that('takes_faults')} (a strategy with an "
                   "aggregation step)", f.attack if f.attack != "none" else f.defense)
        if f.preempt_island >= 0 and f.preempt_steps > 0:
            _check(traits.global_state, "faults.preempt_island",
                   f"preemption needs sync.strategy={strategies_that('global_state')} (a global state to rejoin from, "
                   "or a synchronous job that stalls until the island is back)", f.preempt_island)
        if traits.quorum:
            _check(self.sync.quorum <= n, "sync.quorum", f"must be <= the number of islands ({n})", self.sync.quorum)
            _check(f.attack == "none" or f.attack_island != 0, "faults.attack_island",
                   f"must not be 0 with sync.mode={self.sync.mode} (island 0 holds the synchroniser, which the "
                   "defences trust)", f.attack_island)
        if not traits.checkpoints:
            _check(self.checkpoint_every == 0, "checkpoint_every",
                   f"must be 0 with sync.mode={self.sync.mode} (its in-flight merges are not checkpointed yet)",
                   self.checkpoint_every)
        if EXPERIMENT_TABLE[self.experiment].reference:
            _check(traits.synchronous, "sync.strategy", f"the {self.experiment} experiment is synchronous: must be "
                   f"{strategies_that('synchronous')}", self.sync.strategy)
        for section in SECTIONS.values():  # the rules a strategy's own settings add (config/sync.py: Section)
            if section.check_run is not None:
                section.check_run(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ExperimentConfig":
        """A config as ``to_dict`` wrote it — also in a result.json or checkpoint from before a section's keys moved
        (each section upgrades the ``sync`` mapping it knows: ``Section.upgrade``)."""
        sync = d.get("sync")
        if isinstance(sync, dict):
            for section in SECTIONS.values():
                if section.upgrade is not None:
                    sync = section.upgrade(sync)
            d = {**d, "sync": sync}
        return build(cls, d, "")


PRECISIONS = ("fp32", "bf16")
_DEVICE_RE = re.compile(r"(auto|cpu|cuda|cuda:\d+)")


def check_device_spelling(spec: Any) -> None:
    """``device`` must read auto, cpu, cuda or cuda:N. Whether that device exists is checked by
    ``islands_kit.device.resolve_device`` when the run starts (it needs torch.cuda; this module stays torch-free)."""
    _check(isinstance(spec, str) and _DEVICE_RE.fullmatch(spec) is not None, "device",
           "must be auto, cpu, cuda or cuda:N", spec)
