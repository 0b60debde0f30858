"""What a run checks before it trains, the same for ``--dry-run`` and for the run itself, so a result is never lost at
the end to something knowable at the start.

* the output folder: not a file, not a dangling symbolic link or a link loop (on the way to it either), and writable
  (a probe file is created and removed in it, or in the nearest folder that exists when it does not yet: nothing is
  created by the check itself);
* the corpus: a local ``.txt`` corpus must decode as UTF-8, a ``.parquet`` one must carry the Parquet magic
  (``data.corpora.check_corpus_spec``);
* the device: ``device=cuda`` where CUDA is absent is refused here, as the run itself would refuse it;
* the islands' hardware profiles exist;
* memory: the peak of a training step of the islands this process holds must fit in the memory available on the
  device (``check_memory``): their parameters, gradients and optimizer moments (``estimate_parameter_bytes``) plus
  what one micro-batch's forward keeps for its backward (``activation_bytes_per_token``: the tensors autograd saves,
  attention included) or an evaluation chunk's logits, whichever is larger. Every term is a lower bound (Shampoo's
  factors, the strategy's copies and the allocator's slack come on top), so a refusal is certain to be right.

The parameter count comes from the model itself, built on torch's ``meta`` device (shapes without storage), with one
and two blocks: the per-block count times ``n_layers`` gives the total without building every block.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from islands_kit.config import ConfigError, ExperimentConfig, ModelConfig
from islands_kit.data import check_corpus_spec
from islands_kit.device import check_precision, resolve_device
from islands_kit.model import ByteTransformer
from islands_kit.train.islands import HARDWARE

# per island held by a process: weights, gradients and two optimizer moments (Adam; Shampoo holds more), float32
COPIES_PER_ISLAND = 4
SHARED_COPIES = 2  # plus the initial model the islands are copied from and the evaluation model
# the model dimensions that set the parameter count: a refusal names the one whose size matters most
_SIZE_FIELDS = ("d_model", "n_layers", "n_experts", "d_expert", "n_shared_experts")


def check_output_dir(out: str | Path) -> None:
    """Refuse an ``--out`` that is a file or a folder this process cannot write in, before any work. Permission bits
    do not tell (root, ACLs, read-only mounts), so a probe file is created and removed."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"--out: {p} is a file, not a folder; choose a folder for the run's outputs")
    where = p
    while not where.exists():  # the folder the run would create: probe the nearest existing one (nothing is created)
        if where.is_symlink():  # it is there but leads nowhere: creating the folder would fail after training
            raise ConfigError(f"--out: {where} is a symbolic link to nothing (dangling, or a loop), so the folder {p} "
                              "cannot be created; remove the link or choose another folder")
        where = where.parent
    if not where.is_dir():
        raise ConfigError(f"--out: {where} is a file, so the folder {p} cannot be created under it")
    try:
        fd, probe = tempfile.mkstemp(prefix=".islands_kit-probe.", dir=where)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"--out: cannot write in {where} ({e.strerror or type(e).__name__}); choose a writable "
                          "folder") from None


def parameter_count(model_cfg: ModelConfig) -> int:
    """Parameters of ``ByteTransformer(model_cfg)``, counted on the meta device (no storage is allocated)."""
    def count(n_layers: int) -> int:
        with torch.device("meta"):
            return ByteTransformer(dataclasses.replace(model_cfg, n_layers=n_layers)).num_params()

    try:
        one, two = count(1), count(2)
    except (RuntimeError, OverflowError, ValueError) as e:  # a shape past int64: too large to even describe
        raise ConfigError(f"model: d_model={model_cfg.d_model}, d_expert={model_cfg.d_expert}, "
                          f"n_experts={model_cfg.n_experts}: the model's shapes overflow ({type(e).__name__})") from None
    return one + (model_cfg.n_layers - 1) * (two - one)


def float32_copies(n_local_islands: int) -> int:
    """Float32 copies of the parameters a process holding ``n_local_islands`` islands keeps at least (0 islands: the
    one model that sampling loads)."""
    return COPIES_PER_ISLAND * n_local_islands + SHARED_COPIES if n_local_islands > 0 else 1


