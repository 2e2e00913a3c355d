"""Row normalisation that cannot overflow."""

from __future__ import annotations

import numpy as np


def normalize_rows(X, *, dtype=np.float64):
    """Return ``(U, zero)``: the rows of ``X`` at unit L2 norm, and the zero rows.

    ``U`` is a new array in ``dtype`` (rows of zeros stay zero); ``zero`` says
    which rows were all zeros.

    Each row is first divided by its largest absolute entry, so the squares
    in the norm cannot overflow (the norm of ``[1e200, 1e200]`` is finite
    here, ``inf`` in ``np.linalg.norm``).
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
