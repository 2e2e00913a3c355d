"""Tests for sklearn_isotropy.diagnostics: measures with known answers, plots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp
from sklearn.decomposition import PCA

from sklearn_isotropy.diagnostics import (
    anisotropy_report,
    effective_rank,
    isotropy_score,
    mean_pair_cosine,
    pair_cosines,
    plot_cosine_histogram,
    plot_eigenvalue_spectrum,
    top_component_variance_ratio,
)


@pytest.fixture(scope="module")
def gaussian():
    return np.random.RandomState(0).normal(size=(20_000, 10))


@pytest.fixture(scope="module")
def cone():
    """Rank-1 cone: every row a positive multiple of one unit vector."""
    rng = np.random.RandomState(1)
    v = rng.normal(size=10)
    v /= np.linalg.norm(v)
    return rng.uniform(1.0, 2.0, size=(500, 1)) * v


def test_isotropic_gaussian(gaussian):
    assert abs(mean_pair_cosine(gaussian, random_state=0)) < 0.02
    assert isotropy_score(gaussian) > 0.9
    assert 9.9 < effective_rank(gaussian) <= 10.0
    # the top eigenvalue of a sample covariance exceeds 1/d slightly
    # (Marchenko-Pastur edge (1 + sqrt(d/n))**2 / d = 0.1045)
    assert 0.1 < top_component_variance_ratio(gaussian) < 0.11


def test_rank_one_cone(cone):
    np.testing.assert_allclose(mean_pair_cosine(cone, random_state=0), 1.0, atol=1e-12)
    # Z(v) = sum exp(t_i), Z(-v) = sum exp(-t_i), Z(c) = n for c orthogonal to v
    t = np.linalg.norm(cone, axis=1)
    np.testing.assert_allclose(
        isotropy_score(cone), np.exp(-t).sum() / np.exp(t).sum(), rtol=1e-10
    )
    assert isotropy_score(10 * cone) < 1e-6
    np.testing.assert_allclose(effective_rank(cone), 1.0, atol=1e-9)
    np.testing.assert_allclose(top_component_variance_ratio(cone), 1.0, atol=1e-12)


def test_isotropy_score_matches_direct_formula():
    rng = np.random.RandomState(2)
    X = rng.normal(size=(300, 4)) * [1.0, 0.5, 0.3, 0.1] + [0.5, 0, 0, 0]
    _, vecs = np.linalg.eigh(X.T @ X)
    z = [np.exp(X @ (s * c)).sum() for c in vecs.T for s in (1, -1)]
    np.testing.assert_allclose(isotropy_score(X), min(z) / max(z), rtol=1e-10)
    # far out of exp's range it still returns a number in [0, 1]
    big = isotropy_score(X * 1e4)
    assert 0.0 <= big <= 1.0 and np.isfinite(big)
    assert np.isfinite(logsumexp(X * 1e4))


def test_effective_rank_and_top_share_match_independent_computations():
    rng = np.random.RandomState(3)
    X = rng.normal(size=(200, 6)) * [4.0, 2.0, 1.0, 1.0, 0.5, 0.1] + 3.0
    # the effective rank of the covariance: the entropy of its eigenvalues
    evals = np.linalg.eigvalsh(np.cov(X, rowvar=False))
    p = evals / evals.sum()
    np.testing.assert_allclose(effective_rank(X), np.exp(-(p * np.log(p)).sum()))
    evals0 = np.linalg.eigvalsh(X.T @ X / len(X))
    p0 = evals0 / evals0.sum()
    np.testing.assert_allclose(
        effective_rank(X, center=False), np.exp(-(p0 * np.log(p0)).sum())
    )
    ratios = PCA().fit(X).explained_variance_ratio_
    np.testing.assert_allclose(top_component_variance_ratio(X), ratios[0])
    np.testing.assert_allclose(
        top_component_variance_ratio(X, n_components=3), ratios[:3].sum()
    )


def test_mean_pair_cosine_matches_all_pairs():
    rng = np.random.RandomState(4)
    X = rng.normal(size=(30, 5)) + [1.0, 0, 0, 0, 0]
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    G = U @ U.T
    exact = (G.sum() - np.trace(G)) / (30 * 29)
    got = mean_pair_cosine(X, n_pairs=400_000, random_state=0)
    np.testing.assert_allclose(got, exact, atol=5e-3)
    # distinct rows only: a matrix of two opposite rows has cosine -1 always
    np.testing.assert_array_equal(
        pair_cosines([[1.0, 0.0], [-2.0, 0.0]], n_pairs=50, random_state=0), -1.0
    )


def test_scale_and_degenerate_inputs():
    rng = np.random.RandomState(5)
    X = rng.normal(size=(50, 4))
    np.testing.assert_allclose(
        mean_pair_cosine(X * 1e200, random_state=0),
        mean_pair_cosine(X, random_state=0),
    )
    np.testing.assert_allclose(effective_rank(X * 1e200), effective_rank(X))
    np.testing.assert_allclose(
        top_component_variance_ratio(X * 1e-200), top_component_variance_ratio(X)
    )
    Z = np.zeros((5, 3))
    assert effective_rank(Z) == 0.0
    assert top_component_variance_ratio(Z) == 0.0
    assert isotropy_score(Z) == 1.0
    assert mean_pair_cosine(Z, random_state=0) == 0.0
    with pytest.raises(ValueError, match="NaN"):
        effective_rank([[np.nan, 1.0], [1.0, 2.0]])
    with pytest.raises(ValueError, match="minimum of 2"):
        mean_pair_cosine([[1.0, 2.0]])
    with pytest.raises(ValueError, match="n_pairs"):
        pair_cosines(X, n_pairs=0)
    with pytest.raises(ValueError, match="n_components"):
        top_component_variance_ratio(X, n_components=0)


def test_report(gaussian, cone):
    r = anisotropy_report(cone, random_state=0)
    assert r["n_features"] == 10
    np.testing.assert_allclose(r["mean_pair_cosine"], 1.0)
    assert r["effective_rank"] == pytest.approx(effective_rank(cone))
    assert r["isotropy_score"] == isotropy_score(cone, normalize=True)
    unit = cone / np.linalg.norm(cone, axis=1, keepdims=True)
    assert isotropy_score(cone, normalize=True) == pytest.approx(
        isotropy_score(unit), rel=1e-9
    )
    # normalised, every row is v: Z(v) = n e, Z(-v) = n / e
    assert isotropy_score(unit) == pytest.approx(np.exp(-2.0), rel=1e-9)
    assert r["top_component_variance_ratio"] == pytest.approx(1.0)


# ------------------------------------------------------------------- plots


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


def test_optional_dependencies_are_imported_lazily():
    # importing the modules, and a fit and transform on numpy, import no
    # plotting, torch or dask (one fresh process checks them all)
    code = (
        "import sys, numpy as np, sklearn_isotropy, sklearn_isotropy.diagnostics, "
        "sklearn_isotropy.metrics, sklearn_isotropy.datasets\n"
        "X = np.random.default_rng(0).normal(size=(50, 4))\n"
        "sklearn_isotropy.WhiteningTransformer().fit(X).transform(X)\n"
        "heavy = ('matplotlib', 'torch', 'transformers', 'dask', 'distributed')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    )
    assert out.stdout.strip() == "[]"


def test_spectrum_stops_at_the_numerical_rank(plt):
    from sklearn_isotropy import NATSVTransformer

    rng = np.random.RandomState(8)
    X = (rng.normal(size=(400, 12)) * np.geomspace(3, 0.3, 12) + 2).astype(np.float32)
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
