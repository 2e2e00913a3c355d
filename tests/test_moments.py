"""MomentAccumulator: exact streaming and merging against numpy/sklearn."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.covariance import OAS, ledoit_wolf_shrinkage

from sklearn_isotropy import MomentAccumulator


def _data(seed, n=200, d=6, offset=5.0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + offset


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


def test_batch_statistics_match_numpy():
    X = _data(0)
    acc = MomentAccumulator(X.shape[1]).update(X)
    Y = X - X.mean(axis=0)
    np.testing.assert_allclose(acc.mean, X.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(acc.covariance(), np.cov(X, rowvar=False), rtol=1e-10)
    sq = np.sum(Y**2, axis=1)
    np.testing.assert_allclose(acc.norm4, np.sum(sq**2), rtol=1e-10)
    np.testing.assert_allclose(acc.norm3, sq @ Y, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(acc.second_moment(), X.T @ X / X.shape[0], rtol=1e-10)


def test_weighted_statistics_match_numpy():
    X = _data(1)
    w = np.random.default_rng(1).uniform(0.5, 3.0, size=X.shape[0])
    acc = MomentAccumulator(X.shape[1]).update(X, w)
    np.testing.assert_allclose(acc.mean, np.average(X, axis=0, weights=w), rtol=1e-12)
    expected = np.cov(X, rowvar=False, aweights=w, bias=True) * w.sum()
    np.testing.assert_allclose(acc.scatter, expected, rtol=1e-10)


def test_without_fourth_moments_same_scatter_and_merge_drops_them():
    X = _data(3)
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


def test_diag_kind_matches_full_diagonal():
    X = _data(2)
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
def test_streaming_equals_batch(seed, cuts, weighted):
    X = _data(seed, n=150, d=5, offset=100.0)
    w = np.random.default_rng(seed).integers(0, 4, size=150) if weighted else None
    batch = MomentAccumulator(5).update(X, w)
    stream = MomentAccumulator(5)
    bounds = [0, *sorted(set(cuts)), 150]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        stream.update(X[lo:hi], None if w is None else w[lo:hi])
    _assert_same(stream, batch)


def test_merge_is_order_free_and_pure():
    X = _data(3, n=300)
    parts = [MomentAccumulator(6).update(c) for c in np.array_split(X, 5)]
    before = parts[0].scatter.copy()
    left = parts[0].merge(parts[1]).merge(parts[2]).merge(parts[3]).merge(parts[4])
    tree = (parts[3] + parts[1]) + (parts[4] + (parts[0] + parts[2]))
    whole = MomentAccumulator(6).update(X)
    _assert_same(left, whole)
    _assert_same(tree, whole)
    np.testing.assert_array_equal(parts[0].scatter, before)


def test_merge_with_empty_and_zero_weight():
    X = _data(4)
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
def test_shrinkage_intensities_match_sklearn(n, d):
    X = _data(5, n=n, d=d)
    acc = MomentAccumulator(d)
    for chunk in np.array_split(X, 4):
        acc.update(chunk)
    np.testing.assert_allclose(acc.ledoit_wolf_shrinkage(), ledoit_wolf_shrinkage(X))
    np.testing.assert_allclose(acc.oas_shrinkage(), OAS().fit(X).shrinkage_)


def test_covariance_needs_weight_above_ddof():
    acc = MomentAccumulator(2).update(np.ones((1, 2)))
    with pytest.raises(ValueError, match="n_samples = 1"):
        acc.covariance()
