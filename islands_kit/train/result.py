"""What a run reports: ``Result`` (result.json as a dict), ``Diverged`` and the description of the machine and code."""
from __future__ import annotations

import hashlib
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

import islands_kit


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
        root = Path(__file__).resolve().parent.parent.parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except Exception:
        return None


def cpu_model_and_flags() -> tuple[str, str]:
    """The CPU's model name and its feature flags (from /proc/cpuinfo where there is one)."""
    model, flags = platform.processor(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = value.strip()
                    break
    except OSError:
        pass
    return model, flags


def machine_fingerprint() -> str:
    """What decides a CPU run's last bits: the torch build, the kernel family it dispatches to, and the CPU itself.
    Runs are paired only when this matches (a 1200-step run drifts by up to a seed's spread between kernel sets)."""
    model, flags = cpu_model_and_flags()
    flag_hash = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:12]
    return f"torch {torch.__version__} | {torch.backends.cpu.get_cpu_capability()} | {platform.machine()} {model} | flags {flag_hash}"


def versions() -> dict[str, Any]:
    """torch's CPU kernels split reductions by thread: results are bit-reproducible per seed *and* thread count, on
    one machine and kernel set (``cpu``, ``cpu_capability``, ``machine``)."""
    return {"python": platform.python_version(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "islands_kit": islands_kit.__version__, "cpu": cpu_model_and_flags()[0],
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": machine_fingerprint()}
