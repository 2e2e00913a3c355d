"""WhiteningTransformer against independent numpy/scipy/sklearn computations."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.covariance import OAS, ledoit_wolf_shrinkage
from sklearn.decomposition import PCA
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline

import sklearn_isotropy
import sklearn_isotropy.linear._whitening
from sklearn_isotropy import NATSVTransformer, WhiteningTransformer
from sklearn_isotropy.exceptions import RankDeficiencyWarning


def match_signs(A, B):
    """Flip the columns of A to agree in sign with B."""
    signs = np.sign(np.sum(A * B, axis=0))
    signs[signs == 0] = 1
    return A * signs


# --------------------------------------------------------------- the whitening
@pytest.mark.parametrize("method", ["pca", "zca", "cholesky"])
@pytest.mark.parametrize("dtype,atol", [(np.float64, 1e-10), (np.float32, 2e-4)])
def test_output_covariance_is_identity(method, dtype, atol, make_cone):
    X = make_cone(1000, 12, dtype=dtype)
    Z = WhiteningTransformer(method=method).fit_transform(X)
    assert Z.dtype == dtype
    cov = np.cov(Z.astype(np.float64), rowvar=False)
    np.testing.assert_allclose(cov, np.eye(X.shape[1]), atol=atol)
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=atol * 10)


def test_pca_equals_sklearn_pca_whiten(make_cone):
    X = make_cone(1000, 12)
    for k in (None, 5):
        ours = WhiteningTransformer(n_components=k).fit(X)
        pca = PCA(n_components=k, whiten=True, svd_solver="full").fit(X)
        Z, P = ours.transform(X), pca.transform(X)
        np.testing.assert_allclose(match_signs(Z, P), P, rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(ours.explained_variance_, pca.explained_variance_)
        np.testing.assert_allclose(
            ours.explained_variance_ratio_[: pca.n_components_],
            pca.explained_variance_ratio_ / pca.explained_variance_ratio_.sum()
            if k is None
            else pca.explained_variance_ratio_,
            rtol=1e-10,
        )
        np.testing.assert_allclose(
            np.abs(ours.components_), np.abs(pca.components_), atol=1e-10
        )


def test_float_n_components_matches_pca(make_cone):
    X = make_cone(1000, 12)
    for share in (0.5, 0.9, 0.999):
        ours = WhiteningTransformer(n_components=share).fit(X)
        assert ours.n_components_ == PCA(n_components=share).fit(X).n_components_


def test_zca_is_inverse_matrix_square_root(make_cone):
    X = make_cone(1000, 6)
    est = WhiteningTransformer(method="zca").fit(X)
    cov = np.cov(X, rowvar=False)
    expected = np.linalg.inv(scipy.linalg.sqrtm(cov).real)
    np.testing.assert_allclose(est.whitening_, expected, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(est.whitening_, est.whitening_.T, atol=1e-12)


def test_cholesky_matches_scipy(make_cone):
    X = make_cone(1000, 6)
    est = WhiteningTransformer(method="cholesky").fit(X)
    L = np.linalg.cholesky(np.cov(X, rowvar=False))
    expected = np.linalg.inv(L).T
    np.testing.assert_allclose(est.whitening_, expected, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("power", [0.0, 0.5, 1.0, 1.5])
def test_power_partial_whitening(power, make_cone):
    X = make_cone(1000, 12)
    est = WhiteningTransformer(power=power).fit(X)
    Z = est.transform(X)
    evals = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    expected = np.diag(evals ** (1.0 - power))
    np.testing.assert_allclose(
        np.cov(Z, rowvar=False), expected, rtol=1e-8, atol=1e-8 * evals[0]
    )
    if power == 0:
        P = PCA().fit(X).transform(X)
        np.testing.assert_allclose(match_signs(Z, P), P, atol=1e-8)


def test_fixed_shrinkage_covariance(make_cone):
    X = make_cone(1000, 8)
    s = 0.3
    est = WhiteningTransformer(shrinkage=s).fit(X)
    cov = np.cov(X, rowvar=False)
    expected = (1 - s) * cov + s * np.trace(cov) / 8 * np.eye(8)
    np.testing.assert_allclose(est.covariance_, expected, rtol=1e-10)
    assert est.shrinkage_ == s
    # the map whitens the shrunk covariance, not the empirical one
    W = est.whitening_
    np.testing.assert_allclose(W.T @ expected @ W, np.eye(8), atol=1e-9)
    np.testing.assert_allclose(
        np.cov(est.transform(X), rowvar=False), W.T @ cov @ W, rtol=1e-8, atol=1e-10
    )


def test_estimated_shrinkage_matches_sklearn(make_cone):
    X = make_cone(60, 40)
    lw = WhiteningTransformer(shrinkage="ledoit-wolf").fit(X)
    oas = WhiteningTransformer(shrinkage="oas").fit(X)
    np.testing.assert_allclose(lw.shrinkage_, ledoit_wolf_shrinkage(X), rtol=1e-10)
    np.testing.assert_allclose(oas.shrinkage_, OAS().fit(X).shrinkage_, rtol=1e-10)
    assert lw.rank_ == 40 and lw.n_components_ == 40


def test_fourth_moments_are_kept_only_for_ledoit_wolf(make_cone):
    X = make_cone(300, 20)
    assert not WhiteningTransformer().fit(X).moments_.fourth_moments
    assert not WhiteningTransformer(shrinkage="oas").fit(X).moments_.fourth_moments
    est = WhiteningTransformer(shrinkage=0.1).partial_fit(X[:150])
    before = est.whitening_.copy()
    # switching to Ledoit-Wolf mid-stream cannot be served exactly: an error,
    # and the fitted state is untouched
    est.set_params(shrinkage="ledoit-wolf")
    with pytest.raises(ValueError, match=r"Call fit \(not partial_fit\)"):
        est.partial_fit(X[150:])
    np.testing.assert_array_equal(est.whitening_, before)
    assert est.n_samples_seen_ == 150
    # streaming from the start with Ledoit-Wolf is exact
    stream = WhiteningTransformer(shrinkage="ledoit-wolf")
    for chunk in np.array_split(X, 3):
        stream.partial_fit(chunk)
    np.testing.assert_allclose(stream.shrinkage_, ledoit_wolf_shrinkage(X), rtol=1e-10)


# ----------------------------------------------------------------- streaming
def test_streaming_equals_batch_to_1e10(make_cone):
    X = make_cone(5000, 20, offset=50.0)
    batch = WhiteningTransformer().fit(X)
    stream = WhiteningTransformer()
    for chunk in np.array_split(X, 37):
        stream.partial_fit(chunk)
    assert stream.n_samples_seen_ == batch.n_samples_seen_ == 5000
    for name in ("mean_", "covariance_", "whitening_", "explained_variance_"):
        a, b = getattr(stream, name), getattr(batch, name)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * np.abs(b).max())
    np.testing.assert_allclose(stream.transform(X), batch.transform(X), atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n_chunks=st.integers(1, 8),
    power=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_streaming_property(seed, n_chunks, power, make_cone):
    X = make_cone(400, 6, seed=seed)
    batch = WhiteningTransformer(power=power).fit(X)
    stream = WhiteningTransformer(power=power)
    for chunk in np.array_split(X, n_chunks):
        stream.partial_fit(chunk)
    np.testing.assert_allclose(
        stream.transform(X), batch.transform(X), rtol=1e-9, atol=1e-9
    )


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), d=st.integers(1, 10))
def test_whitened_identity_and_inverse_property(seed, d, make_cone):
    X = make_cone(300, d, seed=seed)
    est = WhiteningTransformer().fit(X)
    Z = est.transform(X)
    cov = np.cov(Z, rowvar=False).reshape(d, d)
    np.testing.assert_allclose(cov, np.eye(d), atol=1e-8)
    np.testing.assert_allclose(est.inverse_transform(Z), X, rtol=1e-8, atol=1e-8)


def test_integer_sample_weight_equals_repeated_rows(make_cone):
    X = make_cone(200, 5)
    w = np.random.default_rng(0).integers(0, 4, size=200)
    weighted = WhiteningTransformer().fit(X, sample_weight=w)
    repeated = WhiteningTransformer().fit(np.repeat(X, w, axis=0))
    np.testing.assert_allclose(weighted.mean_, repeated.mean_, rtol=1e-12)
    np.testing.assert_allclose(weighted.covariance_, repeated.covariance_, rtol=1e-10)
    np.testing.assert_allclose(weighted.transform(X), repeated.transform(X), atol=1e-9)


def test_streaming_with_weights(make_cone):
    X = make_cone(600, 5)
    w = np.random.default_rng(1).uniform(0, 2, size=600)
    batch = WhiteningTransformer().fit(X, sample_weight=w)
    stream = WhiteningTransformer()
    for idx in np.array_split(np.arange(600), 5):
        stream.partial_fit(X[idx], sample_weight=w[idx])
    np.testing.assert_allclose(stream.whitening_, batch.whitening_, rtol=1e-10)


# ------------------------------------------------------------ rank deficiency
def test_n_less_than_d_drops_components_and_held_out_stays_bounded(make_cone):
    d = 768
    # embedding-like rows: a common offset plus a decaying spectrum; the
    # held-out rows come from the same draw (same basis and offset)
    X = make_cone(600, d, seed=0, offset=3.0, spread=(5.0, 0.05))
    X_fit, X_new = X[:300], X[300:]
    with pytest.warns(RankDeficiencyWarning, match="rank 299 < n_features = 768"):
        est = WhiteningTransformer().fit(X_fit)
    assert est.n_components_ == est.rank_ == 299
    Z_fit, Z_new = est.transform(X_fit), est.transform(X_new)
    assert np.all(np.isfinite(Z_new))
    fit_norms = np.linalg.norm(Z_fit, axis=1)
    new_norms = np.linalg.norm(Z_new, axis=1)
    assert new_norms.max() < 3 * fit_norms.max()
    # shrinkage keeps every dimension and also stays bounded
    shrunk = WhiteningTransformer(shrinkage="ledoit-wolf").fit(X_fit)
    assert shrunk.n_components_ == d
    ratio = (
        np.linalg.norm(shrunk.transform(X_new), axis=1).max()
        / np.linalg.norm(shrunk.transform(X_fit), axis=1).max()
    )
    assert ratio < 3


def test_naive_recipe_would_explode_where_we_stay_finite():
    # the papers' recipe, U diag(1/sqrt(s)) from np.linalg.svd(np.cov(X)),
    # divides by round-off eigenvalues when n < d
    rng = np.random.default_rng(1)
    X_fit, X_new = rng.normal(size=(50, 100)), rng.normal(size=(20, 100))
    with np.errstate(divide="ignore", invalid="ignore"):
        u, s, _ = np.linalg.svd(np.cov(X_fit, rowvar=False))
        naive = (X_new - X_fit.mean(0)) @ (u / np.sqrt(s))
    assert not np.all(np.isfinite(naive)) or np.abs(naive).max() > 1e5
    with pytest.warns(RankDeficiencyWarning):
        ours = WhiteningTransformer().fit(X_fit).transform(X_new)
    assert np.all(np.isfinite(ours)) and np.abs(ours).max() < 100


def test_collinear_and_constant_columns(make_cone):
    X = make_cone(200, 4)
    X = np.column_stack([X, X[:, 0] * 2 - X[:, 1], np.full(200, 7.0)])
    # directions without variance are dropped harmlessly: logged, not warned
    with warnings.catch_warnings():
        warnings.simplefilter("error", RankDeficiencyWarning)
        est = WhiteningTransformer().fit(X)
    Z = est.transform(X)
    assert Z.shape == (200, 4) and np.all(np.isfinite(Z))
    np.testing.assert_allclose(np.cov(Z, rowvar=False), np.eye(4), atol=1e-8)


def round_off_cone():
    """``(X, signal)``: 2,000 rows of 64 features in a 20-dim affine subspace.

    ``X = offset + signal``, an offset of about 1 per feature and a signal of
    variance 0.05**2 in 20 orthonormal directions. Stored in float32, every
    row carries round-off relative to the offset in all 64 directions, at
    about 1e-14 of the signal's variance.
    """
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(64, 20)))[0].T
    signal = 0.05 * rng.normal(size=(2000, 20)) @ basis
    return rng.normal(size=64) + signal, signal


def pair_cosines(Z):
    Z = np.asarray(Z, dtype=np.float64)
    Z = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    return Z @ Z.T


@pytest.mark.parametrize(
    "how,dtype,atol",
    [
        ("fit", np.float32, 1e-4),
        ("partial_fit", np.float32, 1e-4),
        ("rows < features", np.float32, 1e-4),
        ("fit", np.float16, 2e-2),
    ],
)
def test_input_round_off_is_not_whitened_into_components(how, dtype, atol):
    # a float32 fit kept 59 components, 39 of them float32 round-off
    # whitened to unit variance (cosines of near-duplicates 0.58, not 0.92)
    X, signal = round_off_cone()
    fit_rows = X[:50] if how == "rows < features" else X
    X_low = fit_rows.astype(dtype)
    est = WhiteningTransformer()
    if how == "partial_fit":
        for chunk in np.array_split(X_low, 4):
            est.partial_fit(chunk)
    else:
        est.fit(X_low)
    rank = np.linalg.matrix_rank(signal)
    assert rank == 20
    assert est.rank_ == est.n_components_ == rank
    assert est.moments_.input_eps == np.finfo(dtype).eps
    # numpy's whitening of the exact rows: the same cosines, to the precision
    # of the input
    lam, U = np.linalg.eigh(np.cov(fit_rows, rowvar=False))
    lam, U = lam[::-1][:rank], U[:, ::-1][:, :rank]
    expected = (X[:300] - fit_rows.mean(axis=0)) @ (U / np.sqrt(lam))
    got = est.transform(X[:300].astype(dtype))
    np.testing.assert_allclose(pair_cosines(got), pair_cosines(expected), atol=atol)
    # float64 rows of the same data keep the same directions
    assert WhiteningTransformer().fit(fit_rows).rank_ == rank


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_offset_rows_keep_every_direction_their_precision_resolves(d, dtype):
    # mean 1e4, spread 1e-2: float32 rounds each entry to 1e-3, so each
    # direction's variance is about 1,000 times its rounding noise. The
    # floor eps**2 * mean squared norm (all the rounding in one direction,
    # d times what one receives) kept 41 of 64 directions and refused 128
    # features as "constant data"
    rng = np.random.default_rng(0)
    X = (1e4 + 1e-2 * rng.normal(size=(2000, d))).astype(dtype)
    lam = np.linalg.eigvalsh(np.cov(X.astype(np.float64), rowvar=False))[::-1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RankDeficiencyWarning)
        est = WhiteningTransformer().fit(X)
        NATSVTransformer(n_components=3).fit(X)
    assert est.rank_ == est.n_components_ == d
    np.testing.assert_allclose(est.explained_variance_, lam, rtol=1e-6)
    Z = est.transform(X).astype(np.float64)
    np.testing.assert_allclose(np.cov(Z, rowvar=False), np.eye(d), atol=1e-3)


def test_a_float16_batch_counts_with_its_share_of_the_rows():
    # one float16 batch (5% of the rows) set float16's epsilon for all the
    # float32 rows after it: every direction fell below the floor. Its
    # rounding noise (about 4e-9 a direction, at its share) is far below
    # the smallest variance (7e-7)
    rng = np.random.default_rng(0)
    d = 64
    X = 1.5 + 1e-3 * rng.normal(size=(2000, d))
    batches = [X[:100].astype(np.float16)]
    batches += [chunk.astype(np.float32) for chunk in np.array_split(X[100:], 3)]
    est = WhiteningTransformer()
    for batch in batches:
        est.partial_fit(batch)
    stored = np.vstack([b.astype(np.float64) for b in batches])
    lam = np.linalg.eigvalsh(np.cov(stored, rowvar=False))[::-1]
    assert est.rank_ == est.n_components_ == d
    np.testing.assert_allclose(est.explained_variance_, lam, rtol=1e-6)
    eps16, eps32 = (float(np.finfo(t).eps) for t in (np.float16, np.float32))
    assert est.moments_.input_eps == eps16
    assert est.moments_.input_eps_rms == pytest.approx(
        np.sqrt((100 * eps16**2 + 1900 * eps32**2) / 2000), rel=1e-12
    )


def test_explicit_n_components_above_rank_is_an_error():
    X = np.random.default_rng(0).normal(size=(5, 10))
    with pytest.raises(ValueError, match="exceeds the rank 4"):
        WhiteningTransformer(n_components=6).fit(X)
    with pytest.raises(ValueError, match="n_features = 10"):
        WhiteningTransformer(n_components=11).fit(X)


def test_cholesky_needs_full_rank_and_power_one(make_cone):
    X = np.random.default_rng(0).normal(size=(5, 10))
    with pytest.raises(ValueError, match="full-rank"):
        WhiteningTransformer(method="cholesky").fit(X)
    est = WhiteningTransformer(method="cholesky", shrinkage=0.1).fit(X)
    assert np.all(np.isfinite(est.transform(X)))
    with pytest.raises(ValueError, match="power=1"):
        WhiteningTransformer(method="cholesky", power=0.5).fit(make_cone(1000, 12))
    with pytest.raises(ValueError, match="n_components=None"):
        WhiteningTransformer(5, method="zca").fit(make_cone(1000, 12))


# --------------------------------------------------------------- bad input
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_rejected(bad, make_cone):
    X = make_cone(1000, 12)
    X[3, 2] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        WhiteningTransformer().fit(X)
    est = WhiteningTransformer().fit(make_cone(1000, 12))
    with pytest.raises(ValueError, match="NaN|infinity"):
        est.transform(X)


def test_transform_overflow_of_float32_output_is_an_error(make_cone):
    X = make_cone(1000, 5, dtype=np.float32)
    est = WhiteningTransformer().fit(X)
    huge = X[:3] * np.float32(1e37)  # finite float32, but X @ W overflows it
    assert np.all(np.isfinite(huge))
    with pytest.raises(ValueError, match="overflowed float32.*Pass float64"):
        est.transform(huge)
    # the same rows in float64 are fine
    assert np.all(np.isfinite(est.transform(huge.astype(np.float64))))


def test_wrong_width_at_transform(make_cone):
    est = WhiteningTransformer().fit(make_cone(1000, 12))
    with pytest.raises(ValueError, match="12 features"):
        est.transform(make_cone(1000, 11))
    with pytest.raises(ValueError, match="expects 12"):
        est.inverse_transform(np.zeros((2, 5)))


def test_single_sample_and_constant_data():
    with pytest.raises(ValueError, match="n_samples = 1"):
        WhiteningTransformer().fit(np.ones((1, 3)))
    with pytest.raises(ValueError, match="constant data"):
        WhiteningTransformer().fit(np.ones((10, 3)))


def test_partial_fit_failure_leaves_state_untouched(make_cone):
    est = WhiteningTransformer()
    with pytest.raises(ValueError, match="first batch"):
        est.partial_fit(np.ones((1, 3)))
    assert not hasattr(est, "moments_")
    X = make_cone(1000, 3)
    est.partial_fit(X)
    W = est.whitening_.copy()
    with pytest.raises(ValueError, match="NaN"):
        est.partial_fit(np.full((2, 3), np.nan))
    np.testing.assert_array_equal(est.whitening_, W)
    est.partial_fit(X[:1])  # one more row is fine once fitted
    assert est.n_samples_seen_ == X.shape[0] + 1


def test_float16_is_upcast_and_sparse_is_rejected(make_cone):
    X = make_cone(1000, 4)
    Z = WhiteningTransformer().fit_transform(X.astype(np.float16))
    assert Z.dtype == np.float64 and np.all(np.isfinite(Z))
    with pytest.raises(TypeError, match="dense data is required"):
        WhiteningTransformer().fit(scipy.sparse.csr_matrix(X))


def test_negative_sample_weight(make_cone):
    X = make_cone(1000, 3)
    w = np.ones(X.shape[0])
    w[7] = -1
    with pytest.raises(ValueError, match=r"sample_weight\[7\]"):
        WhiteningTransformer().fit(X, sample_weight=w)


def test_not_fitted(make_cone):
    with pytest.raises(NotFittedError):
        WhiteningTransformer().transform(make_cone(1000, 12))


# ------------------------------------------------------------- sklearn life
def test_feature_names_pandas_output_and_pickle(make_cone):
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(make_cone(1000, 5), columns=list("abcde"))
    est = WhiteningTransformer(n_components=3).set_output(transform="pandas").fit(X)
    out = est.transform(X)
    assert list(out.columns) == [f"whitening{i}" for i in range(3)]
    assert list(est.feature_names_in_) == list("abcde")
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.transform(X).to_numpy(), out.to_numpy())


def test_zca_inverse_and_names(make_cone):
    X = make_cone(1000, 5)
    est = WhiteningTransformer(method="zca").fit(X)
    np.testing.assert_allclose(est.inverse_transform(est.transform(X)), X, atol=1e-9)
    assert est.get_feature_names_out().shape == (5,)


def test_in_pipeline_and_clone(make_cone):
    from sklearn.linear_model import Ridge

    X = make_cone(300, 10)
    y = X[:, 0] - X[:, 3]
    pipe = make_pipeline(WhiteningTransformer(n_components=8, power=0.5), Ridge())
    pipe.fit(X, y)
    twin = clone(pipe).set_params(whiteningtransformer__n_components=4)
    twin.fit(X, y)
    assert twin[0].n_components_ == 4 and pipe[0].n_components_ == 8


def test_refit_forgets_previous_fit(make_cone):
    est = WhiteningTransformer().fit(make_cone(1000, 4, seed=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.fit(make_cone(1000, 6, seed=2))
    assert est.n_features_in_ == 6 and est.n_samples_seen_ == 1000


def test_failed_fit_leaves_estimator_unfitted():
    est = WhiteningTransformer(n_components=6)
    with pytest.raises(ValueError, match="exceeds the rank"):
        est.fit(np.random.default_rng(0).normal(size=(5, 10)))
    with pytest.raises(NotFittedError):
        est.transform(np.zeros((2, 10)))


def test_overflow_is_an_error(make_cone):
    with pytest.raises(ValueError, match="overflowed float64"):
        WhiteningTransformer().fit(make_cone(1000, 4) * 1e160)
    # fourth powers of 1e80 overflow float64, but the accumulator scales such
    # rows by a power of two: Ledoit-Wolf and OAS are scale-free and give the
    # intensities of the unscaled rows
    X = make_cone(1000, 4) * 1e80
    for shrinkage, reference in [
        ("ledoit-wolf", ledoit_wolf_shrinkage(X / 1e80)),
        ("oas", OAS().fit(X / 1e80).shrinkage_),
    ]:
        est = WhiteningTransformer(shrinkage=shrinkage).fit(X)
        assert 0 < est.shrinkage_ < 1
        np.testing.assert_allclose(est.shrinkage_, reference, rtol=1e-10)
        unscaled = WhiteningTransformer(shrinkage=shrinkage).fit(X / 1e80)
        np.testing.assert_allclose(
            est.transform(X), unscaled.transform(X / 1e80), rtol=1e-8, atol=1e-8
        )


# ------------------------------------------------------ lazy fitted map
def _count_eighs(monkeypatch):
    calls = []
    original = sklearn_isotropy.linear._whitening.sorted_eigh

    def counting(a, *args, **kwargs):
        calls.append(a.shape)
        return original(a, *args, **kwargs)

    monkeypatch.setattr(sklearn_isotropy.linear._whitening, "sorted_eigh", counting)
    return calls


def test_partial_fit_defers_the_eigendecomposition(monkeypatch, make_cone):
    X = make_cone(2000, 8)
    calls = _count_eighs(monkeypatch)
    est = WhiteningTransformer(n_components=5)
    for chunk in np.array_split(X, 10):
        est.partial_fit(chunk)
    assert calls == []  # ten batches, no eigendecomposition yet
    ref = WhiteningTransformer(n_components=5).fit(X)
    assert len(calls) == 1  # fit computes its map eagerly
    # the first use computes the map once; later uses reuse it
    np.testing.assert_allclose(est.transform(X), ref.transform(X), atol=1e-9)
    assert len(calls) == 2
    assert est.n_components_ == 5 and est.rank_ == 8
    np.testing.assert_allclose(est.whitening_, ref.whitening_, rtol=1e-10)
    est.transform(X[:10])
    assert len(calls) == 2
    # another batch makes the map stale again: every attribute follows it
    est.partial_fit(X[:500])
    assert len(calls) == 2
    both = WhiteningTransformer(n_components=5).fit(np.vstack([X, X[:500]]))
    np.testing.assert_allclose(est.mean_, both.mean_, rtol=1e-12)
    np.testing.assert_allclose(est.explained_variance_, both.explained_variance_)
    assert len(calls) == 4


def test_stale_map_uses_the_parameters_of_the_last_partial_fit(make_cone):
    X = make_cone(500, 6)
    est = WhiteningTransformer(n_components=4).partial_fit(X)
    est.set_params(n_components=2)  # after the fit: does not change the map
    assert est.n_components_ == 4
    est.partial_fit(X[:10])  # a new batch fits with the current parameters
    assert est.n_components_ == 2


def test_errors_that_need_the_map_surface_at_first_use():
    rng = np.random.default_rng(0)
    est = WhiteningTransformer(n_components=6)
    est.partial_fit(rng.normal(size=(5, 10)))  # rank 4 so far: no error yet
    with pytest.raises(ValueError, match="exceeds the rank 4"):
        est.transform(rng.normal(size=(2, 10)))
    with pytest.raises(ValueError, match="exceeds the rank 4"):
        getattr(est, "whitening_")  # noqa: B009  (attribute access is the test)
    est.partial_fit(rng.normal(size=(20, 10)))  # more rows: the map exists
    assert est.transform(rng.normal(size=(2, 10))).shape == (2, 6)
    # invalid parameters and input are still rejected by partial_fit itself
    with pytest.raises(ValueError, match="n_features = 10"):
        WhiteningTransformer(n_components=11).partial_fit(rng.normal(size=(5, 10)))
    with pytest.raises(ValueError, match="NaN"):
        est.partial_fit(np.full((3, 10), np.nan))
    assert est.n_samples_seen_ == 25


def test_pickle_clone_and_names_of_a_stale_map(make_cone):
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(make_cone(400, 5), columns=list("abcde"))
    est = WhiteningTransformer(n_components=3).set_output(transform="pandas")
    est.partial_fit(X.iloc[:200]).partial_fit(X.iloc[200:])
    assert "whitening_" not in vars(est)  # stale until used
    again = pickle.loads(pickle.dumps(est))
    ref = WhiteningTransformer(n_components=3).fit(X)
    np.testing.assert_allclose(
        again.transform(X).to_numpy(), ref.transform(X), atol=1e-9
    )
    assert list(est.get_feature_names_out()) == [f"whitening{i}" for i in range(3)]
    assert clone(est).get_params() == est.get_params()
    assert not hasattr(clone(est), "whitening_")
    # attribute access on the stale copy computes the same map
    np.testing.assert_allclose(est.whitening_, again.whitening_)


# ------------------------------------------------------- numbers at the edges
def _rank_message(caplog, fit):
    """The INFO message of a fit that drops directions without variance."""
    sklearn_isotropy.linear._whitening._REPORTED.clear()
    with caplog.at_level("INFO", logger="sklearn_isotropy"), warnings.catch_warnings():
        warnings.simplefilter("error", RankDeficiencyWarning)
        est = fit()
        fit()  # the same message is logged once
    (message,) = [r.getMessage() for r in caplog.records if "keeps" in r.getMessage()]
    return est, message


def test_feature_scales_far_apart_give_advice_that_helps(caplog):
    # 1e-6 next to 1e6: below float64 round-off for the eigenproblem, well
    # above it for the rows (at 1e-8 next to 1e8 they are round-off of the
    # rows, which StandardNormalizer leaves unscaled too)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 8)) * np.array([1e6] + [1e-6] * 7)
    est, message = _rank_message(caplog, lambda: WhiteningTransformer().fit(X))
    assert "Whitening keeps 1 of 8 directions" in message
    assert "too few samples" not in message
    assert "standardise the features first" in message
    assert "shrinkage does not help" in message.lower()
    assert est.rank_ == 1
    # the advice works: standardised first, all 8 directions are kept
    from sklearn_isotropy import StandardNormalizer

    with warnings.catch_warnings():
        warnings.simplefilter("error", RankDeficiencyWarning)
        pipe = make_pipeline(StandardNormalizer(), WhiteningTransformer()).fit(X)
    Z = pipe.transform(X)
    np.testing.assert_allclose(np.cov(Z, rowvar=False), np.eye(8), atol=1e-8)


def test_too_few_samples_is_named_as_such():
    X = np.random.default_rng(1).normal(size=(5, 10))
    with pytest.warns(RankDeficiencyWarning, match="too few samples: 5 rows"):
        WhiteningTransformer().fit(X)


@pytest.mark.parametrize("n_samples", [12, 20])
def test_too_few_rows_is_blamed_even_when_the_variances_spread(n_samples):
    # n_samples <= n_features caps the rank at n - 1; features whose scales
    # span 1e6 (variances 1e12: an encoder's near-zero dimensions) must not
    # take the blame when every direction the rows span is kept
    rng = np.random.default_rng(2)
    X = rng.normal(size=(n_samples, 20)) * np.geomspace(1.0, 1e-6, 20)
    with pytest.warns(RankDeficiencyWarning) as record:
        est = WhiteningTransformer().fit(X)
    message = str(record[0].message)
    assert est.rank_ == n_samples - 1
    assert f"rank {n_samples - 1} < n_features = 20" in message
    assert f"too few samples: {n_samples} rows" in message
    assert f"span at most {n_samples - 1} directions" in message
    assert "variances span" not in message
    assert "Fit on more rows (at least 21," in message
    assert f"n_components <= {n_samples - 1}" in message
    assert "shrinkage > 0" in message
    # each piece of advice does what it says
    with warnings.catch_warnings():
        warnings.simplefilter("error", RankDeficiencyWarning)
        WhiteningTransformer(n_components=n_samples - 1).fit(X)
        shrunk = WhiteningTransformer(shrinkage="ledoit-wolf").fit(X)
    assert shrunk.n_components_ == 20
    with pytest.raises(ValueError, match=r"too few samples.*n_components <= "):
        WhiteningTransformer(n_components=n_samples).fit(X)


def test_spread_is_blamed_when_it_limits_the_rank_below_the_rows(caplog):
    # 30 rows could span 29 directions of 10; the variances spanning 1e24
    # are what leaves fewer, and the message says so (and not "too few rows")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 10)) * np.array([1e6] * 5 + [1e-6] * 5)
    est, message = _rank_message(caplog, lambda: WhiteningTransformer().fit(X))
    assert est.rank_ == 5
    assert "Whitening keeps 5 of 10 directions" in message
    assert "variances span a factor of" in message
    assert "too few samples" not in message


@pytest.mark.parametrize("scale", [1e-200, 1e-300, 1e100])
def test_tiny_and_huge_inputs_whiten_like_unit_inputs(scale, make_cone):
    # data around 1e-200 is not constant: its variance underflows float64,
    # but whitening is scale-free and is computed in scaled units
    X = make_cone(400, 5)
    ref = WhiteningTransformer().fit(X)
    est = WhiteningTransformer().fit(X * scale)
    Z = est.transform(X * scale)
    assert np.all(np.isfinite(Z))
    np.testing.assert_allclose(Z, ref.transform(X), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(
        est.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=1e-10
    )
    np.testing.assert_allclose(
        est.inverse_transform(Z), X * scale, rtol=1e-8, atol=1e-8 * scale
    )
    for method in ("zca", "cholesky"):
        other = WhiteningTransformer(method=method).fit(X * scale)
        np.testing.assert_allclose(
            other.transform(X * scale),
            WhiteningTransformer(method=method).fit(X).transform(X),
            rtol=1e-8,
            atol=1e-8,
        )


def test_extreme_power_is_rejected_at_fit(make_cone):
    X = make_cone(300, 4)
    with pytest.raises(ValueError, match=r"power=1000000.0 cannot be applied"):
        WhiteningTransformer(power=1e6).fit(X)
    with pytest.raises(ValueError, match="Use a power between 0"):
        WhiteningTransformer(power=2000.0).fit(X)
    # with partial_fit the same error comes at the first use of the map
    est = WhiteningTransformer(power=1e6).partial_fit(X)
    with pytest.raises(ValueError, match="cannot be applied"):
        est.transform(X)
    # large but representable powers are fine
    Z = WhiteningTransformer(power=3.0).fit_transform(X)
    assert np.all(np.isfinite(Z))


# ------------------------------------------------ wide data: the dual form
# wide rows: make_cone(n, d, **WIDE); unrotated, so no d x d basis is drawn
WIDE = {"offset": 3.0, "spread": (5.0, 0.5), "rotate": False}


@pytest.mark.parametrize("power", [1.0, 0.5])
def test_wide_data_uses_the_dual_form_and_matches_pca(power, make_cone):
    X, X_new = make_cone(12, 4000, **WIDE), make_cone(6, 4000, seed=1, **WIDE)
    with pytest.warns(RankDeficiencyWarning, match="too few samples"):
        est = WhiteningTransformer(power=power).fit(X)
    assert est.moments_.representation == "rows"
    assert "covariance_" not in vars(est)  # the d x d matrix is never built
    pca = PCA(n_components=11, svd_solver="full").fit(X)
    assert est.n_components_ == est.rank_ == 11
    np.testing.assert_allclose(est.explained_variance_, pca.explained_variance_)
    np.testing.assert_allclose(
        est.components_, match_signs(est.components_.T, pca.components_.T).T
    )
    np.testing.assert_allclose(
        np.abs(est.components_), np.abs(pca.components_), atol=1e-10
    )
    expected = pca.transform(X_new) / pca.explained_variance_ ** (power / 2)
    Z = est.transform(X_new)
    np.testing.assert_allclose(match_signs(Z, expected), expected, atol=1e-9)
    # the covariance is still available, built on request
    np.testing.assert_allclose(est.covariance_, np.cov(X, rowvar=False), atol=1e-12)


def test_wide_data_20000_features_fits_without_a_d_by_d_matrix(make_cone):
    import tracemalloc

    X = make_cone(10, 20_000, **WIDE)
    tracemalloc.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankDeficiencyWarning)
        est = WhiteningTransformer().fit(X)
        Z = est.transform(X)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # one 20,000 x 20,000 float64 matrix is 3.2 GB; the dual form needs a few
    # n x d arrays (1.6 MB each)
    assert peak < 50 * 2**20
    assert Z.shape == (10, 9)
    np.testing.assert_allclose(np.cov(Z, rowvar=False), np.eye(9), atol=1e-8)


def test_wide_data_streams_pickles_and_switches_to_the_scatter_form(make_cone):
    X = make_cone(120, 50, **WIDE)
    est = WhiteningTransformer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankDeficiencyWarning)
        for lo in range(0, 40, 8):
            est.partial_fit(X[lo : lo + 8])
        assert est.moments_.representation == "rows"
        batch = WhiteningTransformer().fit(X[:40])
        np.testing.assert_allclose(est.transform(X), batch.transform(X), atol=1e-9)
        again = pickle.loads(pickle.dumps(est))
        for lo in range(40, 120, 8):
            again.partial_fit(X[lo : lo + 8])
    assert again.moments_.representation == "scatter"
    full = WhiteningTransformer().fit(X)
    np.testing.assert_allclose(again.transform(X), full.transform(X), atol=1e-9)


def test_wide_data_with_options_that_need_a_full_map(monkeypatch, make_cone):
    X = make_cone(10, 300, **WIDE)
    keep = {"keep_rows": False}
    for params in (
        {"shrinkage": 0.2},
        {"shrinkage": "ledoit-wolf"},
        {"method": "zca", "shrinkage": 0.1},
        {"method": "cholesky", "shrinkage": 0.1},
    ):
        est = WhiteningTransformer(**params).fit(X)
        assert est.moments_.representation == "rows"
        assert est.whitening_.shape[0] == 300
        # the same map as from the d x d statistics of the same rows
        ref = WhiteningTransformer(**params)
        monkeypatch.setattr(
            ref,
            "_new_moments",
            lambda d, ref=ref: sklearn_isotropy.MomentAccumulator(
                d, fourth_moments=ref._needs_fourth_moments(), **keep
            ),
        )
        ref.fit(X)
        assert ref.moments_.representation == "scatter"
        np.testing.assert_allclose(est.transform(X), ref.transform(X), atol=1e-8)
    # too little memory for the d x d map is a clear error, not an OOM
    monkeypatch.setattr(
        sklearn_isotropy.linear._whitening, "_available_memory", lambda: 2**20
    )
    with pytest.raises(ValueError, match=r"method='zca' needs 300 x 300 matrices"):
        WhiteningTransformer(method="zca", shrinkage=0.1).fit(X)
    with pytest.raises(ValueError, match=r"shrinkage=0.5 needs .*dual form"):
        WhiteningTransformer(shrinkage=0.5).fit(X)
    with pytest.warns(RankDeficiencyWarning):
        WhiteningTransformer().fit(X)  # the dual form needs no d x d memory


# ------------------------------------------- probabilistic PCA: noise_variance
def _spectrum(X):
    cov = np.cov(X, rowvar=False)
    evals, evecs = np.linalg.eigh(cov)
    return evals[::-1], evecs[:, ::-1]


@pytest.mark.parametrize(
    "params",
    [{}, {"n_components": 5}, {"method": "zca", "power": 0.5}, {"shrinkage": 0.2}],
    ids=repr,
)
def test_zero_noise_variance_is_plain_whitening(params, make_cone):
    X = make_cone(800, 10)
    plain = WhiteningTransformer(**params).fit(X)
    zero = WhiteningTransformer(noise_variance=0.0, **params).fit(X)
    np.testing.assert_allclose(zero.transform(X), plain.transform(X), atol=1e-8)
    assert zero.noise_variance_ == 0.0


@pytest.mark.parametrize("power", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("n_components", [None, 3])
def test_noise_variance_is_the_posterior_mean_gain(power, n_components, make_cone):
    # z_i = (l_i - s2) ** (1 - power / 2) / l_i * u_i'(x - mean) for l_i > s2;
    # power=1 is probabilistic PCA's posterior mean of the whitened latent
    X = make_cone(800, 10)
    evals, evecs = _spectrum(X)
    s2 = float(evals[5] + evals[6]) / 2  # 6 components stay above it
    est = WhiteningTransformer(
        n_components=n_components, noise_variance=s2, power=power
    ).fit(X)
    keep = np.flatnonzero(evals > s2)[:n_components]
    gain = (evals[keep] - s2) ** (1 - power / 2) / evals[keep]
    expected = (X - X.mean(axis=0)) @ (evecs[:, keep] * gain)
    Z = est.transform(X)
    assert est.n_components_ == len(keep) == (n_components or 6)
    assert est.noise_variance_ == s2
    # signs of eigenvectors are free: compare Gram matrices
    np.testing.assert_allclose(Z @ Z.T, expected @ expected.T, rtol=1e-9, atol=1e-9)


def test_noise_variance_with_zca_rotates_the_denoised_latent_back(make_cone):
    X = make_cone(800, 8)
    evals, evecs = _spectrum(X)
    s2 = float(evals[3] + evals[4]) / 2
    est = WhiteningTransformer(method="zca", noise_variance=s2).fit(X)
    keep = evals > s2
    gain = np.sqrt(evals[keep] - s2) / evals[keep]
    W = (evecs[:, keep] * gain) @ evecs[:, keep].T
    np.testing.assert_allclose(est.whitening_, W, atol=1e-12)
    assert est.transform(X).shape == X.shape


def test_noise_variance_inverse_transform_is_the_projection(make_cone):
    X = make_cone(800, 10)
    evals = _spectrum(X)[0]
    est = WhiteningTransformer(noise_variance=float(evals[4] + evals[5]) / 2).fit(X)
    Z = est.transform(X)
    # a pseudo-inverse: back to the kept principal subspace, as PCA's
    pca = PCA(n_components=est.n_components_).fit(X)
    np.testing.assert_allclose(
        est.inverse_transform(Z), pca.inverse_transform(pca.transform(X)), atol=1e-9
    )
    np.testing.assert_allclose(est.transform(est.inverse_transform(Z)), Z, atol=1e-9)


def test_noise_variance_errors(make_cone):
    X = make_cone(300, 6)
    with pytest.raises(ValueError, match="method='cholesky' has no principal"):
        WhiteningTransformer(method="cholesky", noise_variance="auto").fit(X)
    WhiteningTransformer(method="cholesky", noise_variance=0.0).fit(X)  # plain
    with pytest.raises(ValueError, match="no component is left above the noise"):
        WhiteningTransformer(noise_variance=1e6).fit(X)
    with pytest.raises(ValueError, match="noise_variance"):
        WhiteningTransformer(noise_variance=-1.0).fit(X)
    with pytest.raises(ValueError, match="noise_variance"):
        WhiteningTransformer(noise_variance="median").fit(X)


def _effective_rank_floor(X):
    """The eigenvalue past the effective rank of X's covariance, from numpy."""
    evals = np.sort(np.linalg.eigvalsh(np.cov(X, rowvar=False)))[::-1]
    evals = evals[evals > evals[0] * 1e-12]
    p = evals / evals.sum()
    return evals[int(np.exp(-(p * np.log(p)).sum()))]


