"""Optional kernels: Triton where it can run, a plain torch definition everywhere (and the torch code is the spec:
``reference.py`` for the model kernels, ``comm/codecs/`` for the codec kernel).

Public API::

    available() -> bool                        # Triton installed and a CUDA GPU (or TRITON_INTERPRET=1)
    set_backend("auto" | "torch" | "triton")   # call or context manager; also $ISLANDS_KIT_KERNELS
    grouped_mm(x_sorted (T,K), w (E,K,N), group_sizes (E,), *, mxfp8=False) -> (T,N)   # MoE expert GEMM
    mx_qdq(x, block=32, dim=-1) -> x-shaped    # MXFP8 (E4M3 + E8M0 block scale) quantise-dequantise, STE gradient
    use_triton(*tensors, op, device_fallback=False) -> bool   # the per-call backend decision
    codec_quantize_ef / codec_dequantize       # Triton fast path behind comm/codecs/ (no torch twin here)

Files: ``dispatch.py`` (backend choice), ``ops.py`` (the operations above), ``reference.py`` (torch references),
``triton_grouped.py``, ``triton_mx.py``, ``triton_codec.py`` (kernels, imported only when used). This package is a
leaf: it takes tensors and returns tensors, imports nothing else from islands_kit, and Triton only on the first call
that runs a kernel.
"""
from .dispatch import BACKENDS, ENV_VAR, KernelBackendError, available, requested_backend, set_backend, use_triton
from .ops import codec_dequantize, codec_quantize_ef, grouped_mm, mx_qdq

__all__ = [
    "BACKENDS", "ENV_VAR", "KernelBackendError", "available", "requested_backend", "set_backend", "use_triton",
    "grouped_mm", "mx_qdq", "codec_quantize_ef", "codec_dequantize",
]
