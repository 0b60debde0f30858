"""Which backend runs the kernels: the plain torch reference or Triton.

Triton is optional. It runs on a CUDA GPU, or on the CPU through its interpreter when ``TRITON_INTERPRET=1`` is set
*before* the kernels are defined (the interpreter is how tests check the kernels on machines without a GPU; it is slow
and meant for small tensors only). Everything else falls back to the torch path.

The choice, strongest first:

1. ``set_backend("auto" | "torch" | "triton")`` — what the config field ``model.kernels`` calls. It works as a plain
   call and as a context manager that restores the previous choice on exit (like ``torch.set_grad_enabled``).
2. The environment variable ``ISLANDS_KIT_KERNELS`` in {auto, torch, triton}.
3. ``auto``: Triton where it can run on the tensors at hand, torch otherwise.

Forcing ``triton`` where it cannot run raises a ``KernelBackendError`` that says why (not installed, no GPU, tensor on
the wrong device) instead of silently using torch. The pattern follows nanochat's ``flash_attention.py`` (a guarded
import plus an explicit override).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType, TracebackType

import torch

ENV_VAR = "ISLANDS_KIT_KERNELS"
BACKENDS = ("auto", "torch", "triton")


class KernelBackendError(RuntimeError):
    """The requested kernel backend cannot run here; the message says why and how to fall back."""


_override: str | None = None  # set by set_backend; None = follow the environment variable


def triton_installed() -> bool:
    """True when the ``triton`` package can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):  # e.g. blocked by an import hook, or sys.modules["triton"] = None
        return False


def interpreting() -> bool:
    """True when Triton's CPU interpreter is switched on (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _why_unavailable() -> str | None:
    """None when Triton can run here, else the reason in words."""
    if not triton_installed():
        return "triton is not installed (pip install 'islands_kit[kernels]')"
    if not (interpreting() or torch.cuda.is_available()):
        return "no CUDA GPU is visible and TRITON_INTERPRET=1 is not set"
    return None


def available() -> bool:
    """True when the Triton kernels can run on this machine (installed, and a CUDA GPU or the interpreter)."""
    return _why_unavailable() is None


def _check_name(name: str, where: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"{where}: must be one of {'|'.join(BACKENDS)} (got {name!r})")
    return name


def requested_backend() -> str:
    """The backend asked for: the ``set_backend`` override, else ``$ISLANDS_KIT_KERNELS``, else ``auto``."""
    if _override is not None:
        return _override
    return _check_name(os.environ.get(ENV_VAR, "auto").strip().lower() or "auto", ENV_VAR)


class set_backend:
    """Choose the kernel backend: ``"auto"`` (Triton where it can run), ``"torch"`` or ``"triton"``.

    Usable as a call (``set_backend("torch")``, lasts until changed) or as a context manager
    (``with set_backend("torch"): ...`` restores the previous choice on exit). Forcing ``"triton"`` where Triton cannot
    run raises ``KernelBackendError`` at once.
    """

    def __init__(self, name: str) -> None:
        global _override
        _check_name(name, "set_backend(name)")
        if name == "triton":
            why = _why_unavailable()
            if why is not None:
                raise KernelBackendError(f"set_backend('triton'): Triton cannot run here: {why}; use 'auto' or 'torch'")
        self.previous = _override
        self.name = name
        _override = name

    def __enter__(self) -> "set_backend":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        global _override
        _override = self.previous


def _device_ok(device: torch.device) -> bool:
    """Triton compiled kernels need CUDA tensors; the interpreter works on CPU tensors."""
    return device.type == "cpu" if interpreting() else device.type == "cuda"


def use_triton(*tensors: torch.Tensor, op: str, device_fallback: bool = False) -> bool:
    """Decide for one call of ``op`` on ``tensors``: True = run the Triton kernel, False = the torch path.

    ``auto`` picks Triton only when it is available and every tensor is on a device it can use; ``triton`` raises
    ``KernelBackendError`` naming ``op`` and the reason when it cannot run. ``device_fallback=True`` is for ops whose
    data device the caller does not choose (wire payloads: a CPU copy received over gloo in a GPU run): tensors on a
    device Triton cannot use then take the torch path even when ``triton`` is forced (the two paths are bit-identical).
    """
    name = requested_backend()
    if name == "torch":
        return False
    why = _why_unavailable()
    if why is None:
        bad = [t.device for t in tensors if not _device_ok(t.device)]
        if bad and device_fallback:
            return False
        if bad:
            need = "CPU tensors (TRITON_INTERPRET=1)" if interpreting() else "CUDA tensors"
            why = f"the Triton path needs {need}, got a tensor on {bad[0]}"
    if why is None:
        return True
    if name == "triton":
        raise KernelBackendError(f"{op}: backend 'triton' was forced but cannot run: {why}")
    return False


def triton_module(name: str) -> ModuleType:
    """Import ``islands_kit.kernels.<name>`` (a module of Triton kernels) on first use.

    ``@triton.jit`` decides between compiled and interpreted kernels when the module is imported, so each such module
    records that mode in ``INTERPRETED``; if ``TRITON_INTERPRET`` has changed since, using it would hand CPU tensors to
    compiled kernels (or CUDA tensors to the interpreter), and this raises instead.
    """
    mod = importlib.import_module(f"{__package__}.{name}")
    mode = bool(mod.INTERPRETED)
    if mode != interpreting():
        raise KernelBackendError(
            f"{name}: its Triton kernels were defined with TRITON_INTERPRET={int(mode)} but it is now "
            f"{int(interpreting())}; set TRITON_INTERPRET before the first kernel call and keep it for the process"
        )
    return mod