def test_auto_noise_variance_is_the_eigenvalue_at_the_effective_rank():
    # a spiked covariance: 5 strong directions over isotropic noise of
    # variance 0.7; the floor lands in the noise bulk, the spikes are kept
    rng = np.random.default_rng(3)
    n, d = 4000, 60
    basis = np.linalg.qr(rng.normal(size=(d, 5)))[0]
    X = rng.normal(size=(n, 5)) * [9.0, 7.0, 5.0, 4.0, 3.0] @ basis.T
    X += np.sqrt(0.7) * rng.normal(size=(n, d)) + 2.0
    est = WhiteningTransformer(noise_variance="auto").fit(X)
    assert est.noise_variance_ == pytest.approx(_effective_rank_floor(X), rel=1e-9)
    assert 0.7 < est.noise_variance_ < 0.7 * (1 + np.sqrt(d / n)) ** 2
    assert 5 <= est.n_components_ < 20
    # ... with rows fewer than features as well (the dual form)
    small = WhiteningTransformer(noise_variance="auto").fit(X[:40])
    floor = _effective_rank_floor(X[:40])
    assert small.noise_variance_ == pytest.approx(floor, rel=1e-9)
    assert np.all(np.isfinite(small.transform(X)))
    # a flat spectrum keeps its leading direction
    flat = WhiteningTransformer(noise_variance="auto").fit(rng.normal(size=(50, 2)))
    assert flat.n_components_ == 1


