"""BERT-whitening: a linear map that makes the embedding covariance the identity."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from scipy import linalg
from sklearn.utils._param_validation import Interval, RealNotInt, StrOptions

from .._utils import warn
from ..exceptions import RankDeficiencyWarning
from ._base import (
    LinearMap,
    _check_dense_feasible,
    _check_enough_samples,
    _dual_spectrum,
    _numerical_rank,
    _power_scale,
    _rank_deficiency_reason,
    _sorted_eigh,
    _StreamingMomentsMixin,
)
from ._moments import MomentAccumulator
from ._scatter_kernels import unscale
from ._threads import small_problem

__all__ = ["WhiteningTransformer"]


class WhiteningTransformer(_StreamingMomentsMixin):
    """Whiten embeddings: subtract the mean and map the covariance to the identity.

    This is BERT-whitening (Su et al., 2021): with the covariance
    ``Sigma = U diag(lambda) U^T`` of the training embeddings, the transform
    is ``(X - mean_) @ U[:, :k] @ diag(lambda[:k] ** (-power / 2))``. Keeping
    the first ``k`` columns also reduces the dimension (their best result
    kept 256 of 768). The statistics are accumulated exactly in float64 and
    can be streamed with :meth:`partial_fit`.
    The output columns are named ``whitening0``, ``whitening1``, ...

    Parameters
    ----------
    n_components : int, float or None, default=None
        Output dimension for ``method="pca"``.

        - ``None``: every component, capped at the numerical rank of the
          covariance (a :class:`~sklearn_isotropy.exceptions.RankDeficiencyWarning`
          says when directions are dropped).
        - int ``k``: the ``k`` leading components; ``k`` must not exceed the
          rank of the fitted covariance.
        - float in (0, 1): the fewest components whose eigenvalues explain
          that share of the total variance, as in
          :class:`sklearn.decomposition.PCA`.

        ``method="zca"`` and ``method="cholesky"`` keep the input coordinates
        and need ``n_components=None``.
    method : {"pca", "zca", "cholesky"}, default="pca"
        ``"pca"``: ``W = U diag(lambda ** (-power/2))`` (Su et al.), output in
        principal-axis order. ``"zca"``: ``W = U diag(lambda ** (-power/2))
        U^T``, the whitening closest to the identity, output in the input
        coordinates. ``"cholesky"``: ``W = L^{-T}`` with ``Sigma = L L^T``;
        needs a full-rank covariance and ``power=1``.
    power : float, default=1.0
        Exponent ``p`` of ``lambda ** (-p / 2)``: 1 whitens fully, 0 only
        rotates (and truncates), values between whiten partially. On encoders
        trained for sentence similarity partial whitening can beat both
        extremes; tune it with :class:`~sklearn.model_selection.GridSearchCV`.
    shrinkage : float in [0, 1], "ledoit-wolf" or "oas", default=0.0
        Shrink the covariance toward a scaled identity before whitening,
        ``(1 - s) Sigma + s * trace(Sigma) / d * I``. A float sets ``s``;
        ``"ledoit-wolf"`` and ``"oas"`` estimate it from the data exactly as
        :func:`sklearn.covariance.ledoit_wolf_shrinkage` and
        :class:`sklearn.covariance.OAS` do (from the streamed moments). Any
        ``s > 0`` makes the covariance full rank, which keeps held-out rows
        bounded when ``n_samples <= n_features``.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,)
        Weighted mean of the training rows.
    covariance_ : ndarray of shape (n_features, n_features)
        The (shrunk) covariance that was whitened, with frequency weights
        and ``ddof=1`` (as :class:`~sklearn.decomposition.PCA`). With fewer
        rows than features the map is computed without it (dual form), and
        it is built when first read.
    components_ : ndarray of shape (n_components_, n_features)
        Principal axes (eigenvectors of ``covariance_``), largest first.
    explained_variance_ : ndarray of shape (n_components_,)
        Eigenvalues of ``covariance_`` for the kept components.
    explained_variance_ratio_ : ndarray of shape (n_components_,)
        Share of the total variance of each kept component.
    whitening_ : ndarray of shape (n_features, n_components_)
        The matrix ``W`` applied by :meth:`transform` after centring.
    shrinkage_ : float
        The shrinkage intensity used.
    rank_ : int
        Numerical rank of ``covariance_``.
    n_components_ : int
        Width of the output.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during fit, when ``X`` has string column names.
    n_samples_seen_ : int
        Rows seen by ``fit`` / ``partial_fit`` (including rows of weight 0).
    moments_ : MomentAccumulator
        Streamed count, mean and scatter (with the fourth moments for
        ``shrinkage="ledoit-wolf"``); mergeable with another fit's.

    See Also
    --------
    NATSVTransformer : Null the top principal directions instead.
    StandardNormalizer : Per-dimension standardisation.
    sklearn.decomposition.PCA : ``PCA(whiten=True)`` is the batch equivalent
        of ``method="pca"`` without streaming, weights or shrinkage.

    Notes
    -----
    A covariance estimated from ``n`` rows has rank at most ``n - 1``; with
    ``n <= n_features`` the remaining eigenvalues are round-off, and
    dividing by their square roots sends held-out rows to norms of ``1e8``
    and more (the whitening papers' code did this). Here those directions
    are dropped with a warning, or regularised with ``shrinkage``.

    With fewer rows than features, ``method="pca"`` without shrinkage works
    in the dual form: the components come from the SVD of the ``n x d``
    centred rows, in ``O(n^2 d)`` time and ``O(n d)`` memory, so 10 rows of
    20,000 features never build a ``d x d`` matrix. ``shrinkage > 0``,
    ``"zca"`` and ``"cholesky"`` define a full ``d x d`` map; on such data
    they raise a ``ValueError`` before allocating it if it would not fit in
    memory.

    :meth:`fit` computes the map before returning. :meth:`partial_fit` only
    merges statistics; the map is computed at its first use afterwards
    (:meth:`transform` or reading a fitted attribute), and errors that need
    it (``n_components`` above the rank, ``method="cholesky"`` on a
    rank-deficient covariance, a ``power`` out of float64's range) are
    raised then. See :ref:`scaling`.

    References
    ----------
    .. [1] J. Su, J. Cao, W. Liu, Y. Ou, "Whitening Sentence Representations
       for Better Semantics and Faster Retrieval", arXiv:2103.15316, 2021.
    .. [2] J. Huang, D. Tang, W. Zhong, S. Lu, L. Shou, M. Gong, D. Jiang,
       N. Duan, "WhiteningBERT: An Easy Unsupervised Sentence Embedding
       Approach", Findings of EMNLP, 2021.
    .. [3] A. Kessy, A. Lewin, K. Strimmer, "Optimal Whitening and
       Decorrelation", The American Statistician 72(4), 2018.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy import WhiteningTransformer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 8)) @ rng.normal(size=(8, 8)) + 3.0
    >>> Z = WhiteningTransformer(n_components=4).fit_transform(X)
    >>> Z.shape
    (500, 4)
    >>> np.allclose(np.cov(Z, rowvar=False), np.eye(4))
    True
    """

    _parameter_constraints: dict = {
        "n_components": [
            Interval(Integral, 1, None, closed="left"),
            Interval(RealNotInt, 0, 1, closed="neither"),
            None,
        ],
        "method": [StrOptions({"pca", "zca", "cholesky"})],
        "power": [Interval(Real, 0, None, closed="left")],
        "shrinkage": [
            Interval(Real, 0, 1, closed="both"),
            StrOptions({"ledoit-wolf", "oas"}),
        ],
    }

    def __init__(
        self, n_components=None, *, method="pca", power=1.0, shrinkage=0.0
    ) -> None:
        self.n_components = n_components
        self.method = method
        self.power = power
        self.shrinkage = shrinkage

    _fitted_attributes = (
        "mean_",
        "covariance_",
        "components_",
        "explained_variance_",
        "explained_variance_ratio_",
        "whitening_",
        "shrinkage_",
        "rank_",
        "n_components_",
        "_unwhitening",
    )

    # ------------------------------------------------------------------ fitting
    def _needs_fourth_moments(self) -> bool:
        return isinstance(self.shrinkage, str) and self.shrinkage == "ledoit-wolf"

    def _check_statistics(self, moments: MomentAccumulator, params: dict) -> None:
        _check_enough_samples(moments, type(self).__name__)
        d = moments.n_features
        method, n_components = params["method"], params["n_components"]
        if method != "pca" and n_components is not None:
            raise ValueError(
                f"method={method!r} keeps the input coordinates and needs "
                f"n_components=None; got n_components={n_components!r}. Use "
                "method='pca' to reduce the dimension."
            )
        if method == "cholesky" and params["power"] != 1:
            raise ValueError(
                f"method='cholesky' only whitens fully (power=1); got "
                f"power={params['power']!r}. Use method='pca' or 'zca' for partial "
                "whitening."
            )
        if isinstance(n_components, Integral) and n_components > d:
            raise ValueError(
                f"n_components={n_components} must be <= n_features = {d}."
            )
        if params["shrinkage"] == "ledoit-wolf":
            if not moments.fourth_moments:
                raise ValueError(
                    "shrinkage='ledoit-wolf' needs fourth moments of the rows, "
                    "which moments_ does not hold: the fit that started it used "
                    "another shrinkage. Call fit (not partial_fit) after "
                    "switching to 'ledoit-wolf'."
                )
            if not moments.is_finite(include_fourth=True):
                raise ValueError(
                    "The fourth moments that shrinkage='ledoit-wolf' needs "
                    "overflowed float64 (rows far larger than the rest of the "
                    "data). Rescale the input, e.g. divide it by its largest "
                    "absolute value, or use shrinkage='oas'."
                )

    def _resolve_shrinkage(self, moments: MomentAccumulator, shrinkage) -> float:
        if shrinkage == "ledoit-wolf":
            return moments.ledoit_wolf_shrinkage()
        if shrinkage == "oas":
            return moments.oas_shrinkage()
        return float(shrinkage)

    def _compute_map(self, moments: MomentAccumulator, params: dict) -> dict:
        name = type(self).__name__
        d = moments.n_features
        method, power = params["method"], params["power"]
        dual = (
            moments.representation == "rows"
            and method == "pca"
            and not isinstance(params["shrinkage"], str)
            and params["shrinkage"] == 0
        )
        cov = None
        if dual:
            # n < d rows and a map of rank < n: the n x n dual form suffices
            evals, evecs, e = _dual_spectrum(moments)
            shrinkage = 0.0
        else:
            if moments.representation == "rows":
                why = (
                    f"method={method!r}"
                    if method != "pca"
                    else f"shrinkage={params['shrinkage']!r}"
                )
                _check_dense_feasible(moments, name, why)
            cov, e = moments.scaled_covariance()
            shrinkage = self._resolve_shrinkage(moments, params["shrinkage"])
            if shrinkage > 0:
                mu = np.trace(cov) / d
                cov = (1.0 - shrinkage) * cov
                cov[np.diag_indices(d)] += shrinkage * mu
            evals, evecs = _sorted_eigh(cov)
        rank = _numerical_rank(evals, moments.n_nonzero, shrinkage > 0, d)
        if rank == 0:
            raise ValueError(
                f"{name} cannot whiten constant data: every feature has zero "
                f"variance over the n_samples = {moments.n_samples} rows seen."
            )
        total = float(np.sum(evals[:rank]))

        if method == "cholesky" and rank < d:
            cause, todo = _rank_deficiency_reason(moments, rank)
            raise ValueError(
                f"method='cholesky' needs a full-rank covariance, but its "
                f"numerical rank is {rank} < n_features = {d} ({cause}). "
                f"{todo}. Or use method='pca', which keeps the {rank} directions."
            )
        k = self._select_n_components(
            params["n_components"], evals, rank, d, total, moments
        )
        if method == "cholesky":
            with small_problem(d):
                chol = linalg.cholesky(cov, lower=True, check_finite=False)
                whitening = linalg.solve_triangular(
                    chol, np.eye(d), lower=True, check_finite=False
                ).T
            unwhitening = chol.T
            if e:
                whitening, unwhitening = np.ldexp(whitening, -e), np.ldexp(chol.T, e)
        else:
            scale = _power_scale(evals[:k], e, power)
            whitening = evecs[:, :k] * scale
            unwhitening = (evecs[:, :k] / scale).T
            if method == "zca":
                whitening = whitening @ evecs[:, :k].T
                unwhitening = evecs[:, :k] @ unwhitening

        attrs = {
            "mean_": moments.mean.copy(),
            "shrinkage_": shrinkage,
            "rank_": rank,
            "components_": evecs[:, :k].T.copy(),
            "explained_variance_": unscale(evals[:k], 2 * e),
            "explained_variance_ratio_": evals[:k] / total,
            "whitening_": whitening,
            "_unwhitening": unwhitening,
            "n_components_": whitening.shape[1],
        }
        if cov is not None:
            attrs["covariance_"] = unscale(cov, 2 * e)
        return attrs

    def _missing_attribute(self, name: str):
        if name == "covariance_":
            # the dual form never builds the d x d covariance; build it on
            # request, with the parameters of the map
            cov, e = self.moments_.scaled_covariance()
            attrs = self._on_fitted_device({"covariance_": unscale(cov, 2 * e)})
            self.covariance_ = attrs["covariance_"]
            return self.covariance_
        return super()._missing_attribute(name)

    def _select_n_components(self, n_components, evals, rank, d, total, moments):
        if n_components is None:
            if rank < d:
                cause, todo = _rank_deficiency_reason(moments, rank)
                warn(
                    f"The covariance has numerical rank {rank} < n_features = {d}: "
                    f"{cause}. Only {rank} components are kept (pass "
                    f"n_components <= {rank} to choose them without this "
                    f"warning). {todo}.",
                    RankDeficiencyWarning,
                )
            return rank
        if isinstance(n_components, Integral):
            if n_components > rank:
                cause, todo = _rank_deficiency_reason(moments, rank)
                raise ValueError(
                    f"n_components={n_components} exceeds the rank {rank} of the "
                    f"fitted covariance ({cause}); pass n_components <= {rank}. "
                    f"{todo}."
                )
            return int(n_components)
        ratio = np.cumsum(evals[:rank]) / total
        return int(min(np.searchsorted(ratio, n_components, side="right") + 1, rank))

    # ---------------------------------------------------------------- transform
    def _linear_map(self) -> LinearMap:
        return LinearMap(self.mean_, "matmul", self.whitening_)

    def _inverse_map(self) -> LinearMap:
        return LinearMap(self.mean_, "matmul", self._unwhitening)

    @property
    def _n_features_out(self):
        return self.n_components_
