"""Eigenpairs of a symmetric matrix, and the effective rank of a spectrum.

The families that read a spectrum share these: the linear estimators
(``linear/_spectrum.py`` adds what they need of the moments), the static
vectorizer's Zipfian whitening of its table, and the anisotropy
diagnostics.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from sklearn.utils.extmath import svd_flip


def sorted_eigh(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of a symmetric matrix, largest first, with deterministic signs."""
    # LAPACK syevd (divide and conquer), through scipy's wrapper rather than
    # numpy's: a measured choice (benchmarks/README.md, "Choices measured
    # once")
    evals, evecs = linalg.eigh(matrix, driver="evd", check_finite=False)
    return evals[::-1], fix_signs(evecs[:, ::-1])


def fix_signs(vectors: np.ndarray) -> np.ndarray:
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


def spectrum_effective_rank(spectrum: np.ndarray) -> float:
    """Effective rank of a matrix from its singular values (Roy and Vetterli).

    ``exp(H(p))``, ``H`` the Shannon entropy of ``p = spectrum /
    sum(spectrum)``: the number of equally strong directions that would
    spread the total as evenly. Roy and Vetterli (2007) define it on a
    matrix's singular values. The package measures the covariance matrix
    of the rows, whose singular values are its eigenvalues, the squared
    singular values of the centred rows over ``n - 1`` (the scale cancels),
    so callers pass those: ``WhiteningTransformer(noise_variance="auto")``
    its covariance eigenvalues, :func:`~sklearn_isotropy.diagnostics.\
effective_rank` the squared singular values of the centred rows.

    Parameters
    ----------
    spectrum : ndarray of shape (n,)
        Non-negative values; zeros add nothing.

    Returns
    -------
    rank : float
        Between 1 and the number of positive values; 0.0 when there are
        none.
    """
    total = np.sum(spectrum)
    if not total > 0:
        return 0.0
    p = spectrum / total
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))
