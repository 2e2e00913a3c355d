"""Tests of what the linear post-processors share: blockwise transforms, scaling.

Transforms run in blocks of rows (made small here), centred before the
product, and check their output for NaN, infinity and float32 overflow;
statistics of tiny or huge rows are computed in scaled units.
"""

from __future__ import annotations

import numpy as np
import pytest

import sklearn_isotropy.linear._base
from sklearn_isotropy import NATSVTransformer, StandardNormalizer, WhiteningTransformer
from tests._data import CONE


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_transform_rejects_non_finite_in_every_column_and_row(
    bad, dtype, monkeypatch, make_cone
):
    # transform checks finiteness on its output, block by block; a non-finite
    # entry must be caught in the first, a middle and the last block, and in a
    # constant column, whose row of the whitening matrix is (numerically) zero
    monkeypatch.setattr(sklearn_isotropy.linear._base, "_FINISH_BLOCK_BYTES", 512)
    monkeypatch.setattr(sklearn_isotropy.linear._base, "_TRANSFORM_BLOCK_BYTES", 512)
    X = make_cone(3000, 6).astype(dtype)
    X = np.column_stack([X, np.full(len(X), 7.0, dtype=dtype)])
    est = WhiteningTransformer().fit(X)
    assert np.abs(est.whitening_[-1]).max() < 1e-8
    for row, col in [(0, 0), (1234, 3), (len(X) - 1, 6)]:
        bad_X = X.copy()
        bad_X[row, col] = bad
        with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
            est.transform(bad_X)


def test_transform_equals_centred_product_blockwise(make_cone, monkeypatch):
    # the rows are centred and multiplied in blocks; compare every row with an
    # independent float64 (X - mean) @ W, on blocks of 37 rows (the last one
    # shorter) and on the default blocks
    X = make_cone(5000, 40)
    est = WhiteningTransformer().fit(X)
    expected = (X - X.mean(axis=0)) @ est.whitening_
    with monkeypatch.context() as patch:
        patch.setattr(
            sklearn_isotropy.linear._base, "_TRANSFORM_BLOCK_BYTES", 37 * 40 * 8
        )
        np.testing.assert_allclose(est.transform(X), expected, rtol=1e-9, atol=1e-9)
        huge = X.astype(np.float32)
        huge[-1] *= np.float32(1e37)  # finite, but overflows in the last block
        with pytest.raises(ValueError, match="overflowed float32"):
            est.transform(huge)
    expected = (X - X.mean(axis=0)) @ est.whitening_
    np.testing.assert_allclose(est.transform(X), expected, rtol=1e-9, atol=1e-9)
    Z32 = est.transform(X.astype(np.float32))
    assert Z32.dtype == np.float32
    np.testing.assert_allclose(Z32, expected, rtol=0, atol=2e-3)


def test_float32_transform_centres_before_the_product(make_cone):
    # a large common offset against small spreads: X @ W - mean @ W would
    # round two large float32 products before they cancel (about 4e-4 off
    # the float64 result on these rows); centring first stays near the
    # float32 rounding of the input (about 4e-5)
    X = make_cone(4000, 32, seed=1, offset=20.0, spread=(3.0, 0.03), dtype=np.float32)
    est = WhiteningTransformer().fit(X)
    Z32 = est.transform(X)
    assert Z32.dtype == np.float32
    expected = (X.astype(np.float64) - est.mean_) @ est.whitening_
    assert np.abs(Z32 - expected).max() < 1e-4
    # one row at a time (another product kernel) is as accurate
    rows = np.vstack([est.transform(X[i : i + 1]) for i in range(600)])
    assert np.abs(rows - expected[:600]).max() < 1e-4


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
