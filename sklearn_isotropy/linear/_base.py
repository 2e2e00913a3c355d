"""Shared machinery of the linear post-processors: exact streaming fits."""

from __future__ import annotations

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.utils.validation import (
    _assert_all_finite,
    _check_sample_weight,
    check_is_fitted,
    validate_data,
)

from .._utils import is_dask_collection
from ._moments import MomentAccumulator

FLOAT_DTYPES = (np.float64, np.float32)

# bytes of output finished per step in ``_finish_checked``: small enough for
# the block to stay in a core's L2 cache between the subtraction and the check
_FINISH_BLOCK_BYTES = 2**18


def _check_nonnegative_weights(sample_weight, X):
    """Validate ``sample_weight`` as finite, non-negative float64 weights."""
    if sample_weight is None:
        return None
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


class _StreamingMomentsMixin(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator
):
    """Base of the estimators fitted from a :class:`MomentAccumulator`.

    ``fit`` is a reset followed by ``partial_fit``; ``partial_fit`` merges the
    batch into ``moments_`` and recomputes the fitted map from the merged
    statistics, so any split of the data into batches gives the same model.
    Subclasses set ``_moments_kind`` and implement ``_fit_moments``; those
    whose fit needs the fourth moments (Ledoit-Wolf shrinkage) override
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

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    def _reset(self) -> None:
        fitted = [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]
        for name in fitted:
            delattr(self, name)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Fit on ``X``, forgetting any previous fit.

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

            return partial_fit_dask(self, X, sample_weight, first=True)
        return self._partial_fit(X, sample_weight, first=True)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y=None, sample_weight=None):
        """Update the fit with a batch of rows (exact streaming).

        The count, mean and scatter of all batches seen so far are merged in
        float64, so the result equals one ``fit`` on the concatenated batches
        up to round-off; memory does not grow with the number of rows.

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
        first = not hasattr(self, "moments_")
        if is_dask_collection(X) or is_dask_collection(sample_weight):
            from ._dask import partial_fit_dask

            return partial_fit_dask(self, X, sample_weight, first=first)
        return self._partial_fit(X, sample_weight, first=first)

    def _partial_fit(self, X, sample_weight, *, first):
        X = validate_data(self, X, reset=first, dtype=FLOAT_DTYPES)
        sample_weight = _check_nonnegative_weights(sample_weight, X)
        if first:
            moments = self._new_moments(X.shape[1])
        else:
            moments = self.moments_.copy()
        # overflow leaves non-finite statistics, which _fit_moments reports
        # as one clear error (_check_finite_moments) instead of warnings
        with np.errstate(over="ignore", invalid="ignore"):
            moments.update(X, sample_weight)
        self._commit(moments)
        return self

    def _commit(self, moments: MomentAccumulator) -> None:
        """Fit the map to ``moments`` and store them (numpy and dask paths).

        The new map is computed before anything is stored, so a batch that
        cannot be fitted leaves a previously fitted estimator untouched.
        """
        self._fit_moments(moments)
        self.moments_ = moments
        self.n_samples_seen_ = moments.n_samples

    def _fit_moments(self, moments: MomentAccumulator) -> None:  # pragma: no cover
        raise NotImplementedError

    def __sklearn_is_fitted__(self) -> bool:
        # fitted means a fit committed its statistics; a fit that raised
        # part-way (after validate_data set n_features_in_) is not fitted
        return hasattr(self, "n_samples_seen_")

    def _transform_dask(self, X):
        """Lazy block-wise transform of a dask collection (see ``_dask.py``)."""
        from ._dask import transform_dask

        return transform_dask(self, X)

    def _transform(self, X):
        """Shared body of ``transform``: dask dispatch, checks, then the map.

        ``X`` is validated except for finiteness: subclasses compute their
        output in ``_transform_array`` with :func:`_finish_checked`, which
        checks the output instead (one pass over memory fewer).
        """
        if is_dask_collection(X):
            return self._transform_dask(X)
        check_is_fitted(self)
        X = validate_data(
            self, X, reset=False, dtype=FLOAT_DTYPES, ensure_all_finite=False
        )
        return self._transform_array(X)

    def _transform_array(self, X):  # pragma: no cover
        raise NotImplementedError


