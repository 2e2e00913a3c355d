"""Tests of the anisotropy plots: spectra and cosine histograms (matplotlib)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA

from sklearn_isotropy.datasets import make_cone
from sklearn_isotropy.diagnostics import (
    mean_pair_cosine,
    plot_cosine_histogram,
    plot_eigenvalue_spectrum,
)


@pytest.fixture
def plt():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def test_spectrum_plot_draws_normalised_eigenvalues(plt, tmp_path):
    rng = np.random.RandomState(6)
    X = rng.normal(size=(300, 5)) * [5.0, 2.0, 1.0, 0.5, 0.2]
    W = (X - X.mean(0)) / X.std(0)
    fig, ax = plt.subplots()
    out = plot_eigenvalue_spectrum({"before": X, "after": W}, ax=ax)
    assert out is ax
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == ["before", "after"]
    np.testing.assert_allclose(
        lines[0].get_ydata(), PCA().fit(X).explained_variance_ratio_, rtol=1e-8
    )
    assert ax.get_yscale() == "log"
    raw = plot_eigenvalue_spectrum(X, normalize=False)
    np.testing.assert_allclose(
        raw.get_lines()[0].get_ydata(), PCA().fit(X).explained_variance_, rtol=1e-8
    )
    fig.savefig(tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 0


def test_cosine_histogram(plt):
    rng = np.random.RandomState(7)
    X = rng.normal(size=(100, 5))
    ax = plot_cosine_histogram({"raw": X + 5, "centred": X}, random_state=0, bins=20)
    assert len(ax.patches) == 2  # one step histogram per matrix
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    m = mean_pair_cosine(X + 5, random_state=0)
    assert labels[0] == f"raw (mean {m:.2f})"
    with pytest.raises(ValueError, match="empty dict"):
        plot_cosine_histogram({})


def test_spectrum_stops_at_the_numerical_rank(plt):
    from sklearn_isotropy import NATSVTransformer

    X = make_cone(
        400, 12, spread=(3, 0.3), offset=np.full(12, 2.0), rotate=False, random_state=8
    ).astype(np.float32)
    nulled = NATSVTransformer(n_components=3).fit_transform(X)  # rank 12 - 3
    few = X[:5]  # 5 rows span 4 directions
    ax = plot_eigenvalue_spectrum({"raw": X, "natsv": nulled, "few rows": few})
    lengths = [len(line.get_ydata()) for line in ax.get_lines()]
    assert lengths == [12, 9, 4]
    # what is drawn is the data's spectrum, not round-off
    expected = PCA().fit(nulled.astype(np.float64)).explained_variance_ratio_[:9]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), expected, rtol=1e-4)
    assert min(ln.get_ydata().min() for ln in ax.get_lines()) > 1e-6


def test_overlapping_lines_stay_distinguishable(plt):
    X = np.random.RandomState(9).normal(size=(100, 40))
    ax = plot_eigenvalue_spectrum({"a": X, "b": X.copy(), "c": X * 2})
    lines = ax.get_lines()
    styles = {(ln.get_marker(), ln.get_linestyle()) for ln in lines}
    assert len(styles) == 3
    # markers of coinciding lines sit at different components
    starts = {ln.get_markevery()[0] for ln in lines}
    assert len(starts) > 1
    legend = ax.get_legend()
    # the legend is outside the axes (anchored right of them), not over data
    assert legend.get_bbox_to_anchor().x0 >= ax.get_window_extent().x1 - 1
