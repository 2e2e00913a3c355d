"""The fixed input map in front of the Glow, in float64.

``u = ((x - mean) / scale - m) @ W``: a per-feature standardisation, safe for
any finite magnitude, then (``init="whitening"``) the whitening of a
:class:`~sklearn_isotropy.WhiteningTransformer` fitted to the standardised
training rows. It is fixed at fit time and never trained. Whitened
coordinates past the numerical rank of the covariance bypass the Glow; this
module holds their density and the log-determinant of the whole map, so that
the estimator reports log-likelihoods in the original input space.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..exceptions import RankDeficiencyWarning
from ..linear import StandardNormalizer, WhiteningTransformer

__all__ = [
    "bypass_log_density",
    "check_raw_magnitude",
    "fit_input_map",
    "fit_whitener",
    "from_flow_input",
    "input_log_det",
    "standardization",
    "standardize",
    "to_flow_input",
    "unstandardize",
]

_FLOAT32_MAX = float(np.finfo(np.float32).max)


def rescaled(X: np.ndarray) -> tuple[np.ndarray, float]:
    """``(X / p, p)`` with ``p`` a power of two near ``max|X|``, in ``X``'s dtype.

    Dividing by a power of two is exact, and the squares of the rescaled rows
    cannot overflow: statistics of ``X / p`` are those of ``X`` for any
    finite magnitude (1e154 and more), moved back by ``p``.
    """
    amax = float(np.max(np.abs(X))) if X.size else 0.0
    p = 2.0 ** np.floor(np.log2(amax)) if amax > 0 else 1.0
    return X / X.dtype.type(p), p


def standardization(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and scale of ``X`` (float64), for any finite magnitude.

    The statistics are those of :class:`~sklearn_isotropy.StandardNormalizer`
    (same constant-feature rule, at the precision of ``X``'s dtype: a float32
    feature whose spread is float32 round-off is constant), computed on
    ``X / p`` with ``p`` a power of two near ``max|X|``: dividing by a power
    of two is exact, and the squares of the rescaled rows cannot overflow, so
    input of magnitude 1e154 and more gets the same standardisation as input
    of magnitude 1.
    """
    X_p, p = rescaled(X)
    normalizer = StandardNormalizer().fit(X_p)
    return normalizer.mean_ * p, normalizer.scale_ * p