def _finish_checked(estimator, X, out, finish) -> None:
    """Fill ``out`` block of rows by block, then make sure it is finite.

    ``finish(rows)`` computes ``out[rows]`` (the last, elementwise step of a
    transform). ``X`` was validated without the finite check: every
    transform here is a product or an elementwise map, so a NaN or an
    infinity in a row of ``X`` makes its row of ``out`` non-finite (``NaN *
    w`` is NaN, ``inf * 0`` is NaN). Checking the output catches non-finite
    input *and* overflow of the output dtype, and each block is checked while
    it is still in cache from ``finish``, which saves a whole pass over ``X``.

    Raises sklearn's usual error for NaN or infinite input, and a ValueError
    saying what to do if finite input overflowed the output dtype.
    """
    n_rows, width = out.shape
    step = max(1, _FINISH_BLOCK_BYTES // max(1, width * out.itemsize))
    finite = True
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for lo in range(0, n_rows, step):
            rows = slice(lo, min(lo + step, n_rows))
            finish(rows)
            # a sum is finite only if every term is (or it overflowed, which
            # the elementwise check below tells apart)
            finite = finite and bool(np.isfinite(out[rows].sum()))
    if finite or np.all(np.isfinite(out)):
        return
    name = type(estimator).__name__
    _assert_all_finite(X, input_name="X", estimator_name=name)
    todo = "Pass float64 input, or rescale" if out.dtype == np.float32 else "Rescale"
    raise ValueError(
        f"{name}.transform overflowed {out.dtype}: the input is finite but too "
        f"large for the fitted map (largest |X| = {float(np.max(np.abs(X))):.3g}). "
        f"{todo} the input like the data the estimator was fitted on."
    )


def _check_enough_samples(moments: MomentAccumulator, estimator_name: str) -> None:
    """Raise unless the statistics define a covariance (two rows of weight)."""
    if moments.n_nonzero < 2 or moments.sum_weights <= 1:
        raise ValueError(
            f"{estimator_name} needs at least 2 samples with positive weight to "
            f"estimate a covariance; got n_samples = {moments.n_samples} "
            f"({moments.n_nonzero} with positive weight, total weight "
            f"{moments.sum_weights:g}). With partial_fit, make the first batch "
            "at least 2 rows long."
        )


def _check_finite_moments(moments: MomentAccumulator) -> None:
    """Raise if the float64 statistics overflowed (entries near 1e154 or more)."""
    if not (np.all(np.isfinite(moments.mean)) and np.all(np.isfinite(moments.scatter))):
        raise ValueError(
            "The mean or the sum of squares of the input overflowed float64 "
            "(values of magnitude around 1e154 or more). Rescale the input, e.g. "
            "divide it by its largest absolute value, before fitting."
        )


def _sorted_eigh(cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of a symmetric matrix, largest first, with deterministic signs."""
    evals, evecs = np.linalg.eigh(cov)  # LAPACK syevd, divide and conquer
    evals, evecs = evals[::-1], evecs[:, ::-1]
    # the entry of largest magnitude of every eigenvector is made positive, so
    # two fits on the same statistics give the same components
    signs = np.sign(evecs[np.argmax(np.abs(evecs), axis=0), np.arange(evecs.shape[1])])
    signs[signs == 0] = 1.0
    return evals, evecs * signs


def _numerical_rank(evals: np.ndarray, n_nonzero: int, shrunk: bool) -> int:
    """Directions the data actually span: eigenvalues above round-off level."""
    top = evals[0] if evals.size else 0.0
    if top <= 0:
        return 0
    tol = top * evals.size * np.finfo(np.float64).eps
    rank = int(np.count_nonzero(evals > tol))
    if not shrunk:
        # n centred rows span at most n - 1 directions
        rank = min(rank, n_nonzero - 1)
    return rank
