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

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

from islands_kit.config import ConfigError, IslandConfig, ModelConfig, OptimConfig
from islands_kit.data import BatchStream
from islands_kit.device import autocast
from islands_kit.model import ByteTransformer, RoutingStats
from islands_kit.optim.build import build_optimizer, build_snoo
from islands_kit.optim.schedule import lr_lambda
from islands_kit.sync.base import strided_fragments
from islands_kit.sync.schedule import fragment_offsets


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    peak_flops: float  # dense bf16 (GPUs) / fp32 (CPUs) FLOP/s per accelerator
    mfu: float  # model FLOPs utilisation assumed for training
    hbm_bytes_per_s: float = 0.0  # peak memory bandwidth per accelerator (0 = not stated)
    memory_bytes: float = 0.0  # memory per accelerator (0 = not stated)
    gpu_names: tuple[str, ...] = ()  # substrings of torch.cuda.get_device_name() that identify it (most specific first)


# Peak figures are the vendors' spec-sheet numbers, dense (without 2:4 sparsity), per GPU:
#   A100 SXM 80GB: 312 TFLOP/s bf16, 2.039 TB/s HBM2e (NVIDIA A100 datasheet);
#   H100 SXM: 989 TFLOP/s bf16 (1,979 with sparsity), 80 GB, 3.35 TB/s HBM3 (NVIDIA H100 datasheet);
#   H200 SXM: the H100's compute, 141 GB, 4.8 TB/s HBM3e (NVIDIA H200 datasheet);
#   L40S: 362 TFLOP/s bf16 (733 with sparsity), 48 GB, 0.864 TB/s GDDR6 (NVIDIA L40S datasheet);
#   B300 (HGX B300, Blackwell Ultra): 36 PFLOP/s bf16 *with sparsity* per 8-GPU board = 2.25 PFLOP/s dense per GPU,
#     288 GB, 8 TB/s HBM3e (NVIDIA HGX B300 platform table; the B200 has the same bf16 rate);
#   GB300 (GB300 NVL72 rack): 360 PFLOP/s bf16 with sparsity per 72 GPUs = 2.5 PFLOP/s dense per GPU, 288 GB,
#     8 TB/s HBM3e (NVIDIA GB300 NVL72 spec; higher clocks and power than the HGX part).
# The seed run's two sites were GB300 and B300 clusters. MFU 0.40 is an assumed utilisation for large-model training
# on these parts (not a measurement of this kit's small models; those go in benchmarks/RESULTS.md).
HARDWARE: dict[str, HardwareProfile] = {
    "h100": HardwareProfile("NVIDIA H100 SXM (bf16 dense)", 989e12, 0.40, 3.35e12, 80e9, ("H100",)),
    "h200": HardwareProfile("NVIDIA H200 (bf16 dense)", 989e12, 0.42, 4.8e12, 141e9, ("H200",)),
    "a100": HardwareProfile("NVIDIA A100 SXM (bf16 dense)", 312e12, 0.40, 2.039e12, 80e9, ("A100",)),
    "l40s": HardwareProfile("NVIDIA L40S (bf16 dense)", 362e12, 0.35, 0.864e12, 48e9, ("L40S",)),
    "b300": HardwareProfile("NVIDIA B300 HGX (bf16 dense)", 2.25e15, 0.40, 8.0e12, 288e9, ("B300",)),
    "gb300": HardwareProfile("NVIDIA GB300 NVL72 (bf16 dense)", 2.5e15, 0.40, 8.0e12, 288e9, ("GB300",)),
    # laptop-scale islands: what the demo actually runs on (2 CPU cores)
    "cpu-2core": HardwareProfile("2 x86 CPU cores (fp32)", 1.0e11, 0.30),
    "cpu-1core": HardwareProfile("1 x86 CPU core (fp32)", 0.5e11, 0.30),
}


def profile_for_gpu(device_name: str) -> str | None:
    """The HARDWARE key whose ``gpu_names`` match ``torch.cuda.get_device_name()`` (GB300 before B300), else None."""
    for key in sorted((k for k, h in HARDWARE.items() if h.gpu_names), key=lambda k: -max(map(len, HARDWARE[k].gpu_names))):
        if any(n in device_name for n in HARDWARE[key].gpu_names):
            return key
    return None


def step_flops(model_cfg: ModelConfig, active_params: int, tokens: int) -> float:
    return float(tokens) * (6.0 * active_params + 12.0 * model_cfg.n_layers * model_cfg.d_model * model_cfg.seq_len)