@pytest.mark.parametrize("n_rows", [4000, 40])  # the primal and the dual form
def test_auto_rule_and_diagnostics_agree_on_the_effective_rank(n_rows):
    # one definition: the floor of "auto" is the covariance eigenvalue at the
    # effective rank that diagnostics.effective_rank reports for the same rows
    from sklearn_isotropy.diagnostics import effective_rank

    rng = np.random.default_rng(11)
    d = 60
    basis = np.linalg.qr(rng.normal(size=(d, 6)))[0]
    X = rng.normal(size=(n_rows, 6)) * [9.0, 7.0, 5.0, 4.0, 3.0, 2.0] @ basis.T
    X += np.sqrt(0.5) * rng.normal(size=(n_rows, d)) + 1.0
    rank = effective_rank(X)
    assert 0.05 < rank - int(rank) < 0.95  # no floor decided by round-off
    evals = np.sort(np.linalg.eigvalsh(np.cov(X, rowvar=False)))[::-1]
    est = WhiteningTransformer(noise_variance="auto").fit(X)
    assert est.noise_variance_ == pytest.approx(evals[int(rank)], rel=1e-9)


ROTATION = np.linalg.qr(np.random.default_rng(5).normal(size=(3, 3)))[0]
ROTATION8 = np.linalg.qr(np.random.default_rng(0).normal(size=(8, 8)))[0]


