"""BERT-whitening: a linear map that makes the embedding covariance the identity."""

from __future__ import annotations

import logging
import math
import os
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import linalg
from sklearn.utils.validation import check_is_fitted, validate_data

from .._utils import sorted_eigh, spectrum_effective_rank, warn
from .._utils._sklearn import Interval, RealNotInt, StrOptions
from ..exceptions import RankDeficiencyWarning
from ._array_api import (
    check_fitted_namespace,
    float_dtype,
    input_namespace,
    namespace_of,
    to_host,
)
from ._base import (
    LinearMap,
    _check_enough_samples,
    _constant_features,
    _float_dtypes,
    _MapAttribute,
    _on_device_of,
    _StreamingMomentsMixin,
)
from ._moments import MomentAccumulator
from ._scatter_kernels import unscale
from ._spectrum import _dual_spectrum, _numerical_rank, _spectrum_tolerance

__all__ = ["WhiteningTransformer"]

logger = logging.getLogger(__name__)
# INFO messages already logged in this process (each is logged once)
_REPORTED: set[str] = set()


# ------------------------------------------------- the whitening's spectrum
# checks and scales of the fit, used by WhiteningTransformer alone (the
# helpers NATSV shares are in _spectrum.py)


def _rank_deficiency_reason(moments: MomentAccumulator, rank: int) -> tuple[str, str]:
    """(cause, what to do) for a covariance of rank below ``n_features``.

    Two limits cap the rank. The rows: ``n`` centred rows of positive weight
    span at most ``n - 1`` directions. And round-off (float64's, or the
    coarser one of float32 input rows): a direction whose variance falls
    below it next to the largest is lost (feature variances spread far
    apart, constant or collinear features). A rank at the rows' limit is the
    rows' doing, however spread the variances are; only a rank below it is
    round-off's.
    """
    d = moments.n_features
    n = moments.n_nonzero
    if n - 1 < d and rank >= n - 1:
        return (
            f"too few samples: {n} rows of positive weight span at most "
            f"{n - 1} directions",
            f"Fit on more rows (at least {d + 1}, one more than n_features), or "
            "pass shrinkage > 0 (e.g. 'ledoit-wolf') to keep every dimension",
        )
    rows_allow = (
        f"; the {n} rows alone would span {n - 1} directions" if n - 1 < d else ""
    )
    eps = np.finfo(np.float64).eps
    round_off = _round_off(moments)
    var, _ = moments.scaled_variances()
    # StandardNormalizer's rule: a feature whose spread is at the round-off
    # level of its own values or of the rows is constant (a tiny variance
    # that is neither is not)
    is_constant = _constant_features(moments)
    constant = int(np.count_nonzero(is_constant))
    varying = var[~is_constant]
    spread = float(varying.max() / varying.min()) if varying.size else 1.0
    # the features that fall below round-off next to the largest: when they
    # are a few and the rank lost is theirs (an encoder's near-constant
    # dimensions, as the distilled static tables have), the message names
    # them without the spread, whose value changes from fit to fit
    tiny = int(np.count_nonzero(varying < varying.max() * d * eps * 1e3))
    few = constant + tiny
    # a few of them, or any number of features at round-off level (which no
    # standardisation rescues either)
    if few and rank >= d - few and (few <= max(1, d // 4) or not tiny):
        cause = (
            f"{few} feature(s) are constant up to {round_off} next to "
            f"the others{rows_allow}"
        )
        if tiny:
            return (
                cause,
                "Harmless if they carry no signal (some encoders have a few such "
                "dimensions); to keep them, standardise first: "
                "make_pipeline(StandardNormalizer(), WhiteningTransformer())",
            )
        return (
            cause,
            "Harmless: their spread is at the round-off level of the rows, so "
            "they carry no signal (some encoders have a few such dimensions, "
            "which StandardNormalizer leaves unscaled as well)",
        )
    if varying.size > 1 and spread * d * eps > 1e-3:
        return (
            f"the feature variances span a factor of {spread:.1e}, so the "
            f"directions of the small-scale features fall below {round_off} "
            f"next to the large ones{rows_allow}",
            "If the small-scale features carry signal, standardise the "
            "features first, e.g. make_pipeline(StandardNormalizer(), "
            "WhiteningTransformer()), which keeps them; if they are numerical "
            "noise (as the near-zero dimensions of some encoders are), losing "
            "their directions is harmless. Shrinkage does not help here",
        )
    if constant:
        return (
            f"{constant} feature(s) are constant and the others may be "
            f"linearly dependent{rows_allow}",
            "Drop the constant features, or pass shrinkage > 0 to keep every dimension",
        )
    return (
        f"the features are linearly dependent (collinear) up to {round_off}"
        f"{rows_allow}",
        "Pass shrinkage > 0 (e.g. 'ledoit-wolf') to keep every dimension",
    )


def _round_off(moments: MomentAccumulator) -> str:
    """The round-off that limits the rank, in words: float64's or the input's."""
    eps = moments.input_eps
    if eps <= np.finfo(np.float64).eps:
        return "float64 round-off"
    for dtype in (np.float32, np.float16):
        if eps == np.finfo(dtype).eps:
            return f"the round-off of the {dtype.__name__} input"
    return f"the round-off of the input (eps = {eps:.2g})"


def _available_memory() -> int | None:
    """Bytes of memory available to a new allocation, if the system says."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


# d x d float64 matrices alive at once while a full map is computed (the
# covariance, the eigenvectors and LAPACK's workspace, the map, its inverse)
_DENSE_MATRICES = 6


def _check_dense_feasible(moments: MomentAccumulator, name: str, why: str) -> None:
    """Raise a clear error before a ``d x d`` computation that cannot fit.

    Only the dual form (rows kept, ``n_samples < n_features``) gets here: the
    option ``why`` needs the full ``d x d`` map although the data are ``n x
    d``, which for very wide data is more memory than the machine has.
    """
    d = moments.n_features
    need = _DENSE_MATRICES * 8 * d * d
    avail = _available_memory()
    if avail is not None and need > avail:
        raise ValueError(
            f"{name} with {why} needs {d:,} x {d:,} matrices (about "
            f"{need / 2**30:.1f} GiB of working memory) although the data are "
            f"{moments.n_nonzero} x {d:,}, and only {avail / 2**30:.1f} GiB is "
            "available. With n_samples < n_features only method='pca' with "
            "shrinkage=0 (the n x n dual form) avoids them; reduce the "
            "dimension first or use that."
        )


def _power_scale(evals: np.ndarray, e: int, power: float) -> np.ndarray:
    """``lambda ** (-power / 2)`` for eigenvalues ``evals * 4**e``, checked.

    Raises a ValueError, instead of returning an infinite or zero scale,
    when the result leaves float64's range (an extreme ``power``, or
    eigenvalues of extreme magnitude raised to a power above 1).
    """
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        if e == 0:
            scale = evals ** (-power / 2.0)
        else:
            scale = np.exp2(-(power / 2.0) * (np.log2(evals) + 2.0 * e))
        inverse = 1.0 / scale
    if np.all(np.isfinite(scale) & (scale > 0) & np.isfinite(inverse)):
        return scale
    lo, hi = (float(np.ldexp(v, 2 * e)) for v in (evals.min(), evals.max()))
    raise ValueError(
        f"power={power!r} cannot be applied to this covariance: its kept "
        f"eigenvalues range from {lo:.3g} to {hi:.3g}, and raising them to "
        f"-power/2 = {-power / 2.0:.3g} leaves float64's range (the whitening "
        "matrix would hold infinite or zero entries). Use a power between 0 "
        "(rotation only) and 1 (full whitening), or rescale the input."
    )


class WhiteningTransformer(_StreamingMomentsMixin):
    """Whiten embeddings: subtract the mean and map the covariance to the identity.

    This is BERT-whitening (Su et al., 2021): with the covariance
    ``Sigma = U diag(lambda) U^T`` of the training embeddings, the transform
    is ``(X - mean_) @ U[:, :k] @ diag(lambda[:k] ** (-power / 2))``, whose
    ``k`` columns (``whitening0``, ...) also reduce the dimension. The
    statistics are exact in float64 and stream with :meth:`partial_fit`.

    Parameters
    ----------
    n_components : int, float or None, default=None
        Output dimension for ``method="pca"``.

        ``None``: every component up to the numerical rank of the covariance
        (a :class:`~sklearn_isotropy.exceptions.RankDeficiencyWarning` when
        too few rows limit it); int ``k``: the ``k`` leading components, at
        most the rank; float in (0, 1): the fewest components explaining that
        share of the variance, as in :class:`sklearn.decomposition.PCA`.
        ``"zca"`` and ``"cholesky"`` need None.
    method : {"pca", "zca", "cholesky"}, default="pca"
        ``"pca"``: ``W = U diag(lambda ** (-power/2))`` (Su et al.), output in
        principal-axis order. ``"zca"``: ``W = U diag(lambda ** (-power/2))
        U^T``, the whitening closest to the identity, output in the input
        coordinates. ``"cholesky"``: ``W = L^{-T}`` with ``Sigma = L L^T``;
        needs a full-rank covariance and ``power=1``.
    power : float, default=1.0
        Exponent ``p`` of ``lambda ** (-p / 2)``: 1 whitens fully, 0 only
        rotates (and truncates), values between whiten partially (tune it
        with :class:`~sklearn.model_selection.GridSearchCV`).
    shrinkage : float in [0, 1], "ledoit-wolf" or "oas", default=0.0
        Shrink the covariance toward a scaled identity before whitening,
        ``(1 - s) Sigma + s * trace(Sigma) / d * I``. A float sets ``s``;
        ``"ledoit-wolf"`` and ``"oas"`` estimate it as scikit-learn does, from
        the streamed moments. Any ``s > 0`` makes the covariance full rank.
    noise_variance : float >= 0, "auto" or None, default=None
        Variance ``s2`` of the isotropic noise of probabilistic PCA. With
        ``s2 > 0`` each component is the posterior mean of its whitened
        latent, ``sqrt(max(lambda - s2, 0)) / lambda * u^T (x - mean)``: the
        directions near the noise floor are damped instead of amplified,
        those below it dropped. ``None`` and 0 are plain whitening;
        ``"auto"`` estimates ``s2`` from the spectrum, without labels (see
        :ref:`without_labels`); a flat spectrum, every eigenvalue tied with
        the largest to the rank's tolerance, gets ``s2 = 0``, plain
        whitening. ``method="cholesky"`` needs ``None``.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,)
        Weighted mean of the training rows.
    covariance_ : ndarray of shape (n_features, n_features)
        The (shrunk) covariance that was whitened (frequency weights,
        ``ddof=1``); built when first read if the map did not need it.
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
    noise_variance_ : float
        The ``s2`` the transform used; with ``noise_variance=None``, the
        maximum-likelihood one of probabilistic PCA (the mean eigenvalue
        beyond the kept components on the fitted support, as
        ``PCA.noise_variance_`` for full-rank data), which only
        :meth:`score_samples` uses.
    rank_ : int
        Numerical rank of ``covariance_``: its eigenvalues above the
        round-off of the eigenproblem and of the input rows (see Notes).
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
    With ``n <= n_features`` rows the covariance has rank at most ``n - 1``;
    the other directions are dropped with a warning, or regularised with
    ``shrinkage`` (:ref:`postprocessors`). Without shrinkage,
    ``method="pca"`` then works in the dual form, from the SVD of the
    centred rows, never building a ``d x d`` matrix (:ref:`scaling`).

    The rank counts an eigenvalue only above two round-offs, whichever is
    larger: float64's in the eigenproblem, ``n_features * eps64`` times the
    largest eigenvalue, and the input's. Rows stored in float32 (or
    float16) are rounded entry by entry to their dtype's ``eps``; those
    independent errors give any one direction at most about ``eps**2 *
    max_j E[x_j**2]`` of variance (times ``(1 + sqrt(d / n))**2`` for the
    spread of ``n`` rows' sample covariance), ``eps`` weighted over the rows
    (:attr:`MomentAccumulator.input_eps_rms`). So float32 rows of mean 1e4
    and spread 1e-2 keep every direction, as float64 ones do.
    ``noise_variance="auto"`` sets ``s2`` to the eigenvalue at the
    spectrum's effective rank (Roy and Vetterli, 2007), taken on the
    eigenvalues of ``covariance_`` (what
    :func:`~sklearn_isotropy.diagnostics.effective_rank` measures), a rule
    measured against others in :ref:`without_labels`. Eigenvalues whose
    standard deviations lie within twice the square root of the rank's
    tolerance of the largest tie with it and are all kept; when every one
    ties (an isotropic design, or rows already whitened), ``s2`` is 0.
    :meth:`partial_fit` only merges statistics; the map is computed, and
    errors that need it are raised, at its first use.

    References
    ----------
    .. [1] J. Su, J. Cao, W. Liu, Y. Ou, "Whitening Sentence Representations
       for Better Semantics and Faster Retrieval", arXiv:2103.15316, 2021.
    .. [2] J. Huang, D. Tang, W. Zhong, S. Lu, L. Shou, M. Gong, D. Jiang,
       N. Duan, "WhiteningBERT: An Easy Unsupervised Sentence Embedding
       Approach", Findings of EMNLP, 2021.
    .. [3] A. Kessy, A. Lewin, K. Strimmer, "Optimal Whitening and
       Decorrelation", The American Statistician 72(4), 2018.
    .. [4] M. E. Tipping, C. M. Bishop, "Probabilistic Principal Component
       Analysis", Journal of the Royal Statistical Society B 61(3), 1999.
    .. [5] O. Roy, M. Vetterli, "The Effective Rank: a Measure of Effective
       Dimensionality", European Signal Processing Conference, 2007.

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
        "noise_variance": [
            Interval(Real, 0, None, closed="left"),
            StrOptions({"auto"}),
            None,
        ],
    }

    def __init__(
        self,
        n_components=None,
        *,
        method="pca",
        power=1.0,
        shrinkage=0.0,
        noise_variance=None,
    ) -> None:
        self.n_components = n_components
        self.method = method
        self.power = power
        self.shrinkage = shrinkage
        self.noise_variance = noise_variance

    # the attributes of the map (computed at first read after partial_fit);
    # the dual form never builds the d x d covariance: it is built on request
    mean_ = _MapAttribute()
    covariance_ = _MapAttribute(missing="_full_covariance")
    components_ = _MapAttribute()
    explained_variance_ = _MapAttribute()
    explained_variance_ratio_ = _MapAttribute()
    whitening_ = _MapAttribute()
    shrinkage_ = _MapAttribute()
    noise_variance_ = _MapAttribute()
    rank_ = _MapAttribute()
    n_components_ = _MapAttribute()
    _unwhitening = _MapAttribute()
    _likelihood = _MapAttribute()

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
        if method == "cholesky" and params["noise_variance"] not in (None, 0):
            raise ValueError(
                "method='cholesky' has no principal components to denoise and "
                f"needs noise_variance=None; got noise_variance="
                f"{params['noise_variance']!r}. Use method='pca' or 'zca'."
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
            evals, evecs = sorted_eigh(cov)
        tolerance = _spectrum_tolerance(evals, e, moments)
        rank = _numerical_rank(evals, tolerance, moments, shrunk=shrinkage > 0)
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
        noise = params["noise_variance"]
        k = self._select_n_components(
            params["n_components"], evals, rank, d, total, moments, noise
        )
        if noise is None:
            # probabilistic PCA's maximum-likelihood noise: the mean of the
            # eigenvalues beyond the kept ones on the fitted support (as
            # PCA.noise_variance_ for full-rank data; the directions without
            # variance are no noise to average, only round-off)
            s2 = float(np.mean(evals[k:rank])) if rank > k else 0.0
        else:
            s2 = (
                _auto_noise_variance(evals[:rank], tolerance)
                if noise == "auto"
                else float(np.ldexp(noise, -2 * e))
            )
            k = self._components_above(evals, k, s2, noise, e)
        if method == "cholesky":
            chol = linalg.cholesky(cov, lower=True, check_finite=False)
            whitening = linalg.solve_triangular(
                chol, np.eye(d), lower=True, check_finite=False
            ).T
            unwhitening = chol.T
            if e:
                whitening, unwhitening = np.ldexp(whitening, -e), np.ldexp(chol.T, e)
        else:
            scale = _power_scale(evals[:k], e, power)
            if noise is not None and s2 > 0:
                # the posterior mean of the signal, whitened to `power`:
                # (lambda - s2) ** (1 - power / 2) / lambda
                scale = scale * (1.0 - s2 / evals[:k]) ** (1.0 - power / 2.0)
            whitening = evecs[:, :k] * scale
            unwhitening = (evecs[:, :k] / scale).T
            if method == "zca":
                whitening = whitening @ evecs[:, :k].T
                unwhitening = evecs[:, :k] @ unwhitening

        attrs = {
            "mean_": moments.mean.copy(),
            "shrinkage_": shrinkage,
            "noise_variance_": float(unscale(np.float64(s2), 2 * e)),
            "rank_": rank,
            "components_": evecs[:, :k].T.copy(),
            "explained_variance_": unscale(evals[:k], 2 * e),
            "explained_variance_ratio_": evals[:k] / total,
            "whitening_": whitening,
            "_unwhitening": unwhitening,
            "n_components_": whitening.shape[1],
            "_likelihood": _Likelihood(
                evals[:k].copy(),
                s2,
                e,
                rank,
                evecs[:, :rank].T.copy() if k < rank < d else None,
            ),
        }
        if cov is not None:
            attrs["covariance_"] = unscale(cov, 2 * e)
        return attrs

    def _full_covariance(self):
        """``covariance_`` of a map computed without it (the dual form)."""
        cov, e = self.moments_.scaled_covariance()
        return _on_device_of(unscale(cov, 2 * e), self.__dict__.get("_fitted_on"))

    @staticmethod
    def _components_above(evals, k, s2, noise, e) -> int:
        """How many of the ``k`` leading components lie above the noise floor."""
        above = int(np.count_nonzero(evals[:k] > s2))
        if above == 0:
            top = float(np.ldexp(evals[0], 2 * e))
            # only a number can be: 'auto' stays below the largest eigenvalue
            raise ValueError(
                f"noise_variance={noise!r} is at or above every eigenvalue of the "
                f"covariance (the largest is {top:.4g}), so no component is left "
                f"above the noise floor. Pass a noise_variance below {top:.4g}, "
                "or 'auto' to estimate one from the spectrum."
            )
        return above

    def _select_n_components(
        self, n_components, evals, rank, d, total, moments, noise=None
    ):
        if n_components is None:
            if rank < d:
                _report_rank(moments, rank, denoised=noise not in (None, 0))
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

    # --------------------------------------------------------------- likelihood
    def score_samples(self, X: ArrayLike) -> np.ndarray:
        """Compute the log-likelihood of each row under the fitted Gaussian model.

        The model lives on the fitted support, the ``rank_`` directions the
        training rows span. With every one of them kept (``n_components_ ==
        rank_``) it is the Gaussian of ``mean_`` and ``covariance_``; for a
        rank-deficient covariance, the degenerate Gaussian's density on its
        support, as :class:`scipy.stats.multivariate_normal` with
        ``allow_singular=True`` (of a row's projection onto the support, so
        it stays finite for rows off it, where scipy gives ``-inf``).
        Otherwise it is probabilistic PCA, as
        :meth:`sklearn.decomposition.PCA.score_samples`: the kept components
        with their eigenvalues, and variance ``noise_variance_`` in the other
        directions of the support. The directions without variance (constant
        or collinear features, too few rows) carry no density, so settings
        fitted on the same rows score on the same support and :meth:`score`
        compares them without labels, e.g. in
        :class:`~sklearn.model_selection.GridSearchCV`. For full-rank data it
        equals ``PCA.score_samples``, and it is the Gaussian baseline of
        :meth:`GlowFlowTransformer.score_samples
        <sklearn_isotropy.GlowFlowTransformer.score_samples>`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to score.

        Returns
        -------
        log_likelihood : ndarray of shape (n_samples,)
            Natural-log density of each row, in float64 (or the widest float
            type of the fitting device).
        """
        check_is_fitted(self)
        check_fitted_namespace(self, X, "score_samples")
        X = validate_data(self, X, reset=False, dtype=_float_dtypes(input_namespace(X)))
        xp, device = namespace_of(X)
        dtype = float_dtype(xp, device)
        model = self._likelihood
        X = xp.astype(X, dtype)
        components = xp.astype(self.components_, dtype)
        # in the units of the fit (variances times 4**-e), so that data at any
        # scale where fit works gives finite logarithms and no underflow
        unit = math.ldexp(1.0, -model.exponent)
        centred = (X - xp.astype(self.mean_, dtype)) * unit
        projected = centred @ components.T
        variances = xp.asarray(model.variances, dtype=dtype, device=device)
        mahalanobis = xp.sum(projected**2 / variances, axis=1)
        log_det = float(np.sum(np.log(model.variances)))
        q, rank = components.shape[0], model.rank
        if q < rank:
            s2 = self._likelihood_noise()
            residual = centred - projected @ components
            if model.support is not None:  # only the part on the support
                support = xp.asarray(model.support, dtype=dtype, device=device)
                residual = (residual @ support.T) @ support
            mahalanobis = mahalanobis + xp.sum(residual**2, axis=1) / s2
            log_det += (rank - q) * math.log(s2)
        log_det += rank * 2 * model.exponent * math.log(2.0)
        return -0.5 * (rank * math.log(2.0 * math.pi) + log_det + mahalanobis)

    def score(self, X: ArrayLike, y=None) -> float:
        """Compute the average log-likelihood of the rows under the fitted model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to score.
        y : None
            Ignored; present for API consistency.

        Returns
        -------
        score : float
            Mean of :meth:`score_samples`.
        """
        return float(np.mean(to_host(self.score_samples(X))))

    def _likelihood_noise(self) -> float:
        """The likelihood's noise variance, in the fit's units, floored at round-off."""
        model = self._likelihood
        if model.noise <= 0:
            raise ValueError(
                "noise_variance=0 with fewer components than the fitted support "
                f"({self.n_components_} < rank_ = {model.rank}) gives zero "
                "density off the kept components, so there is no likelihood to "
                "score. Use noise_variance=None (probabilistic PCA's "
                "maximum-likelihood noise), a positive value or 'auto'."
            )
        floor = float(model.variances[0]) * self.n_features_in_ * np.finfo(float).eps
        return max(model.noise, floor)

    # ---------------------------------------------------------------- transform
    def _linear_map(self) -> LinearMap:
        return LinearMap(self.mean_, "matmul", self.whitening_)

    def _inverse_map(self) -> LinearMap:
        return LinearMap(self.mean_, "matmul", self._unwhitening)

    @property
    def _n_features_out(self):
        return self.n_components_


class _Likelihood(NamedTuple):
    """What :meth:`WhiteningTransformer.score_samples` needs beyond the map.

    ``variances`` (the kept eigenvalues) and ``noise`` are in units of
    ``4**exponent``, as the map was computed, so that the likelihood of data
    at any scale where ``fit`` works is finite. ``support`` holds the
    ``rank`` directions the rows span when they are fewer than the features
    and more than the kept components (None otherwise: the residual of the
    kept components then lies on the support already).
    """

    variances: np.ndarray
    noise: float
    exponent: int
    rank: int
    support: np.ndarray | None


def _report_rank(moments: MomentAccumulator, rank: int, denoised: bool) -> None:
    """Say that whitening keeps ``rank`` < ``n_features`` directions.

    Too few rows is a real problem (held-out rows have variance in the
    directions the fit never saw) and a :class:`RankDeficiencyWarning`,
    unless a noise variance drops those directions anyway. Constant,
    collinear or round-off-level features (some encoders have a few) are
    dropped harmlessly: that is logged at INFO level, once per message.
    """
    d = moments.n_features
    cause, todo = _rank_deficiency_reason(moments, rank)
    rows_limited = moments.n_nonzero - 1 < d and rank >= moments.n_nonzero - 1
    if rows_limited and not denoised:
        warn(
            f"The covariance has numerical rank {rank} < n_features = {d}: "
            f"{cause}. Only {rank} components are kept (pass "
            f"n_components <= {rank} to choose them without this "
            f"warning). {todo}.",
            RankDeficiencyWarning,
        )
        return
    message = (
        f"Whitening keeps {rank} of {d} directions, dropping those without "
        f"variance above {_round_off(moments)}: {cause}. {todo}."
    )
    if message not in _REPORTED:
        _REPORTED.add(message)
        logger.info(message)


def _auto_noise_variance(evals: np.ndarray, tolerance: float) -> float:
    """Label-free noise variance from the spectrum (``noise_variance="auto"``).

    The eigenvalue at the spectrum's effective rank (Roy and Vetterli,
    2007): ``r = exp(H)`` with ``H`` the Shannon entropy of the eigenvalues
    normalised to sum to one, the number of equally strong directions that
    would spread the variance as evenly. ``evals`` are the eigenvalues of the
    covariance that is whitened (the singular values of that matrix, as Roy
    and Vetterli define the rank; the squared singular values of the centred
    rows), down to its numerical rank: ``r`` is what
    :func:`~sklearn_isotropy.diagnostics.effective_rank` gives for the same
    rows. The ``floor(r)`` leading directions
    carry the signal; the next eigenvalue is the noise floor. A spectrum
    that concentrates its variance in a few directions gets a high floor,
    an already flat one a low floor (and the posterior stays near plain
    whitening there).

    The floor is below the largest eigenvalue, so that the leading component
    is always kept. Eigenvalues that tie with the largest are as strong as
    it: when the floor would be one of them, they are all signal, and the
    floor is the next smaller eigenvalue, or 0 when every eigenvalue ties (a
    flat spectrum, plain whitening: there is no noise to tell from the
    signal). Ties are measured with the rank's tolerance
    (:func:`~sklearn_isotropy.linear._spectrum._spectrum_tolerance`), in
    standard deviations, the units in which the rank resolves the spectrum:
    the rank counts a direction whose standard deviation is within
    ``delta = sqrt(tolerance)`` of 0 as none, so every standard deviation is
    known to ``delta``, and two that are equal can come out ``2 * delta``
    apart. A standard deviation within ``2 * delta`` of the largest ties
    with it. This is what makes a flat spectrum flat. The rows of an
    earlier whitening have eigenvalues 1 to within 1e-15 to 1e-12 (float64)
    or 1e-7 to 5e-7 (float32, from well-conditioned rows), inside that
    resolution (in relative eigenvalue about ``4 * delta / sqrt(lambda)``:
    ``4 * sqrt(n_features * eps64)`` for float64 rows, 1.7e-7 at 8
    features, and 5e-7 to 1.2e-6 for float32 rows). ``n_features * eps64``
    of the largest eigenvalue, the ties' tolerance before, is below the
    covariance's own round-off: the floor was then one of the eigenvalues
    at 1, and the output's standard deviation ``sqrt(1 - floor / lambda)``,
    1e-7 or 4e-4.

    The limit: float32 rows whitened in float32 from ill-conditioned ones
    (a condition number of 1e4) are flat only to 1e-6 to 6e-6, which is
    the first whitening's round-off, not the rows' own: those eigenvalues
    are resolved, do not tie, and the floor damps every direction. Chain
    whitenings in float64, or fit one whitening.
    """
    if evals.size < 2:
        return 0.0  # one eigenvalue: no spectrum to tell noise from
    rank = spectrum_effective_rank(evals)
    index = min(max(int(rank), 1), evals.size - 1)
    # evals are sorted, so the ties with the largest are a prefix
    delta = math.sqrt(tolerance)
    tied = int(np.count_nonzero(np.sqrt(evals) >= math.sqrt(evals[0]) - 2 * delta))
    if index >= tied:
        return float(evals[index])
    return float(evals[tied]) if tied < evals.size else 0.0
