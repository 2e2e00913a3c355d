"""Exact, mergeable streaming moments: count, mean and scatter in float64.

One accumulator serves every linear post-processor (whitening, NATSV, standard
normalisation). Chunks are merged with the parallel-variance update of Chan,
Golub and LeVeque, so a stream of ``partial_fit`` calls, or a tree reduction
of per-worker statistics, gives the same numbers as one pass over the
concatenated data, to float64 round-off.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["MomentAccumulator"]

# rows converted to float64 at a time; bounds the temporary memory of a batch
_BLOCK_ROWS = 4096


class MomentAccumulator:
    """Weighted count, mean and scatter of a stream of rows, mergeable.

    The accumulator holds, in float64, the total weight, the weighted mean and
    the scatter matrix ``sum_i w_i (x_i - mean)(x_i - mean)^T`` of every row
    seen so far (or only its diagonal, with ``kind="diag"``), plus, unless
    ``fourth_moments=False``, the third and fourth moments of the centred row
    norms that the Ledoit-Wolf shrinkage estimate needs. Two accumulators
    combine exactly into the statistics of the union of their rows, whatever
    the order, which is what makes ``partial_fit`` exact and distributed
    fitting possible.

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
        :meth:`ledoit_wolf_shrinkage` needs. They cost a few extra passes
        over each block of rows (about 7% of an update of 768-wide rows);
        pass ``False`` when Ledoit-Wolf shrinkage will not be used. Ignored
        for ``kind="diag"``.

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
        ``kind="diag"``).
    norm3 : ndarray of shape (n_features,) or None
        ``sum_i w_i ||x_i - mean||^2 (x_i - mean)``; None when the fourth
        moments are not kept.
    norm4 : float or None
        ``sum_i w_i ||x_i - mean||^4``; None when the fourth moments are not
        kept.
    fourth_moments : bool
        Whether ``norm3`` and ``norm4`` are kept, so that
        :meth:`ledoit_wolf_shrinkage` can be computed.

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
        self, n_features: int, *, kind: str = "full", fourth_moments: bool = True
    ) -> None:
        if not isinstance(n_features, numbers.Integral) or n_features < 1:
            raise ValueError(
                f"n_features must be a positive integer, got {n_features!r}."
            )
        if kind not in ("full", "diag"):
            raise ValueError(f"kind must be 'full' or 'diag', got {kind!r}.")
        self.n_features = int(n_features)
        self.kind = kind
        self.n_samples = 0
        self.n_nonzero = 0
        self.sum_weights = 0.0
        self.mean = np.zeros(n_features)
        if kind == "full":
            self.scatter = np.zeros((n_features, n_features))
        else:
            self.scatter = np.zeros(n_features)
        if fourth_moments and kind == "full":
            self.norm3 = np.zeros(n_features)
            self.norm4 = 0.0
        else:
            self.norm3 = None
            self.norm4 = None

    @property
    def fourth_moments(self) -> bool:
        """Whether ``norm3`` and ``norm4`` are kept (Ledoit-Wolf possible)."""
        # derived from the data, not stored: statistics pickled before this
        # option existed load with the right value
        return self.norm3 is not None

    def __repr__(self) -> str:
        return (
            f"MomentAccumulator(n_features={self.n_features}, kind={self.kind!r}, "
            f"n_samples={self.n_samples}, sum_weights={self.sum_weights:g})"
        )

    # ------------------------------------------------------------------ update
    def update(self, X, sample_weight=None) -> MomentAccumulator:
        """Add the rows of ``X`` (with optional weights) in place.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Finite rows; converted block by block to float64.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights; ``None`` means 1 for every row.

        Returns
        -------
        self : MomentAccumulator
        """
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(
                f"Expected rows of width {self.n_features}, got an array of shape "
                f"{X.shape}."
            )
        n = X.shape[0]
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, dtype=np.float64)
            if sample_weight.shape != (n,):
                raise ValueError(
                    f"sample_weight has shape {sample_weight.shape}, expected ({n},)."
                )
        if n:
            self._merge_inplace(self._from_batch(X, sample_weight))
        return self

    def _from_batch(self, X, w) -> MomentAccumulator:
        """Statistics of a batch, computed in float64 block by block.

        Two passes: the weighted mean first, then the scatter about it,
        accumulated over blocks of rows by symmetric rank-k updates into one
        float64 matrix. A residual-mean correction makes the result exact
        to round-off whatever the offset of the data.
        """
        out = self._empty()
        n, d = X.shape
        out.n_samples = n
        blocks = [
            slice(lo, min(lo + _BLOCK_ROWS, n)) for lo in range(0, n, _BLOCK_ROWS)
        ]
        if w is None:
            sw = float(n)
            out.n_nonzero = n
            total = np.zeros(d)
            for b in blocks:
                total += X[b].sum(axis=0, dtype=np.float64)
        else:
            sw = float(w.sum())
            out.n_nonzero = int(np.count_nonzero(w))
            if sw == 0:
                return out
            total = np.zeros(d)
            for b in blocks:
                total += w[b] @ np.asarray(X[b], dtype=np.float64)
        mean = total / sw
        full = self.kind == "full"
        norms = self.fourth_moments
        scatter = np.zeros((d, d)) if full else np.zeros(d)
        resid = np.zeros(d)  # weighted sum of the centred rows, ~0
        norm3, norm4 = np.zeros(d), 0.0
        for b in blocks:
            Y = np.array(X[b], dtype=np.float64)
            Y -= mean
            wb = None if w is None else w[b]
            Yw = Y if wb is None else Y * np.sqrt(wb)[:, None]
            resid += Y.sum(axis=0) if wb is None else wb @ Y
            if full:
                # numpy runs Yw.T @ Yw as a symmetric rank-k update (syrk).
                # Calling scipy's BLAS here instead interleaves two OpenBLAS
                # thread pools whose spinning threads stall each other (about
                # 2x slower on 2 cores).
                scatter += Yw.T @ Yw
                if norms:
                    sq = np.einsum("ij,ij->i", Y, Y)
                    wsq = sq if wb is None else sq * wb
                    norm3 += wsq @ Y
                    norm4 += float(wsq @ sq)
            else:
                scatter += np.einsum("ij,ij->j", Yw, Yw)
        shift = resid / sw
        if full:
            scatter -= np.outer(resid, shift)
            scatter = (scatter + scatter.T) / 2.0  # exactly symmetric
        else:
            scatter -= resid * shift
        if norms:
            out.norm3, out.norm4 = norm3, norm4
        out.sum_weights = sw
        out.mean = mean + shift
        out.scatter = np.ascontiguousarray(scatter)
        return out

    # ------------------------------------------------------------------- merge
    def merge(self, other: MomentAccumulator) -> MomentAccumulator:
        """Return the statistics of the union of the rows of ``self`` and ``other``.

        Neither operand is modified. The merge is exact (Chan et al.'s
        pairwise update, extended to the third and fourth moments of the
        centred norms) and associative up to float64 round-off, so it can
        serve as the combine step of a tree reduction. The result keeps the
        fourth moments only if both operands do.
        """
        out = self.copy()
        out._merge_inplace(other)
        return out

    __add__ = merge

    def copy(self) -> MomentAccumulator:
        """Return a deep copy."""
        out = self._empty()
        out.n_samples = self.n_samples
        out.n_nonzero = self.n_nonzero
        out.sum_weights = self.sum_weights
        out.mean = self.mean.copy()
        out.scatter = self.scatter.copy()
        out.norm3 = None if self.norm3 is None else self.norm3.copy()
        out.norm4 = self.norm4
        return out

    def _empty(self) -> MomentAccumulator:
        """A new, empty accumulator of the same shape and options."""
        return MomentAccumulator(
            self.n_features, kind=self.kind, fourth_moments=self.fourth_moments
        )

    def _merge_inplace(self, other: MomentAccumulator) -> None:
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
        self.n_samples += other.n_samples
        self.n_nonzero += other.n_nonzero
        if not other.fourth_moments:
            self.norm3 = self.norm4 = None
        na, nb = self.sum_weights, other.sum_weights
        if nb == 0:
            return
        if na == 0:
            self.sum_weights = nb
            self.mean = other.mean.copy()
            self.scatter = other.scatter.copy()
            if self.fourth_moments:
                self.norm3, self.norm4 = other.norm3.copy(), other.norm4
            return
        n = na + nb
        delta = other.mean - self.mean
        mean = self.mean + delta * (nb / n)
        # shifts of each part's mean relative to the merged mean
        da = self.mean - mean
        db = other.mean - mean
        norm3 = norm4 = None
        if self.kind == "full":
            scatter = self.scatter + other.scatter
            scatter += np.outer(delta, delta) * (na * nb / n)
            if self.fourth_moments:
                # both shifts use each part's scatter about its own mean
                norm4 = _shift_norm4(self, da) + _shift_norm4(other, db)
                norm3 = _shift_norm3(self, da) + _shift_norm3(other, db)
        else:
            scatter = self.scatter + other.scatter + delta * delta * (na * nb / n)
        self.sum_weights = n
        self.mean = mean
        self.scatter = scatter
        self.norm3 = norm3
        self.norm4 = norm4

    # ----------------------------------------------------------------- results
    def covariance(self, ddof: int = 1) -> np.ndarray:
        """Weighted covariance ``scatter / (sum_weights - ddof)``.

        With ``ddof=1`` the weights are frequency weights: an integer weight
        equals repeating the row.
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
        """Uncentred second moment ``E[x x^T]`` under the weights."""
        if self.kind != "full":
            raise ValueError("second_moment needs kind='full'.")
        return self.scatter / self.sum_weights + np.outer(self.mean, self.mean)

    def ledoit_wolf_shrinkage(self) -> float:
        """Ledoit-Wolf shrinkage intensity.

        The same value as :func:`sklearn.covariance.ledoit_wolf_shrinkage`,

        computed from the accumulated moments alone (the fourth moment of
        the centred row norms and the scatter matrix), so it is exact in a
        stream.
        """
        if self.kind != "full":
            raise ValueError("Ledoit-Wolf shrinkage needs kind='full' statistics.")
        if not self.fourth_moments:
            raise ValueError(
                "Ledoit-Wolf shrinkage needs the fourth moments of the rows, which "
                "these statistics did not keep (fourth_moments=False, or merged "
                "with statistics that did not). Accumulate the rows again with "
                "fourth_moments=True."
            )
        n, p = self.sum_weights, self.n_features
        emp_cov = self.scatter / n
        mu = np.trace(emp_cov) / p
        delta_ = np.sum(emp_cov**2)
        beta = (self.norm4 / n - delta_) / (p * n)
        delta = (delta_ - 2.0 * mu * np.trace(emp_cov) + p * mu**2) / p
        beta = min(beta, delta)
        return 0.0 if beta <= 0 or delta <= 0 else float(beta / delta)

    def oas_shrinkage(self) -> float:
        """Oracle Approximating Shrinkage intensity, as sklearn's OAS estimates it.

        Computed from the accumulated covariance alone, after scaling it to
        unit average variance: the intensity does not depend on the scale,
        and the squares below cannot overflow.
        """
        if self.kind != "full":
            raise ValueError("OAS shrinkage needs kind='full' statistics.")
        n, p = self.sum_weights, self.n_features
        if p == 1:
            return 0.0  # one feature: every shrinkage gives the same estimate
        emp_cov = self.scatter / n
        scale = np.trace(emp_cov) / p
        if scale > 0:
            emp_cov = emp_cov / scale
        alpha = np.mean(emp_cov**2)
        mu = np.trace(emp_cov) / p
        mu_squared = mu**2
        num = alpha + mu_squared
        den = (n + 1.0) * (alpha - mu_squared / p)
        return 1.0 if den == 0 else float(min(num / den, 1.0))


def _shift_norm4(part: MomentAccumulator, d: np.ndarray) -> float:
    """``sum w ||y + d||^4`` from a part's moments about its own mean (sum w y = 0)."""
    dd = float(d @ d)
    return (
        part.norm4
        + 4.0 * float(d @ part.scatter @ d)
        + 4.0 * float(part.norm3 @ d)
        + 2.0 * dd * float(np.trace(part.scatter))
        + part.sum_weights * dd * dd
    )


def _shift_norm3(part: MomentAccumulator, d: np.ndarray) -> np.ndarray:
    """``sum w ||y + d||^2 (y + d)`` from a part's moments about its own mean."""
    dd = float(d @ d)
    return (
        part.norm3
        + np.trace(part.scatter) * d
        + 2.0 * (part.scatter @ d)
        + part.sum_weights * dd * d
    )
