"""The spectrum of a fitted covariance, shared by whitening and NATSV.

Eigenpairs largest first with deterministic signs, from the ``d x d``
covariance (:func:`~sklearn_isotropy._utils.sorted_eigh`, which the other
families share) or, with fewer kept rows than features, from the rows
themselves (:func:`_dual_spectrum`); and the number of directions the data
actually span (:func:`_numerical_rank`), above the round-off of the
eigenproblem and of the input rows (:func:`_spectrum_tolerance`). Both
forms give the same components, so an estimator fitted on the same
statistics gives the same map whichever form its moments are in.
"""

from __future__ import annotations

import math

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


def _rounding_floor(moments: MomentAccumulator, e: int, *, center: bool) -> float:
    """Variance the input's rounding can put into one direction, in units of ``4**e``.

    Rows stored in float32 (or float16) were rounded entry by entry to
    relative precision ``eps``, each with its own mean included: an entry
    ``x_ij`` is off by at most ``eps * |x_ij| / 2``, a rounding variance of
    at most ``eps**2 * x_ij**2 / 12``. The errors of different entries are
    independent, so their covariance is diagonal: feature ``j`` receives at
    most ``eps**2 * q_j / 12``, with ``q_j = sum_i w_i x_ij**2 / (sum_w -
    ddof)`` its mean square, and no direction receives more than the
    largest ``q_j`` does. The sample covariance of ``n`` rows of such noise
    spreads its eigenvalues up to ``(1 + sqrt(d / n))**2`` times that
    (Marchenko-Pastur), which the factor 12 covers for ``n >= d / 6`` and
    the floor includes for fewer rows. The floor is thus ``eps**2 * max_j
    q_j * (1 + sqrt(d / n))**2``, capped by ``eps**2 * sum_j q_j``, the
    worst case of all the rounding aligned in one direction (Weyl's bound
    on the Frobenius norm of the error, the floor used before; about ``d``
    times what one direction receives). ``eps`` is the rows' weighted root
    mean square (:attr:`MomentAccumulator.input_eps_rms`), so a float16
    batch counts with its share of the weight. ``center=False``: the
    uncentred second moment, divided by ``sum_w``.
    """
    sw = moments.sum_weights
    var, ev = moments.scaled_variances()  # population variances, in 4**ev
    with np.errstate(over="ignore", under="ignore"):
        m = unscale(moments.mean, -e)
        q = unscale(var, 2 * (ev - e)) + m * m
    if center:
        q = q * (sw / (sw - 1.0))
    d, n = moments.n_features, max(moments.n_nonzero, 1)
    aligned = float(np.sum(q))
    one_direction = float(np.max(q)) * (1.0 + math.sqrt(d / n)) ** 2
    return moments.input_eps_rms**2 * min(aligned, one_direction)


def _spectrum_tolerance(
    evals: np.ndarray, e: int, moments: MomentAccumulator, *, center: bool = True
) -> float:
    """Round-off level of the eigenvalues ``evals`` (in units of ``4**e``).

    ``evals`` (largest first) are those of the covariance (``ddof=1``) of
    the rows of ``moments``, or with ``center=False`` of their second
    moment. Two round-offs limit what they resolve, and the larger applies:
    the float64 eigenproblem's (:func:`_eigen_tolerance`) and the input's
    (:func:`_rounding_floor`), which for float64 rows is below the first
    but for a mean some 1e8 times the spread. An eigenvalue at or below it
    may be round-off alone: :func:`_numerical_rank` does not count it. In
    standard deviations the spectrum is resolved to ``sqrt(tolerance)``,
    which also sets how closely ``noise_variance="auto"`` tells eigenvalues
    apart from the largest (``_whitening._auto_noise_variance``).
    """
    if not evals.size or evals[0] <= 0:
        return 0.0
    return max(
        _eigen_tolerance(evals, moments.n_features),
        _rounding_floor(moments, e, center=center),
    )


def _numerical_rank(
    evals: np.ndarray,
    tolerance: float,
    moments: MomentAccumulator,
    *,
    center: bool = True,
    shrunk: bool = False,
) -> int:
    """Directions the data actually span: eigenvalues above ``tolerance``.

    ``tolerance`` is :func:`_spectrum_tolerance` of the same ``evals``: an
    eigenvalue at or below it may be round-off alone (the rule of
    :func:`numpy.linalg.matrix_rank`, singular values below the data's
    round-off, with the data's own epsilon). Without shrinkage, ``n`` rows
    of positive weight span at most ``n - 1`` directions about their mean
    (``n`` uncentred).
    """
    if not evals.size or evals[0] <= 0:
        return 0
    rank = int(np.count_nonzero(evals > tolerance))
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
