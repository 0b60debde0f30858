"""What a run reports: ``Result`` (result.json as a dict), ``Diverged`` and the description of the machine and code."""
from __future__ import annotations

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


def versions() -> dict[str, Any]:
    """torch's CPU kernels split reductions by thread: results are bit-reproducible per seed *and* thread count."""
    return {"python": platform.python_version(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "islands_kit": islands_kit.__version__}
