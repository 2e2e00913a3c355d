"""Plots of anisotropy and of a retrieval study.

Anisotropy: the covariance spectrum and pair-cosine histograms; retrieval:
quality against bytes per vector.

matplotlib is an optional dependency (``pip install "sklearn-isotropy[plot]"``)
imported only when a plot is drawn.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .._utils import import_optional
from .._utils._sklearn import Interval, validate_params
from ._measures import _check_X, _covariance_eigenvalues, pair_cosines

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "plot_cosine_histogram",
    "plot_cosine_panels",
    "plot_eigenvalue_spectrum",
    "plot_quality_vs_bytes",
]


def _new_axes(ax):
    if ax is not None:
        return ax
    plt = import_optional("matplotlib.pyplot", purpose="plotting", extra="plot")
    _, ax = plt.subplots(layout="constrained")  # room for an outside legend
    return ax


def _as_named(embeddings, *, keep_dtype=False):
    """Return a mapping ``label -> matrix`` of one matrix or a mapping.

    With ``keep_dtype``, each value is ``(X, dtype)``: the float64 matrix and
    the dtype it came in (whose precision sets the numerical rank).
    """
    if isinstance(embeddings, dict):
        if not embeddings:
            raise ValueError("embeddings is an empty dict; pass at least one matrix")
        items = embeddings.items()
    else:
        items = [("embeddings", embeddings)]

    def check(X):
        dtype = getattr(X, "dtype", np.dtype(np.float64))
        return (_check_X(X), dtype) if keep_dtype else _check_X(X)

    return {str(k): check(v) for k, v in items}


#: Markers and line styles cycled through so that lines drawn on top of each
#: other (two methods with the same output) stay distinguishable.
_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")
_LINESTYLES = ("-", "--", "-.", ":")


def _numerical_rank_spectrum(X, dtype, *, relative):
    """Return the covariance eigenvalues of ``X`` down to its numerical rank.

    Directions whose singular value is below ``s_max * max(n, d) * eps`` (the
    rule of :func:`numpy.linalg.matrix_rank`, with the machine epsilon of the
    input's dtype) are round-off, not data: a float32 embedding nulled or
    truncated by a transform has eigenvalues of 1e-12 there, which say
    nothing and squash the informative range of a log axis.
    """
    ev = _covariance_eigenvalues(X, relative=relative)
    if ev.size == 0 or ev[0] <= 0:
        return ev[:0]
    eps = np.finfo(dtype).eps if np.issubdtype(dtype, np.floating) else 0.0
    eps = max(eps, np.finfo(np.float64).eps)
    tol = np.sqrt(ev[0]) * max(X.shape) * eps
    return ev[np.sqrt(ev) > tol]


def _legend_outside(ax, n_entries):
    """Put the legend to the right of the axes, where it cannot hide data."""
    if n_entries > 1:
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0.0,
            fontsize="small",
            frameon=False,
        )


# matplotlib's Axes and Figure are checked by matplotlib, when drawn on
@validate_params(
    {
        "embeddings": ["array-like", dict],
        "normalize": ["boolean"],
        "ax": "no_validation",
    },
    prefer_skip_nested_validation=True,
)
def plot_eigenvalue_spectrum(
    embeddings: ArrayLike | dict, *, normalize: bool = True, ax: Axes | None = None
) -> Axes:
    """Plot the sorted covariance eigenvalues of one or more embedding matrices.

    An anisotropic embedding has a spectrum that falls steeply (a few
    directions dominate); a whitened one is flat. Each spectrum is drawn down
    to the numerical rank of its matrix (:func:`numpy.linalg.matrix_rank`'s
    rule, with the epsilon of the matrix's dtype), not into round-off.

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
    named = _as_named(embeddings, keep_dtype=True)
    ax = _new_axes(ax)
    for i, (label, (X, dtype)) in enumerate(named.items()):
        ev = _numerical_rank_spectrum(X, dtype, relative=normalize)
        if normalize and ev.sum() > 0:
            ev = ev / ev.sum()
        x = np.arange(1, ev.size + 1)
        # markers at staggered positions: two identical spectra show both
        step = max(1, ev.size // 10)
        ax.plot(
            x,
            ev,
            label=label,
            marker=_MARKERS[i % len(_MARKERS)],
            linestyle=_LINESTYLES[i % len(_LINESTYLES)],
            markevery=((i * step) // max(1, len(named)) % step, step),
            markersize=5,
            markerfacecolor="none",
        )
    ax.set_yscale("log")
    ax.set_xlabel("component (sorted by eigenvalue)")
    ax.set_ylabel("share of variance" if normalize else "covariance eigenvalue")
    ax.set_title("Covariance eigenvalue spectrum")
    _legend_outside(ax, len(named))
    return ax


@validate_params(
    {
        "embeddings": ["array-like", dict],
        "n_pairs": [Interval(Integral, 1, None, closed="left")],
        "bins": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "ax": "no_validation",
    },
    prefer_skip_nested_validation=True,
)
def plot_cosine_histogram(
    embeddings: ArrayLike | dict,
    *,
    n_pairs: int = 10_000,
    bins: int = 50,
    random_state: int | np.random.RandomState | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Plot histograms of the cosine similarity of random pairs of rows.

    Anisotropic embeddings bunch near 1; isotropic ones spread around 0.

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
        Seed of the pair sampling (the same pairs for matrices of as many rows).
    ax : matplotlib Axes, default=None
        Axes to draw on; a new figure is created when None.

    Returns
    -------
    ax : matplotlib Axes
        The axes drawn on.

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
    _legend_outside(ax, len(named))
    return ax


@validate_params(
    {
        "embeddings": [dict],
        "reference": [str, None],
        "n_pairs": [Interval(Integral, 1, None, closed="left")],
        "bins": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "figure": "no_validation",
    },
    prefer_skip_nested_validation=True,
)
def plot_cosine_panels(
    embeddings: dict,
    *,
    reference: str | None = None,
    n_pairs: int = 10_000,
    bins: int = 50,
    random_state: int | np.random.RandomState | None = 0,
    figure: Figure | None = None,
) -> Figure:
    """Plot small multiples of pair-cosine histograms, one panel per matrix.

    Each panel, titled with its mean, draws the cosines of random pairs of
    rows of one matrix, over the `reference` matrix's histogram in grey.

    Parameters
    ----------
    embeddings : dict of str to array-like of shape (n_samples, n_features)
        A mapping from a label to a matrix.
    reference : str, default=None
        The label drawn behind the other panels; none when None.
    n_pairs : int, default=10_000
        Random pairs of distinct rows per matrix.
    bins : int, default=50
        Histogram bins over [-1, 1].
    random_state : int, RandomState instance or None, default=0
        Seed of the pair sampling.
    figure : matplotlib Figure, default=None
        Where to draw (sized to the panels); a new figure when None.

    Returns
    -------
    figure : matplotlib Figure
        The figure drawn on.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from sklearn_isotropy.diagnostics import plot_cosine_panels
    >>> X = np.random.RandomState(0).normal(size=(100, 5))
    >>> fig = plot_cosine_panels({"raw": X + 3, "centred": X}, reference="raw")
    >>> len([ax for ax in fig.axes if ax.get_visible()])
    2
    """
    named = _as_named(embeddings)
    if figure is None:
        plt = import_optional("matplotlib.pyplot", purpose="plotting", extra="plot")
        figure = plt.figure(layout="constrained")
    labels = list(named)
    ncols = min(3, len(labels))
    nrows = -(-len(labels) // ncols)
    figure.set_size_inches(3.4 * ncols, 2.6 * nrows + 0.6)
    axes = figure.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    edges = np.linspace(-1.0, 1.0, bins + 1)

    def cosines(label):
        return pair_cosines(named[label], n_pairs=n_pairs, random_state=random_state)

    ref = cosines(reference) if reference in named else None
    for ax, label in zip(axes.flat, labels):
        cos = cosines(label)
        if ref is not None and label != reference:
            ax.hist(ref, bins=edges, density=True, color="0.8", label=reference)
        ax.hist(cos, bins=edges, density=True, histtype="step", linewidth=1.5)
        mean = float(cos.mean())
        mean = 0.0 if abs(mean) < 0.005 else mean  # "0.00", not "-0.00"
        ax.set_title(f"{label}\nmean cosine {mean:.2f}", fontsize="small")
        ax.set_xlim(-1.0, 1.0)
    for ax in axes.flat[len(labels) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("cosine of random pairs")
    for ax in axes[:, 0]:
        ax.set_ylabel("density")
    return figure


# the marker and line style of each precision
_PRECISION_STYLES = {
    "float32": {"marker": "o", "linestyle": "-"},
    "int8": {"marker": "s", "linestyle": "--"},
    "binary": {"marker": "^", "linestyle": ":"},
    "binary-uncentred": {"marker": "v", "linestyle": "-."},
}
# the style of a precision not in the table
_OTHER_PRECISION = {"marker": "D", "linestyle": "-"}


@validate_params(
    {
        "records": ["array-like"],
        "metric": [str],
        "ax": "no_validation",
        "title": [str, None],
        "legend": ["boolean"],
        "zoom": [Interval(Real, 0, None, closed="neither"), None],
    },
    prefer_skip_nested_validation=True,
)
def plot_quality_vs_bytes(
    records: list[dict],
    *,
    metric: str = "mrr@10",
    ax: Axes | None = None,
    title: str | None = None,
    legend: bool = True,
    zoom: float | None = None,
) -> Axes:
    """Plot a quality score against bytes per vector (log scale).

    One colour per method, one line per precision through its dimensions
    (solid float32, dashed int8, dotted binary); a method without a
    dimension is a hollow marker. The legend sits right of the axes (save
    with ``bbox_inches="tight"``).

    Parameters
    ----------
    records : list of dict
        ``Evaluation.records`` of a retrieval
        :func:`~sklearn_isotropy.evaluation.evaluate` run (failed ones skipped).
    metric : str, default="mrr@10"
        Which score to plot (x100).
    ax : matplotlib.axes.Axes, default=None
        Where to draw; a new figure's axes when None.
    title : str, default=None
        Axes title.
    legend : bool, default=True
        Draw the method and precision legend (right of the axes).
    zoom : float, default=None
        Show only the top `zoom` points (x100) below the best score.

    Returns
    -------
    ax : matplotlib.axes.Axes
        The axes drawn on.
    """
    ax = _new_axes(ax)
    ok = [r for r in records if "error" not in r]
    # a curve per registered method; a custom transformer is its own
    curve = {id(r): r["label"] if r["method"] == "custom" else r["method"] for r in ok}
    methods = list(dict.fromkeys(curve.values()))
    colours = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    groups = {}
    for r in ok:
        groups.setdefault((curve[id(r)], r["quantization"]), []).append(r)
    for (method, quant), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["bytes_per_vector"])
        single = len(rs) == 1  # raw, NATSV: hollow and larger, so overlaps show
        style = _PRECISION_STYLES.get(quant, _OTHER_PRECISION)
        ax.plot(
            [r["bytes_per_vector"] for r in rs],
            [100 * r[metric] for r in rs],
            linestyle="none" if single else style["linestyle"],
            marker=style["marker"],
            color=colours[method],
            markerfacecolor="none" if single else colours[method],
            markeredgewidth=1.8 if single else 1.0,
            markersize=10 if single else 6,
            linewidth=1.4,
            alpha=0.9,
        )
    ax.set_xscale("log")
    if zoom is not None and ok:
        best = max(100 * r[metric] for r in ok)
        ax.set_ylim(best - zoom, best + 0.1 * zoom)
    ax.set_xlabel("bytes per vector (log scale)")
    ax.set_ylabel(f"{metric} x100")
    ax.grid(True, which="both", alpha=0.3)
    if title:
        ax.set_title(title)
    if not legend:
        return ax
    from matplotlib.lines import Line2D

    def method_label(m):  # "PCA-k" for a curve through several k
        rs = [r for r in ok if curve[id(r)] == m]
        r = next((r for r in rs if r.get("k")), rs[0])
        return r["label"].replace(str(r["k"]), "k") if r.get("k") else r["label"]

    heading = {"color": "none", "marker": None, "linestyle": "none"}
    quants = list(dict.fromkeys(r["quantization"] for r in ok))
    # one legend (an extra legend added with add_artist is left out of
    # bbox_inches="tight"), with a heading row before each group
    ax.legend(
        handles=[
            Line2D([], [], label="method", **heading),
            *[
                Line2D([], [], color=colours[m], linewidth=3, label=method_label(m))
                for m in methods
            ],
            Line2D([], [], label=" ", **heading),
            Line2D([], [], label="precision", **heading),
            *[
                Line2D(
                    [],
                    [],
                    color="0.3",
                    label=q,
                    **_PRECISION_STYLES.get(q, _OTHER_PRECISION),
                )
                for q in quants
            ],
        ],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    return ax
