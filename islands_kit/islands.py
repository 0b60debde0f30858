"""An island: one replica + its inner optimizer + its own data stream + batch size + parallelism + compute speed.

Parallelism. An island's batch of ``batch_size`` sequences is split over ``dp_ranks`` data-parallel ranks, each of which
runs ``batch_size / (dp_ranks * micro_batch_size)`` micro-batches with gradient accumulation. In the simulator the ranks
run one after another in this process; the accumulated gradient is the mean over the whole island batch, exactly what
the island's internal all-reduce would produce.

Compute speed (the simulated clock). A step costs

    FLOPs = tokens · (6 · N_active + 12 · n_layers · d_model · seq_len)     (Kaplan et al. 2020, incl. attention)

and takes FLOPs / (peak_flops · mfu · n_accelerators) seconds on the island's hardware profile (``HARDWARE``), so two
sites with different GPUs, batch sizes and accelerator counts advance at different rates.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from islands_kit.config import ConfigError, IslandConfig, ModelConfig, OptimConfig
from islands_kit.data import BatchStream
from islands_kit.model import ByteTransformer, RoutingStats


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    peak_flops: float  # dense bf16 (GPUs) / fp32 (CPUs) FLOP/s per accelerator
    mfu: float  # model FLOPs utilisation assumed for training


HARDWARE: dict[str, HardwareProfile] = {
    "h100": HardwareProfile("NVIDIA H100 SXM (bf16 dense)", 989e12, 0.40),
    "h200": HardwareProfile("NVIDIA H200 (bf16 dense)", 989e12, 0.42),
    "a100": HardwareProfile("NVIDIA A100 SXM (bf16 dense)", 312e12, 0.40),
    "l40s": HardwareProfile("NVIDIA L40S (bf16 dense)", 362e12, 0.35),
    # laptop-scale islands: what the demo actually runs on (2 CPU cores); about 30 GFLOP/s achieved by this kit
    "cpu-2core": HardwareProfile("2 x86 CPU cores (fp32)", 1.0e11, 0.30),
    "cpu-1core": HardwareProfile("1 x86 CPU core (fp32)", 0.5e11, 0.30),
}


def step_flops(model_cfg: ModelConfig, active_params: int, tokens: int) -> float:
    return float(tokens) * (6.0 * active_params + 12.0 * model_cfg.n_layers * model_cfg.d_model * model_cfg.seq_len)


def step_seconds(island: IslandConfig, model_cfg: ModelConfig, active_params: int) -> float:
    if island.hardware not in HARDWARE:
        raise ConfigError(f"islands.hardware: unknown profile (valid: {', '.join(HARDWARE)}) (got {island.hardware!r})")
    hw = HARDWARE[island.hardware]
    tokens = island.batch_size * model_cfg.seq_len
    return step_flops(model_cfg, active_params, tokens) / (hw.peak_flops * hw.mfu * island.n_accelerators)


def lr_lambda(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``min_lr_ratio`` at ``total_steps``."""
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, total_steps - cfg.warmup_steps)
    prog = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * prog))


def build_optimizer(model: nn.Module, cfg: OptimConfig, process_group=None) -> torch.optim.Optimizer:
    """Inner optimizer. Weight decay applies to matrices only (not norms, router bias or other 1-D tensors)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr)
    if cfg.name == "shampoo":
        from islands_kit.optim import Shampoo

        return Shampoo(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), epsilon=cfg.shampoo_epsilon,
                       shampoo_beta2=cfg.shampoo_beta2, grafting=cfg.grafting, grafting_epsilon=cfg.eps,
                       max_preconditioner_dim=cfg.max_preconditioner_dim,
                       precondition_frequency=cfg.precondition_frequency,
                       start_preconditioning_step=cfg.start_preconditioning_step, process_group=process_group)
    raise ConfigError(f"optim.name: must be one of adamw|shampoo|sgd (got {cfg.name!r})")


class Island:
    def __init__(self, island_id: int, cfg: IslandConfig, model: ByteTransformer, optim_cfg: OptimConfig,
                 stream: BatchStream, total_steps: int, compute_s: float, process_group=None) -> None:
        self.id = island_id
        self.cfg = cfg
        self.model = model
        self.optim_cfg = optim_cfg
        self.optimizer = build_optimizer(model, optim_cfg, process_group)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_lambda(s, optim_cfg, total_steps))
        self.stream = stream
        self.process_group = process_group  # this island's ranks under torch.distributed (None in one process)
        self.compute_s = compute_s
        self.n_chunks = cfg.batch_size // cfg.micro_batch_size  # dp_ranks x micro-batches per rank
        self.tokens_per_step = cfg.batch_size * stream.seq_len
        self.last_loss = float("nan")
        self.last_loads: torch.Tensor | None = None
        self.last_stats: RoutingStats | None = None

    def forward_backward(self) -> float:
        """One island batch: every rank's micro-batches, gradients accumulated as the mean over the batch.

        In one process the island's ranks run one after another. Under torch.distributed with several processes per
        island (``process_group`` of size R), rank r runs only its contiguous share of the micro-batches and the
        gradients, loss and routing loads are then summed over the island's group — the same mean, summed in a
        different order (equal within float tolerance, not bitwise)."""
        self.model.train()
        x, y = self.stream.next()  # (B, T): every rank draws the whole island batch so the streams stay in step
        xs, ys = x.chunk(self.n_chunks), y.chunk(self.n_chunks)  # n_chunks x (micro_batch_size, T)
        size, rank = self._group_size_rank()
        lo, hi = rank * self.n_chunks // size, (rank + 1) * self.n_chunks // size
        loss_sum = torch.zeros((), dtype=torch.float64)
        loads = None
        for xc, yc in zip(xs[lo:hi], ys[lo:hi]):
            out = self.model(xc, yc)
            ((out.loss + out.aux_loss) / self.n_chunks).backward()
            loss_sum += out.loss.detach().double()
            stats = self.model.routing_stats()
            loads = stats.loads.clone() if loads is None else loads + stats.loads
            self.last_stats = stats
        if size > 1:
            import torch.distributed as dist

            for p in self.model.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad, group=self.process_group)
            dist.all_reduce(loss_sum, group=self.process_group)
            dist.all_reduce(loads, group=self.process_group)
        self.last_loss = float(loss_sum) / self.n_chunks
        self.last_loads = loads
        return self.last_loss

    def _group_size_rank(self) -> tuple[int, int]:
        if self.process_group is None:
            return 1, 0
        import torch.distributed as dist

        return dist.get_world_size(self.process_group), dist.get_rank(self.process_group)

    def optimizer_step(self) -> None:
        if self.optim_cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.optim_cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "stream": self.stream.state_dict()}

    def load_state_dict(self, d: dict) -> None:
        self.model.load_state_dict(d["model"])
        self.optimizer.load_state_dict(d["optimizer"])
        self.scheduler.load_state_dict(d["scheduler"])
        self.stream.load_state_dict(d["stream"])
