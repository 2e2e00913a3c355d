"""Dask back end of the linear post-processors: moments by tree reduction.

Nothing here imports dask at module level (the estimators only call
:func:`~sklearn_isotropy._utils.is_dask_collection`, which looks at
``sys.modules``), so a numpy fit never imports dask; the functions that build
task graphs import it when they run. The user guide's "Scaling" page
documents the behaviour.
"""

from __future__ import annotations

import copy
import uuid

import numpy as np

from .._utils import import_optional, is_dask_collection
from .._utils._sklearn import _check_feature_names
from ._moments import MomentAccumulator

# statistics merged per task of the tree reduction: each combine task holds
# at most this many (n_features, n_features) matrices
_FAN_IN = 8
# rows checked for NaN/inf at a time inside a block (bounds the boolean mask)
_CHECK_ROWS = 4096
# problems quoted in full in the error message; the rest are only counted
_MAX_QUOTED_PROBLEMS = 5


def _import_dask():
    dask = import_optional("dask", purpose="Fitting or transforming dask collections")
    import_optional("dask.array", purpose="Fitting or transforming dask collections")
    return dask


# --------------------------------------------------------------------- inputs
def _as_dask_array(X, estimator, *, reset: bool):
    """Return ``X`` as a 2-D dask array with one chunk along the columns.

    Dask DataFrames are converted with their partition lengths, and their
    column names are checked (or recorded, with ``reset=True``) the way
    ``validate_data`` does for pandas input.
    """
    import dask.array as da

    name = type(estimator).__name__
    if not isinstance(X, da.Array):
        meta = getattr(X, "_meta", None)
        if hasattr(X, "to_dask_array") and getattr(meta, "ndim", 0) == 2:
            _check_feature_names(estimator, meta, reset=reset)
            X = X.to_dask_array(lengths=True)
        else:
            raise TypeError(
                f"{name} accepts a dask.array.Array or a dask DataFrame of shape "
                f"(n_samples, n_features); got {type(X).__module__}."
                f"{type(X).__qualname__}. Convert it first (for a dask Bag of "
                "rows, e.g. `dask.array.stack` of its partitions)."
            )
    elif reset:
        _check_feature_names(estimator, np.empty((0, 0)), reset=True)
    if X.ndim != 2:
        raise ValueError(
            f"Expected a 2-D dask array of shape (n_samples, n_features), got "
            f"one with {X.ndim} dimension(s) and shape {X.shape}. Reshape your "
            "data, e.g. with X.reshape(-1, 1) for a single feature."
        )
    if X.dtype.kind not in "biuf":
        raise ValueError(
            f"{name} needs a real numeric dask array; got dtype {X.dtype}. Cast "
            "it with X.astype('float64') (or 'float32')."
        )
    if np.isnan(X.shape[1]):
        raise ValueError(
            "The number of columns of the dask array is unknown; call "
            "X.compute_chunk_sizes() first."
        )
    if X.shape[1] < 1:
        raise ValueError(
            f"Found array with 0 feature(s) (shape={X.shape}) while a minimum "
            f"of 1 is required by {name}."
        )
    if len(X.chunks[1]) > 1:
        # one chunk along the columns: every task sees whole rows
        X = X.rechunk({1: -1})
    return X


def _row_offsets(chunks) -> list:
    """Start row of every row-chunk, or None for chunks after an unknown size."""
    offsets, start = [], 0
    for size in chunks:
        offsets.append(start)
        start = None if start is None or np.isnan(size) else start + int(size)
    return offsets


def _weight_blocks(sample_weight, X, name):
    """Per-row-chunk pieces of ``sample_weight`` aligned with the chunks of X."""
    import dask.array as da

    n_chunks = len(X.chunks[0])
    if sample_weight is None:
        return [None] * n_chunks
    known = not any(np.isnan(c) for c in X.chunks[0])
    if not isinstance(sample_weight, da.Array):
        if is_dask_collection(sample_weight):
            raise TypeError(
                "sample_weight must be a numpy array or a 1-D dask array, got "
                f"{type(sample_weight).__qualname__}."
            )
        sample_weight = np.asarray(sample_weight, dtype=np.float64)
        if not known:
            raise ValueError(
                "A numpy sample_weight needs a dask X with known chunk sizes; call "
                "X.compute_chunk_sizes() or pass sample_weight as a dask array "
                "chunked like the rows of X."
            )
        if sample_weight.shape != (X.shape[0],):
            raise ValueError(
                f"sample_weight has shape {sample_weight.shape}, expected "
                f"({X.shape[0]},) to match the rows of X."
            )
        sample_weight = da.from_array(sample_weight, chunks=(X.chunks[0],))
    if sample_weight.ndim != 1:
        raise ValueError(f"sample_weight must be 1-D, got shape {sample_weight.shape}.")
    if sample_weight.chunks[0] != X.chunks[0]:
        sw_known = not any(np.isnan(c) for c in sample_weight.chunks[0])
        if not (known and sw_known):
            raise ValueError(
                "sample_weight must be chunked like the rows of X when chunk sizes "
                f"are unknown; got {len(sample_weight.chunks[0])} weight chunks "
                f"for {n_chunks} row chunks. Call compute_chunk_sizes() on both."
            )
        if sample_weight.shape[0] != X.shape[0]:
            raise ValueError(
                f"sample_weight has {sample_weight.shape[0]} entries but X has "
                f"{X.shape[0]} rows; pass one weight per row."
            )
        sample_weight = sample_weight.rechunk((X.chunks[0],))
    return list(sample_weight.to_delayed().ravel())


