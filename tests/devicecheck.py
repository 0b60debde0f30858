"""A stand-in accelerator for CPU-only machines that fails on device mixing, as CUDA does.

``OnDevice`` tensors report ``device == meta`` while holding real CPU data (``.inner``); ``DeviceCheckMode`` runs every
aten op on the inner CPU tensors and wraps the results again. So a run with ``device`` resolved to ``meta`` trains for
real, every tensor placed with ``.to(device)`` / ``device=...`` becomes an ``OnDevice`` tensor, and anything created
without a device stays a plain CPU tensor. An op that mixes the two raises :class:`DeviceMixError`, naming the op —
the error a GPU run would hit. CUDA's own exceptions are allowed: cross-device ``copy_`` / ``.to``, CPU 0-dim tensors
read as operands (Python-scalar-like; written in place they are an error), and CPU index tensors in advanced indexing.

Why ``meta`` and not a fake ``cuda``: a CPU build of torch has no device guard for CUDA, so ``.to("cuda")`` fails
before any dispatch; ``meta`` has one and its own kernels are never reached here (the mode runs the CPU kernels).
SDPA's backend choice is pinned to the math implementation, which the CPU can run for any device label.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = torch.device("meta")
aten = torch.ops.aten
_MIX_ALLOWED = {aten.copy_.default, aten._to_copy.default, aten.lift_fresh.default}
_INDEXING = {aten.index.Tensor, aten.index_put_.default, aten.index_put.default, aten._index_put_impl_.default}
_SDP_MATH = 0  # torch.nn.attention.SDPBackend.MATH


class DeviceMixError(AssertionError):
    """An op was handed tensors on the (stand-in) accelerator and plain CPU tensors."""


class OnDevice(torch.Tensor):
    """A tensor that says it is on the accelerator (``meta``) and keeps its real values on the CPU in ``inner``."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> "OnDevice":
        t = torch.Tensor._make_wrapper_subclass(cls, inner.shape, strides=inner.stride(), storage_offset=inner.storage_offset(),
                                                dtype=inner.dtype, device=DEVICE, requires_grad=False)
        t.inner = inner
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # pragma: no cover - only inside the mode
        raise RuntimeError(f"OnDevice tensor used outside DeviceCheckMode ({func})")

    @property
    def is_meta(self) -> bool:  # it holds data: e.g. Module.load_state_dict must copy into it, not skip it as "meta"
        return False

    def __repr__(self) -> str:  # the default repr would try to read meta storage
        return f"OnDevice({self.inner!r})"


def _is_host(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) and t.device.type == "cpu"


class _FromData(TorchFunctionMode):
    """``torch.tensor(data, device=meta)`` builds its tensor below the dispatcher, where the values would be lost to a
    real meta tensor: build it on the CPU and move it, which is what it means on a GPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        dev = kwargs.get("device")
        if func in (torch.tensor, torch.as_tensor) and dev is not None and torch.device(dev).type == DEVICE.type:
            kwargs["device"] = torch.device("cpu")
            return func(*args, **kwargs).to(DEVICE)
        return func(*args, **kwargs)


class DeviceCheckMode(TorchDispatchMode):
    """Run ops on the inner CPU data; raise :class:`DeviceMixError` where a GPU would refuse the op. ``ops`` counts
    the ops that touched the stand-in device (a run that never placed anything there would be a vacuous check)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self._from_data = _FromData()

    def __enter__(self) -> "DeviceCheckMode":
        self._from_data.__enter__()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self._from_data.__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        flat, _ = tree_flatten((args, kwargs))
        on = any(isinstance(t, OnDevice) for t in flat)
        dev = kwargs.get("device")
        to_device = dev is not None and torch.device(dev).type == DEVICE.type
        if on and func in _INDEXING:  # CPU index tensors are fine on CUDA; the indexed tensor and values are not
            flat, _ = tree_flatten(([args[0], *args[2:]], kwargs))
        if on and func not in _MIX_ALLOWED:
            written = [args[i] if i < len(args) else kwargs.get(arg.name) for i, arg in enumerate(func._schema.arguments)
                       if arg.alias_info is not None and arg.alias_info.is_write]
            # CPU 0-dim tensors may be read next to GPU tensors (as Python scalars are), never written from them
            host = [t for t in flat if _is_host(t) and (t.dim() > 0 or any(t is w for w in written))]
            if host:
                raise DeviceMixError(f"{func}: got tensors on the accelerator and a CPU tensor of shape "
                                     f"{tuple(host[0].shape)} ({host[0].dtype}); a GPU run fails here")
        if func is aten._fused_sdp_choice.default:
            return _SDP_MATH
        if to_device:
            kwargs["device"] = torch.device("cpu")
        a, k = tree_map(lambda t: t.inner if isinstance(t, OnDevice) else t, (args, kwargs))
        out = func(*a, **k)
        if on or to_device:
            self.ops += 1
        wrap = to_device or (on and not (dev is not None and not to_device))  # .to("cpu") leaves the device
        if not wrap:
            return out
        rets = func._schema.returns
        if len(rets) == 1 and rets[0].alias_info is not None and rets[0].alias_info.is_write:
            return kwargs["out"] if "out" in kwargs else args[0]  # in-place / out=: the same (wrapper) tensor
        return tree_map(lambda t: OnDevice(t) if isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) else t, out)


def on_device(t: Any) -> bool:
    return isinstance(t, OnDevice)
