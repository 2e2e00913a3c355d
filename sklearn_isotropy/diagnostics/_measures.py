"""Anisotropy measures of an embedding matrix."""

from __future__ import annotations

from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import logsumexp
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array

from .._utils import normalize_rows, spectrum_effective_rank
from .._utils._sklearn import Interval, validate_params

_SAMPLED_PAIRS = {
    "X": ["array-like"],
    "n_pairs": [Interval(Integral, 1, None, closed="left")],
    "random_state": ["random_state"],
}


def _check_X(X, min_samples=2):
    X = check_array(X, dtype=np.float64, ensure_min_samples=min_samples, input_name="X")
    return X


def _covariance_eigenvalues(X, *, relative=False):
    """Return the covariance eigenvalues of X (descending, >= 0), by SVD.

    With ``relative=True`` they are divided by the squared largest centred
    magnitude, which keeps ratios exact for data near the float limits.
    """
    Xc = X - X.mean(axis=0)
    scale = np.max(np.abs(Xc))
    if scale == 0:
        return np.zeros(min(X.shape))
    s = np.linalg.svd(Xc / scale, compute_uv=False)
    ev = (s**2) / (X.shape[0] - 1)
    return ev if relative else ev * scale**2


@validate_params(_SAMPLED_PAIRS, prefer_skip_nested_validation=True)
def pair_cosines(
    X: ArrayLike,
    *,
    n_pairs: int = 10_000,
    random_state: int | np.random.RandomState | None = None,
) -> np.ndarray:
    """Compute the cosine similarities of random pairs of distinct rows.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings, one per row; ``n_samples >= 2``.
    n_pairs : int, default=10_000
        Number of pairs ``(i, j)``, ``i != j``, drawn uniformly with
        replacement.
    random_state : int, RandomState instance or None, default=None
        Seed of the pair sampling.

    Returns
    -------
    cosines : ndarray of shape (n_pairs,)
        A pair containing a zero vector has cosine 0.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy.diagnostics import pair_cosines
    >>> pair_cosines(np.ones((5, 3)), n_pairs=4, random_state=0)
    array([1., 1., 1., 1.])
    """
    X = _check_X(X)
    rng = check_random_state(random_state)
    n = X.shape[0]
    i = rng.randint(n, size=n_pairs)
    j = (i + rng.randint(1, n, size=n_pairs)) % n  # uniform over j != i
    U, _ = normalize_rows(X)
    return np.clip(np.einsum("ij,ij->i", U[i], U[j]), -1.0, 1.0)


@validate_params(_SAMPLED_PAIRS, prefer_skip_nested_validation=True)
def mean_pair_cosine(
    X: ArrayLike,
    *,
    n_pairs: int = 10_000,
    random_state: int | np.random.RandomState | None = None,
) -> float:
    """Compute the mean cosine similarity of random pairs of distinct rows.

    About 0 for isotropic embeddings, close to 1 for embeddings crowded in a
    narrow cone (Ethayarajh, 2019, measures anisotropy this way).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings; ``n_samples >= 2``.
    n_pairs : int, default=10_000
        Number of random pairs.
    random_state : int, RandomState instance or None, default=None
        Seed of the pair sampling.

    Returns
    -------
    mean_cosine : float
        In [-1, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy.diagnostics import mean_pair_cosine
    >>> X = np.random.RandomState(0).normal(size=(500, 20))
    >>> abs(mean_pair_cosine(X, random_state=0)) < 0.05
    True
    >>> round(mean_pair_cosine(X + 10, random_state=0), 2)
    0.99
    """
    return float(np.mean(pair_cosines(X, n_pairs=n_pairs, random_state=random_state)))


@validate_params(
    {"X": ["array-like"], "normalize": ["boolean"]},
    prefer_skip_nested_validation=True,
)
def isotropy_score(X: ArrayLike, *, normalize: bool = False) -> float:
    """Compute the isotropy score I(W) of Mu & Viswanath (2018), in [0, 1].

    ``I(W) = min_c Z(c) / max_c Z(c)`` with the partition function
    ``Z(c) = sum_i exp(c . w_i)`` over the rows ``w_i`` of `X`, where `c`
    ranges over the eigenvectors of ``X.T @ X``. It is 1 when every direction
    carries the same mass and tends to 0 when the rows point one way.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings (not centred: a common offset is anisotropy too).
    normalize : bool, default=False
        Scale every row to unit norm first, to compare embeddings of different
        scale (``Z(c)`` is not scale-invariant); False is the original.

    Returns
    -------
    score : float
        In [0, 1]; never NaN (computed in log space).

    Notes
    -----
    Both ``c`` and ``-c`` are used for each eigenvector, so the value does
    not depend on the eigensolver's sign choice.

    References
    ----------
    .. [1] J. Mu and P. Viswanath, "All-but-the-Top: Simple and Effective
       Postprocessing for Word Representations", ICLR 2018.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy.diagnostics import isotropy_score
    >>> X = np.random.RandomState(0).normal(size=(2000, 5))
    >>> isotropy_score(X) > 0.8
    True
    >>> isotropy_score(X + 5) < 1e-6
    True
    """
    X = _check_X(X, min_samples=1)
    if normalize:
        X, _ = normalize_rows(X)
    scale = np.max(np.abs(X))
    if scale == 0:
        return 1.0
    _, _, vt = np.linalg.svd(X / scale, full_matrices=False)
    C = np.vstack([vt, -vt])  # eigenvectors of X^T X, both signs
    log_z = logsumexp(X @ C.T, axis=0)
    return float(np.exp(np.min(log_z) - np.max(log_z)))


