"""Shared machinery of the linear post-processors: exact streaming fits."""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_array, gen_batches
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, validate_data

from .._utils import PrefixedFeatureNamesMixin, is_dask_collection
from .._utils._sklearn import _assert_all_finite, _check_sample_weight, _fit_context
from ._array_api import (
    check_fitted_namespace,
    float_dtype,
    for_pickle,
    input_namespace,
    is_array,
    namespace_of,
    on_device,
    to_host,
)
from ._moments import MomentAccumulator, rounding_eps
from ._scatter_kernels import one_blas_thread, unscale

FLOAT_DTYPES = (np.float64, np.float32)

# private state of a fit, cleared by a new one: the parameters of a map that
# partial_fit left to compute at first use, and a 0-size array in the
# namespace and on the device of the training rows (absent for numpy)
_MAP_STATE = ("_map_pending", "_fitted_on")
# batches of at most this many entries are checked for NaN/inf up front
_SMALL_BATCH = 2**16

# bytes of input mapped at a time by a transform: large enough for a matrix
# product to run at full speed, small enough to keep the temporaries small
_TRANSFORM_BLOCK_BYTES = 2**24
# the same for numpy rows under the other maps: small enough for the block to
# stay in a core's cache from one step to the next (both sizes are measured
# choices: benchmarks/README.md, "Choices measured once")
_FINISH_BLOCK_BYTES = 2**18


def _check_nonnegative_weights(sample_weight, X):
    """Validate ``sample_weight``: finite, non-negative float64, in host memory.

    Host memory also for rows on a device: the statistics are merged there.
    """
    if sample_weight is None:
        return None
    if is_array(sample_weight):
        sample_weight = to_host(sample_weight)
    X = np.empty((X.shape[0], 0))  # only the number of rows is read
    sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64)
    if not np.all(np.isfinite(sample_weight)):
        raise ValueError("sample_weight contains NaN or infinity; pass finite weights.")
    if np.any(sample_weight < 0):
        first = int(np.flatnonzero(sample_weight < 0)[0])
        raise ValueError(
            "sample_weight must be non-negative; got "
            f"sample_weight[{first}] = {sample_weight[first]!r}."
        )
    return sample_weight


class _MapAttribute:
    """A fitted attribute of the map, computed at its first read after ``partial_fit``.

    ``fit`` stores every attribute of the map on the estimator, where it
    hides this descriptor. ``partial_fit`` only merges statistics and drops
    them: reading one then computes the whole map from ``moments_``
    (:meth:`_StreamingMomentsMixin._ensure_map`), once. ``missing`` names a
    method that computes the attribute when the map does not hold it (the
    covariance of a whitening computed in the dual form).
    """

    def __init__(self, missing: str | None = None) -> None:
        self.missing = missing

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, estimator, owner=None):
        if estimator is None:
            return self
        state = estimator.__dict__
        if "moments_" in state:
            estimator._ensure_map()
            if self.name not in state and self.missing is not None:
                state[self.name] = getattr(estimator, self.missing)()
        if self.name in state:
            return state[self.name]
        raise AttributeError(
            f"{type(estimator).__name__!r} object has no attribute {self.name!r}"
        )