# ---------------------------------------------------------- per-block worker
class _BlockProblems:
    """Invalid input of some blocks, returned by the workers.

    The client then raises one ValueError naming every bad block, not a remote
    traceback.
    """

    def __init__(self, messages, count=None) -> None:
        self.messages = list(messages)[:_MAX_QUOTED_PROBLEMS]
        self.count = len(messages) if count is None else count

    def merge(self, other: _BlockProblems) -> _BlockProblems:
        return _BlockProblems(self.messages + other.messages, self.count + other.count)

    def error(self, name: str) -> ValueError:
        more = self.count - len(self.messages)
        lines = "\n".join(f"  - {m}" for m in self.messages)
        tail = f"\n  ... and {more} more block(s)." if more > 0 else ""
        return ValueError(
            f"{name} cannot be fitted on this dask array: {self.count} block(s) "
            f"hold invalid input.\n{lines}{tail}\nDrop or impute the rows with "
            "NaN or infinity (e.g. X[da.isfinite(X).all(axis=1)]), make the "
            "sample weights finite and non-negative, and fit again."
        )


def _where(index, offset, row) -> str:
    if offset is None:
        return f"block {index} (row {row} of the block)"
    return f"block {index} (global row {offset + row})"


def _block_moments(X, w, options, index, offset):
    """Moments of one row-chunk, or a :class:`_BlockProblems` describing it."""
    X = np.asarray(X)
    n, d = X.shape
    rows = f"rows {offset}-{offset + n - 1}" if offset is not None else f"{n} rows"
    for start in range(0, n, _CHECK_ROWS):
        bad = ~np.isfinite(X[start : start + _CHECK_ROWS])
        if bad.any():
            r, c = np.argwhere(bad)[0]
            value = X[start + r, c]
            n_bad = int(bad.any(axis=1).sum())
            for later in range(start + _CHECK_ROWS, n, _CHECK_ROWS):
                n_bad += int(
                    (~np.isfinite(X[later : later + _CHECK_ROWS])).any(1).sum()
                )
            return _BlockProblems(
                [
                    f"X contains {'NaN' if np.isnan(value) else 'infinity'} in "
                    f"{_where(index, offset, start + r)}, column {c}; the block "
                    f"({rows}) has {n_bad} row(s) with NaN or infinity."
                ]
            )
    if w is not None:
        w = np.asarray(w, dtype=np.float64)
        if w.shape != (n,):
            return _BlockProblems(
                [
                    f"sample_weight block {index} has {w.shape[0]} entries for "
                    f"{n} rows of X."
                ]
            )
        if not np.all(np.isfinite(w)):
            r = int(np.flatnonzero(~np.isfinite(w))[0])
            where = _where(index, offset, r)
            return _BlockProblems([f"sample_weight is NaN or infinite in {where}."])
        if np.any(w < 0):
            r = int(np.flatnonzero(w < 0)[0])
            return _BlockProblems(
                [
                    f"sample_weight is negative ({float(w[r])!r}) in "
                    f"{_where(index, offset, r)}; weights must be non-negative."
                ]
            )
    with np.errstate(over="ignore", invalid="ignore"):  # reported on the client
        return MomentAccumulator(d, **options).update(X, w)


def _combine(*parts):
    """Combine step of the tree reduction: merge statistics, collect problems."""
    problems = [p for p in parts if isinstance(p, _BlockProblems)]
    if problems:
        out = problems[0]
        for p in problems[1:]:
            out = out.merge(p)
        return out
    out = parts[0]
    for p in parts[1:]:
        out = out.merge(p)
    return out


