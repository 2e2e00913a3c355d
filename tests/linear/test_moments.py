"""MomentAccumulator: exact streaming and merging against numpy/sklearn."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.covariance import OAS, ledoit_wolf_shrinkage

from sklearn_isotropy import MomentAccumulator, datasets
from tests._references import two_pass


def _assert_same(a, b, rtol=1e-10):
    assert a.n_samples == b.n_samples
    assert a.n_nonzero == b.n_nonzero
    np.testing.assert_allclose(a.sum_weights, b.sum_weights, rtol=rtol)
    np.testing.assert_allclose(a.mean, b.mean, rtol=rtol, atol=1e-12)
    scale = np.abs(b.scatter).max()
    np.testing.assert_allclose(a.scatter, b.scatter, rtol=rtol, atol=rtol * scale)
    if b.norm4 is not None:
        np.testing.assert_allclose(a.norm4, b.norm4, rtol=rtol)
        s3 = np.abs(b.norm3).max()
        np.testing.assert_allclose(a.norm3, b.norm3, rtol=rtol, atol=rtol * s3)


def test_batch_statistics_match_numpy(make_cone):
    X = make_cone(200, 6, seed=0, offset=5.0)
    acc = MomentAccumulator(X.shape[1]).update(X)
    Y = X - X.mean(axis=0)
    np.testing.assert_allclose(acc.mean, X.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(acc.covariance(), np.cov(X, rowvar=False), rtol=1e-10)
    sq = np.sum(Y**2, axis=1)
    np.testing.assert_allclose(acc.norm4, np.sum(sq**2), rtol=1e-10)
    np.testing.assert_allclose(acc.norm3, sq @ Y, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(acc.second_moment(), X.T @ X / X.shape[0], rtol=1e-10)


def test_weighted_statistics_match_numpy(make_cone):
    X = make_cone(200, 6, seed=1, offset=5.0)
    w = np.random.default_rng(1).uniform(0.5, 3.0, size=X.shape[0])
    acc = MomentAccumulator(X.shape[1]).update(X, w)
    np.testing.assert_allclose(acc.mean, np.average(X, axis=0, weights=w), rtol=1e-12)
    expected = np.cov(X, rowvar=False, aweights=w, bias=True) * w.sum()
    np.testing.assert_allclose(acc.scatter, expected, rtol=1e-10)


def test_without_fourth_moments_same_scatter_and_merge_drops_them(make_cone):
    X = make_cone(200, 6, seed=3, offset=5.0)
    with_norms = MomentAccumulator(X.shape[1]).update(X)
    lean = MomentAccumulator(X.shape[1], fourth_moments=False)
    for chunk in np.array_split(X, 4):
        lean.update(chunk)
    assert lean.norm3 is None and lean.norm4 is None
    np.testing.assert_allclose(lean.scatter, with_norms.scatter, rtol=1e-10)
    np.testing.assert_allclose(lean.mean, with_norms.mean, rtol=1e-12)
    np.testing.assert_allclose(
        lean.oas_shrinkage(), with_norms.oas_shrinkage(), rtol=1e-10
    )
    with pytest.raises(ValueError, match="fourth_moments=True"):
        lean.ledoit_wolf_shrinkage()
    # on one batch, skipping the fourth moments changes nothing else, bit for
    # bit (the offset is large enough that the residual-mean correction shows)
    one = MomentAccumulator(X.shape[1], fourth_moments=False).update(X + 1e9)
    ref = MomentAccumulator(X.shape[1]).update(X + 1e9)
    np.testing.assert_array_equal(one.scatter, ref.scatter)
    np.testing.assert_array_equal(one.mean, ref.mean)
    # merging with statistics that lack them drops them, whichever side
    a = MomentAccumulator(X.shape[1]).update(X[:50])
    b = MomentAccumulator(X.shape[1], fourth_moments=False).update(X[50:])
    for merged in (a.merge(b), b.merge(a)):
        assert not merged.fourth_moments and merged.norm4 is None
        np.testing.assert_allclose(merged.scatter, with_norms.scatter, rtol=1e-10)
    assert a.fourth_moments and a.norm4 is not None  # operands untouched
    # an empty lean accumulator merged into a full one also drops them
    assert not a.merge(MomentAccumulator(X.shape[1], fourth_moments=False)).norm3


def test_diag_kind_matches_full_diagonal(make_cone):
    X = make_cone(200, 6, seed=2, offset=5.0)
    full = MomentAccumulator(X.shape[1]).update(X)
    diag = MomentAccumulator(X.shape[1], kind="diag")
    for chunk in np.array_split(X, 7):
        diag.update(chunk)
    np.testing.assert_allclose(diag.scatter, np.diag(full.scatter), rtol=1e-10)
    assert diag.norm3 is None and diag.norm4 is None
    with pytest.raises(ValueError, match="kind='full'"):
        diag.ledoit_wolf_shrinkage()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    cuts=st.lists(st.integers(1, 149), max_size=6),
    weighted=st.booleans(),
)
def test_streaming_equals_batch(seed, cuts, weighted, make_cone):
    X = make_cone(150, 5, seed=seed, offset=100.0)
    w = np.random.default_rng(seed).integers(0, 4, size=150) if weighted else None
    batch = MomentAccumulator(5).update(X, w)
    stream = MomentAccumulator(5)
    bounds = [0, *sorted(set(cuts)), 150]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        stream.update(X[lo:hi], None if w is None else w[lo:hi])
    _assert_same(stream, batch)


def test_merge_is_order_free_and_pure(make_cone):
    X = make_cone(300, 6, seed=3, offset=5.0)
    parts = [MomentAccumulator(6).update(c) for c in np.array_split(X, 5)]
    before = parts[0].scatter.copy()
    left = parts[0].merge(parts[1]).merge(parts[2]).merge(parts[3]).merge(parts[4])
    tree = (parts[3] + parts[1]) + (parts[4] + (parts[0] + parts[2]))
    whole = MomentAccumulator(6).update(X)
    _assert_same(left, whole)
    _assert_same(tree, whole)
    np.testing.assert_array_equal(parts[0].scatter, before)


def test_merge_with_empty_and_zero_weight(make_cone):
    X = make_cone(200, 6, seed=4, offset=5.0)
    acc = MomentAccumulator(6).update(X)
    _assert_same(acc.merge(MomentAccumulator(6)), acc)
    _assert_same(MomentAccumulator(6).merge(acc), acc)
    zero = MomentAccumulator(6).update(X[:10], np.zeros(10))
    merged = acc.merge(zero)
    assert merged.n_samples == acc.n_samples + 10
    np.testing.assert_allclose(merged.scatter, acc.scatter, rtol=1e-12)


def test_merge_rejects_mismatch():
    with pytest.raises(ValueError, match="different shapes"):
        MomentAccumulator(3).merge(MomentAccumulator(4))
    with pytest.raises(TypeError, match="MomentAccumulator"):
        MomentAccumulator(3).merge(np.zeros(3))
    with pytest.raises(ValueError, match="width 3"):
        MomentAccumulator(3).update(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="positive integer"):
        MomentAccumulator(0)


@pytest.mark.parametrize("n,d", [(50, 10), (40, 80), (500, 3)])
def test_shrinkage_intensities_match_sklearn(n, d, make_cone):
    X = make_cone(n, d, seed=5, offset=5.0)
    acc = MomentAccumulator(d)
    for chunk in np.array_split(X, 4):
        acc.update(chunk)
    np.testing.assert_allclose(acc.ledoit_wolf_shrinkage(), ledoit_wolf_shrinkage(X))
    np.testing.assert_allclose(acc.oas_shrinkage(), OAS().fit(X).shrinkage_)


def test_covariance_needs_weight_above_ddof():
    acc = MomentAccumulator(2).update(np.ones((1, 2)))
    with pytest.raises(ValueError, match="n_samples = 1"):
        acc.covariance()


@pytest.mark.parametrize("name", ["WhiteningTransformer", "NATSVTransformer"])
def test_small_sample_weights_say_the_total_must_exceed_one(make_cone, name):
    import sklearn_isotropy

    estimator = getattr(sklearn_isotropy, name)
    X = make_cone(200, 4)
    small = np.full(200, 1e-3)  # 200 rows of positive weight, total 0.2
    with pytest.raises(
        ValueError, match=r"total weight must exceed 1; got a total of 0.2 over 200"
    ) as refused:
        estimator().fit(X, sample_weight=small)
    assert "sample_weight * n_samples / sample_weight.sum()" in str(refused.value)
    # what it suggests works: equal weights scaled up are the unweighted fit
    scaled = estimator().fit(X, sample_weight=small * 200 / small.sum())
    np.testing.assert_allclose(
        scaled.transform(X), estimator().fit(X).transform(X), rtol=1e-7, atol=1e-9
    )


# --------------------------------------------------- one pass, exactly
def _drifting_rows(seed, n, d, drift, weighted):
    """``(X, w)``: rows sorted by a drift of ``drift`` along a random direction.

    ``w`` is None, or random weights when ``weighted``.
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + np.linspace(0, drift, n)[:, None] * rng.normal(size=d)
    w = rng.uniform(0.1, 2.0, size=n) if weighted else None
    return X, w


