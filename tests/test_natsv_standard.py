"""NATSVTransformer and StandardNormalizer against numpy/sklearn."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.preprocessing import StandardScaler

import sklearn_isotropy.linear._base
from sklearn_isotropy import NATSVTransformer, StandardNormalizer
from sklearn_isotropy.exceptions import RankDeficiencyWarning

# the data of these tests: make_cone(n, d, **CONE), unrotated (the columns
# are the principal axes, scales 8 to 0.5) around an offset of scale 5
CONE = {"offset": 5.0, "spread": (8.0, 0.5), "rotate": False}


# ------------------------------------------------------------------- NATSV
@pytest.mark.parametrize("k", [0, 1, 3])
def test_natsv_centered_matches_svd_recipe(k, make_cone):
    X = make_cone(400, 10, **CONE)
    Y = X - X.mean(axis=0)
    _, _, vt = np.linalg.svd(Y, full_matrices=False)
    expected = Y - Y @ vt[:k].T @ vt[:k]
    est = NATSVTransformer(n_components=k).fit(X)
    np.testing.assert_allclose(est.transform(X), expected, atol=1e-9)
    np.testing.assert_allclose(np.abs(est.components_), np.abs(vt[:k]), atol=1e-9)
    assert est.transform(X).shape == X.shape


def test_natsv_uncentered_matches_svd_of_raw_rows(make_cone):
    X = make_cone(400, 10, **CONE)
    _, _, vt = np.linalg.svd(X, full_matrices=False)
    est = NATSVTransformer(n_components=2, center=False).fit(X)
    expected = X - X @ vt[:2].T @ vt[:2]
    np.testing.assert_allclose(est.transform(X), expected, atol=1e-9)
    assert est.mean_ is None


def test_natsv_output_orthogonal_to_removed_directions_float32(make_cone):
    X = make_cone(400, 10, **CONE, dtype=np.float32)
    est = NATSVTransformer(n_components=3).fit(X)
    Z = est.transform(X)
    assert Z.dtype == np.float32
    assert np.abs(Z @ est.components_.T).max() < 1e-3 * np.abs(Z).max()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), n_chunks=st.integers(1, 6))
def test_natsv_streaming_equals_batch(seed, n_chunks, make_cone):
    X = make_cone(300, 6, seed=seed, **CONE)
    batch = NATSVTransformer(n_components=2).fit(X)
    stream = NATSVTransformer(n_components=2)
    for chunk in np.array_split(X, n_chunks):
        stream.partial_fit(chunk)
    np.testing.assert_allclose(stream.transform(X), batch.transform(X), atol=1e-8)


def test_natsv_bad_n_components(make_cone):
    with pytest.raises(ValueError, match="n_features = 3"):
        NATSVTransformer(n_components=4).fit(make_cone(400, 3, **CONE))
    with pytest.warns(RankDeficiencyWarning, match="rank 2"):
        NATSVTransformer(n_components=3).fit(make_cone(3, 5, **CONE))
    with pytest.raises(ValueError, match="n_samples = 1"):
        NATSVTransformer().fit(make_cone(1, 10, **CONE))


# ------------------------------------------------------------ SN baseline
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


@pytest.mark.parametrize(
    "est", [StandardNormalizer(), NATSVTransformer()], ids=lambda e: type(e).__name__
)
def test_overflowing_statistics_are_an_error_not_garbage(est, make_cone):
    X = make_cone(400, 3, **CONE) * 1e160  # finite, but squares overflow float64
    with pytest.raises(ValueError, match="overflowed float64"):
        est.fit(X)


TRANSFORMERS = [
    StandardNormalizer(),
    StandardNormalizer(with_mean=False),
    NATSVTransformer(n_components=2),
    NATSVTransformer(n_components=0, center=False),
]


@pytest.mark.parametrize("est", TRANSFORMERS, ids=repr)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_transform_rejects_non_finite_anywhere(est, dtype, bad, monkeypatch, make_cone):
    # transform checks finiteness on its output, block by block (made small
    # here): a bad entry must be caught in the first, a middle and the last
    monkeypatch.setattr(sklearn_isotropy.linear._base, "_FINISH_BLOCK_BYTES", 512)
    X = make_cone(3000, 10, **CONE, dtype=dtype)
    est = est.fit(X)
    for row, col in [(0, 0), (1234, 4), (len(X) - 1, X.shape[1] - 1)]:
        bad_X = X.copy()
        bad_X[row, col] = bad
        with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
            est.transform(bad_X)


@pytest.mark.parametrize("est", TRANSFORMERS, ids=repr)
def test_transform_matches_formula_on_many_blocks(est, make_cone):
    X = make_cone(5000, 40, **CONE)
    est = est.fit(X)
    if isinstance(est, StandardNormalizer):
        mean = X.mean(axis=0) if est.with_mean else 0.0
        expected = (X - mean) / X.std(axis=0)
    else:
        Y = X - X.mean(axis=0) if est.center else X
        _, _, Vt = np.linalg.svd(Y, full_matrices=False)
        C = Vt[: est.n_components]
        expected = Y - (Y @ C.T) @ C
    np.testing.assert_allclose(est.transform(X), expected, rtol=1e-8, atol=1e-8)


def test_transform_overflow_of_float32_output_is_an_error(make_cone):
    X = make_cone(400, 4, **CONE, dtype=np.float32) * np.float32(1e-30)  # tiny spread
    sn = StandardNormalizer().fit(X)
    with pytest.raises(ValueError, match="overflowed float32.*Pass float64"):
        sn.transform(np.full((3, 4), 1e10, dtype=np.float32))
    # in a random basis: the top direction is not an axis
    rotated = make_cone(400, 4, offset=5.0, spread=(8.0, 0.5), dtype=np.float32)
    natsv = NATSVTransformer(n_components=1).fit(rotated)
    # rows along the signs of the removed direction: the coordinate along it
    # is 3e38 * ||c||_1 > float32's largest value
    c = natsv.components_[0]
    assert np.abs(c).sum() > 1.2
    huge = np.tile(np.float32(3e38) * np.sign(c).astype(np.float32), (3, 1))
    assert np.all(np.isfinite(huge))
    with pytest.raises(ValueError, match="overflowed float32"):
        natsv.transform(huge)


# ------------------------------------------------- wide data, the dual form
@pytest.mark.parametrize("center", [True, False])
def test_natsv_on_wide_data_uses_the_dual_form(center):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(15, 3000)) * np.geomspace(4, 0.5, 3000) + 2.0
    est = NATSVTransformer(n_components=3, center=center).fit(X)
    assert est.moments_.representation == "rows"
    Y = X - X.mean(axis=0) if center else X
    _, _, vt = np.linalg.svd(Y, full_matrices=False)
    np.testing.assert_allclose(np.abs(est.components_), np.abs(vt[:3]), atol=1e-10)
    X_new = rng.normal(size=(4, 3000))
    Y_new = X_new - X.mean(axis=0) if center else X_new
    expected = Y_new - Y_new @ vt[:3].T @ vt[:3]
    np.testing.assert_allclose(est.transform(X_new), expected, atol=1e-9)
    # streamed in batches (still rows) gives the same
    stream = NATSVTransformer(n_components=3, center=center)
    for chunk in np.array_split(X, 4):
        stream.partial_fit(chunk)
    np.testing.assert_allclose(stream.transform(X_new), expected, atol=1e-9)


def test_natsv_dual_form_beyond_the_rank_completes_the_basis():
    X = np.random.default_rng(5).normal(size=(4, 50))
    with pytest.warns(RankDeficiencyWarning, match="rank 3"):
        est = NATSVTransformer(n_components=6).fit(X)
    C = est.components_
    np.testing.assert_allclose(C @ C.T, np.eye(6), atol=1e-12)
    np.testing.assert_allclose(est.explained_variance_[3:], 0.0, atol=1e-12)
    assert np.all(np.isfinite(est.transform(X)))


@pytest.mark.parametrize("center", [True, False])
def test_natsv_rank_of_float32_rows_leaves_out_their_round_off(center):
    # rows in a 20-dim affine subspace of 64 features, stored in float32:
    # their round-off spans the other directions, at 1e-14 of the variance,
    # and counted in the rank (59 directions, no warning at 25)
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(64, 20)))[0].T
    signal = 0.05 * rng.normal(size=(2000, 20)) @ basis
    X = rng.normal(size=64) + signal
    # uncentred, the offset is one more direction
    rank = np.linalg.matrix_rank(signal if center else X)
    assert rank == (20 if center else 21)
    X32 = X.astype(np.float32)
    with pytest.warns(RankDeficiencyWarning, match=f"numerical rank {rank} "):
        NATSVTransformer(n_components=rank + 1, center=center).fit(X32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RankDeficiencyWarning)
        NATSVTransformer(n_components=rank, center=center).fit(X32)


# -------------------------------------------------------- tiny magnitudes
@pytest.mark.parametrize("scale", [1e-200, 1e-310])
def test_tiny_inputs_are_not_constant(scale, make_cone):
    X = make_cone(400, 10, **CONE)
    sn = StandardNormalizer().fit(X * scale)
    ref = StandardNormalizer().fit(X)
    np.testing.assert_allclose(sn.transform(X * scale), ref.transform(X), rtol=1e-6)
    np.testing.assert_allclose(sn.scale_, ref.scale_ * scale, rtol=1e-6)
    natsv = NATSVTransformer(n_components=2).fit(X * scale)
    np.testing.assert_allclose(
        np.abs(natsv.components_),
        np.abs(NATSVTransformer(n_components=2).fit(X).components_),
        atol=1e-6,
    )