@pytest.mark.parametrize(
    "X,n_tied",
    [
        (np.array([[1.0, 0], [-1, 0], [0, 1], [0, -1]]), 2),
        (np.vstack([np.eye(3), -np.eye(3)]), 3),
        # ties to round-off only, and a constant feature beside the tie
        (np.vstack([np.eye(3), -np.eye(3)]) @ ROTATION, 3),
        (np.array([[1.0, 0, 5], [-1, 0, 5], [0, 1, 5], [0, -1, 5]]), 2),
    ],
)
def test_auto_noise_variance_keeps_tied_leading_components(X, n_tied):
    # the top eigenvalues tie: "auto" refused to fit, saying "Pass a smaller
    # noise_variance, or 'auto'" (or kept one of the tied directions, at
    # 1e-8 of its scale, when they tie only to round-off)
    lam = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    np.testing.assert_allclose(lam[:n_tied], lam[0], rtol=1e-14)
    assert np.all(lam[n_tied:] < 1e-12)
    est = WhiteningTransformer(noise_variance="auto").fit(X)
    # no noise to tell from the signal: plain whitening of the tied directions
    assert est.noise_variance_ == 0.0 and est.n_components_ == n_tied
    Z, centred = est.transform(X), X - X.mean(axis=0)
    np.testing.assert_allclose(Z @ Z.T, centred @ centred.T / lam[0], atol=1e-12)
    # a number above the largest eigenvalue is still refused, with a bound
    top = f"{lam[0]:.4g}"
    with pytest.raises(ValueError, match=f"Pass a noise_variance below {top}, or"):
        WhiteningTransformer(noise_variance=1.5 * lam[0]).fit(X)