@pytest.mark.parametrize("weighted", [False, True])
def test_drifting_rows_are_exact_whatever_the_provisional_centre(weighted):
    # rows sorted by a huge drift: the first rows (the provisional centre of
    # the one-pass algorithm) are far from the batch mean, so the batch is
    # re-read about its mean; the result must still be the exact scatter
    n, d = 20_000, 6
    X, w = _drifting_rows(7, n, d, 1e6, weighted)
    acc = MomentAccumulator(d).update(X, w)
    mean, scatter = two_pass(X, w)
    np.testing.assert_allclose(acc.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(acc.scatter, scatter, rtol=1e-10)
    if not weighted:
        Y = X - mean
        sq = np.sum(Y**2, axis=1)
        np.testing.assert_allclose(acc.norm4, np.sum(sq**2), rtol=1e-10)
        # a signed sum: its round-off is relative to sum |q y|, not to itself
        np.testing.assert_allclose(
            acc.norm3, sq @ Y, rtol=1e-8, atol=1e-12 * np.max(sq @ np.abs(Y))
        )


@pytest.mark.parametrize("weighted", [False, True])
def test_streamed_drifting_rows_are_exact(weighted):
    # each batch is read about the running mean; batches far from it (the
    # first few of a drift) fall back to a pass about their own mean
    n, d = 6_000, 5
    X, w = _drifting_rows(9, n, d, 1e5, weighted)
    acc = MomentAccumulator(d, fourth_moments=False)
    for idx in np.array_split(np.arange(n), 12):
        acc.update(X[idx], None if w is None else w[idx])
    mean, scatter = two_pass(X, w)
    np.testing.assert_allclose(acc.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(acc.scatter, scatter, rtol=1e-10)


def test_large_common_offset_float32_rows_are_exact():
    # float32 rows with an offset 1e4 times their spread: the scatter of the
    # exact float64 values of those rows, as numpy's two-pass algorithm gives
    rng = np.random.default_rng(3)
    X = (rng.normal(size=(30_000, 8)) * 0.01 + 100.0).astype(np.float32)
    acc = MomentAccumulator(8)
    for chunk in np.array_split(X, 7):
        acc.update(chunk)
    mean, scatter = two_pass(X)
    np.testing.assert_allclose(acc.mean, mean, rtol=1e-13)
    np.testing.assert_allclose(acc.scatter, scatter, rtol=1e-10)


@pytest.mark.parametrize("scale", [1e-200, 1e-160, 1e120])
def test_extreme_magnitudes_keep_full_precision(scale, make_cone):
    # squares of 1e-200 underflow float64 and fourth powers of 1e120
    # overflow it; the accumulator scales such rows by a power of two, so the
    # statistics keep their precision (reported in the data's units, where
    # they may round to zero)
    X = make_cone(500, 4, seed=8, offset=3.0)
    acc = MomentAccumulator(4).update(X[:200] * scale).update(X[200:] * scale)
    ref = MomentAccumulator(4).update(X)
    np.testing.assert_allclose(acc.mean, ref.mean * scale, rtol=1e-12)
    cov, e = acc.scaled_covariance(ddof=0)
    assert e != 0 and np.all(np.isfinite(cov))
    # cov * 4**e is the covariance; compare in the scaled units
    expected = np.ldexp(ref.scatter * scale, -e) * np.ldexp(scale, -e) / 500
    np.testing.assert_allclose(cov, expected, rtol=1e-10)
    variances, e_var = acc.scaled_variances()
    assert e_var == e
    np.testing.assert_allclose(variances, np.diagonal(expected), rtol=1e-10)
    np.testing.assert_allclose(
        acc.ledoit_wolf_shrinkage(), ref.ledoit_wolf_shrinkage(), rtol=1e-10
    )
    np.testing.assert_allclose(acc.oas_shrinkage(), ref.oas_shrinkage(), rtol=1e-10)


# ------------------------------------------------------------ rows kept
def test_fewer_rows_than_features_are_kept_then_switched():
    rng = np.random.default_rng(11)
    d = 40
    X = rng.normal(size=(100, d)) @ rng.normal(size=(d, d)) + 7.0
    w = rng.integers(0, 3, size=100).astype(float)
    acc = MomentAccumulator(d)
    assert acc.representation == "rows"
    acc.update(X[:15], w[:15]).update(X[15:30], w[15:30])
    assert acc.representation == "rows"  # fewer than 40 rows of weight > 0
    mean, scatter = two_pass(X[:30], w[:30])
    np.testing.assert_allclose(acc.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(acc.scatter, scatter, rtol=1e-10, atol=1e-9)
    assert acc.n_samples == 30 and acc.n_nonzero == int(np.count_nonzero(w[:30]))
    again = pickle.loads(pickle.dumps(acc))
    assert again.representation == "rows"
    np.testing.assert_allclose(again.scatter, acc.scatter, rtol=1e-12)
    for lo in range(30, 100, 10):
        acc.update(X[lo : lo + 10], w[lo : lo + 10])
    assert acc.representation == "scatter"
    batch = MomentAccumulator(d, keep_rows=False).update(X, w)
    _assert_same(acc, batch)


def test_scaled_views_keep_what_the_units_of_the_data_cannot():
    # the views the estimators read, array * 4**e, in both forms, on data
    # whose squares lie below float64's smallest subnormal number
    rng = np.random.default_rng(13)
    d = 12
    Xu = datasets.make_cone(
        30, d, spread=(4.0, 0.1), offset=np.full(d, 3.0), rotate=False, random_state=rng
    )
    w = rng.uniform(0.5, 2.0, size=30)
    X = np.ldexp(Xu, -830)
    for n in (8, 30):  # 8 < 12 rows: the rows are kept; 30: the scatter
        acc = MomentAccumulator(d).update(X[:n], w[:n])
        assert acc.representation == ("rows" if n < d else "scatter")
        R, v = Xu[:n], w[:n]
        mean = np.average(R, axis=0, weights=v)
        scatter = ((R - mean) * v[:, None]).T @ (R - mean)
        M, e = acc.scaled_covariance()
        np.testing.assert_allclose(
            np.ldexp(M, 2 * e + 1660), scatter / (v.sum() - 1), rtol=1e-10
        )
        var, e = acc.scaled_variances()
        np.testing.assert_allclose(
            np.ldexp(var, 2 * e + 1660), np.diagonal(scatter) / v.sum(), rtol=1e-10
        )
        M, e = acc.scaled_covariance(center=False)
        np.testing.assert_allclose(
            np.ldexp(M, 2 * e + 1660), (R * v[:, None]).T @ R / v.sum(), rtol=1e-10
        )
        assert not np.any(acc.covariance())  # underflows in the data's units
    Y, e = MomentAccumulator(d).update(X[:8], w[:8]).scaled_rows()
    centred = Xu[:8] - np.average(Xu[:8], axis=0, weights=w[:8])
    np.testing.assert_allclose(
        np.ldexp(Y.T @ Y, 2 * e + 1660), (centred * w[:8, None]).T @ centred, rtol=1e-9
    )
    with pytest.raises(ValueError, match="no longer keep"):
        acc.scaled_rows()


def test_updated_leaves_the_statistics_and_is_finite_tells_nan(make_cone):
    X = make_cone(100, 5, seed=14)
    acc = MomentAccumulator(5).update(X[:50])
    before = acc.scatter.copy()
    new = acc.updated(X[50:])
    np.testing.assert_array_equal(acc.scatter, before)
    assert acc.n_samples == 50 and new.n_samples == 100
    np.testing.assert_allclose(new.covariance(), np.cov(X, rowvar=False), rtol=1e-10)
    assert new.is_finite() and new.is_finite(include_fourth=True)
    with np.errstate(invalid="ignore"):
        bad = new.updated(np.where(np.arange(5) == 2, np.nan, X[:3]))
    assert not bad.is_finite()


def test_merges_of_rows_and_scatter_forms():
    rng = np.random.default_rng(12)
    d = 30
    X = rng.normal(size=(90, d)) + 2.0
    small = [MomentAccumulator(d).update(c) for c in np.array_split(X[:40], 4)]
    big = MomentAccumulator(d).update(X[40:])
    assert small[0].representation == "rows" and big.representation == "scatter"
    rows_only = small[0] + small[1]  # 20 rows < 30: still rows
    assert rows_only.representation == "rows"
    whole = MomentAccumulator(d, keep_rows=False).update(X)
    for merged in (
        ((small[0] + small[1]) + (small[2] + small[3])) + big,
        big + (small[3] + (small[0] + (small[2] + small[1]))),
    ):
        _assert_same(merged, whole)
    assert small[0].n_samples == 10  # operands untouched


def test_input_eps_is_the_coarsest_rounding_of_the_rows_seen():
    """The statistics remember the precision the rows were stored in.

    They are float64 whatever the rows, but float32 rows carry float32
    round-off into them: every path that adds rows keeps the coarsest epsilon
    (the whitening's rank tolerance scales with it).
    """
    import pandas as pd

    eps = {t: float(np.finfo(t).eps) for t in (np.float16, np.float32, np.float64)}
    rng = np.random.default_rng(13)
    d = 6
    X = rng.normal(size=(40, d))
    assert MomentAccumulator(d).input_eps == eps[np.float64]
    assert MomentAccumulator(d).update(X.astype(int)).input_eps == eps[np.float64]
    for kind, keep_rows in (("full", True), ("full", False), ("diag", True)):
        # a float32 batch after float64 ones, while the rows are kept (3 < 6)
        # and after the switch to the scatter form
        acc = MomentAccumulator(d, kind=kind, keep_rows=keep_rows).update(X[:3])
        assert acc.input_eps == eps[np.float64]
        acc.update(X[3:5].astype(np.float32))
        assert acc.input_eps == eps[np.float32]
        acc.update(X[5:])
        assert acc.input_eps == eps[np.float32]
        assert pickle.loads(pickle.dumps(acc)).input_eps == eps[np.float32]
        assert acc.copy().input_eps == eps[np.float32]
        # a merge keeps the coarser of the two, either way round
        half = MomentAccumulator(d, kind=kind).update(X.astype(np.float16))
        assert (acc + half).input_eps == (half + acc).input_eps == eps[np.float16]
    # rows validated to float64 from a coarser type say so; so do DataFrames
    declared = MomentAccumulator(d).update(X, input_eps=eps[np.float16])
    assert declared.input_eps == eps[np.float16]
    frame = pd.DataFrame(X).astype({0: np.float32})
    assert MomentAccumulator(d).update(frame).input_eps == eps[np.float32]


def test_input_eps_rms_counts_each_rows_rounding_with_its_weight():
    """A float16 batch raises the rounding level by its share of the weight only.

    The whitening's rank tolerance scales with ``input_eps_rms``: one
    float16 batch used to set float16's epsilon for every float32 row after
    it. Every path that adds rows (kept rows, scatter, weights, merges,
    pickles) gives ``sqrt(sum_i w_i eps_i**2 / sum_w)``, computed here
    directly from the rows' dtypes.
    """
    eps16, eps32 = (float(np.finfo(t).eps) for t in (np.float16, np.float32))
    rng = np.random.default_rng(14)
    d = 6
    X = rng.normal(size=(40, d))
    w = rng.uniform(0.5, 2.0, size=40)
    expected = np.sqrt((eps16**2 * w[:2].sum() + eps32**2 * w[2:].sum()) / w.sum())
    for kind, keep_rows in (("full", True), ("full", False), ("diag", True)):
        acc = MomentAccumulator(d, kind=kind, keep_rows=keep_rows)
        acc.update(X[:2].astype(np.float16), w[:2])  # rows kept: 2 < 6
        acc.update(X[2:20].astype(np.float32), w[2:20])  # now the scatter
        rest = MomentAccumulator(d, kind=kind).update(X[20:].astype(np.float32), w[20:])
        for merged in (acc + rest, rest + acc):
            assert merged.input_eps == eps16  # the coarsest, as before
            assert merged.input_eps_rms == pytest.approx(expected, rel=1e-12)
            again = pickle.loads(pickle.dumps(merged))
            assert again.input_eps_rms == pytest.approx(expected, rel=1e-12)
    # one dtype: exactly its epsilon; no rows: the coarsest
    assert MomentAccumulator(d).update(X.astype(np.float32)).input_eps_rms == eps32
    assert MomentAccumulator(d).input_eps_rms == float(np.finfo(np.float64).eps)
    # statistics pickled before the weighted epsilon was kept read as before
    old = MomentAccumulator(d).update(X.astype(np.float32))
    state = old.__getstate__()
    del state["_eps2_weight"]
    restored = MomentAccumulator.__new__(MomentAccumulator)
    restored.__setstate__(state)
    assert restored.input_eps_rms == eps32
