"""NATSVTransformer against the SVD recipe of all-but-the-top (numpy)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sklearn_isotropy import NATSVTransformer, datasets
from sklearn_isotropy.exceptions import RankDeficiencyWarning
from tests._data import CONE


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


# ------------------------------------------------- wide data, the dual form
@pytest.mark.parametrize("center", [True, False])
def test_natsv_on_wide_data_uses_the_dual_form(center):
    rng = np.random.default_rng(4)
    n, d = 15, 3000
    X = datasets.make_cone(
        n, d, spread=(4, 0.5), offset=np.full(d, 2.0), rotate=False, random_state=rng
    )
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