def _whitened(dtype):
    """Rows that a whitening in ``dtype`` mapped to the identity covariance."""
    X = np.random.default_rng(0).normal(size=(500, 8)) + 3.0
    return WhiteningTransformer().fit_transform(X.astype(dtype))


@pytest.mark.parametrize(
    "make_rows",
    [
        # an exactly isotropic design, rotated: its eigenvalues tie to round-off
        lambda: np.vstack([np.eye(8), -np.eye(8)]) @ ROTATION8,
        lambda: _whitened(np.float64),
        lambda: _whitened(np.float32),
    ],
    ids=["isotropic", "whitened-float64", "whitened-float32"],
)
def test_auto_noise_variance_of_a_flat_spectrum_is_plain_whitening(make_rows):
    # every eigenvalue ties with the largest to round-off: "auto" kept 7 of
    # the 8 directions, with the floor at the common eigenvalue, and scaled
    # the output to a standard deviation of 1e-7 (float64) or 4e-4 (float32)
    Z = make_rows()
    Z64 = Z.astype(np.float64)
    lam, U = np.linalg.eigh(np.cov(Z64, rowvar=False))
    assert lam.max() - lam.min() < 1e-6 * lam.max()  # flat, to round-off
    est = WhiteningTransformer(noise_variance="auto").fit(Z)
    assert est.noise_variance_ == 0.0 and est.n_components_ == 8
    # numpy's plain whitening of the same rows: the same output up to a
    # rotation within the tie, so the same Gram matrix
    expected = (Z64 - Z64.mean(axis=0)) @ (U / np.sqrt(lam))
    got = est.transform(Z).astype(np.float64)
    atol = 1e-3 if Z.dtype == np.float32 else 1e-9
    np.testing.assert_allclose(got @ got.T, expected @ expected.T, atol=atol * 8)
    np.testing.assert_allclose(got.std(axis=0, ddof=1), 1.0, atol=atol)


