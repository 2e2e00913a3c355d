"""NATSV / all-but-the-top: null away the top principal directions."""

from __future__ import annotations

from numbers import Integral

import numpy as np

from .._utils import sorted_eigh, warn
from .._utils._sklearn import Interval
from ..exceptions import RankDeficiencyWarning
from ._base import (
    LinearMap,
    _check_enough_samples,
    _MapAttribute,
    _StreamingMomentsMixin,
)
from ._moments import MomentAccumulator
from ._scatter_kernels import unscale
from ._spectrum import _dual_spectrum, _numerical_rank, _spectrum_tolerance

__all__ = ["NATSVTransformer"]


class NATSVTransformer(_StreamingMomentsMixin):
    """Null away the top principal directions of the embeddings.

    The BERT-flow paper's NATSV baseline ("nulling away the top-k singular
    vectors"): project every row onto the orthogonal complement of the
    ``n_components`` leading directions of the training rows. With
    ``center=True`` the mean is removed first and the directions are the
    principal axes of the covariance, which is "all-but-the-top" (Mu and
    Viswanath, 2018); with ``center=False`` they are the leading right
    singular vectors of the uncentred data. The output keeps the input
    width, in columns named ``natsv0``, ``natsv1``, ...

    Parameters
    ----------
    n_components : int, default=1
        Number of leading directions to remove (0 keeps every direction and
        only centres). Must not exceed ``n_features``.
    center : bool, default=True
        Subtract the mean before finding and removing the directions.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,) or None
        Mean of the training rows; None when ``center=False``.
    components_ : ndarray of shape (n_components, n_features)
        The removed directions, leading first.
    explained_variance_ : ndarray of shape (n_components,)
        Eigenvalues of the covariance (``center=True``) or of the
        uncentred second moment (``center=False``) along the removed
        directions.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during fit, when ``X`` has string column names.
    n_samples_seen_ : int
        Rows seen by ``fit`` / ``partial_fit``, including rows of weight 0.
    moments_ : MomentAccumulator
        Streamed count, mean and scatter; mergeable with another fit's
        (:meth:`MomentAccumulator.merge`).

    See Also
    --------
    WhiteningTransformer : Rescale every direction instead of removing some.

    Notes
    -----
    With fewer rows than features the directions come from the SVD of the
    ``n x d`` rows (dual form), never from a ``d x d`` matrix. As for every
    linear transformer here, :meth:`partial_fit` only merges statistics and
    the directions are computed at their first use afterwards.

    References
    ----------
    .. [1] B. Li, H. Zhou, J. He, M. Wang, Y. Yang, L. Li, "On the Sentence
       Embeddings from Pre-trained Language Models", EMNLP 2020.
    .. [2] J. Mu, P. Viswanath, "All-but-the-Top: Simple and Effective
       Postprocessing for Word Representations", ICLR 2018.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy import NATSVTransformer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 5)) * [10.0, 1.0, 1.0, 1.0, 1.0]
    >>> natsv = NATSVTransformer(n_components=1).fit(X)
    >>> Z = natsv.transform(X)
    >>> Z.shape
    (200, 5)
    >>> bool(np.abs(Z @ natsv.components_[0]).max() < 1e-10)
    True
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 0, None, closed="left")],
        "center": ["boolean"],
    }

    def __init__(self, n_components=1, *, center=True) -> None:
        self.n_components = n_components
        self.center = center

    # the attributes of the map (computed at first read after partial_fit)
    mean_ = _MapAttribute()
    components_ = _MapAttribute()
    explained_variance_ = _MapAttribute()

    def _check_statistics(self, moments: MomentAccumulator, params: dict) -> None:
        _check_enough_samples(moments, type(self).__name__)
        d, k = moments.n_features, params["n_components"]
        if k > d:
            raise ValueError(
                f"n_components={k} must be <= n_features = {d}: there are only "
                f"{d} directions to remove."
            )

    def _compute_map(self, moments: MomentAccumulator, params: dict) -> dict:
        k, center = params["n_components"], params["center"]
        if moments.representation == "rows":
            # fewer rows than features: the SVD of the rows (dual form)
            evals, evecs, e = _dual_spectrum(
                moments, center=center, ddof=1 if center else 0
            )
        else:
            matrix, e = moments.scaled_covariance(center=center)
            evals, evecs = sorted_eigh(matrix)
        tolerance = _spectrum_tolerance(evals, e, moments, center=center)
        rank = _numerical_rank(evals, tolerance, moments, center=center)
        if k > rank:
            warn(
                f"n_components={k} exceeds the numerical rank {rank} of the "
                f"training rows (n_samples = {moments.n_samples}); the directions "
                "beyond the rank carry no variance and are arbitrary.",
                RankDeficiencyWarning,
            )
        if k > evecs.shape[1]:
            evecs = _complete_basis(evecs, k)
            evals = np.concatenate([evals, np.zeros(k - len(evals))])
        return {
            "mean_": moments.mean.copy() if center else None,
            "components_": evecs[:, :k].T.copy(),
            "explained_variance_": unscale(evals[:k], 2 * e),
        }

    def _linear_map(self) -> LinearMap:
        center = self.mean_ if self.center else None
        if self.components_.shape[0]:
            return LinearMap(center, "project_out", self.components_)
        return LinearMap(center, "identity")

    @property
    def _n_features_out(self):
        return self.n_features_in_


def _complete_basis(vectors: np.ndarray, k: int) -> np.ndarray:
    """Complete ``vectors`` to ``k`` orthonormal columns.

    ``vectors`` (orthonormal columns), followed by orthonormal directions
    orthogonal to them.

    Only directions beyond the rank of the data need it (the dual form
    yields one direction per kept row); they carry no variance, so any
    orthonormal completion is as good as the arbitrary null eigenvectors of
    the ``d x d`` problem. A fixed seed keeps it deterministic.
    """
    d, m = vectors.shape
    rng = np.random.default_rng(0)
    fill = rng.standard_normal((d, k - m))
    fill -= vectors @ (vectors.T @ fill)
    q, _ = np.linalg.qr(np.hstack([vectors, fill]))
    return np.hstack([vectors, q[:, m:k]])