def _tree_reduce(parts):
    from dask import delayed

    level = 0
    while len(parts) > 1:
        parts = [
            delayed(_combine, pure=True)(
                *parts[i : i + _FAN_IN],
                dask_key_name=f"isotropy-combine-{level}-{i}-{uuid.uuid4().hex}",
            )
            for i in range(0, len(parts), _FAN_IN)
        ]
        level += 1
    return parts[0]


def moments_dask(
    X, sample_weight=None, *, kind="full", fourth_moments=True, name="estimator"
):
    """Compute the :class:`MomentAccumulator` of a 2-D dask array.

    One task per row-chunk computes its statistics where the chunk lives;
    a tree of :meth:`MomentAccumulator.merge` tasks (fan-in 8) combines them,
    so no task holds more than its block and a few ``d x d`` matrices.
    """
    dask = _import_dask()
    blocks = list(X.to_delayed().ravel())
    weights = _weight_blocks(sample_weight, X, name)
    offsets = _row_offsets(X.chunks[0])
    token = uuid.uuid4().hex
    options = {"kind": kind, "fourth_moments": fourth_moments}
    parts = [
        dask.delayed(_block_moments, pure=True)(
            b, w, options, i, off, dask_key_name=f"isotropy-moments-{i}-{token}"
        )
        for i, (b, w, off) in enumerate(zip(blocks, weights, offsets))
    ]
    (result,) = dask.compute(_tree_reduce(parts))
    if isinstance(result, _BlockProblems):
        raise result.error(name)
    return result


# ------------------------------------------------------- estimator back end
def partial_fit_dask(
    estimator, X, sample_weight=None, *, first: bool, eager: bool = False
):
    """Fit (``first=True``) or update ``estimator`` from a dask collection.

    Mirrors ``_StreamingMomentsMixin._partial_fit``: the statistics are
    computed on the workers and merged; with ``eager`` (``fit``) the map is
    computed on the client before anything is committed, otherwise
    (``partial_fit``) at its first use.
    """
    _import_dask()
    name = type(estimator).__name__
    X = _as_dask_array(X, estimator, reset=first)
    d = int(X.shape[1])
    if not first and d != estimator.n_features_in_:
        raise ValueError(
            f"X has {d} features, but {name} is expecting "
            f"{estimator.n_features_in_} features as input."
        )
    batch = moments_dask(
        X,
        sample_weight,
        kind=estimator._moments_kind,
        # a continued fit keeps what it started with, as partial_fit on arrays does
        fourth_moments=(
            estimator._needs_fourth_moments()
            if first
            else estimator.moments_.fourth_moments
        ),
        name=name,
    )
    if batch.n_samples == 0:
        raise ValueError(
            f"Found array with 0 sample(s) (shape={X.shape}) while a minimum of 1 "
            f"is required by {name}."
        )
    moments = batch if first else estimator.moments_.merge(batch)
    if first:
        estimator.n_features_in_ = d
    estimator._commit(moments, eager=eager)
    return estimator


def _transform_block(block, estimator):
    return estimator.transform(block)


def _lean_copy(estimator):
    """Shallow copy holding only what ``transform`` needs, for the task graph."""
    estimator._ensure_map()  # a map left stale by partial_fit is computed here
    lean = copy.copy(estimator)
    for attr in ("moments_", "covariance_", "feature_names_in_"):
        lean.__dict__.pop(attr, None)
    # blocks are numpy arrays; a pandas set_output config must not apply there
    lean.__dict__.pop("_sklearn_output_config", None)
    return lean


def transform_dask(estimator, X):
    """Lazy block-wise ``estimator.transform`` of a dask array.

    Returns a dask array with the row chunks of ``X``, one chunk of
    ``estimator._n_features_out`` columns, float32 for float32 input and
    float64 otherwise. Nothing is computed.
    """
    from sklearn.utils.validation import check_is_fitted

    dask = _import_dask()
    check_is_fitted(estimator)
    name = type(estimator).__name__
    X = _as_dask_array(X, estimator, reset=False)
    if X.shape[1] != estimator.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {name} is expecting "
            f"{estimator.n_features_in_} features as input."
        )
    dtype = np.dtype(np.float32 if X.dtype == np.float32 else np.float64)
    n_out = int(estimator._n_features_out)
    token = uuid.uuid4().hex
    # the fitted estimator is one key of the graph, sent once to each worker
    lean = dask.delayed(_lean_copy(estimator), name=f"isotropy-{name}-{token}")
    return X.map_blocks(
        _transform_block,
        lean,
        dtype=dtype,
        chunks=(X.chunks[0], (n_out,)),
        meta=np.empty((0, n_out), dtype=dtype),
        name=f"isotropy-{name.lower()}-transform-{token}",
    )
