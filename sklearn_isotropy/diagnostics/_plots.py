"""Plots of anisotropy: covariance spectrum and pair-cosine histogram.

matplotlib is an optional dependency (``pip install "sklearn-isotropy[plot]"``)
imported only when a plot is drawn.
"""

from __future__ import annotations

import numpy as np

from .._utils import import_optional
from ._measures import _check_X, _covariance_eigenvalues, pair_cosines

__all__ = ["plot_cosine_histogram", "plot_eigenvalue_spectrum"]


def _new_axes(ax):
    if ax is not None:
        return ax
    plt = import_optional("matplotlib.pyplot", purpose="plotting", extra="plot")
    _, ax = plt.subplots()
    return ax


def _as_named(embeddings):
    """Accept one matrix or a mapping ``label -> matrix``."""
    if isinstance(embeddings, dict):
        if not embeddings:
            raise ValueError("embeddings is an empty dict; pass at least one matrix")
        return {str(k): _check_X(v) for k, v in embeddings.items()}
    return {"embeddings": _check_X(embeddings)}


def plot_eigenvalue_spectrum(embeddings, *, normalize=True, ax=None):
    """Plot the sorted covariance eigenvalues of one or more embedding matrices.

    An anisotropic embedding has a spectrum that falls steeply (a few
    directions dominate); a whitened one is flat.

    Parameters
    ----------
    embeddings : array-like of shape (n_samples, n_features) or dict
        One matrix, or a mapping from a label (e.g. ``"before"``,
        ``"after"``) to a matrix; each gets one line.
    normalize : bool, default=True
        Divide each spectrum by its sum, so matrices of different scale and
        width are comparable (the y axis is then the share of variance).
    ax : matplotlib Axes, default=None
        Axes to draw on; a new figure is created when None.

    Returns
    -------
    ax : matplotlib Axes
        The axes drawn on (log-scale y axis).

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from sklearn_isotropy.diagnostics import plot_eigenvalue_spectrum
    >>> X = np.random.RandomState(0).normal(size=(200, 6)) * [5, 2, 1, 1, 1, 1]
    >>> ax = plot_eigenvalue_spectrum({"before": X, "after": X / X.std(axis=0)})
    >>> [line.get_label() for line in ax.get_lines()]
    ['before', 'after']
    """
    named = _as_named(embeddings)
    ax = _new_axes(ax)
    for label, X in named.items():
        ev = _covariance_eigenvalues(X, relative=normalize)
        if normalize and ev.sum() > 0:
            ev = ev / ev.sum()
        # numerically zero eigenvalues cannot be drawn on a log axis: floor
        # them at 1e-10 of the largest so the informative range stays visible
        floor = ev.max() * 1e-10 if ev.max() > 0 else 1e-12
        ax.plot(np.arange(1, ev.size + 1), np.maximum(ev, floor), label=label)
    ax.set_yscale("log")
    ax.set_xlabel("component (sorted by eigenvalue)")
    ax.set_ylabel("share of variance" if normalize else "covariance eigenvalue")
    ax.set_title("Covariance eigenvalue spectrum")
    ax.legend()
    return ax


def plot_cosine_histogram(
    embeddings, *, n_pairs=10_000, bins=50, random_state=None, ax=None
):
    """Plot histograms of the cosine similarity of random pairs of rows.

    Anisotropic embeddings have all pair cosines bunched near 1; isotropic
    ones spread around 0.

    Parameters
    ----------
    embeddings : array-like of shape (n_samples, n_features) or dict
        One matrix, or a mapping from a label to a matrix; each gets one
        histogram.
    n_pairs : int, default=10_000
        Random pairs of distinct rows per matrix.
    bins : int, default=50
        Histogram bins over [-1, 1].
    random_state : int, RandomState instance or None, default=None
        Seed of the pair sampling (the same pairs for every matrix with the
        same number of rows).
    ax : matplotlib Axes, default=None
        Axes to draw on; a new figure is created when None.

    Returns
    -------
    ax : matplotlib Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from sklearn_isotropy.diagnostics import plot_cosine_histogram
    >>> X = np.random.RandomState(0).normal(size=(100, 5))
    >>> ax = plot_cosine_histogram({"raw": X + 3, "centred": X}, random_state=0)
    >>> bool(ax.get_xlim()[0] <= -1 and ax.get_xlim()[1] >= 1)
    True
    """
    named = _as_named(embeddings)
    ax = _new_axes(ax)
    edges = np.linspace(-1.0, 1.0, bins + 1)
    for label, X in named.items():
        cos = pair_cosines(X, n_pairs=n_pairs, random_state=random_state)
        ax.hist(
            cos,
            bins=edges,
            density=True,
            histtype="step",
            label=f"{label} (mean {cos.mean():.2f})",
        )
    ax.set_xlim(-1.0, 1.0)
    ax.set_xlabel("cosine similarity of random pairs")
    ax.set_ylabel("density")
    ax.set_title("Pair cosine similarity")
    ax.legend()
    return ax
