"""Tests of the anisotropy measures: known answers and independent computations."""

from __future__ import annotations

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