def test_auto_noise_variance_streams_and_pickles(make_cone):
    X = make_cone(900, 10)
    batch = WhiteningTransformer(noise_variance="auto").fit(X)
    stream = WhiteningTransformer(noise_variance="auto")
    for chunk in np.array_split(X, 4):
        stream.partial_fit(chunk)
    np.testing.assert_allclose(stream.noise_variance_, batch.noise_variance_)
    np.testing.assert_allclose(stream.transform(X), batch.transform(X), atol=1e-10)
    again = pickle.loads(pickle.dumps(batch))
    np.testing.assert_array_equal(again.transform(X), batch.transform(X))


def test_score_samples_is_the_gaussian_log_density(make_cone):
    from scipy.stats import multivariate_normal

    X = make_cone(600, 8)
    est = WhiteningTransformer().fit(X)
    held_out = make_cone(50, 8, seed=1)
    expected = multivariate_normal(est.mean_, est.covariance_).logpdf(held_out)
    np.testing.assert_allclose(est.score_samples(held_out), expected, atol=1e-6)
    assert est.score(held_out) == pytest.approx(expected.mean(), abs=1e-6)
    # shrinkage: the density of the shrunk covariance
    shrunk = WhiteningTransformer(shrinkage=0.3, method="zca").fit(X)
    expected = multivariate_normal(shrunk.mean_, shrunk.covariance_).logpdf(held_out)
    np.testing.assert_allclose(shrunk.score_samples(held_out), expected, atol=1e-6)


