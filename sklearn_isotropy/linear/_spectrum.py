"""The spectrum of a fitted covariance, shared by whitening and NATSV.

Eigenpairs largest first with deterministic signs, from the ``d x d``
covariance (:func:`_sorted_eigh`) or, with fewer kept rows than features,
from the rows themselves (:func:`_dual_spectrum`); and the number of
directions the data actually span (:func:`_numerical_rank`). Both forms give
the same components, so an estimator fitted on the same statistics gives
the same map whichever form its moments are in.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from sklearn.utils.extmath import svd_flip

from ._moments import MomentAccumulator


def _sorted_eigh(cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of a symmetric matrix, largest first, with deterministic signs."""
    # LAPACK syevd (divide and conquer); scipy's wrapper is about 10% faster
    # than numpy's on a 768 x 768 covariance
    evals, evecs = linalg.eigh(cov, driver="evd", check_finite=False)
    return evals[::-1], _fix_signs(evecs[:, ::-1])


def _fix_signs(vectors: np.ndarray) -> np.ndarray:
    """Make the entry of largest magnitude of every column positive.

    An eigenvector is defined up to its sign, and LAPACK's choice depends on
    the routine and the input's round-off. Two fits on the same statistics,
    primal (eigenvectors of the covariance) or dual (right singular vectors
    of the rows), then give the same components, and so the same map.
    scikit-learn's ``svd_flip`` makes the same choice for PCA (on a copy:
    the input is left as it is).
    """
    if not vectors.size:
        return vectors
    flipped, _ = svd_flip(np.array(vectors, copy=True), None)
    return flipped


def _numerical_rank(
    evals: np.ndarray, n_nonzero: int, shrunk: bool, n_features: int | None = None
) -> int:
    """Directions the data actually span: eigenvalues above round-off level.

    The tolerance is the one of the ``n_features x n_features`` eigenproblem
    (``n_features * eps`` relative to the largest eigenvalue), also for the
    dual form, so both forms keep the same directions.
    """
    top = evals[0] if evals.size else 0.0
    if top <= 0:
        return 0
    size = evals.size if n_features is None else max(n_features, evals.size)
    tol = top * size * np.finfo(np.float64).eps
    rank = int(np.count_nonzero(evals > tol))
    if not shrunk:
        # n centred rows span at most n - 1 directions
        rank = min(rank, n_nonzero - 1)
    return rank


def _dual_spectrum(
    moments: MomentAccumulator, *, center: bool = True, ddof: int = 1
) -> tuple[np.ndarray, np.ndarray, int]:
    """Spectrum of the covariance from the kept rows (the dual form).

    With ``Y`` the ``m x d`` centred, weighted rows (``m < d``), the
    covariance is ``Y.T @ Y / (sw - ddof)``; its nonzero eigenpairs come from
    the thin SVD ``Y = U S V^T``: eigenvalues ``S**2 / (sw - ddof)`` and
    eigenvectors the columns of ``V``, in ``O(m**2 d)`` time and ``O(m d)``
    memory, never a ``d x d`` matrix. The SVD of ``Y`` is also more accurate
    than an eigendecomposition of ``Y.T @ Y``. Returns ``(evals, V, e)``
    with the eigenvalues in units of ``4**e``, largest first.
    """
    Y, e = moments.scaled_rows(center=center)
    denom = moments.sum_weights - ddof if center else moments.sum_weights
    if not Y.size:
        return np.zeros(0), np.zeros((moments.n_features, 0)), 0
    _, sv, Vt = np.linalg.svd(Y, full_matrices=False)
    return sv**2 / denom, _fix_signs(Vt.T), e
