"""Where a run computes and in what precision: the ``device`` and ``precision`` config fields made concrete.

``device`` (``ExperimentConfig.device``):

* ``auto`` — the local GPU when CUDA is available, else the CPU;
* ``cpu``;
* ``cuda`` — the current CUDA device; an error (naming the field) where CUDA is not available, never a silent CPU run;
* ``cuda:N`` — GPU N; an error where there is no GPU N.

Under torchrun (``LOCAL_RANK`` set, ``WORLD_SIZE > 1``) ``auto`` and ``cuda`` mean ``cuda:LOCAL_RANK``: one GPU per
rank, as ``islands_kit.comm.distributed`` selects for NCCL. In one process every island (replica, optimizer state, sync
buffers) lives on the same device; islands share it and run one after another, as on the CPU.

``precision`` (``ExperimentConfig.precision``): ``fp32``, or ``bf16`` = ``torch.autocast(dtype=bfloat16)`` around the
forward (and so the backward) pass only. Master weights, gradients and optimizer state stay float32; so do everything
the sync layer holds (DiLoCo's global parameters and outer momentum, pseudo-gradients, codec inputs and error-feedback
residuals), since it works on ``FragmentView.flat()`` (float32) outside autocast. Evaluation runs under the same
autocast as training.

The torch calls that need CUDA live here (the config module stays import-light and checks only the spelling).
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, ContextManager

import torch

from islands_kit.config import ConfigError, check_device_spelling


def _torchrun_local_rank() -> int | None:
    """LOCAL_RANK under a multi-process torchrun launch, else None."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 and os.environ.get("LOCAL_RANK", "") != "":
        return int(os.environ["LOCAL_RANK"])
    return None


def resolve_device(spec: str) -> torch.device:
    """The torch.device for ``spec`` on this machine; raises ConfigError naming ``device`` when it cannot be had."""
    check_device_spelling(spec)
    if spec == "cpu":
        return torch.device("cpu")
    has_cuda = torch.cuda.is_available()
    if spec == "auto" and not has_cuda:
        return torch.device("cpu")
    if not has_cuda:
        raise ConfigError(f"device: {spec} was asked for but CUDA is not available here (torch {torch.__version__}, "
                          f"built for CUDA {torch.version.cuda}); use device=auto or device=cpu, or install the CUDA "
                          "torch wheel (docs/install.md: GPUs)")
    n = torch.cuda.device_count()
    if spec.startswith("cuda:"):
        index = int(spec.split(":")[1])
    else:
        local = _torchrun_local_rank()
        index = local if local is not None else torch.cuda.current_device()
    if index >= n:
        raise ConfigError(f"device: GPU {index} does not exist; this machine has {n} visible (got {spec!r})")
    return torch.device("cuda", index)


def check_precision(precision: str, device: torch.device) -> None:
    """bf16 autocast needs a device that supports it: the CPU (always) or a GPU with bf16 (Ampere and newer)."""
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"precision: bf16 needs a GPU with bfloat16 support (Ampere or newer); "
                          f"{torch.cuda.get_device_name(device)} has none (got 'bf16')")


def autocast(device: torch.device, precision: str) -> ContextManager[Any]:
    """The forward-pass context for ``precision``: bf16 autocast, or nothing for fp32 (CPU numbers unchanged)."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def use_fused_adamw(device: torch.device) -> bool:
    """Fused AdamW (one kernel for every parameter, no temporaries) wherever torch has it: CUDA, and the CPU since
    torch 2.4. The same update as torch's per-tensor and foreach AdamW up to float rounding (the last bits differ:
    tests/test_device.py holds them to a tight tolerance), several times cheaper on the CPU than the per-tensor loop
    that is torch's CPU default."""
    return device.type == "cuda" or (device.type == "cpu" and torch.__version__ >= "2.4")  # TorchVersion: compared as a version


def describe(device: torch.device, precision: str) -> dict[str, Any]:
    """What result.json records about the accelerator: device, precision, GPU name and count, CUDA and NCCL versions
    (the GPU fields are None on the CPU)."""
    info: dict[str, Any] = {"device": str(device), "precision": precision, "gpu_name": None, "gpu_count": None,
                            "cuda_version": None, "nccl_version": None}
    if device.type == "cuda":
        info["gpu_name"] = torch.cuda.get_device_name(device)
        info["gpu_count"] = torch.cuda.device_count()
        info["cuda_version"] = torch.version.cuda
        try:
            v = torch.cuda.nccl.version()
            info["nccl_version"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:  # a CUDA build without NCCL
            info["nccl_version"] = None
    return info


def wire_device(run_device: torch.device, backend: str) -> torch.device:
    """Where ``TorchDistTransport`` puts its wire messages (and so which backend carries them), given the run's device
    and the process group's backend (``islands_kit.comm.distributed``: gloo, nccl or cpu:gloo,cuda:nccl).

    A run on a GPU with NCCL in the group sends its messages as GPU tensors over NCCL: the message (header, codec
    bytes, checksum) is assembled in host memory, copied to the GPU and all-gathered / exchanged there, and read back
    to host memory to be checked and decoded — staging through the host, since the wire format is bytes with a
    checksummed header. Otherwise (a CPU run, or gloo forced) the messages stay in host memory and travel over gloo.
    Pure ``nccl`` carries CUDA tensors only, so there they go to the current GPU whatever the run's device."""
    if backend == "nccl":
        return run_device if run_device.type == "cuda" else torch.device("cuda", torch.cuda.current_device())
    if "nccl" in backend and run_device.type == "cuda":
        return run_device
    return torch.device("cpu")
