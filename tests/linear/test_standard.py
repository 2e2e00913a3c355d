"""StandardNormalizer (SN) against scikit-learn's StandardScaler."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.preprocessing import StandardScaler

from sklearn_isotropy import StandardNormalizer
from tests._data import CONE


@pytest.mark.parametrize("with_mean", [True, False])
@pytest.mark.parametrize("with_std", [True, False])
def test_standard_normalizer_equals_standard_scaler(with_mean, with_std, make_cone):
    X = make_cone(400, 10, **CONE)
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


def test_standard_normalizer_streaming_and_float32(make_cone):
    X = make_cone(400, 10, **CONE, dtype=np.float32)
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


def test_standard_normalizer_inverse_of_its_pandas_output(make_cone):
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(make_cone(400, 3, **CONE), columns=["a", "b", "c"])
    sn = StandardNormalizer().set_output(transform="pandas").fit(X)
    back = sn.inverse_transform(sn.transform(X))
    np.testing.assert_allclose(np.asarray(back), X.to_numpy(), atol=1e-10)
    with pytest.raises(ValueError, match="expects 3"):
        sn.inverse_transform(np.zeros((2, 4)))


def _pooled_like(dtype):
    """Rows like mean-pooled MiniLM outputs: 32 features, three at round-off.

    all-MiniLM-L6-v2 on STS-B has two features with standard deviations of
    about 1e-32 and one at 2e-9 (mean -1e-7), against a median of 0.27.
    """
    rng = np.random.default_rng(0)
    X = 0.27 * rng.normal(size=(400, 32)) + 0.1 * rng.normal(size=32)
    X[:, 0] = 1e-32 * rng.normal(size=400)
    X[:, 1] = 8e-33 + 1.6e-32 * rng.normal(size=400)
    X[:, 2] = -1e-7 + 2e-9 * rng.normal(size=400)
    return X.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_features_at_the_rows_round_off_are_constant(dtype):
    # they were divided by their spread: round-off at unit variance in every
    # row, as large as any feature's signal
    X = _pooled_like(dtype)
    X64 = X.astype(np.float64)
    std = X64.std(axis=0)
    eps = np.finfo(dtype).eps
    # the rule, from numpy: a spread at or below eps times the rows' spread
    at_round_off = std <= eps * np.sqrt(np.sum(std**2))
    # float32 rows: all three; float64 rows resolve the 2e-9 one
    n_constant = 3 if dtype == np.float32 else 2
    np.testing.assert_array_equal(np.flatnonzero(at_round_off), range(n_constant))
    sn = StandardNormalizer().fit(X)
    np.testing.assert_array_equal(sn.scale_[:n_constant], 1.0)
    np.testing.assert_allclose(sn.scale_[n_constant:], std[n_constant:], rtol=1e-6)
    Z = sn.transform(X).astype(np.float64)
    assert np.all(np.abs(Z[:, :n_constant]) < 1e-6)  # centred, not amplified
    np.testing.assert_allclose(Z[:, n_constant:].std(axis=0), 1.0, rtol=1e-5)
    # the flow's standardize=True takes StandardNormalizer's statistics
    from sklearn_isotropy.flow._input import standardization, standardize

    mean, scale = standardization(X64)
    U = standardize(X64, mean, scale)
    assert np.all(np.abs(U[:, :2]) < 1e-20)  # the float64 rule: 1e-32 at least


def test_offset_features_are_not_round_off():
    # mean 1e4, spread 1e-2 in float32: each entry is rounded to 1e-3, so
    # the features are resolved; measured against the rows' uncentred norm
    # (1e4 * sqrt(128)) they would not be
    rng = np.random.default_rng(1)
    X = (1e4 + 1e-2 * rng.normal(size=(2000, 128))).astype(np.float32)
    sn = StandardNormalizer().fit(X)
    np.testing.assert_allclose(sn.scale_, X.astype(np.float64).std(axis=0), rtol=1e-6)
    # a feature that only steps between two neighbouring float32 values
    # (1e4 and 1e4 + 9.8e-4) is not: its spread is its own rounding
    step = np.spacing(np.float32(1e4))
    X[:, 0] = np.float32(1e4) + step * (np.arange(2000) % 2)
    assert X[:, 0].std() > 0
    assert StandardNormalizer().fit(X).scale_[0] == 1.0