def estimate_parameter_bytes(model_cfg: ModelConfig, n_local_islands: int) -> int:
    """A lower bound on the memory a process holding ``n_local_islands`` islands needs: 4 bytes per parameter times
    ``float32_copies``."""
    return 4 * parameter_count(model_cfg) * float32_copies(n_local_islands)


def available_memory(device: torch.device) -> int | None:
    """Bytes free on ``device``: the GPU's free memory, or the host's MemAvailable capped by the cgroup's limit
    (containers). None where it cannot be read (then memory is not checked)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    free: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit.isdigit() and used.isdigit():
            free.append(max(0, int(limit) - int(used)))
    except OSError:
        pass
    return min(free) if free else None


def activation_bytes_per_token(m: ModelConfig, precision: str = "fp32") -> int:
    """A lower bound on what one token's forward keeps for its backward (autograd's saved tensors), counted from the
    model's structure: per layer the attention's RMSNorm input and output, q, k and v after RoPE, the attention's
    output and one log-sum-exp per head (the fused attention kernels keep no T x T scores: the attention's memory
    is linear in T), the feed-forward's RMSNorm input and output, the router's E probabilities, and per routed (or
    shared) expert its two hidden projections and their SwiGLU product; then the final norm's input and output and
    the logits' 256 log-probabilities. 4 bytes an element, 2 under bf16 autocast. tests/test_preflight.py holds it
    against the tensors autograd really saves (between 0.55 and 0.8 of them)."""
    per_layer = (8 * m.d_model + m.n_heads + (m.n_experts if m.n_experts > 1 else 0)
                 + 3 * m.top_k * m.d_expert + 3 * m.n_shared_experts * m.d_expert)
    elements = m.n_layers * per_layer + 2 * m.d_model + 2 * m.vocab_size
    return (2 if precision == "bf16" else 4) * elements


EVAL_CHUNK = 64  # windows an evaluation scores at once (train/evaluation.py)
EVAL_BYTES_PER_LOGIT = 4 + 8 + 8  # the logits, their float64 copy and its log-softmax (metrics.evaluate_bpb)


def micro_batch(cfg: ExperimentConfig, n_local_islands: int) -> int:
    """The largest micro-batch a process holding ``n_local_islands`` islands surely runs: every island's largest
    when it holds them all, else the smallest (it holds at least one island, not known which)."""
    sizes = [isl.micro_batch_size for isl in cfg.islands]
    return max(sizes) if n_local_islands >= len(sizes) else min(sizes)


def step_bytes(cfg: ExperimentConfig, model_cfg: ModelConfig, n_local_islands: int) -> tuple[int, int, int]:
    """(parameters, activations, evaluation): lower bounds on the bytes of a training step's parts in a process
    holding ``n_local_islands`` islands; its peak is the first plus the larger of the other two (one island's
    micro-batch is in flight at a time, and evaluation runs between steps)."""
    micro = micro_batch(cfg, n_local_islands)
    act = micro * model_cfg.seq_len * activation_bytes_per_token(model_cfg, cfg.precision)
    windows = max(1, min(EVAL_CHUNK, cfg.data.eval_bytes // model_cfg.seq_len)) if cfg.data.eval_bytes else 1
    ev = windows * model_cfg.seq_len * model_cfg.vocab_size * EVAL_BYTES_PER_LOGIT
    return estimate_parameter_bytes(model_cfg, n_local_islands), act, ev


def check_memory(model_cfg: ModelConfig, n_local_islands: int, device: torch.device, where: str = "",
                 cfg: ExperimentConfig | None = None) -> int:
    """Refuse a model whose parameter memory — or, given the run's ``cfg``, a training step's peak
    (``step_bytes``) — exceeds what ``device`` has free, naming the dimension that matters most and the estimate
    (``where`` prefixes the message). Returns the estimate (bytes)."""
    def need_of(m: ModelConfig) -> int:
        if cfg is None:
            return estimate_parameter_bytes(m, n_local_islands)
        params, act, ev = step_bytes(cfg, m, n_local_islands)
        return params + max(act, ev)

    need = need_of(model_cfg)
    have = available_memory(device)
    if have is None or need <= have:
        return need
    # the field that, back at its default, shrinks the estimate most
    default = ModelConfig()
    def shrunk(name: str) -> int:
        try:
            return need_of(dataclasses.replace(model_cfg, **{name: getattr(default, name)}))
        except (ConfigError, ValueError):  # the default breaks a rule with the other fields (top_k, heads)
            return need
    worst = min(_SIZE_FIELDS + (("seq_len",) if cfg is not None else ()), key=shrunk)
    copies = float32_copies(n_local_islands)
    params = estimate_parameter_bytes(model_cfg, n_local_islands)
    head = (f"{where}model.{worst}: {getattr(model_cfg, worst)} makes a model of {parameter_count(model_cfg):.3g} "
            f"parameters: {copies} float32 copies ({n_local_islands} island(s) here) need at least {params / 1e9:.3g} GB")
    if cfg is None:
        raise ConfigError(f"{head}, more than the {have / 1e9:.3g} GB free on {device} (rule: the parameter memory "
                          "must fit in free memory)")
    _, act, ev = step_bytes(cfg, model_cfg, n_local_islands)
    micro = micro_batch(cfg, n_local_islands)
    raise ConfigError(f"{head}, and a micro-batch of {micro} x {model_cfg.seq_len} tokens keeps at least "
                      f"{act / 1e9:.3g} GB of activations for its backward (an evaluation chunk {ev / 1e9:.3g} GB): "
                      f"a step needs at least {need / 1e9:.3g} GB, more than the {have / 1e9:.3g} GB free on "
                      f"{device} (rule: a training step's memory must fit in free memory)")


def local_islands(cfg: ExperimentConfig) -> int:
    """Islands one process holds: all of them, or an even share under torchrun (``WORLD_SIZE`` processes)."""
    world = max(1, int(os.environ.get("WORLD_SIZE", "1") or 1))
    return max(1, -(-len(cfg.islands) // world))


def preflight(cfg: ExperimentConfig, out: str | Path | None, n_local_islands: int | None = None) -> torch.device:
    """Every check a run makes before training (see the module docstring); returns the run's device."""
    cfg.validate()
    if out is not None:
        check_output_dir(out)
    device = resolve_device(cfg.device)
    check_precision(cfg.precision, device)
    for i, isl in enumerate(cfg.islands):
        if isl.hardware not in HARDWARE:
            raise ConfigError(f"islands[{i}].hardware: must be one of {'|'.join(HARDWARE)} (got {isl.hardware!r})")
    check_memory(cfg.model, n_local_islands or local_islands(cfg), device, cfg=cfg)
    check_corpus_spec(cfg.data.corpus)
    return device