class _StreamingMomentsMixin(
    PrefixedFeatureNamesMixin, TransformerMixin, BaseEstimator
):
    """Base of the estimators fitted from a :class:`MomentAccumulator`.

    ``fit`` is a reset followed by ``partial_fit`` and an eager computation
    of the fitted map; ``partial_fit`` only merges the batch into
    ``moments_`` (one pass over the rows) and leaves the map pending. The
    map (an eigendecomposition for whitening and NATSV) is then computed
    from the merged statistics the first time one of its attributes is
    read, by ``transform`` or by the user: each is a :class:`_MapAttribute`.
    Any split of the data into batches gives the same model.

    Subclasses set ``_moments_kind``, declare the attributes of the map as
    :class:`_MapAttribute` and implement ``_compute_map(moments, params)``,
    which returns them as a dict, ``_linear_map()`` (and, if invertible,
    ``_inverse_map()``), and optionally ``_check_statistics(moments,
    params)`` for the cheap checks that must fail at ``partial_fit`` time.
    Those whose fit needs the fourth moments (Ledoit-Wolf shrinkage) override
    ``_needs_fourth_moments``.
    """

    _moments_kind = "full"

    def _needs_fourth_moments(self) -> bool:
        return False

    def _new_moments(self, n_features: int) -> MomentAccumulator:
        return MomentAccumulator(
            n_features,
            kind=self._moments_kind,
            fourth_moments=self._needs_fourth_moments(),
        )

    @classmethod
    def _map_names(cls) -> list[str]:
        """Names of the attributes of the map (the :class:`_MapAttribute`)."""
        return [
            name
            for klass in cls.__mro__
            for name, value in vars(klass).items()
            if isinstance(value, _MapAttribute)
        ]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.array_api_support = True
        return tags

    def __getstate__(self):
        # tensors on an accelerator pickle as CPU tensors, so that a machine
        # without one loads the estimator
        return {k: for_pickle(v) for k, v in super().__getstate__().items()}

    def to_numpy(self) -> _StreamingMomentsMixin:
        """Return a copy of the fitted estimator that holds numpy arrays.

        For an estimator fitted on the arrays of another Array API namespace
        (torch tensors, on a GPU or not; see :ref:`gpu`): the copy's fitted
        arrays are numpy arrays in host memory, so it transforms numpy
        input, pickles and exports without the fitting library or device.
        The statistics (``moments_``) are numpy float64 arrays in any case.

        Returns
        -------
        estimator : object
            A fitted copy, fitted arrays converted; numpy ones are copied.
        """
        check_is_fitted(self)
        self._ensure_map()
        out = copy.copy(self)
        state = out.__dict__
        for name, value in self.__dict__.items():
            if isinstance(value, np.ndarray):
                state[name] = value.copy()
            elif is_array(value):
                state[name] = np.array(to_host(value))
        state.pop("_fitted_on", None)
        state["moments_"] = self.moments_.copy()
        return out

    def _reset(self) -> None:
        state = self.__dict__
        fitted = [k for k in state if k.endswith("_") and not k.startswith("__")]
        for name in (*fitted, *self._map_names(), *_MAP_STATE):
            state.pop(name, None)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(
        self, X: ArrayLike, y=None, sample_weight: ArrayLike | None = None
    ) -> _StreamingMomentsMixin:
        """Fit on ``X``, forgetting any previous fit.

        The fitted map is computed before ``fit`` returns, so every error
        (e.g. ``n_components`` above the rank of the data) is raised here.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Training embeddings, finite and dense. A ``dask.array.Array``
            (or dask DataFrame) chunked by rows is fitted on the workers
            without being materialised; see :mod:`sklearn_isotropy.dask`.
        y : None
            Ignored; present for API consistency.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative frequency weights: an integer weight counts the row
            that many times. With a dask ``X``, a 1-D dask array chunked
            like the rows of ``X`` (or a numpy array).

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._reset()
        if is_dask_collection(X) or is_dask_collection(sample_weight):
            from ._dask import partial_fit_dask

            return partial_fit_dask(self, X, sample_weight, first=True, eager=True)
        return self._partial_fit(X, sample_weight, first=True, eager=True)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(
        self, X: ArrayLike, y=None, sample_weight: ArrayLike | None = None
    ) -> _StreamingMomentsMixin:
        """Update the fit with a batch of rows (exact streaming).

        The count, mean and scatter of all batches seen so far are merged in
        float64, so the result equals one ``fit`` on the concatenated batches
        up to round-off; memory does not grow with the number of rows.

        The fitted map is recomputed once, when it is next used, with the
        parameters in effect at this call; errors that need it are raised
        then (see :ref:`scaling`). Invalid input is rejected here, leaving
        the estimator unchanged.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            A batch of embeddings.
        y : None
            Ignored; present for API consistency.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative frequency weights for the rows of this batch.

        Returns
        -------
        self : object
            Updated estimator.
        """
        first = "moments_" not in self.__dict__
        if is_dask_collection(X) or is_dask_collection(sample_weight):
            from ._dask import partial_fit_dask

            return partial_fit_dask(self, X, sample_weight, first=first, eager=False)
        return self._partial_fit(X, sample_weight, first=first, eager=False)

    def _partial_fit(self, X, sample_weight, *, first, eager):
        # finiteness is checked on the statistics: a NaN or an infinity in any
        # row makes them non-finite, and only then is X scanned for the error
        # message (one pass over memory fewer)
        if not first:
            check_fitted_namespace(self, X, "partial_fit")
        target = input_namespace(X)
        # read before validation, which converts float16 rows to float64: the
        # rows keep float16's round-off, and the rank tolerance scales with it
        input_eps = rounding_eps(X)
        X = validate_data(
            self, X, reset=first, dtype=_float_dtypes(target), ensure_all_finite=False
        )
        sample_weight = _check_nonnegative_weights(sample_weight, X)
        name = type(self).__name__
        if X.shape[0] < X.shape[1] or X.shape[0] * X.shape[1] <= _SMALL_BATCH:
            # small batches may be kept as rows, where a row of weight 0 does
            # not reach the statistics: check them directly (cheap)
            _assert_all_finite(X, input_name="X", estimator_name=name)
        previous = self._new_moments(X.shape[1]) if first else self.moments_
        # overflow leaves non-finite statistics, which _check_finite_moments
        # reports as one clear error instead of warnings; the previous
        # statistics are left as they are until the new ones are committed
        with np.errstate(over="ignore", invalid="ignore"):
            moments = previous.updated(X, sample_weight, input_eps=input_eps)
        if not moments.is_finite():
            _assert_all_finite(X, input_name="X", estimator_name=name)
        fitted_on = None
        if first and target is not None:
            xp, device = target
            fitted_on = xp.empty((0,), dtype=X.dtype, device=device)
        self._commit(moments, eager=eager, fitted_on=fitted_on)
        return self

    def _commit(
        self, moments: MomentAccumulator, *, eager: bool, fitted_on=None
    ) -> None:
        """Store ``moments`` (and the map if ``eager``) once both are computed.

        A batch that cannot be fitted thus leaves the estimator as it was.
        ``fitted_on``: a 0-size array in the namespace and on the device of
        a first batch of another Array API namespace.
        """
        params = self.get_params(deep=False)
        _check_finite_moments(moments)
        self._check_statistics(moments, params)
        state = self.__dict__
        like = state.get("_fitted_on") if fitted_on is None else fitted_on
        attrs = self._computed_map(moments, params, like) if eager else None
        for name in self._map_names():
            state.pop(name, None)
        if fitted_on is not None:
            state["_fitted_on"] = fitted_on
        self.moments_ = moments
        self.n_samples_seen_ = moments.n_samples
        if attrs is None:
            self._map_pending = params
        else:
            state.update(attrs)
            state.pop("_map_pending", None)

    def _check_statistics(self, moments: MomentAccumulator, params: dict) -> None:
        """Cheap checks of the statistics against the parameters (may raise)."""

    def _compute_map(self, moments: MomentAccumulator, params: dict) -> dict:
        raise NotImplementedError  # pragma: no cover

    def _computed_map(self, moments: MomentAccumulator, params: dict, like) -> dict:
        """:meth:`_compute_map`, its arrays on the device of ``like`` (or numpy)."""
        with one_blas_thread():  # factorisations: see one_blas_thread
            attrs = self._compute_map(moments, params)
        return {name: _on_device_of(value, like) for name, value in attrs.items()}

    def _ensure_map(self) -> None:
        """Compute the map now if ``partial_fit`` left it pending."""
        state = self.__dict__
        params = state.get("_map_pending")
        if params is not None:
            like = state.get("_fitted_on")
            state.update(self._computed_map(state["moments_"], params, like))
            del state["_map_pending"]

    def __sklearn_is_fitted__(self) -> bool:
        # fitted means a fit committed its statistics; a fit that raised
        # part-way (after validate_data set n_features_in_) is not fitted
        return "n_samples_seen_" in self.__dict__

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Apply the fitted map to ``X``.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Embeddings to transform. A dask array is transformed lazily,
            block by block.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features_out)
            Float32 for float32 input, else float64; ``n_features_out`` is
            ``n_components_`` for whitening, ``n_features_in_`` otherwise.
        """
        if is_dask_collection(X):
            from ._dask import transform_dask

            return transform_dask(self, X)
        check_is_fitted(self)
        check_fitted_namespace(self, X, "transform")
        # X is validated except for finiteness: the output is checked instead
        # (one pass over memory fewer; see LinearMap.apply)
        X = validate_data(
            self,
            X,
            reset=False,
            dtype=_float_dtypes(input_namespace(X)),
            ensure_all_finite=False,
        )
        Z, finite = self._linear_map().apply(X)
        if not finite:
            _raise_not_finite(self, X)
        return Z

    def _linear_map(self) -> LinearMap:  # pragma: no cover
        """Return the fitted transform, ``X -> map(X - center)``."""
        raise NotImplementedError

    # None: the map has no inverse (NATSV), and no inverse_transform either;
    # otherwise a method returning the inverse, ``Z -> map(Z) + center``
    _inverse_map = None

    @available_if(lambda self: self._inverse_map is not None)
    def inverse_transform(self, X: ArrayLike) -> np.ndarray:
        """Map transformed rows back to the input space.

        Exact when the output keeps every direction; with whitening that
        keeps fewer components than features, the reconstruction from the
        kept components (as :meth:`sklearn.decomposition.PCA.inverse_transform`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_out)
            Rows as :meth:`transform` returns them.

        Returns
        -------
        X_original : ndarray of shape (n_samples, n_features_in_)
            Float32 for float32 input, else float64.
        """
        check_is_fitted(self)
        check_fitted_namespace(self, X, "inverse_transform")
        # like StandardScaler: no feature-name check, since the input is this
        # estimator's own output (named with its prefix in pandas)
        X = check_array(X, dtype=_float_dtypes(input_namespace(X)))
        n_out = self._n_features_out
        if X.shape[1] != n_out:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__}."
                f"inverse_transform expects {n_out} (the width of its output)."
            )
        return self._inverse_map().apply(X, inverse=True)[0]


