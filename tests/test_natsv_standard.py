"""NATSVTransformer and StandardNormalizer against numpy/sklearn."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.preprocessing import StandardScaler

from sklearn_isotropy import NATSVTransformer, StandardNormalizer
from sklearn_isotropy.exceptions import RankDeficiencyWarning


def cone(n=400, d=10, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.geomspace(8, 0.5, d) + 5 * rng.normal(size=d)
    return X.astype(dtype)


# ------------------------------------------------------------------- NATSV
@pytest.mark.parametrize("k", [0, 1, 3])
def test_natsv_centered_matches_svd_recipe(k):
    X = cone()
    Y = X - X.mean(axis=0)
    _, _, vt = np.linalg.svd(Y, full_matrices=False)
    expected = Y - Y @ vt[:k].T @ vt[:k]
    est = NATSVTransformer(n_components=k).fit(X)
    np.testing.assert_allclose(est.transform(X), expected, atol=1e-9)
    np.testing.assert_allclose(np.abs(est.components_), np.abs(vt[:k]), atol=1e-9)
    assert est.transform(X).shape == X.shape


def test_natsv_uncentered_matches_svd_of_raw_rows():
    X = cone()
    _, _, vt = np.linalg.svd(X, full_matrices=False)
    est = NATSVTransformer(n_components=2, center=False).fit(X)
    expected = X - X @ vt[:2].T @ vt[:2]
    np.testing.assert_allclose(est.transform(X), expected, atol=1e-9)
    assert est.mean_ is None


def test_natsv_output_orthogonal_to_removed_directions_float32():
    X = cone(dtype=np.float32)
    est = NATSVTransformer(n_components=3).fit(X)
    Z = est.transform(X)
    assert Z.dtype == np.float32
    assert np.abs(Z @ est.components_.T).max() < 1e-3 * np.abs(Z).max()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), n_chunks=st.integers(1, 6))
def test_natsv_streaming_equals_batch(seed, n_chunks):
    X = cone(n=300, d=6, seed=seed)
    batch = NATSVTransformer(n_components=2).fit(X)
    stream = NATSVTransformer(n_components=2)
    for chunk in np.array_split(X, n_chunks):
        stream.partial_fit(chunk)
    np.testing.assert_allclose(stream.transform(X), batch.transform(X), atol=1e-8)


def test_natsv_bad_n_components():
    with pytest.raises(ValueError, match="n_features = 3"):
        NATSVTransformer(n_components=4).fit(cone(d=3))
    with pytest.warns(RankDeficiencyWarning, match="rank 2"):
        NATSVTransformer(n_components=3).fit(cone(n=3, d=5))
    with pytest.raises(ValueError, match="n_samples = 1"):
        NATSVTransformer().fit(cone(n=1))


# ------------------------------------------------------------ SN baseline
@pytest.mark.parametrize("with_mean", [True, False])
@pytest.mark.parametrize("with_std", [True, False])
def test_standard_normalizer_equals_standard_scaler(with_mean, with_std):
    X = cone()
    X[:, 4] = 3.0  # a constant dimension must not be divided by zero
    w = np.random.default_rng(0).uniform(0, 3, size=X.shape[0])
    for sample_weight in (None, w):
        ours = StandardNormalizer(with_mean=with_mean, with_std=with_std).fit(
            X, sample_weight=sample_weight
        )
        ref = StandardScaler(with_mean=with_mean, with_std=with_std).fit(
            X, sample_weight=sample_weight
        )
        np.testing.assert_allclose(ours.transform(X), ref.transform(X), atol=1e-10)
        if with_std:
            np.testing.assert_allclose(ours.scale_, ref.scale_, rtol=1e-10)
            assert ours.scale_[4] == 1.0
        Z = ours.transform(X)
        assert np.all(np.isfinite(Z))
        np.testing.assert_allclose(ours.inverse_transform(Z), X, atol=1e-10)


def test_standard_normalizer_streaming_and_float32():
    X = cone(dtype=np.float32)
    batch = StandardNormalizer().fit(X)
    stream = StandardNormalizer()
    for chunk in np.array_split(X, 9):
        stream.partial_fit(chunk)
    np.testing.assert_allclose(stream.mean_, batch.mean_, rtol=1e-12)
    np.testing.assert_allclose(stream.var_, batch.var_, rtol=1e-10)
    Z = stream.transform(X)
    assert Z.dtype == np.float32
    np.testing.assert_allclose(Z.std(axis=0), 1.0, atol=1e-4)


def test_standard_normalizer_one_sample_is_fine():
    Z = StandardNormalizer().fit_transform(np.array([[1.0, 2.0]]))
    np.testing.assert_array_equal(Z, [[0.0, 0.0]])
