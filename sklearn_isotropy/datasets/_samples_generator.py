"""Synthetic anisotropic embeddings, for tests, benchmarks and examples."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils import check_random_state

from .._utils._sklearn import Interval, validate_params

__all__ = ["make_cone"]


@validate_params(
    {
        "n_samples": [Interval(Integral, 1, None, closed="left")],
        "n_features": [Interval(Integral, 1, None, closed="left")],
        "spread": ["array-like"],
        "offset": [Interval(Real, None, None, closed="neither"), "array-like"],
        "rotate": ["boolean"],
        "random_state": ["random_state", np.random.Generator],
    },
    prefer_skip_nested_validation=True,
)
def make_cone(
    n_samples: int = 100,
    n_features: int = 10,
    *,
    spread: ArrayLike = (10.0, 0.1),
    offset: float | ArrayLike = 4.0,
    rotate: bool = True,
    random_state: int | np.random.RandomState | np.random.Generator | None = None,
) -> np.ndarray:
    """Generate anisotropic embeddings: a Gaussian cloud far from the origin.

    Raw sentence embeddings crowd into a narrow cone: they share a large
    common offset, and a few directions carry most of their variance. These
    rows have both: a Gaussian with standard deviations ``spread`` along its
    principal axes (in a random orthogonal basis with `rotate`), shifted by
    ``offset``. The closer the offset and the steeper the spread, the
    narrower the cone (the mean cosine of random pairs tends to 1).

    Parameters
    ----------
    n_samples : int, default=100
        Number of rows.
    n_features : int, default=10
        Number of columns.
    spread : array-like of shape (2,) or (n_features,), default=(10.0, 0.1)
        Standard deviations along the principal axes, all positive: two
        values run geometrically from the first axis's to the last's
        (``numpy.geomspace(*spread, n_features)``); ``n_features`` values
        are the axes' own.
    offset : float or array-like of shape (n_features,), default=4.0
        The rows' common offset (their mean). A float draws it at random,
        ``offset * N(0, I)``, so that its norm is about
        ``offset * sqrt(n_features)``; an array is the offset itself.
    rotate : bool, default=True
        Turn the principal axes into a random orthogonal basis, so that no
        coordinate is special; False keeps them along the coordinates (no
        ``n_features x n_features`` matrix is drawn, for wide data).
    random_state : int, RandomState instance, Generator or None, default=None
        Seed of the draws. A :class:`numpy.random.Generator` is drawn from
        as it is: the next draws of the caller's generator continue after
        these.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        The rows, float64.

    See Also
    --------
    sklearn.datasets.make_blobs : Isotropic Gaussian clusters.
    sklearn_isotropy.diagnostics.anisotropy_report : Measures of the cone.

    Notes
    -----
    The draws come in a fixed order: the standard normal rows (scaled by
    the spread), then the basis of `rotate` (the Q factor of a Gaussian
    matrix), then a random offset. With ``rotate=False`` and an array
    `offset`, ``make_cone(n, d, spread=s, offset=m, rotate=False,
    random_state=rng)`` is ``rng.normal(size=(n, d)) * s + m``.

    Examples
    --------
    >>> from sklearn_isotropy import WhiteningTransformer
    >>> from sklearn_isotropy.datasets import make_cone
    >>> from sklearn_isotropy.diagnostics import mean_pair_cosine
    >>> X = make_cone(n_samples=1000, n_features=8, spread=(3.0, 0.1), random_state=0)
    >>> X.shape
    (1000, 8)
    >>> round(mean_pair_cosine(X, random_state=0), 1)  # a narrow cone
    0.9
    >>> Z = WhiteningTransformer().fit_transform(X)
    >>> round(abs(mean_pair_cosine(Z, random_state=0)), 1)  # no cone left
    0.0
    """
    spread = np.asarray(spread, dtype=np.float64)
    if spread.ndim != 1 or spread.size not in (2, n_features):
        raise ValueError(
            f"spread must hold 2 values (the first and last axis's standard "
            f"deviation) or n_features={n_features} (each axis's); got shape "
            f"{spread.shape}"
        )
    if not (np.isfinite(spread).all() and (spread > 0).all()):
        raise ValueError(
            f"spread must hold positive finite standard deviations; got {spread}"
        )
    if spread.size != n_features:  # two values: geometric from first to last
        spread = np.geomspace(spread[0], spread[1], n_features)
    if not isinstance(offset, Real):
        offset = np.asarray(offset, dtype=np.float64)
        if offset.shape != (n_features,) or not np.isfinite(offset).all():
            raise ValueError(
                f"an array offset is the rows' mean: {n_features} finite values "
                f"(n_features); got shape {offset.shape}. Pass a float to draw "
                "one at random"
            )
    rng = (
        random_state
        if isinstance(random_state, np.random.Generator)
        else check_random_state(random_state)
    )
    X = rng.normal(size=(n_samples, n_features)) * spread
    if rotate:
        basis, _ = np.linalg.qr(rng.normal(size=(n_features, n_features)))
        X = X @ basis.T
    if isinstance(offset, Real):
        offset = offset * rng.normal(size=n_features)
    return X + offset
