"""SN: per-dimension standardisation of embeddings (the BERT-flow paper's baseline)."""

from __future__ import annotations

import numpy as np
from sklearn.base import OneToOneFeatureMixin

from ._base import (
    LinearMap,
    _constant_features,
    _MapAttribute,
    _StreamingMomentsMixin,
)
from ._moments import MomentAccumulator
from ._scatter_kernels import unscale

__all__ = ["StandardNormalizer"]


class StandardNormalizer(OneToOneFeatureMixin, _StreamingMomentsMixin):
    """Standardise every embedding dimension: subtract its mean, divide by its std.

    The SN baseline of the BERT-flow paper. Numerically it is
    :class:`sklearn.preprocessing.StandardScaler` (population variance,
    ``ddof=0``; constant dimensions are left unscaled instead of divided by
    zero), computed with the package's exact mergeable accumulator in its
    ``O(n_features)`` diagonal mode, so it streams with :meth:`partial_fit`
    and combines across workers like the other linear post-processors.
    Like StandardScaler's, its output columns keep the input's names.

    Parameters
    ----------
    with_mean : bool, default=True
        Subtract the per-dimension mean.
    with_std : bool, default=True
        Divide by the per-dimension standard deviation.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,) or None
        Per-dimension weighted mean; None when both ``with_mean`` and
        ``with_std`` are False.
    var_ : ndarray of shape (n_features,) or None
        Per-dimension weighted variance (``ddof=0``); None when
        ``with_std=False``.
    scale_ : ndarray of shape (n_features,) or None
        Divisor of each dimension: the standard deviation, or 1 for
        dimensions constant up to round-off (see Notes); None when
        ``with_std=False``.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during fit, when ``X`` has string column names.
    n_samples_seen_ : int
        Rows seen by ``fit`` / ``partial_fit``.
    moments_ : MomentAccumulator
        Streamed count, mean and per-dimension scatter (float64, in host
        memory whatever the array namespace of the input).

    See Also
    --------
    sklearn.preprocessing.StandardScaler : The same map, also for sparse input.
    WhiteningTransformer : Decorrelate the dimensions as well.

    Notes
    -----
    A dimension counts as constant, and keeps the scale 1, when its spread
    is at the round-off level of the rows, ``std_j <= eps * sqrt(sum_k
    var_k)`` with ``eps`` the machine epsilon of the rows' dtype (float32's
    for float32 rows): an embedding's coordinates come out of sums over the
    whole row (matrix products, normalisations, pooling), whose round-off
    scales with the row, not with the coordinate. Mean pooling leaves such
    dimensions (all-MiniLM-L6-v2 has two at 1e-32 and one at 2e-9, against
    a median of 0.27); divided by their spread they would put round-off at
    unit variance in every row. The rows' scale is that of the centred
    rows, since an offset shared by every row is rounded per entry: a
    dimension also counts as constant when its spread is below the rounding
    of its own values, ``eps * |mean_j|``, or by StandardScaler's rule.
    Standardising before :class:`WhiteningTransformer` therefore no longer
    turns them into directions of unit variance.

    References
    ----------
    .. [1] B. Li, H. Zhou, J. He, M. Wang, Y. Yang, L. Li, "On the Sentence
       Embeddings from Pre-trained Language Models", EMNLP 2020.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy import StandardNormalizer
    >>> X = np.array([[0.0, 5.0], [2.0, 5.0], [4.0, 5.0]])
    >>> StandardNormalizer().fit_transform(X)
    array([[-1.22...,  0. ],
           [ 0.    ,  0. ],
           [ 1.22...,  0. ]])
    """

    _parameter_constraints: dict = {
        "with_mean": ["boolean"],
        "with_std": ["boolean"],
    }

    _moments_kind = "diag"

    def __init__(self, *, with_mean=True, with_std=True) -> None:
        self.with_mean = with_mean
        self.with_std = with_std

    # the attributes of the map (computed at first read after partial_fit)
    mean_ = _MapAttribute()
    var_ = _MapAttribute()
    scale_ = _MapAttribute()

    def _compute_map(self, moments: MomentAccumulator, params: dict) -> dict:
        mean = moments.mean.copy()
        var_s, e = moments.scaled_variances()
        # a feature constant up to round-off keeps its scale (1): dividing by
        # its spread would give round-off unit variance in every row
        constant = _constant_features(moments)
        std = np.sqrt(var_s)
        scale = np.where(constant | (std == 0), 1.0, unscale(std, e))
        with_mean, with_std = params["with_mean"], params["with_std"]
        return {
            "mean_": mean if (with_mean or with_std) else None,
            "var_": unscale(var_s, 2 * e) if with_std else None,
            "scale_": scale if with_std else None,
        }

    def _linear_map(self) -> LinearMap:
        center = self.mean_ if self.with_mean else None
        if self.with_std:
            return LinearMap(center, "divide", self.scale_)
        return LinearMap(center, "identity")

    def _inverse_map(self) -> LinearMap:
        center = self.mean_ if self.with_mean else None
        if self.with_std:
            return LinearMap(center, "multiply", self.scale_)
        return LinearMap(center, "identity")

    @property
    def _n_features_out(self):
        return self.n_features_in_
