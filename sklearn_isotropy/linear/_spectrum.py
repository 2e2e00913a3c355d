"""The spectrum of a fitted covariance, shared by whitening and NATSV.

Eigenpairs largest first with deterministic signs, from the ``d x d``
covariance (:func:`~sklearn_isotropy._utils.sorted_eigh`, which the other
families share) or, with fewer kept rows than features, from the rows
themselves (:func:`_dual_spectrum`); and the number of directions the data
actually span (:func:`_numerical_rank`), above the round-off of the
eigenproblem and of the input rows. Both forms give the same components, so
an estimator fitted on the same statistics gives the same map whichever
form its moments are in.
"""

from __future__ import annotations

import numpy as np

from .._utils import fix_signs
from ._moments import MomentAccumulator
from ._scatter_kernels import unscale


def _eigen_tolerance(evals: np.ndarray, n_features: int) -> float:
    """Round-off of the eigenvalues of an ``n_features x n_features`` problem.

    ``n_features * eps`` (float64's) relative to the largest eigenvalue, also
    for the dual form, so both forms keep the same directions. Eigenvalues
    closer than this to each other, or to 0, cannot be told apart.
    """
    top = float(evals[0]) if evals.size else 0.0
    return max(top, 0.0) * max(n_features, evals.size) * np.finfo(np.float64).eps


def _numerical_rank(
    evals: np.ndarray,
    e: int,
    moments: MomentAccumulator,
    *,
    center: bool = True,
    shrunk: bool = False,
) -> int:
    """Directions the data actually span: eigenvalues above round-off level.

    ``evals`` (largest first, in units of ``4**e``) are those of the
    covariance (``ddof=1``) of the rows of ``moments``, or with
    ``center=False`` of their second moment. Two round-offs limit what they
    resolve, and the larger tolerance applies:

    - the float64 eigenproblem's (:func:`_eigen_tolerance`);
    - the input's: rows stored in float32 (or float16) were rounded to
      relative precision ``eps = moments.input_eps`` before they reached the
      float64 statistics, and the rounding is relative to the stored values,
      the mean included. That perturbs the weighted rows by at most ``eps *
      ||X||_F``, which by Weyl's inequality moves every singular value of the
      centred rows by as much: an eigenvalue below ``eps**2 * sum_i w_i
      ||x_i||**2 / (sum_w - ddof)`` may be rounding alone. It is the rule of
      :func:`numpy.linalg.matrix_rank` (singular values below the data's
      ``eps`` times their scale), with the scale of the uncentred rows,
      which is what float32 rounds. For float64 rows it is below the first
      but for a mean some 1e8 times the spread.

    Without shrinkage, ``n`` rows of positive weight span at most ``n - 1``
    directions about their mean (``n`` uncentred).
    """
    if not evals.size or evals[0] <= 0:
        return 0
    # sum_i w_i ||x_i||**2 / (sum_w - ddof), in the units of evals: the trace
    # (the sum of the eigenvalues, which shrinkage keeps), plus the mean's
    # part for a centred covariance
    mean_square = float(np.sum(evals))
    if center:
        sw = moments.sum_weights
        with np.errstate(over="ignore"):
            m = unscale(moments.mean, -e)
            mean_square += sw / (sw - 1.0) * float(m @ m)
    tol = max(
        _eigen_tolerance(evals, moments.n_features),
        moments.input_eps**2 * mean_square,
    )
    rank = int(np.count_nonzero(evals > tol))
    if not shrunk:
        rank = min(rank, moments.n_nonzero - 1 if center else moments.n_nonzero)
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
    return sv**2 / denom, fix_signs(Vt.T), e