@pytest.mark.parametrize("k", [1, 4, 7])
def test_score_samples_equals_pca_probabilistic_model(k, make_cone):
    X = make_cone(600, 8)
    held_out = make_cone(50, 8, seed=1)
    est = WhiteningTransformer(n_components=k).fit(X)
    pca = PCA(n_components=k, svd_solver="full").fit(X)
    assert est.noise_variance_ == pytest.approx(pca.noise_variance_, rel=1e-10)
    np.testing.assert_allclose(
        est.score_samples(held_out), pca.score_samples(held_out), atol=1e-6
    )


def test_score_samples_of_fewer_rows_than_features_is_ppca_on_the_support(make_cone):
    from scipy.stats import multivariate_normal

    # 9 rows span 8 directions of 20: the model is probabilistic PCA in the
    # coordinates of those 8 (PCA's own would spread noise over all 20)
    wide, held_out = make_cone(9, 20), make_cone(5, 20, seed=1)
    est = WhiteningTransformer(n_components=3).fit(wide)
    centred = wide - wide.mean(axis=0)
    _, sv, Vt = np.linalg.svd(centred, full_matrices=False)
    lam, support = sv[:8] ** 2 / 8, Vt[:8]
    variances = np.r_[lam[:3], np.full(5, lam[3:].mean())]
    assert est.rank_ == 8
    assert est.noise_variance_ == pytest.approx(lam[3:].mean(), rel=1e-10)
    for rows in (wide, held_out):
        coords = (rows - wide.mean(axis=0)) @ support.T
        expected = multivariate_normal(np.zeros(8), np.diag(variances)).logpdf(coords)
        np.testing.assert_allclose(est.score_samples(rows), expected, rtol=1e-8)