def _matmul(Y, A, into):
    # numpy writes the product straight into the output rows ``into``: a copy
    # of the result fewer (what it saves: benchmarks/README.md, "Choices
    # measured once"; the Array API has no ``out=``: other namespaces return
    # the product, and it is copied there)
    return np.matmul(Y, A, out=into) if isinstance(into, np.ndarray) else Y @ A


# the fitted maps by the structure of their matrix: rows ``Y`` -> ``map(Y)``,
# given the output rows ``into`` that the result will be stored in
_MAPS = {
    "identity": lambda Y, A, into: Y,
    "divide": lambda Y, A, into: Y / A,
    "multiply": lambda Y, A, into: Y * A,
    "matmul": _matmul,
    "project_out": lambda Y, A, into: Y - (Y @ A.T) @ A,
}


class LinearMap(NamedTuple):
    """A fitted linear transform by the structure of its matrix.

    ``transform`` computes ``map(X - center)`` (``center`` None: no
    centring), ``inverse_transform`` ``map(Z) + center``, with ``map`` one
    of ``"identity"``, ``"divide"`` (``x / operand``, per feature),
    ``"multiply"`` (``x * operand``), ``"matmul"`` (``x @ operand``) and
    ``"project_out"`` (``x - (x @ operand.T) @ operand``, ``operand``
    orthonormal rows).
    """

    center: np.ndarray | None
    kind: str
    operand: np.ndarray | None = None

    def apply(self, X, *, inverse: bool = False):
        """Return ``(map(X - center), finite)`` (``map(X) + center`` if ``inverse``).

        The same lines for every Array API namespace: the fitted arrays
        (float64, or the widest float of the fitting device) are cast to the
        dtype of ``X``, so float32 input gives float32 output, in the
        namespace and on the device of ``X``. The rows are mapped a block
        at a time, centred before the product: ``X @ W - mean @ W`` would
        round the two large float32 products before they cancel (10-20x the
        error on rows offset by 2 with spreads down to 0.03).

        ``finite`` says whether every entry of the result is finite. Every
        map here is a product or an elementwise map, so a NaN or an infinity
        in a row of ``X`` makes its row of the result non-finite (``NaN *
        w`` is NaN, ``inf * 0`` is NaN): testing the result catches
        non-finite input *and* overflow of the output dtype, with one sum
        per block instead of a pass over ``X``.
        """
        xp, device = namespace_of(X)
        kind = self.kind
        center, operand = (
            None if a is None else xp.astype(a, X.dtype, copy=False)
            for a in (self.center, self.operand)
        )
        n, d = X.shape
        width = operand.shape[1] if kind == "matmul" else d
        out = xp.empty((n, width), dtype=X.dtype, device=device)
        small = kind != "matmul" and isinstance(X, np.ndarray)
        size = _FINISH_BLOCK_BYTES if small else _TRANSFORM_BLOCK_BYTES
        step = max(1, size // (d * xp.finfo(X.dtype).bits // 8))
        total = None
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for rows in gen_batches(n, step):
                Y = X[rows, :]
                if center is not None and not inverse:
                    Y = Y - center
                Y = _MAPS[kind](Y, operand, out[rows, :])
                if center is not None and inverse:
                    Y = Y + center
                out[rows, :] = Y  # nothing to copy if Y is already there
                # a sum is finite only if every term is (or it overflowed, which
                # the elementwise check below tells apart)
                total = xp.sum(Y) if total is None else total + xp.sum(Y)
        finite = total is None or bool(xp.isfinite(total))
        return out, finite or bool(xp.all(xp.isfinite(out)))


def _on_device_of(value, like):
    """Return a fitted numpy array ``value`` on the device of ``like`` (None: as is)."""
    if like is None or not isinstance(value, np.ndarray):
        return value
    return on_device(value, like)


def _raise_not_finite(estimator, X) -> None:
    """Raise sklearn's error for non-finite ``X``, else one for an overflow."""
    xp, _ = namespace_of(X)
    name = type(estimator).__name__
    _assert_all_finite(X, input_name="X", estimator_name=name)
    float32 = X.dtype == xp.float32
    todo = "Pass float64 input, or rescale" if float32 else "Rescale"
    dtype = "float32" if float32 else "float64"
    largest = float(xp.max(xp.abs(X)))
    raise ValueError(
        f"{name}.transform overflowed {dtype}: the input is finite but too "
        f"large for the fitted map (largest |X| = {largest:.3g}). "
        f"{todo} the input like the data the estimator was fitted on."
    )


def _float_dtypes(target):
    """The dtypes ``check_array`` may give: numpy's, or those of ``target``."""
    if target is None:
        return FLOAT_DTYPES
    xp, device = target
    if float_dtype(xp, device) == xp.float32:
        return [xp.float32]
    return [xp.float64, xp.float32]


def _constant_features(moments: MomentAccumulator) -> np.ndarray:
    """Mask of the features constant up to round-off: their spread is no signal.

    A feature counts as constant when its variance ``v_j`` (``ddof=0``) is
    at or below the largest of three round-offs:

    - :class:`~sklearn.preprocessing.StandardScaler`'s, float64's in
      computing the variance: ``n * eps64 * v_j + (n * eps64 * mean_j)**2``;
    - the feature's own rounding: stored in a type of epsilon ``eps``
      (:attr:`MomentAccumulator.input_eps_rms`), its values are known to
      ``eps * |x_ij|``, so a spread below ``eps * |mean_j|`` is rounding;
    - the rows' round-off: an embedding's coordinates come out of sums over
      the whole row (matrix products, normalisations, pooling), whose
      rounding error scales with the row, not with the coordinate. A
      spread below ``eps`` times the rows' spread, ``eps**2 * sum_k v_k``
      in variance, cannot be told from it. Mean pooling leaves such
      features (two at 1e-32 and one at 2e-9 in all-MiniLM-L6-v2's
      float32 outputs on STS-B, against a median of 0.27). The scale is
      that of the centred rows: an offset shared by every row is rounded
      per entry (the rule above), so offset data (mean 1e4, spread 1e-2 in
      float32) keeps its features, which the rows' uncentred norm would
      call round-off from 64 features up.
    """
    var, e = moments.scaled_variances()
    n = moments.sum_weights
    eps64 = np.finfo(np.float64).eps
    eps = moments.input_eps_rms
    with np.errstate(over="ignore", under="ignore"):
        mean = unscale(moments.mean, -e)
        computed = n * eps64 * var + (n * mean * eps64) ** 2
        stored = (eps * mean) ** 2
        rows = eps**2 * float(np.sum(var))
    return var <= np.maximum(np.maximum(computed, stored), rows)


def _check_enough_samples(moments: MomentAccumulator, estimator_name: str) -> None:
    """Raise unless the statistics define a covariance.

    That takes two rows of positive weight and a total weight above one:
    sample weights are frequency weights (a weight of ``w`` counts as ``w``
    copies of the row), and the covariance divides by the total minus one.
    """
    if moments.n_nonzero < 2:
        raise ValueError(
            f"{estimator_name} needs at least 2 samples with positive weight to "
            f"estimate a covariance; got n_samples = {moments.n_samples} "
            f"({moments.n_nonzero} with positive weight, total weight "
            f"{moments.sum_weights:g}). With partial_fit, make the first batch "
            "at least 2 rows long."
        )
    if moments.sum_weights <= 1:
        raise ValueError(
            f"{estimator_name} reads sample_weight as frequency weights (a "
            "weight of w counts as w copies of the row) and divides the "
            "covariance by the total weight minus one, so the total weight must "
            f"exceed 1; got a total of {moments.sum_weights:g} over "
            f"{moments.n_nonzero} rows of positive weight. Scale the weights up, "
            "e.g. sample_weight * n_samples / sample_weight.sum() (the relative "
            "weights are what matter), or pass counts."
        )


def _check_finite_moments(moments: MomentAccumulator) -> None:
    """Raise if the statistics overflowed, or their variances exceed float64.

    The accumulator works in scaled units, so its statistics stay finite for
    any finite input that does not overflow on its own; the variances, in
    the units of the data, must still be representable (inputs of magnitude
    around 1e154 and more are not).
    """
    ok = moments.is_finite()
    if ok and moments.representation == "scatter" and moments.sum_weights > 0:
        variances, e = moments.scaled_variances()
        top = float(np.max(variances))
        if top > 0:
            ok = math.log2(top) + 2 * e < 1023
    if not ok:
        raise ValueError(
            "The mean or the sum of squares of the input overflowed float64 "
            "(values of magnitude around 1e154 or more). Rescale the input, e.g. "
            "divide it by its largest absolute value, before fitting."
        )