@validate_params(
    {"X": ["array-like"], "center": ["boolean"]},
    prefer_skip_nested_validation=True,
)
def effective_rank(X: ArrayLike, *, center: bool = True) -> float:
    """Compute the effective rank of Roy & Vetterli (2007) of the covariance of `X`.

    ``exp(H(p))`` where ``p_k = lambda_k / sum(lambda)`` are the normalised
    eigenvalues of the covariance of `X` and ``H`` is the Shannon entropy.
    Roy and Vetterli define the effective rank of a matrix on its singular
    values; this is that of the covariance matrix, whose singular values are
    its eigenvalues, the squared singular values of the centred `X`. It is
    the rank at which ``WhiteningTransformer(noise_variance="auto")`` reads
    its noise floor, on the same rows. It lies between 1 (all variance in
    one direction) and ``min(n_samples, n_features)`` (a flat spectrum).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings.
    center : bool, default=True
        Subtract the column means first (the spread around the mean, not the
        offset, is measured). With ``False``, the second-moment matrix
        ``X.T @ X / n_samples`` takes the covariance's place.

    Returns
    -------
    erank : float
        1.0 for a matrix with a single non-zero singular value; 0.0 for a
        matrix with none (constant rows when centred).

    References
    ----------
    .. [1] O. Roy and M. Vetterli, "The effective rank: A measure of effective
       dimensionality", EUSIPCO 2007.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy.diagnostics import effective_rank
    >>> effective_rank(np.diag([1.0, 1.0, 1.0]), center=False)
    3.0
    >>> effective_rank(np.outer(np.arange(1.0, 6.0), [1.0, 2.0, 3.0]), center=False)
    1.0
    """
    X = _check_X(X, min_samples=1)
    if center:
        X = X - X.mean(axis=0)
    scale = np.max(np.abs(X))
    if scale == 0:
        return 0.0
    s = np.linalg.svd(X / scale, compute_uv=False)
    return spectrum_effective_rank(s**2)


@validate_params(
    {"X": ["array-like"], "n_components": [Interval(Integral, 1, None, closed="left")]},
    prefer_skip_nested_validation=True,
)
def top_component_variance_ratio(X: ArrayLike, *, n_components: int = 1) -> float:
    """Compute the share of the total variance in the top principal component(s).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings; ``n_samples >= 2``.
    n_components : int, default=1
        Number of leading components whose variance share is summed.

    Returns
    -------
    ratio : float
        In [0, 1]; about ``n_components / n_features`` for isotropic data,
        1 when all variance lies in one direction. 0.0 for constant data.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy.diagnostics import top_component_variance_ratio
    >>> X = np.random.RandomState(0).normal(size=(1000, 4)) * [10.0, 1.0, 1.0, 1.0]
    >>> round(top_component_variance_ratio(X), 2)
    0.97
    """
    X = _check_X(X)
    ev = _covariance_eigenvalues(X, relative=True)
    total = ev.sum()
    if total == 0:
        return 0.0
    return float(min(1.0, ev[:n_components].sum() / total))


@validate_params(_SAMPLED_PAIRS, prefer_skip_nested_validation=True)
def anisotropy_report(
    X: ArrayLike,
    *,
    n_pairs: int = 10_000,
    random_state: int | np.random.RandomState | None = None,
) -> dict:
    """Compute every anisotropy measure of an embedding matrix, in one dict.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings; ``n_samples >= 2``.
    n_pairs : int, default=10_000
        Random pairs for :func:`mean_pair_cosine`.
    random_state : int, RandomState instance or None, default=None
        Seed of the pair sampling.

    Returns
    -------
    report : dict
        ``mean_pair_cosine``, ``isotropy_score`` (of the unit-normalised rows,
        so that methods with different output scales compare),
        ``effective_rank``,
        ``top_component_variance_ratio`` (floats) and ``n_features`` (int).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy.diagnostics import anisotropy_report
    >>> report = anisotropy_report(np.random.RandomState(0).normal(size=(300, 8)))
    >>> sorted(report)  # doctest: +NORMALIZE_WHITESPACE
    ['effective_rank', 'isotropy_score', 'mean_pair_cosine', 'n_features',
     'top_component_variance_ratio']
    """
    X = _check_X(X)
    return {
        "mean_pair_cosine": mean_pair_cosine(
            X, n_pairs=n_pairs, random_state=random_state
        ),
        "isotropy_score": isotropy_score(X, normalize=True),
        "effective_rank": effective_rank(X),
        "top_component_variance_ratio": top_component_variance_ratio(X),
        "n_features": int(X.shape[1]),
    }