def step_seconds(island: IslandConfig, model_cfg: ModelConfig, active_params: int) -> float:
    if island.hardware not in HARDWARE:
        raise ConfigError(f"islands.hardware: unknown profile (valid: {', '.join(HARDWARE)}) (got {island.hardware!r})")
    hw = HARDWARE[island.hardware]
    tokens = island.batch_size * model_cfg.seq_len
    return step_flops(model_cfg, active_params, tokens) / (hw.peak_flops * hw.mfu * island.n_accelerators)


def clip_grad_norm(params: Iterable[nn.Parameter], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_``, bit for bit, without its multiply by 1.0 where nothing is clipped on the CPU
    (most of a run: the gradient norm falls below the bound early), which would rewrite every gradient for nothing.
    On a GPU the multiply stays: deciding to skip it would cost a device-to-host sync every step. torch before 2.6 has
    no separate norm, and clips as torch does."""
    params = list(params)
    if not hasattr(torch.nn.utils, "get_total_norm"):
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        return
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads)
    if grads and grads[0].device.type == "cpu" and bool(max_norm / (total + 1e-6) >= 1.0):
        return  # torch's clip coefficient, clamped to 1.0: the multiply would change no bit
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)


class Island:
    """``model`` already sits on its device; batches are moved there (from the CPU data stream) at every step and the
    forward/backward runs under ``precision``'s autocast (``islands_kit.device``)."""

    def __init__(self, island_id: int, cfg: IslandConfig, model: ByteTransformer, optim_cfg: OptimConfig,
                 stream: BatchStream, total_steps: int, compute_s: float, process_group=None,
                 precision: str = "fp32", lr_position: Callable[[int], int] | None = None) -> None:
        """``lr_position``: the step of the global schedule the learning rate is read at, from the optimizer step
        count (None: the step count itself; decoupled islands read it at their clock)."""
        self.id = island_id
        self.cfg = cfg
        self.model = model
        self.device = next(model.parameters()).device
        self.precision = precision
        self.optim_cfg = optim_cfg
        self.optimizer = build_optimizer(model, optim_cfg, process_group)
        P, K = optim_cfg.snoo.fragments, optim_cfg.snoo.k
        frags = strided_fragments(model.block_param_names(), model.extra_param_names(), P) if P > 1 else None
        # SNOO's slow weights around the inner optimizer (None: off), in Streaming DiLoCo's fragments when P > 1
        self.snoo = build_snoo(model, optim_cfg, total_steps, frags, fragment_offsets(K, P) if frags else None)
        position = lr_position or (lambda s: s)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_lambda(position(s), optim_cfg, total_steps))
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
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)  # no-op on the CPU
        xs, ys = x.chunk(self.n_chunks), y.chunk(self.n_chunks)  # n_chunks x (micro_batch_size, T)
        size, rank = self._group_size_rank()
        lo, hi = rank * self.n_chunks // size, (rank + 1) * self.n_chunks // size
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)  # read back once per step, not per chunk
        loads = None
        for xc, yc in zip(xs[lo:hi], ys[lo:hi]):
            with autocast(self.device, self.precision):
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
            clip_grad_norm(self.model.parameters(), self.optim_cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.snoo is not None:
            self.snoo.after_inner_step()

    def strategy_writes(self) -> AbstractContextManager[None]:
        """Around a sync strategy's call that may write this island's weights: SNOO's slow weights move with them
        (``Snoo.external``, ``optim.snoo.merges=keep``); nothing to do without SNOO or with ``merges=smooth`` (the
        merge then enters the next pseudo-gradient)."""
        if self.snoo is not None and self.optim_cfg.snoo.merges == "keep":
            return self.snoo.external()
        return nullcontext()

    def state_dict(self) -> dict:
        d = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
             "scheduler": self.scheduler.state_dict(), "stream": self.stream.state_dict()}
        if self.snoo is not None:
            d["snoo"] = self.snoo.state_dict()
        return d

    def load_state_dict(self, d: dict) -> None:
        self.model.load_state_dict(d["model"])
        self.optimizer.load_state_dict(d["optimizer"])
        self.scheduler.load_state_dict(d["scheduler"])
        self.stream.load_state_dict(d["stream"])
        if self.snoo is not None:
            self.snoo.load_state_dict(d["snoo"])
