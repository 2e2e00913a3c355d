"""Dask back end of the linear post-processors: cluster fits equal in-memory fits.

On a real two-process LocalCluster (``dask_client``, started once for the
module). The 40,000 x 384 data are generated block by block on the workers
from a seed, and the same function builds the in-memory copy on the client,
so no large array travels in the task graph.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_array_equal

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from sklearn_isotropy import (  # noqa: E402
    NATSVTransformer,
    StandardNormalizer,
    WhiteningTransformer,
)

N_ROWS, N_FEATURES, N_CHUNKS = 40_000, 384, 20
CHUNK = N_ROWS // N_CHUNKS
RTOL = 1e-10


# ------------------------------------------------------------------ fixtures
def _block(i: int, n: int = CHUNK, d: int = N_FEATURES) -> np.ndarray:
    """Rows ``i * n`` to ``(i + 1) * n`` of the test data, from a seed.

    Uniform noise with per-feature scales 1 to 4 plus an independent
    8-dimensional shared component: correlated, anisotropic, off-centre, well
    conditioned (eigenvalues 1/12 to about 40), and cheap to generate.
    """
    mixing = np.random.default_rng(12345).normal(size=(8, d))
    scales = np.linspace(1.0, 4.0, d)
    u = np.random.default_rng([7, i]).random((n, d + 8)) - 0.5
    return u[:, :d] * scales + u[:, d:] @ mixing + 3.0


@pytest.fixture(scope="module")
def data(dask_client):
    """(in-memory X, the same X as a persisted dask array of 20 chunks)."""
    blocks = [
        da.from_delayed(
            dask.delayed(_block)(i), shape=(CHUNK, N_FEATURES), dtype=np.float64
        )
        for i in range(N_CHUNKS)
    ]
    X_dask = da.concatenate(blocks).persist()
    X = np.concatenate([_block(i) for i in range(N_CHUNKS)])
    distributed.wait(X_dask)
    return X, X_dask


@pytest.fixture(scope="module")
def small(data):
    """The first 5 chunks (10,000 rows), for the tests of the other paths."""
    X, X_dask = data
    return X[: 5 * CHUNK], X_dask[: 5 * CHUNK]


def assert_rel(actual, desired, rtol=RTOL):
    """Max-norm relative error below ``rtol``."""
    actual, desired = np.asarray(actual), np.asarray(desired)
    assert actual.shape == desired.shape
    err = np.max(np.abs(actual - desired))
    scale = np.max(np.abs(desired))
    assert err <= rtol * scale, f"relative error {err / scale:.3g} > {rtol}"


def align_signs(W, reference):
    """Flip the columns of W to point like those of reference."""
    signs = np.sign(np.sum(W * reference, axis=0))
    signs[signs == 0] = 1.0
    return W * signs


# ------------------------------------------------------------ linear fitting
def test_whitening_fit_on_cluster_equals_in_memory(dask_client, data):
    X, X_dask = data
    assert X_dask.numblocks == (N_CHUNKS, 1)
    ref = WhiteningTransformer().fit(X)
    est = WhiteningTransformer().fit(X_dask)

    assert_rel(est.mean_, X.mean(axis=0))  # independent reference
    assert_rel(est.covariance_, ref.covariance_)
    assert est.n_samples_seen_ == N_ROWS
    assert est.n_features_in_ == N_FEATURES
    assert est.moments_.n_samples == N_ROWS
    assert est.n_components_ == ref.n_components_ == N_FEATURES
    assert_rel(align_signs(est.whitening_, ref.whitening_), ref.whitening_)
    assert_rel(est.explained_variance_, ref.explained_variance_)

    Z = est.transform(X_dask)
    assert isinstance(Z, da.Array)
    assert Z.chunks == (X_dask.chunks[0], (N_FEATURES,))
    # three of the 20 blocks keep the test fast; the other tests compute all
    for i in (0, 7, N_CHUNKS - 1):
        rows = slice(i * CHUNK, (i + 1) * CHUNK)
        Z_ref = ref.transform(X[rows])
        assert_rel(align_signs(Z.blocks[i].compute(), Z_ref), Z_ref)


def test_denoised_whitening_on_cluster(dask_client, small):
    X, X_dask = small
    ref = WhiteningTransformer(noise_variance="auto").fit(X)
    est = WhiteningTransformer(noise_variance="auto").fit(X_dask)
    assert est.noise_variance_ == pytest.approx(ref.noise_variance_, rel=RTOL)
    assert est.n_components_ == ref.n_components_
    assert_rel(align_signs(est.whitening_, ref.whitening_), ref.whitening_)


def test_whitening_options_and_weights_on_cluster(dask_client, small):
    X, X_dask = small
    w = np.random.default_rng(3).integers(0, 4, size=X.shape[0]).astype(float)
    w_dask = da.from_array(w, chunks=CHUNK // 2)  # rechunked to match X
    params = dict(n_components=64, power=0.5, shrinkage="ledoit-wolf")
    ref = WhiteningTransformer(**params).fit(X, sample_weight=w)
    est = WhiteningTransformer(**params).fit(X_dask, sample_weight=w_dask)
    assert est.shrinkage_ == pytest.approx(ref.shrinkage_, rel=RTOL)
    # independent references: numpy's weighted mean and covariance
    assert_rel(est.mean_, np.average(X, axis=0, weights=w))
    cov = np.cov(X, rowvar=False, fweights=w.astype(int))
    s = est.shrinkage_
    shrunk = (1 - s) * cov + s * np.trace(cov) / N_FEATURES * np.eye(N_FEATURES)
    assert_rel(est.covariance_, shrunk)
    assert_rel(align_signs(est.whitening_, ref.whitening_), ref.whitening_)
    Z = est.transform(X_dask)
    assert Z.shape == (X.shape[0], 64)
    Z_ref = ref.transform(X)
    assert_rel(align_signs(Z.compute(), Z_ref), Z_ref)


def test_continued_dask_fit_keeps_its_fourth_moments_like_numpy(dask_client, small):
    # started with Ledoit-Wolf, a detour through another shrinkage must not
    # drop the fourth moments on the dask path (the numpy path keeps them)
    X, X_dask = small
    half = X.shape[0] // 2
    fits = []
    for first, second in ((X[:half], X[half:]), (X_dask[:half], X_dask[half:])):
        est = WhiteningTransformer(shrinkage="ledoit-wolf").fit(first)
        est.set_params(shrinkage=0.1).partial_fit(second[:1000])
        est.set_params(shrinkage="ledoit-wolf").partial_fit(second[1000:])
        assert est.moments_.fourth_moments
        fits.append(est)
    whole = WhiteningTransformer(shrinkage="ledoit-wolf").fit(X)
    for est in fits:
        assert est.shrinkage_ == pytest.approx(whole.shrinkage_, rel=RTOL)


@pytest.mark.parametrize(
    "make",
    [lambda: NATSVTransformer(n_components=3), lambda: StandardNormalizer()],
    ids=["natsv", "standard"],
)
def test_natsv_and_standard_on_cluster(dask_client, small, make):
    X, X_dask = small
    ref = make().fit(X)
    est = make().fit(X_dask)
    assert_rel(est.mean_, X.mean(axis=0))
    if isinstance(est, StandardNormalizer):
        assert_rel(est.var_, X.var(axis=0))  # independent reference
    else:
        assert_rel(np.abs(est.components_), np.abs(ref.components_))
    Z = est.transform(X_dask)
    assert isinstance(Z, da.Array)
    assert_rel(Z.compute(), ref.transform(X))


def test_partial_fit_with_dask_batches(dask_client, small):
    X, X_dask = small
    est = WhiteningTransformer()
    est.partial_fit(X_dask[: 2 * CHUNK + 123])
    est.partial_fit(X_dask[2 * CHUNK + 123 :])
    # partial_fit leaves the map to its first use; a lazy transform of a dask
    # array computes it on the client before the graph is built
    assert "whitening_" not in vars(est)
    ref = WhiteningTransformer().fit(X)
    Z = est.transform(X_dask[:CHUNK])
    assert "whitening_" in vars(est)
    Z_ref = ref.transform(X[:CHUNK])
    assert_rel(align_signs(Z.compute(), Z_ref), Z_ref)
    assert est.n_samples_seen_ == X.shape[0]
    assert_rel(est.covariance_, ref.covariance_)


def test_dask_dataframe_records_feature_names(dask_client):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(300, 3)), columns=["a", "b", "c"])
    ddf = dd.from_pandas(frame, npartitions=3)
    est = WhiteningTransformer().fit(ddf)
    assert_array_equal(est.feature_names_in_, ["a", "b", "c"])
    ref = WhiteningTransformer().fit(frame)
    assert_rel(est.whitening_, ref.whitening_)
    Z = est.transform(ddf)
    assert isinstance(Z, da.Array)
    assert_rel(Z.compute(), ref.transform(frame))


# ------------------------------------------------------------- bad input
def test_nan_in_one_block_names_block_and_row(dask_client):
    X = np.random.default_rng(1).normal(size=(4000, 5))
    X[2345, 3] = np.nan
    X_dask = da.from_array(X, chunks=(500, 5))
    with pytest.raises(ValueError) as info:
        WhiteningTransformer().fit(X_dask)
    message = str(info.value)
    assert type(info.value) is ValueError
    assert "NaN" in message
    assert "block 4" in message
    assert "global row 2345" in message
    assert "column 3" in message
    assert "1 block(s)" in message
    # the estimator stays unfitted
    est = WhiteningTransformer()
    with pytest.raises(ValueError):
        est.fit(X_dask)
    assert not hasattr(est, "moments_")


def test_inf_in_several_blocks_and_unknown_chunks(dask_client):
    X = np.random.default_rng(2).normal(size=(3000, 4))
    X[10, 0] = np.inf
    X[2999, 1] = -np.inf
    X_dask = da.from_array(X, chunks=(1000, 4))
    X_dask = X_dask[da.ones(3000, chunks=1000, dtype=bool)]  # unknown chunk sizes
    assert np.isnan(X_dask.shape[0])
    with pytest.raises(ValueError, match="2 block\\(s\\)") as info:
        StandardNormalizer().fit(X_dask)
    # the offset of the first block is known even when the sizes are not
    assert "infinity in block 0 (global row 10), column 0" in str(info.value)
    assert "infinity in block 2 (row 999 of the block)" in str(info.value)


def test_bad_weights_and_shapes(dask_client):
    X = np.random.default_rng(4).normal(size=(600, 3))
    X_dask = da.from_array(X, chunks=200)
    w = np.ones(600)
    w[450] = -1.0
    with pytest.raises(ValueError, match=r"negative \(-1\.0\).*global row 450"):
        WhiteningTransformer().fit(X_dask, sample_weight=da.from_array(w, chunks=200))
    with pytest.raises(ValueError, match="sample_weight has shape"):
        WhiteningTransformer().fit(X_dask, sample_weight=np.ones(5))
    with pytest.raises(ValueError, match="2-D dask array"):
        WhiteningTransformer().fit(X_dask[:, 0])
    with pytest.raises(ValueError, match="numeric"):
        WhiteningTransformer().fit(X_dask.astype(complex))
    est = WhiteningTransformer().fit(X_dask)
    with pytest.raises(ValueError, match="X has 2 features, but WhiteningTransformer"):
        est.transform(X_dask[:, :2])
    with pytest.raises(ValueError, match="X has 2 features"):
        est.partial_fit(X_dask[:, :2])


def test_transform_is_lazy():
    """transform builds a graph only: blocks that fail when computed are fine."""
    est = WhiteningTransformer().fit(np.random.default_rng(5).normal(size=(100, 4)))

    def boom(block):
        raise RuntimeError("computed")

    X_dask = da.zeros((40, 4), chunks=10).map_blocks(boom, dtype=np.float64)
    Z = est.transform(X_dask)
    assert isinstance(Z, da.Array)
    assert Z.shape == (40, 4) and Z.dtype == np.float64
    X32 = da.zeros((40, 4), chunks=10, dtype=np.float32)
    assert est.transform(X32).dtype == np.float32
    assert est.transform(X32).compute().dtype == np.float32


def test_float32_blocks_keep_their_round_off_out_of_the_rank():
    """Each block's statistics remember its dtype, through the tree reduction.

    Rows in a 20-dim affine subspace of 64 features, stored in float32: their
    round-off spans the other 44 directions at 1e-14 of the variance, and was
    kept (59 components) by a rank tolerance of float64's.
    """
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(64, 20)))[0].T
    signal = 0.05 * rng.normal(size=(2000, 20)) @ basis
    X32 = (rng.normal(size=64) + signal).astype(np.float32)
    rank = np.linalg.matrix_rank(signal)
    est = WhiteningTransformer().fit(da.from_array(X32, chunks=(250, 64)))
    assert est.rank_ == est.n_components_ == rank == 20
    assert est.moments_.input_eps == np.finfo(np.float32).eps
    # a float16 batch after: its coarser round-off sets the tolerance
    est.partial_fit(da.from_array(X32[:500].astype(np.float16), chunks=(250, 64)))
    assert est.moments_.input_eps == np.finfo(np.float16).eps
    assert est.rank_ == rank


# ------------------------------------------------------------------ dask-ml
def test_dask_ml_incremental(dask_client, small):
    wrappers = pytest.importorskip("dask_ml.wrappers")
    X, X_dask = small
    X, X_dask = X[: 3 * CHUNK], X_dask[: 3 * CHUNK]

    def no_score(estimator, X, y=None):
        return 0.0

    inc = wrappers.Incremental(WhiteningTransformer(), scoring=no_score)
    inc.fit(X_dask)
    ref = WhiteningTransformer().fit(X)
    fitted = inc.estimator_
    assert fitted.n_samples_seen_ == X.shape[0]
    assert_rel(fitted.mean_, X.mean(axis=0))
    assert_rel(fitted.covariance_, ref.covariance_)
    assert_rel(align_signs(fitted.whitening_, ref.whitening_), ref.whitening_)
    Z = inc.transform(X_dask[: 2 * CHUNK])
    assert isinstance(Z, da.Array)
    Z_ref = ref.transform(X[: 2 * CHUNK])
    assert_rel(align_signs(Z.compute(), Z_ref), Z_ref)