def test_score_of_rank_deficient_data_is_the_singular_gaussian():
    from scipy.stats import multivariate_normal

    rng = np.random.default_rng(0)
    mixing = rng.normal(size=(3, 10))
    X = rng.normal(size=(500, 3)) @ mixing + 2.0
    held_out = rng.normal(size=(50, 3)) @ mixing + 2.0
    est = WhiteningTransformer().fit(X)
    singular = multivariate_normal(est.mean_, est.covariance_, allow_singular=True)
    expected = singular.logpdf(held_out)
    assert est.rank_ == 3
    np.testing.assert_allclose(est.score_samples(held_out), expected, rtol=1e-8)
    assert est.score(held_out) == pytest.approx(expected.mean(), rel=1e-4)


@pytest.mark.parametrize("n_components", [None, 3])
def test_score_is_finite_at_tiny_scale(n_components, make_cone):
    X = make_cone(300, 8)
    est = WhiteningTransformer(n_components=n_components).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny = WhiteningTransformer(n_components=n_components).fit(X * 1e-200)
        score = tiny.score(X * 1e-200)
    # the density of c X is the density of X divided by c**d
    assert score == pytest.approx(est.score(X) - 8 * np.log(1e-200), rel=1e-10)


def test_likelihood_search_ignores_constant_features():
    from sklearn.model_selection import GridSearchCV

    # three strong directions over noise of variance 0.25, and a constant
    # feature: the support's likelihood peaks at the true noise
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(12, 3)))[0]
    X = rng.normal(size=(1500, 3)) * [6.0, 4.0, 3.0] @ basis.T
    X += 0.5 * rng.normal(size=(1500, 12))
    X[:, 4] = 1.0
    grid = {"noise_variance": [None, 0.05, 0.25, 1.0]}
    search = GridSearchCV(WhiteningTransformer(), grid, cv=3).fit(X)
    assert search.best_params_ == {"noise_variance": 0.25}
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))


def test_score_samples_with_a_noise_variance_is_ppca(make_cone):
    from scipy.stats import multivariate_normal

    X = make_cone(600, 8)
    held_out = make_cone(50, 8, seed=1)
    for noise in (0.3, "auto"):
        est = WhiteningTransformer(noise_variance=noise).fit(X)
        U, lam, s2 = est.components_.T, est.explained_variance_, est.noise_variance_
        cov = U @ np.diag(lam - s2) @ U.T + s2 * np.eye(8)
        expected = multivariate_normal(est.mean_, cov).logpdf(held_out)
        np.testing.assert_allclose(est.score_samples(held_out), expected, atol=1e-6)
    zero = WhiteningTransformer(n_components=3, noise_variance=0.0).fit(X)
    with pytest.raises(ValueError, match="zero density off the kept components"):
        zero.score_samples(held_out)
    with pytest.raises(ValueError, match="3 features"):
        zero.score_samples(held_out[:, :3])


def test_score_samples_stays_finite_for_constant_features(make_cone):
    X = make_cone(400, 6)
    X[:, 2] = 1.5  # a constant feature, as some encoders have
    est = WhiteningTransformer(n_components=5).fit(X)
    assert np.all(np.isfinite(est.score_samples(X)))


def test_grid_search_selects_the_dimension_without_labels():
    from sklearn.model_selection import GridSearchCV

    # three strong directions over isotropic noise: the held-out likelihood
    # of probabilistic PCA peaks at 3 components
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(12, 3)))[0]
    X = rng.normal(size=(1500, 3)) * [6.0, 4.0, 3.0] @ basis.T
    X += 0.5 * rng.normal(size=(1500, 12))
    search = GridSearchCV(
        WhiteningTransformer(), {"n_components": [1, 2, 3, 6, 9]}, cv=3
    ).fit(X)
    assert search.best_params_ == {"n_components": 3}


def test_score_samples_is_the_untrained_flows_density(make_cone):
    pytest.importorskip("torch")
    from sklearn_isotropy import GlowFlowTransformer

    X, held_out = make_cone(400, 6), make_cone(30, 6, seed=1)
    flow = GlowFlowTransformer(max_iter=0, early_stopping=False).fit(X)
    gaussian = WhiteningTransformer().fit(X)
    np.testing.assert_allclose(
        gaussian.score_samples(held_out), flow.score_samples(held_out), atol=1e-4
    )


def test_a_few_near_constant_features_are_reported_once_in_one_short_line(caplog):
    """An encoder's near-constant dimensions are reported once, in one line.

    The distilled static table has three; they lose their directions
    harmlessly: one short INFO line, with no number that changes from fit to
    fit.
    """
    import warnings

    from sklearn_isotropy import WhiteningTransformer
    from sklearn_isotropy.exceptions import RankDeficiencyWarning
    from sklearn_isotropy.linear import _whitening

    rng = np.random.default_rng(0)
    d = 48
    X = rng.normal(size=(600, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d)
    X[:, :3] = 1e-30 * (1 + rng.normal(size=(600, 3)))
    X[300:, :3] *= 7.0  # the second half's tiny features: another spread
    _whitening._REPORTED.clear()
    with caplog.at_level("INFO", logger="sklearn_isotropy"), warnings.catch_warnings():
        warnings.simplefilter("error", RankDeficiencyWarning)
        fits = [
            WhiteningTransformer().fit(X[rows])
            for rows in (slice(300), slice(300, None), slice(None))
        ]
    assert [est.rank_ for est in fits] == [d - 3] * 3
    messages = [r.getMessage() for r in caplog.records if "keeps" in r.getMessage()]
    assert len(messages) == 1, messages
    (message,) = messages
    assert f"Whitening keeps {d - 3} of {d} directions" in message
    assert "3 feature(s) are constant up to float64 round-off" in message
    assert "span a factor" not in message
    assert "\n" not in message and len(message) < 400
    # at 1e-30 next to rows of spread 50 they are round-off of the rows: the
    # message calls them harmless and offers no standardisation, which
    # leaves them unscaled (it used to blow them up to unit variance)
    assert "round-off level of the rows" in message
    assert "standardise" not in message
    from sklearn.pipeline import make_pipeline

    from sklearn_isotropy import StandardNormalizer

    pipe = make_pipeline(StandardNormalizer(), WhiteningTransformer()).fit(X)
    np.testing.assert_array_equal(pipe[0].scale_[:3], 1.0)
    assert pipe[-1].rank_ == d - 3
