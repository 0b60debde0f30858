"""Inverse p-th roots (islands_kit.optim.matrix_functions) on matrices with known spectra."""
from __future__ import annotations

import pytest
import torch

from islands_kit.optim.matrix_functions import (
    inverse_roots_or_previous,
    matrix_inverse_root,
    matrix_inverse_root_reference,
)


def _known(lam: torch.Tensor, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A = Q diag(lam) Q^T with a random orthogonal Q (float64); returns (A, Q)."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(len(lam), len(lam), generator=g, dtype=torch.float64))
    return (Q * lam) @ Q.T, Q


@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_root_matches_known_spectrum_and_round_trips(p: int) -> None:
    lam = torch.logspace(-2, 2, 12, dtype=torch.float64)
    A, Q = _known(lam)
    X = matrix_inverse_root(A, p, epsilon=0.0)
    torch.testing.assert_close(X, (Q * lam.pow(-1.0 / p)) @ Q.T, rtol=1e-10, atol=1e-10)
    # (A^{-1/p})^p A = I
    eye = torch.eye(12, dtype=torch.float64)
    torch.testing.assert_close(torch.linalg.matrix_power(X, p) @ A, eye, rtol=0, atol=1e-9)


def test_inverse_square_root_whitens() -> None:
    A, _ = _known(torch.linspace(0.5, 3.0, 9, dtype=torch.float64), seed=1)
    X = matrix_inverse_root(A, 2, epsilon=0.0)
    torch.testing.assert_close(X @ A @ X, torch.eye(9, dtype=torch.float64), rtol=0, atol=1e-12)


def test_batched_equals_numpy_reference_and_keeps_dtype() -> None:
    g = torch.Generator().manual_seed(2)
    G = torch.randn(5, 7, 3, generator=g)
    A = G @ G.mT  # (5, 7, 7) rank 3: rank-deficient, float32
    X = matrix_inverse_root(A, 4, epsilon=1e-6)
    assert X.dtype == torch.float32 and X.shape == (5, 7, 7)
    torch.testing.assert_close(X, matrix_inverse_root_reference(A, 4, epsilon=1e-6), rtol=1e-4, atol=1e-3)
    # batched == one at a time
    torch.testing.assert_close(X, torch.stack([matrix_inverse_root(a, 4, 1e-6) for a in A]), rtol=1e-6, atol=1e-5)


def test_ill_conditioned_stays_finite_and_accurate() -> None:
    lam = torch.logspace(-6, 6, 16, dtype=torch.float64)  # condition number 1e12
    A, Q = _known(lam, seed=3)
    X = matrix_inverse_root(A, 4, epsilon=1e-12)
    assert torch.isfinite(X).all()
    expected = (Q * (lam + 1e-12).pow(-0.25)) @ Q.T
    # entries near zero carry the eigenvectors' rounding (LAPACK's path differs by CPU): within 1e-5 of the largest
    # entry, far inside the cond * eps = 2e-4 a float64 eigendecomposition of this matrix may lose
    torch.testing.assert_close(X, expected, rtol=1e-6, atol=1e-5 * expected.abs().max().item())
    # float32 input, float64 decomposition (the optimizer's path): still finite and symmetric positive definite
    X32 = matrix_inverse_root(A.float(), 4, epsilon=1e-12)
    assert torch.isfinite(X32).all()
    assert torch.linalg.eigvalsh(X32.double()).min() > 0


def test_rank_deficient_gets_epsilon_on_the_null_space() -> None:
    lam = torch.tensor([0.0, 0.0, 0.0, 0.1, 0.5, 1.0], dtype=torch.float64)
    A, Q = _known(lam, seed=4)
    eps = 1e-8
    X = matrix_inverse_root(A, 4, epsilon=eps)
    assert torch.isfinite(X).all()
    torch.testing.assert_close(X, (Q * (lam + eps).pow(-0.25)) @ Q.T, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(matrix_inverse_root(torch.zeros(4, 4), 4, epsilon=1e-12)).all()


def test_failure_keeps_previous_and_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    A = torch.stack([_known(torch.linspace(1, 2, 4, dtype=torch.float64), seed=s)[0].float() for s in range(3)])
    prev = torch.full((3, 4, 4), 7.0)
    A_bad = A.clone()
    A_bad[1, 0, 0] = float("nan")  # non-finite factor
    roots, failed = inverse_roots_or_previous(A_bad, prev, 4, 1e-12)
    assert failed == 1 and torch.equal(roots[1], prev[1])
    torch.testing.assert_close(roots[[0, 2]], matrix_inverse_root(A[[0, 2]], 4, 1e-12))

    real_eigh = torch.linalg.eigh

    def eigh_fails_on_matrix_2(X: torch.Tensor):  # raises on any batch that contains matrix 2
        if X.ndim == 3 or torch.allclose(X, A[2].to(X.dtype)):
            raise torch.linalg.LinAlgError("forced failure")
        return real_eigh(X)

    monkeypatch.setattr(torch.linalg, "eigh", eigh_fails_on_matrix_2)
    roots, failed = inverse_roots_or_previous(A, prev, 4, 1e-12)
    assert failed == 1 and torch.equal(roots[2], prev[2]) and not torch.equal(roots[0], prev[0])

    def eigh_always_fails(X: torch.Tensor):
        raise RuntimeError("forced failure")

    monkeypatch.setattr(torch.linalg, "eigh", eigh_always_fails)
    roots, failed = inverse_roots_or_previous(A, prev, 4, 1e-12)
    assert failed == 3 and torch.equal(roots, prev)


@pytest.mark.parametrize("kwargs, name", [
    (dict(A=torch.zeros(3, 4), root=4, epsilon=1e-12), "A"),
    (dict(A=torch.eye(3), root=0, epsilon=1e-12), "root"),
    (dict(A=torch.eye(3), root=4, epsilon=-1.0), "epsilon"),
])
def test_bad_arguments_raise(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        matrix_inverse_root(**kwargs)
