"""Matrix functions for Shampoo: inverse p-th roots of symmetric positive semi-definite matrices.

Shampoo (Gupta, Koren & Singer 2018; Distributed Shampoo, Shi et al. 2023) preconditions a gradient block G with
``L^{-1/p} G R^{-1/p}`` where ``L = sum G G^T`` and ``R = sum G^T G`` are the Kronecker factors. Both factors are
symmetric PSD, so the root is taken through the eigendecomposition ``A = Q diag(lambda) Q^T``:

    A^{-1/p} = Q diag((max(lambda, 0) + epsilon)^{-1/p}) Q^T

``epsilon`` (the paper's regulariser, ``epsilon * I`` added to the factor) keeps the root finite on rank-deficient and
ill-conditioned factors; eigenvalues that rounding pushed below zero are clamped to zero first. The decomposition runs
in ``dtype`` (float64 by default: the factors of a language model reach condition numbers of 1e12 and more, and float32
eigenvectors lose the small end of such a spectrum).

Everything here is a pure function of its inputs; the optimizer (``shampoo.py``) owns the state. All functions accept a
batch of matrices ``(..., n, n)`` so that same-sized blocks are decomposed in one ``torch.linalg.eigh`` call.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["matrix_inverse_root", "matrix_inverse_root_reference", "inverse_roots_or_previous"]


def _check_args(A: Tensor, root: float, epsilon: float) -> None:
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"A: must be a square matrix or a batch of them (..., n, n) (got shape {tuple(A.shape)})")
    if not root > 0:
        raise ValueError(f"root: must be > 0 (got {root!r})")
    if not epsilon >= 0:
        raise ValueError(f"epsilon: must be >= 0 (got {epsilon!r})")


def matrix_inverse_root(A: Tensor, root: float, epsilon: float, dtype: torch.dtype = torch.float64) -> Tensor:
    """Return ``A^{-1/root}`` for a symmetric PSD matrix or batch ``A`` of shape ``(..., n, n)``.

    Args:
        A: symmetric PSD matrix/matrices (a Shampoo factor L or R). Asymmetry from rounding is removed by using
            ``(A + A^T) / 2``.
        root: p in ``A^{-1/p}`` (Shampoo uses p = 2 * order = 4 for each factor of a matrix).
        epsilon: regulariser added to the (clamped) eigenvalues, i.e. the root of ``A + epsilon * I``.
        dtype: precision of the eigendecomposition (float64 recommended); the result is cast back to ``A.dtype``.

    Raises whatever ``torch.linalg.eigh`` raises when it fails to converge; callers that must not fail use
    :func:`inverse_roots_or_previous`.
    """
    _check_args(A, root, epsilon)
    X = A.to(dtype)
    X = 0.5 * (X + X.mT)  # (..., n, n), exactly symmetric
    lam, Q = torch.linalg.eigh(X)  # lam (..., n) ascending, Q (..., n, n) eigenvectors in columns
    lam = lam.clamp_min(0.0) + epsilon
    # Q diag(lam^{-1/p}) Q^T without forming the diagonal matrix: scale the columns of Q.
    out = (Q * lam.pow(-1.0 / root).unsqueeze(-2)) @ Q.mT
    return out.to(A.dtype)


def matrix_inverse_root_reference(A: Tensor, root: float, epsilon: float) -> Tensor:
    """Plain reference for one matrix: NumPy float64 ``eigh`` and an explicit diagonal, looped over any batch dims."""
    import numpy as np

    _check_args(A, root, epsilon)
    flat = A.detach().to(torch.float64).reshape(-1, A.shape[-1], A.shape[-1]).cpu().numpy()
    outs = []
    for a in flat:
        lam, q = np.linalg.eigh(0.5 * (a + a.T))
        outs.append(q @ np.diag((np.maximum(lam, 0.0) + epsilon) ** (-1.0 / root)) @ q.T)
    return torch.from_numpy(np.stack(outs)).reshape(A.shape).to(A.dtype)


def inverse_roots_or_previous(
    factors: Tensor, previous: Tensor, root: float, epsilon: float, dtype: torch.dtype = torch.float64
) -> tuple[Tensor, int]:
    """Inverse roots of a batch of factors ``(b, n, n)``, keeping ``previous[i]`` wherever matrix i fails.

    A matrix fails when its factor holds a non-finite value, when ``eigh`` raises on it, or when its root comes out
    non-finite. The whole batch is tried in one ``eigh`` call first; only if that raises is it retried one matrix at a
    time, so that one bad block does not discard the roots of the others.

    Returns ``(roots, n_failed)`` with ``roots`` a new tensor shaped like ``previous``.
    """
    if factors.ndim != 3 or previous.shape != factors.shape:
        raise ValueError(f"factors/previous: must both be (b, n, n) with equal shapes (got {tuple(factors.shape)} and {tuple(previous.shape)})")
    finite_in = torch.isfinite(factors).all(dim=-1).all(dim=-1)  # (b,)
    safe = torch.where(finite_in[:, None, None], factors, torch.zeros_like(factors))
    try:
        roots = matrix_inverse_root(safe, root, epsilon, dtype)
    except Exception:  # eigh did not converge on some matrix: isolate it
        rows = []
        for i in range(safe.shape[0]):
            try:
                rows.append(matrix_inverse_root(safe[i], root, epsilon, dtype))
            except Exception:
                rows.append(torch.full_like(previous[i], float("nan")))  # marked failed below
        roots = torch.stack(rows)
    ok = finite_in & torch.isfinite(roots).all(dim=-1).all(dim=-1)  # (b,)
    roots = torch.where(ok[:, None, None], roots, previous)
    return roots, int((~ok).sum())