def standardize(X64: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(X - mean) / scale`` in float64, without overflow for finite ``X``."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.subtract(X64, mean)
        out /= scale
        # a finite sum proves every entry finite, in one pass and no mask
        if not np.isfinite(out.sum()):
            bad = ~np.isfinite(out)
            if bad.any():
                # X - mean overflowed (values near the float64 limit with
                # opposite signs): halve both sides first, exactly
                half = (X64 * 0.5 - mean * 0.5) / (scale * 0.5)
                out[bad] = half[bad]
    return out


def unstandardize(U64: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Inverse of :func:`standardize` (non-finite where it overflows)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return U64 * scale + mean


def to_flow_input(X, mean, scale, whitener) -> np.ndarray:
    """The fixed input map of the rows ``X``, in float64, cast to their dtype."""
    U = standardize(X.astype(np.float64, copy=False), mean, scale)
    if whitener is not None:
        U = whitener.transform(U)
    with np.errstate(over="ignore"):  # rows too far for float32 become inf
        return U.astype(X.dtype, copy=False)


def from_flow_input(U, mean, scale, whitener) -> np.ndarray:
    """Inverse of :func:`to_flow_input`, in float64."""
    U = U.astype(np.float64, copy=False)
    if whitener is not None:
        U = whitener.inverse_transform(U)
    return unstandardize(U, mean, scale)


def fit_whitener(
    Xs_train: np.ndarray, X_train: np.ndarray, shrinkage
) -> tuple[WhiteningTransformer, int]:
    """The initial whitening of the standardised training rows, and its rank.

    Parameters
    ----------
    Xs_train : ndarray of shape (n_samples, n_features)
        Standardised training rows (float64).
    X_train : ndarray of shape (n_samples, n_features)
        The same rows as given, in their dtype: the rank is theirs, so that
        round-off is judged at the input's precision and against the rows'
        own magnitudes (a float32 row rounded in computing a hyperplane's
        coordinates keeps no direction off it). Standardising rescales the
        features but adds no direction of variance.
    shrinkage : "auto", float, "ledoit-wolf" or "oas"
        The estimator's parameter: ``"auto"`` is 0 for a full-rank covariance
        and ``"oas"`` for a singular one.

    Returns
    -------
    whitener : WhiteningTransformer
        Fitted to ``Xs_train``, full rank (shrunk when the covariance is
        singular).
    rank : int
        Numerical rank of the covariance: the first ``rank`` whitened
        coordinates (in principal-axis order) are the directions in which
        the rows vary.
    """
    d = Xs_train.shape[1]
    if np.all(np.ptp(Xs_train, axis=0) == 0):
        raise ValueError(
            "GlowFlowTransformer cannot fit a density to constant data: every "
            f"feature takes a single value over the {Xs_train.shape[0]} "
            "training rows."
        )
    with warnings.catch_warnings():
        # a singular covariance is handled here, with the flow's advice
        warnings.simplefilter("ignore", RankDeficiencyWarning)
        rank = int(WhiteningTransformer().fit(rescaled(X_train)[0]).n_components_)
    resolved = shrinkage
    if shrinkage == "auto":
        resolved = 0.0 if rank == d else "oas"
    elif rank < d and shrinkage == 0:
        raise ValueError(
            f"The covariance of the training rows has numerical rank {rank} < "
            f"n_features = {d} with shrinkage={shrinkage!r}, so the initial "
            "whitening would not be invertible. Pass shrinkage='auto' (or a "
            "float > 0, 'ledoit-wolf', 'oas'), or init='bert-flow'."
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankDeficiencyWarning)
        whitener = WhiteningTransformer(shrinkage=resolved).fit(Xs_train)
    return whitener, rank


def fit_input_map(X: np.ndarray, rng, params: dict) -> tuple:
    """Fit the input map to ``X`` for the estimator's ``params``, and apply it.

    With early stopping, ``validation_fraction`` of the rows (drawn by
    ``rng``) are held out from the flow's training, not from the map: the
    standardisation and the whitening (the Gaussian the flow starts from, the
    maximum-likelihood fit) use every row. The map is the same at every
    epoch, so the held-out rows still compare the epochs fairly. A Gaussian
    of nine rows in ten instead has the error of a tenth fewer rows on its
    ``d**2 / 2`` parameters, about ``d**2 / (36 n)`` nats a row of held-out
    likelihood (1.6 at 768 features and 10,000 rows; 1.9 to 3.7 measured on
    STS-B's dev and test sentences, ``benchmarks/bench_flow.py``), more than
    a flow gains. The map computes in float64 but judges round-off at the
    precision of ``X``'s dtype (constant features, the whitening's rank).
    Returns ``mean, scale, whitener, rank, U_train, U_val`` (``whitener``
    None with ``init="bert-flow"``, ``U_val`` None without early stopping),
    the rows in float64.
    """
    X64 = X.astype(np.float64, copy=False)
    n_samples, n_features = X64.shape
    if params["standardize"]:
        mean, scale = standardization(X)
    else:
        mean, scale = np.zeros(n_features), np.ones(n_features)
    U_train, U_val = standardize(X64, mean, scale), None
    if not params["standardize"]:
        check_raw_magnitude(X64, params["init"])
    whitener, rank = None, n_features
    if params["init"] == "whitening":
        whitener, rank = fit_whitener(U_train, X, params["shrinkage"])
        U_train = whitener.transform(U_train)
    if params["early_stopping"]:
        fraction = params["validation_fraction"]
        n_val = max(1, int(round(fraction * n_samples)))
        if n_samples - n_val < 2:
            raise ValueError(
                f"early_stopping=True with validation_fraction={fraction} "
                f"leaves {n_samples - n_val} training rows out of n_samples="
                f"{n_samples}; at least 2 are needed. Pass more rows, a smaller "
                "validation_fraction, or early_stopping=False."
            )
        perm = rng.permutation(n_samples)
        U_train, U_val = U_train[perm[n_val:]], U_train[perm[:n_val]]
    return mean, scale, whitener, rank, U_train, U_val


def bypass_log_density(U: np.ndarray, rank: int) -> np.ndarray:
    """Standard normal log-density of the coordinates that bypass the Glow.

    With a singular covariance, the whitened coordinates past ``rank`` are
    directions in which the training rows do not vary (beyond round-off): the
    Glow does not model them, they go to the latent as they are, under the
    shrunk Gaussian of the initial whitening. Zeros when nothing bypasses.
    """
    if rank == U.shape[1]:
        return np.zeros(U.shape[0])
    rest = U[:, rank:].astype(np.float64)
    return -0.5 * (np.sum(rest**2, axis=1) + rest.shape[1] * np.log(2 * np.pi))


def input_log_det(scale: np.ndarray, whitener: WhiteningTransformer | None) -> float:
    """``log|det|`` of the fixed input map (standardisation and whitening)."""
    log_det = -float(np.sum(np.log(scale)))
    if whitener is not None:
        log_det += float(np.linalg.slogdet(whitener.whitening_)[1])
    return log_det


def check_raw_magnitude(X64: np.ndarray, init: str) -> None:
    """Raise if unstandardised values are too large for what follows.

    With ``standardize=False`` the raw values go to the initial whitening
    (``init="whitening"``: float64 sums of squares over the rows) or straight
    into the Glow (``init="bert-flow"``: float32); their squares must not
    overflow there. The message names that cause and the parameter that
    removes it.
    """
    amax = float(np.max(np.abs(X64)))
    if init == "whitening":
        limit, where = (
            np.sqrt(np.finfo(np.float64).max / X64.shape[0]),
            ("the float64 sums of squares of the initial whitening"),
        )
    else:
        limit, where = (
            _FLOAT32_MAX**0.5,
            ("float32, in which the flow computes on the raw values"),
        )
    if amax > limit:
        raise ValueError(
            f"With init={init!r} and standardize=False, the input has values of "
            f"magnitude up to {amax:.3g}, whose squares overflow {where}. Set "
            "standardize=True (done in float64, safe for any finite "
            "magnitude) or rescale the input."
        )
