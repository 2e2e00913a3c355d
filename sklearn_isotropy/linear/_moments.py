"""Exact, mergeable streaming moments: count, mean and scatter in float64.

One accumulator serves every linear post-processor (whitening, NATSV, standard
normalisation). A batch is read once: each block of rows is converted to
float64 about a provisional centre and multiplied into the scatter matrix,
and the exact scatter about the batch mean follows from the accumulated sums
(with a second pass only when the provisional centre was too far off to be
exact). Batches and accumulators are merged with the parallel-variance update
of Chan, Golub and LeVeque, so a stream of ``partial_fit`` calls, or a tree
reduction of per-worker statistics, gives the same numbers as one pass over
the concatenated data, to float64 round-off.

While fewer rows than features have been seen, the accumulator keeps the
rows themselves instead of the ``d x d`` scatter matrix (the dual form): the
estimators then work with ``n x n`` quantities, which is what makes 10 rows
of 20,000 features cheap.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from numpy.typing import ArrayLike

from ._array_api import input_namespace, is_array, namespace_of, to_host
from ._scatter_kernels import (
    REFINE_RATIO,
    SAFE_LOG2,
    accumulate,
    batch_statistics,
    head_rows,
    merged_exponent,
    safe_exponent,
    shift_norm3,
    shift_norm4,
    unscale,
)

__all__ = ["MomentAccumulator", "rounding_eps"]

_FLOAT64_EPS = float(np.finfo(np.float64).eps)


def rounding_eps(X) -> float:
    """Machine epsilon of the floating type that holds the values of ``X``.

    The relative round-off the values carry: float32 (or float16) values
    were rounded to that type, and converting them to float64 later keeps
    the error. At least float64's (float64 or integer values, lists). Only
    the dtype is read (each column's, for a DataFrame), so this is free.
    """
    dtypes = getattr(X, "dtypes", None)
    if dtypes is None or not hasattr(dtypes, "__iter__"):
        dtypes = [getattr(X, "dtype", dtypes)]
    eps = _FLOAT64_EPS
    for dtype in dtypes:
        # a pandas extension dtype (Float32Dtype) names its numpy dtype
        dtype = getattr(dtype, "numpy_dtype", dtype)
        try:
            dtype = np.dtype(dtype)
        except TypeError:  # the dtype of another Array API namespace
            if is_array(X):
                xp, _ = namespace_of(X)
                if xp.isdtype(dtype, "real floating"):
                    eps = max(eps, float(xp.finfo(dtype).eps))
            continue
        if dtype.kind == "f":
            eps = max(eps, float(np.finfo(dtype).eps))
    return eps


class MomentAccumulator:
    """Weighted count, mean and scatter of a stream of rows, mergeable.

    The accumulator holds, in float64, the total weight, the weighted mean and
    the scatter matrix ``sum_i w_i (x_i - mean)(x_i - mean)^T`` of every row
    seen so far, and the moments Ledoit-Wolf shrinkage needs. Two
    accumulators combine exactly into the statistics of the union of their
    rows, which makes ``partial_fit`` exact and distributed fitting possible.

    Parameters
    ----------
    n_features : int
        Width of the rows.
    kind : {"full", "diag"}, default="full"
        ``"full"`` keeps the whole ``(n_features, n_features)`` scatter
        matrix; ``"diag"`` keeps only per-feature sums of squares, enough
        for per-dimension standardisation and ``O(n_features)`` in memory.
    fourth_moments : bool, default=True
        With ``kind="full"``, also keep ``norm3`` and ``norm4``, which
        :meth:`ledoit_wolf_shrinkage` needs (their share of an update's time
        is in ``benchmarks/README.md``, "Choices measured once").
    keep_rows : bool, default=True
        With ``kind="full"``, keep the rows themselves (in float64) while
        fewer rows of positive weight than ``n_features`` have been seen, so
        the estimators can use the ``n x n`` dual form. ``False`` builds the
        scatter matrix from the first row.

    Attributes
    ----------
    n_samples : int
        Rows seen, including rows of weight zero.
    n_nonzero : int
        Rows seen with a positive weight.
    sum_weights : float
        Total weight (the number of rows when unweighted).
    mean : ndarray of shape (n_features,)
        Weighted mean.
    scatter : ndarray of shape (n_features, n_features) or (n_features,)
        Weighted scatter matrix about the mean (diagonal only for
        ``kind="diag"``), computed from the rows while they are kept.
    norm3 : ndarray of shape (n_features,) or None
        ``sum_i w_i ||x_i - mean||^2 (x_i - mean)``, if kept.
    norm4 : float or None
        ``sum_i w_i ||x_i - mean||^4``, if kept.
    fourth_moments : bool
        Whether ``norm3`` and ``norm4`` are kept.
    input_eps : float
        Machine epsilon of the coarsest floating type of the rows seen
        (float64's for float64 or integer rows): their relative round-off
        before they reached the float64 statistics.
    input_eps_rms : float
        Root mean square of the machine epsilons of the rows seen, weighted
        like the rows: ``sqrt(sum_i w_i eps_i**2 / sum_w)``. Equal to
        ``input_eps`` when every row has the same dtype; a float16 batch
        among float32 ones raises it by that batch's share of the weight
        only. The estimators' rank tolerance scales with it.
    representation : {"rows", "scatter"}
        What is kept: the rows themselves, or the scatter matrix.

    Notes
    -----
    Centred rows smaller than ``2**-200`` or larger than ``2**200`` are
    scaled by a power of two before squaring, so data around ``1e-200``
    keeps its precision. ``scatter`` and :meth:`covariance` are in the units
    of the data; the estimators work in the scaled units, through
    :meth:`scaled_covariance`, :meth:`scaled_variances` and
    :meth:`scaled_rows`, which return ``a`` and ``e`` with the statistic
    ``a * 4**e`` (``a * 2**e`` for the rows), exactly.

    Rows of another Array API namespace (``array_api_dispatch=True``) are
    multiplied on their device and only the sums come to host memory, so the
    statistics are always numpy float64 arrays (:ref:`gpu`). A large numpy
    batch is split by rows across BLAS threads and added in a fixed order:
    the same rows give the same bits whatever the thread limits.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy import MomentAccumulator
    >>> X = np.arange(12.0).reshape(6, 2)
    >>> a = MomentAccumulator(2).update(X[:4])
    >>> b = MomentAccumulator(2).update(X[4:])
    >>> ab = a.merge(b)
    >>> np.allclose(ab.covariance(), np.cov(X, rowvar=False))
    True
    """

    def __init__(
        self,
        n_features: int,
        *,
        kind: str = "full",
        fourth_moments: bool = True,
        keep_rows: bool = True,
    ) -> None:
        if not isinstance(n_features, numbers.Integral) or n_features < 1:
            raise ValueError(
                f"n_features must be a positive integer, got {n_features!r}."
            )
        if kind not in ("full", "diag"):
            raise ValueError(f"kind must be 'full' or 'diag', got {kind!r}.")
        d = int(n_features)
        self.n_features = d
        self.kind = kind
        self.n_samples = 0
        self.n_nonzero = 0
        self.sum_weights = 0.0
        self.mean = np.zeros(d)
        # float32 rows carry float32 round-off into the float64 statistics:
        # the coarsest epsilon seen, and sum_i w_i eps_i**2 (each row's
        # rounding counts with its weight)
        self._input_eps = _FLOAT64_EPS
        self._eps2_weight = 0.0
        # the second-order statistics are stored divided by 2**(2 * _exp)
        # (norm3 by 2**(3 * _exp), norm4 by 2**(4 * _exp)); 0 for most data
        self._exp = 0
        self._fourth = bool(fourth_moments) and kind == "full"
        self._norm3 = np.zeros(d) if self._fourth else None
        self._norm4 = 0.0 if self._fourth else None
        if kind == "full" and keep_rows:
            self._rows = []  # float64 blocks of the rows of positive weight
            self._row_weights = []  # their weights (None for unit weights)
            self._scatter = None
        else:
            self._rows = self._row_weights = None
            self._scatter = np.zeros((d, d)) if kind == "full" else np.zeros(d)

    # -------------------------------------------------------------- properties
    @property
    def fourth_moments(self) -> bool:
        """Whether ``norm3`` and ``norm4`` are kept (Ledoit-Wolf possible)."""
        return self._fourth

    @property
    def input_eps(self) -> float:
        """Relative round-off of the rows seen: their dtype's machine epsilon."""
        return self._input_eps

    @property
    def input_eps_rms(self) -> float:
        """Relative round-off of the rows seen, the root mean square over the rows."""
        if self.sum_weights > 0:
            return math.sqrt(self._eps2_weight / self.sum_weights)
        return self._input_eps

    @property
    def representation(self) -> str:
        """``"rows"`` while the rows themselves are kept, else ``"scatter"``."""
        return "scatter" if self._rows is None else "rows"

    @property
    def scatter(self) -> np.ndarray:
        """Weighted scatter about the mean, in the units of the data."""
        stats = self._as_scatter()
        return unscale(stats._scatter, 2 * stats._exp)

    @property
    def norm3(self) -> np.ndarray | None:
        """``sum_i w_i ||x_i - mean||^2 (x_i - mean)``, or None."""
        if not self._fourth:
            return None
        stats = self._as_scatter()
        return unscale(stats._norm3, 3 * stats._exp)

    @property
    def norm4(self) -> float | None:
        """``sum_i w_i ||x_i - mean||^4``, or None."""
        if not self._fourth:
            return None
        stats = self._as_scatter()
        return float(unscale(np.float64(stats._norm4), 4 * stats._exp))

    def __repr__(self) -> str:
        return (
            f"MomentAccumulator(n_features={self.n_features}, kind={self.kind!r}, "
            f"n_samples={self.n_samples}, sum_weights={self.sum_weights:g})"
        )

    # ----------------------------------------------------------------- pickling
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if self._rows is not None and len(self._rows) > 1:
            rows, weights = self._kept_rows()
            state["_rows"] = [rows]
            state["_row_weights"] = [weights]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        # statistics pickled before the weighted epsilon was kept: every row
        # counted at the coarsest epsilon, as the rank tolerance then did
        if "_eps2_weight" not in state:
            self._eps2_weight = self._input_eps**2 * self.sum_weights

    # ------------------------------------------------------------------ update
    def update(
        self,
        X: ArrayLike,
        sample_weight: ArrayLike | None = None,
        *,
        input_eps: float | None = None,
    ) -> MomentAccumulator:
        """Add the rows of ``X`` (with optional weights) in place.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Finite rows; converted block by block to float64.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights; ``None`` means 1 for every row.
        input_eps : float, default=None
            Relative round-off of the rows when it exceeds their dtype's
            (float16 rows that validation converted to float64); None: the
            machine epsilon of the dtype of ``X``.

        Returns
        -------
        self : MomentAccumulator
            The updated accumulator.
        """
        updated = self.updated(X, sample_weight, input_eps=input_eps)
        if updated is not self:
            self.__dict__.update(updated.__dict__)
        return self

    def updated(
        self,
        X: ArrayLike,
        sample_weight: ArrayLike | None = None,
        *,
        input_eps: float | None = None,
    ) -> MomentAccumulator:
        """Return the statistics of ``self`` and the rows of ``X``; ``self`` is kept.

        The same statistics as :meth:`update`, in a new accumulator (``self``
        itself when ``X`` has no rows) that shares no array ``update`` could
        modify. This is what ``partial_fit`` uses: a batch that fails leaves
        the estimator's statistics untouched, without copying them first.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Finite rows.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights; ``None`` means 1 for every row.
        input_eps : float, default=None
            Relative round-off of the rows when it exceeds their dtype's
            (see :meth:`update`).

        Returns
        -------
        moments : MomentAccumulator
            The new statistics (``self`` when ``X`` has no rows).
        """
        # before np.asarray, which makes a float64 array of mixed columns
        input_eps = max(rounding_eps(X), input_eps or 0.0)
        if input_namespace(X) is None:
            X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(
                f"Expected rows of width {self.n_features}, got an array of shape "
                f"{X.shape}."
            )
        n = X.shape[0]
        w = sample_weight
        if w is not None:
            w = np.asarray(w if input_namespace(w) is None else to_host(w), np.float64)
            if w.shape != (n,):
                raise ValueError(f"sample_weight has shape {w.shape}, expected ({n},).")
        if not n:
            return self
        out = self._with_rows(X, w)  # a new accumulator
        out._input_eps = max(self._input_eps, input_eps)
        batch_weight = float(n) if w is None else float(w.sum())
        out._eps2_weight = self._eps2_weight + input_eps**2 * batch_weight
        return out

    def _with_rows(self, X, w) -> MomentAccumulator:
        n = X.shape[0]
        if self._rows is not None:
            if self._n_kept() + _n_positive(w, n) < self.n_features:
                out = self.copy()
                out._append_rows(X, w)
                return out
            base = self._as_scatter()
            owned = True
        else:
            base, owned = self, False
        if base.sum_weights > 0 and not base._fourth and base._exp == 0:
            out = base._with_batch_about_mean(X, w)
            if out is not None:
                return out
        out = base if owned else base.copy()
        shift = base.mean if base.sum_weights > 0 else None
        out._merge_inplace(base._from_batch(X, w, shift), adopt=True)
        return out

    def _with_batch_about_mean(self, X, w) -> MomentAccumulator | None:
        """One pass about the running mean: ``scatter + S - s s^T / N``, exactly.

        ``S = sum w y y^T``, ``s = sum w y`` with ``y = x - mean``. None (the
        general path re-reads the batch) when the batch needs scaling or would
        cancel more than half of a diagonal entry (far from the running mean).
        """
        n = X.shape[0]
        sw = float(n) if w is None else float(w.sum())
        if sw == 0:
            out = self.copy()
            out.n_samples += n
            return out
        head = head_rows(X)
        head -= self.mean
        if safe_exponent(float(np.max(np.abs(head)))) != 0:
            return None
        S, s, _, _ = accumulate(X, w, self.kind, False, self.mean, 0)
        S += self._scatter
        total = self.sum_weights + sw
        u = s / math.sqrt(total)
        diag = np.diagonal(S) if self.kind == "full" else S
        with np.errstate(divide="ignore", invalid="ignore"):
            cancelled = np.where(diag > 0, u * u / diag, 0.0)
        if np.max(cancelled, initial=0.0) > REFINE_RATIO:
            return None
        if self.kind == "full":
            S -= np.outer(u, u)  # exactly symmetric, as S is
        else:
            S -= u * u
        out = MomentAccumulator.__new__(MomentAccumulator)
        out.__dict__.update(self.__dict__)
        out.n_samples = self.n_samples + n
        out.n_nonzero = self.n_nonzero + _n_positive(w, n)
        out.sum_weights = total
        out.mean = self.mean + s / total
        out._scatter = S
        return out

    def _from_batch(self, X, w, shift=None) -> MomentAccumulator:
        """Scatter-form statistics of a batch (:func:`batch_statistics`)."""
        out = MomentAccumulator(
            self.n_features,
            kind=self.kind,
            fourth_moments=self._fourth,
            keep_rows=False,
        )
        n = X.shape[0]
        out.n_samples = n
        out.n_nonzero = _n_positive(w, n)
        sw = float(n) if w is None else float(w.sum())
        if sw == 0:
            return out
        stats = batch_statistics(X, w, sw, self.kind, self._fourth, shift)
        out.sum_weights = sw
        out.mean, out._scatter, out._norm3, out._norm4, out._exp = stats
        if not self._fourth:
            out._norm3 = out._norm4 = None
        return out

    # -------------------------------------------------------------- rows form
    def _n_kept(self) -> int:
        return sum(len(r) for r in self._rows)

    def _kept_rows(self):
        """(rows, weights or None) of the kept rows, as single arrays."""
        rows = (
            np.concatenate(self._rows) if self._rows else np.empty((0, self.n_features))
        )
        if all(w is None for w in self._row_weights):
            return rows, None
        weights = [
            np.ones(len(r)) if w is None else w
            for r, w in zip(self._rows, self._row_weights)
        ]
        return rows, np.concatenate(weights)

    def _append_rows(self, X, w) -> None:
        """Keep the rows of positive weight of a batch (the dual form)."""
        X = to_host(X)  # fewer rows than features: as small as the scatter
        n = X.shape[0]
        if w is not None:
            keep = w > 0
            rows = np.array(X[keep], dtype=np.float64)
            w = w[keep].copy()
        else:
            rows = np.array(X, dtype=np.float64)
        self.n_samples += n
        self.n_nonzero += len(rows)
        if not len(rows):
            return
        sw = float(len(rows)) if w is None else float(w.sum())
        with np.errstate(over="ignore", invalid="ignore"):  # checked by the caller
            mean = np.average(rows, axis=0, weights=w)
            # residual-mean correction: exact to round-off whatever the offset
            mean += np.average(rows - mean, axis=0, weights=w)
            total = self.sum_weights + sw
            self.mean = self.mean + (mean - self.mean) * (sw / total)
        self.sum_weights = total
        self._rows.append(rows)
        self._row_weights.append(w)

    def _as_scatter(self) -> MomentAccumulator:
        """``self`` in the scatter form (a new accumulator when rows are kept)."""
        if self._rows is None:
            return self
        rows, weights = self._kept_rows()
        out = self._from_batch(rows, weights)
        out.n_samples, out.n_nonzero = self.n_samples, self.n_nonzero
        out._input_eps = self._input_eps
        out._eps2_weight = self._eps2_weight
        return out

    def _to_scatter(self) -> None:
        """Switch in place from the kept rows to the scatter form."""
        stats = self._as_scatter()
        self.mean = stats.mean
        self.sum_weights = stats.sum_weights
        self._scatter = stats._scatter
        self._norm3 = stats._norm3
        self._norm4 = stats._norm4
        self._exp = stats._exp
        if self._scatter is None or stats.sum_weights == 0:
            self._scatter = np.zeros((self.n_features, self.n_features))
            if self._fourth:
                self._norm3, self._norm4 = np.zeros(self.n_features), 0.0
        self._rows = self._row_weights = None

    # ------------------------------------------------------------------- merge
    def merge(self, other: MomentAccumulator) -> MomentAccumulator:
        """Return the statistics of the union of the rows of ``self`` and ``other``.

        Neither operand is modified. The merge is exact (Chan et al.'s
        pairwise update, extended to the third and fourth moments of the
        centred norms) and associative up to float64 round-off, so it can
        serve as the combine step of a tree reduction. The result keeps the
        fourth moments only if both operands do.

        Parameters
        ----------
        other : MomentAccumulator
            Statistics of as many features.

        Returns
        -------
        merged : MomentAccumulator
            A new accumulator.
        """
        out = self.copy()
        out._merge_inplace(other)
        return out

    __add__ = merge

    def copy(self) -> MomentAccumulator:
        """Return a deep copy.

        Returns
        -------
        MomentAccumulator
            The copy, sharing no array that an update modifies.
        """
        out = MomentAccumulator.__new__(MomentAccumulator)
        out.__dict__.update(self.__dict__)
        out.mean = self.mean.copy()
        if self._scatter is not None:
            out._scatter = self._scatter.copy()
        if self._norm3 is not None:
            out._norm3 = self._norm3.copy()
        if self._rows is not None:
            # the kept blocks are never modified in place: sharing them is safe
            out._rows = list(self._rows)
            out._row_weights = list(self._row_weights)
        return out

    def _merge_inplace(self, other: MomentAccumulator, adopt: bool = False) -> None:
        """Merge ``other`` into ``self``, in place.

        ``adopt=True`` lets ``self`` take over the arrays of ``other`` instead
        of copying them (for a temporary ``other``).
        """
        if not isinstance(other, MomentAccumulator):
            raise TypeError(
                f"Can only merge a MomentAccumulator, got {type(other).__name__}."
            )
        if other.n_features != self.n_features or other.kind != self.kind:
            raise ValueError(
                "Cannot merge statistics of different shapes: "
                f"{self.n_features} features ({self.kind}) and "
                f"{other.n_features} features ({other.kind})."
            )
        if not other._fourth:
            self._fourth = False
            self._norm3 = self._norm4 = None
        self._input_eps = max(self._input_eps, other._input_eps)
        self._eps2_weight += other._eps2_weight
        if self._rows is not None and other._rows is not None:
            if self._n_kept() + other._n_kept() < self.n_features:
                self._merge_rows(other)
                return
        if other._rows is not None:
            other, adopt = other._as_scatter(), True
        if self._rows is not None:
            self._to_scatter()
        self._merge_scatter(other, adopt)

    def _merge_rows(self, other: MomentAccumulator) -> None:
        na, nb = self.sum_weights, other.sum_weights
        self.n_samples += other.n_samples
        self.n_nonzero += other.n_nonzero
        self._rows.extend(other._rows)
        self._row_weights.extend(other._row_weights)
        if nb > 0:
            n = na + nb
            self.mean = self.mean + (other.mean - self.mean) * (nb / n)
            self.sum_weights = n

    def _merge_scatter(self, other: MomentAccumulator, adopt: bool) -> None:
        self.n_samples += other.n_samples
        self.n_nonzero += other.n_nonzero
        na, nb = self.sum_weights, other.sum_weights
        if nb == 0:
            return
        if na == 0:
            self.sum_weights = nb
            self._exp = other._exp
            if adopt:
                self.mean, self._scatter = other.mean, other._scatter
            else:
                self.mean, self._scatter = other.mean.copy(), other._scatter.copy()
            if self._fourth:
                self._norm3 = other._norm3 if adopt else other._norm3.copy()
                self._norm4 = other._norm4
            return
        n = na + nb
        delta = other.mean - self.mean
        mean = self.mean + delta * (nb / n)
        # the between-parts term outer(t, t), with t = delta * sqrt(na nb / n)
        t = delta * math.sqrt(na * nb / n)
        e = merged_exponent(self._exp, other._exp, t)
        sa, sb = 2 * (self._exp - e), 2 * (other._exp - e)
        ts = unscale(t, -e)
        if self._fourth:
            # both shifts use each part's statistics about its own mean (read
            # before the scatter below is updated in place)
            da = unscale(self.mean - mean, -e)
            db = unscale(other.mean - mean, -e)
            pa = _ScaledParts.of(self, e)
            pb = _ScaledParts.of(other, e)
            self._norm4 = shift_norm4(pa, da) + shift_norm4(pb, db)
            self._norm3 = shift_norm3(pa, da) + shift_norm3(pb, db)
        # self owns its arrays (merge() works on a copy): update in place
        scatter = self._scatter if sa == 0 else np.ldexp(self._scatter, sa)
        scatter += other._scatter if sb == 0 else np.ldexp(other._scatter, sb)
        if self.kind == "full":
            scatter += np.outer(ts, ts)  # exactly symmetric
        else:
            scatter += ts * ts
        self.sum_weights = n
        self.mean = mean
        self._scatter = scatter
        self._exp = e

    # ----------------------------------------------------------------- results
    def is_finite(self, *, include_fourth: bool = False) -> bool:
        """Tell whether the statistics are finite (no NaN or infinity reached them).

        A NaN or an infinity in any row, whatever its weight, reaches the
        mean or the diagonal of the scatter, so this ``O(n_features)`` test
        stands for a scan of the rows.

        Parameters
        ----------
        include_fourth : bool, default=False
            Also test the stored third and fourth moments (if kept).

        Returns
        -------
        bool
            False if a NaN or an infinity reached the statistics.
        """
        if not np.all(np.isfinite(self.mean)):
            return False
        if self._scatter is not None:
            stored = self._scatter
            diag = np.diagonal(stored) if stored.ndim == 2 else stored
            if not np.all(np.isfinite(diag)):
                return False
        if include_fourth and self._fourth:
            return bool(np.isfinite(self._norm4) and np.all(np.isfinite(self._norm3)))
        return True

    def scaled_covariance(
        self, *, center: bool = True, ddof: int = 1
    ) -> tuple[np.ndarray, int]:
        """Return the covariance (or second moment) as ``M`` and ``e``, ``M * 4**e``.

        The ``(n_features, n_features)`` matrix in the accumulator's scaled
        units (see Notes of the class), which keep their precision where the
        units of the data would underflow or overflow. With the rows kept it
        is built from them.

        Parameters
        ----------
        center : bool, default=True
            ``True``: the covariance ``scatter / (sum_weights - ddof)``.
            ``False``: the uncentred second moment ``E[x x^T]`` under the
            weights (``ddof`` is ignored).
        ddof : int, default=1
            Delta degrees of freedom of the covariance.

        Returns
        -------
        matrix : ndarray of shape (n_features, n_features)
            The matrix in scaled units.
        e : int
            The scale exponent.
        """
        if self.kind != "full":
            raise ValueError("scaled_covariance needs kind='full' statistics.")
        acc = self._as_scatter()
        e = acc._exp
        if center:
            return acc._scatter / (acc.sum_weights - ddof), e
        # E[x x^T] = scatter / sw + mean mean^T, in units where the mean fits
        top = float(np.max(np.abs(acc.mean)))
        if top > 0 and math.frexp(top)[1] - e > SAFE_LOG2:
            e2 = math.frexp(top)[1]
            M = np.ldexp(acc._scatter, 2 * (e - e2)) / acc.sum_weights
            e = e2
        else:
            M = acc._scatter / acc.sum_weights
        m = acc.mean if e == 0 else np.ldexp(acc.mean, -e)
        M += np.outer(m, m)
        return M, e

    def scaled_variances(self) -> tuple[np.ndarray, int]:
        """Return the per-feature weighted variances as ``v`` and ``e``, ``v * 4**e``.

        Population variances (``ddof=0``: the diagonal of the scatter divided
        by ``sum_weights``; zeros while the total weight is 0), in scaled
        units, for either ``kind`` and either representation.

        Returns
        -------
        variances : ndarray of shape (n_features,)
            The variances in scaled units.
        e : int
            The scale exponent.
        """
        sw = self.sum_weights
        if self._scatter is None:
            Y, e = self.scaled_rows(center=True)
            sums = np.einsum("ij,ij->j", Y, Y)
        else:
            stored, e = self._scatter, self._exp
            sums = np.diagonal(stored) if stored.ndim == 2 else stored
        if sw > 0:
            return sums / sw, e
        return np.zeros(self.n_features), e

    def scaled_rows(self, *, center: bool = True) -> tuple[np.ndarray, int]:
        """Return the kept rows as ``Y = sqrt(w) * (x - mean) * 2**-e``, and ``e``.

        The rows of the dual form (``representation == "rows"``), weighted so
        that ``Y.T @ Y`` is the scatter (second moment) matrix, and scaled by
        a power of two so that the largest entry is about 1.

        Parameters
        ----------
        center : bool, default=True
            Subtract the mean (False: ``Y.T @ Y`` is the second moment).

        Returns
        -------
        rows : ndarray of shape (n_kept, n_features)
            One row per kept row of positive weight.
        e : int
            The scale exponent.
        """
        if self._rows is None:
            raise ValueError(
                "scaled_rows needs the rows, which these statistics no longer "
                "keep (representation='scatter'); use scaled_covariance."
            )
        rows, weights = self._kept_rows()
        with np.errstate(over="ignore", invalid="ignore"):
            if center:
                Y = rows - self.mean
                # residual correction: the rows sum to zero to round-off
                Y -= np.average(Y, axis=0, weights=weights)
            else:
                Y = rows.copy()
            if weights is not None:
                Y *= np.sqrt(weights)[:, None]
            top = float(np.max(np.abs(Y))) if Y.size else 0.0
        e = math.frexp(top)[1] if top > 0 and math.isfinite(top) else 0
        if e:
            Y = np.ldexp(Y, -e)
        return Y, e

    def covariance(self, ddof: int = 1) -> np.ndarray:
        """Return the weighted covariance ``scatter / (sum_weights - ddof)``.

        Parameters
        ----------
        ddof : int, default=1
            Delta degrees of freedom; with 1, an integer weight equals
            repeating the row (frequency weights).

        Returns
        -------
        ndarray of shape (n_features, n_features)
            The covariance.
        """
        denom = self.sum_weights - ddof
        if denom <= 0:
            raise ValueError(
                f"The covariance needs a total sample weight above {ddof}; the "
                f"statistics hold n_samples = {self.n_samples} rows of total "
                f"weight {self.sum_weights:g}. Pass more rows (sample weights are "
                "frequency weights: an integer weight counts as that many rows)."
            )
        return self.scatter / denom

    def second_moment(self) -> np.ndarray:
        """Return the uncentred second moment ``E[x x^T]`` under the weights.

        Returns
        -------
        ndarray of shape (n_features, n_features)
            The second moment.
        """
        if self.kind != "full":
            raise ValueError("second_moment needs kind='full'.")
        return self.scatter / self.sum_weights + np.outer(self.mean, self.mean)

    def ledoit_wolf_shrinkage(self) -> float:
        """Estimate the Ledoit-Wolf shrinkage intensity.

        The same value as :func:`sklearn.covariance.ledoit_wolf_shrinkage`,
        computed from the accumulated moments alone (the fourth moment of
        the centred row norms and the scatter matrix), so it is exact in a
        stream.

        Returns
        -------
        float
            The intensity, in [0, 1].
        """
        if self.kind != "full":
            raise ValueError("Ledoit-Wolf shrinkage needs kind='full' statistics.")
        if not self._fourth:
            raise ValueError(
                "Ledoit-Wolf shrinkage needs the fourth moments of the rows, which "
                "these statistics did not keep (fourth_moments=False, or merged "
                "with statistics that did not). Accumulate the rows again with "
                "fourth_moments=True."
            )
        stats = self._as_scatter()
        n, p = stats.sum_weights, stats.n_features
        emp_cov = stats._scatter / n
        mu = np.trace(emp_cov) / p
        delta_ = np.sum(emp_cov**2)
        beta = (stats._norm4 / n - delta_) / (p * n)
        delta = (delta_ - 2.0 * mu * np.trace(emp_cov) + p * mu**2) / p
        beta = min(beta, delta)
        return 0.0 if beta <= 0 or delta <= 0 else float(beta / delta)

    def oas_shrinkage(self) -> float:
        """Estimate the Oracle Approximating Shrinkage intensity, as sklearn's OAS.

        Returns
        -------
        float
            The intensity, in [0, 1], from the accumulated covariance alone.
        """
        if self.kind != "full":
            raise ValueError("OAS shrinkage needs kind='full' statistics.")
        n, p = self.sum_weights, self.n_features
        if p == 1:
            return 0.0  # one feature: every shrinkage gives the same estimate
        emp_cov = self._as_scatter()._scatter / n
        scale = np.trace(emp_cov) / p
        if scale > 0:  # unit average variance: the squares cannot overflow
            emp_cov = emp_cov / scale
        alpha = np.mean(emp_cov**2)
        mu = np.trace(emp_cov) / p
        mu_squared = mu**2
        num = alpha + mu_squared
        den = (n + 1.0) * (alpha - mu_squared / p)
        return 1.0 if den == 0 else float(min(num / den, 1.0))


# ---------------------------------------------------------------- helpers
def _n_positive(w, n: int) -> int:
    return n if w is None else int(np.count_nonzero(w > 0))


# ---------------------------------------------------------- fourth moments
class _ScaledParts:
    """One operand of a merge, its statistics in the units ``2**e``."""

    __slots__ = ("norm3", "norm4", "scatter", "sum_weights")

    @classmethod
    def of(cls, acc: MomentAccumulator, e: int) -> _ScaledParts:
        k = acc._exp - e
        part = cls()
        part.sum_weights = acc.sum_weights
        part.scatter = unscale(acc._scatter, 2 * k)
        part.norm3 = unscale(acc._norm3, 3 * k)
        part.norm4 = float(unscale(np.float64(acc._norm4), 4 * k))
        return part
