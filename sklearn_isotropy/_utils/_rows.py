"""Row normalisation that cannot overflow."""

from __future__ import annotations

import numpy as np


def normalize_rows(X, *, dtype=np.float64):
    """Scale each row of ``X`` to unit L2 norm; rows of zeros stay zero.

    Each row is first divided by its largest absolute entry, so the squares
    in the norm cannot overflow even for entries near the top of the float
    range (the norm of ``[1e200, 1e200]`` is finite here, ``inf`` in a plain
    ``np.linalg.norm``). Cosine similarity is scale invariant, so this is
    exact up to round-off.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Finite rows.
    dtype : numpy dtype, default=float64
        Dtype of the result (the computation is done in it).

    Returns
    -------
    U : ndarray of shape (n_samples, n_features)
        Unit-norm rows (zero rows unchanged), a new array.
    zero : ndarray of bool of shape (n_samples,)
        Which rows were all zeros.
    """
    X = np.asarray(X, dtype=dtype)
    scale = np.max(np.abs(X), axis=1, keepdims=True) if X.shape[1] else None
    if scale is None:
        return X.copy(), np.ones(X.shape[0], dtype=bool)
    zero = scale[:, 0] == 0
    U = X / np.where(zero[:, None], 1.0, scale).astype(dtype, copy=False)
    norms = np.linalg.norm(U, axis=1, keepdims=True)
    U /= np.where(norms == 0, 1.0, norms).astype(dtype, copy=False)
    return U, zero