def describe_memory(cfg: ExperimentConfig, device: torch.device) -> str:
    """One line for the dry run: the step's memory estimate against what is free."""
    n = local_islands(cfg)
    params, act, ev = step_bytes(cfg, cfg.model, n)
    have = available_memory(device)
    free = f"{have / 1e9:.3g} GB free on {device}" if have is not None else f"free memory on {device} unknown"
    return (f"memory: a step needs at least {(params + max(act, ev)) / 1e9:.3g} GB (parameters and optimizer state "
            f"{params / 1e9:.3g} GB, then activations {act / 1e9:.3g} GB or an evaluation chunk {ev / 1e9:.3g} GB); "
            f"{free}")


def check_tensors(expected: dict[str, torch.Tensor], got: dict[str, Any], where: str) -> None:
    """Every tensor ``expected`` names is in ``got`` with the same shape, dtype and dense layout and finite values,
    and ``got`` holds nothing else; ConfigError naming the first key that breaks this."""
    for k, t in expected.items():
        if k not in got:
            raise ConfigError(f"{where}: tensor {k} is missing")
        v = got[k]
        if not isinstance(v, torch.Tensor) or tuple(v.shape) != tuple(t.shape):
            shape = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
            raise ConfigError(f"{where}: tensor {k} has shape {shape}, the config makes {tuple(t.shape)}")
        if v.layout != torch.strided or v.dtype != t.dtype:
            raise ConfigError(f"{where}: tensor {k} is a {v.layout} {v.dtype} tensor, the model holds dense {t.dtype}")
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise ConfigError(f"{where}: tensor {k} holds values that are not finite (NaN or inf)")
    extra = sorted(set(got) - set(expected))
    if extra:
        raise ConfigError(f"{where}: tensor {extra[0]} is not part of the model the config makes")
