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
