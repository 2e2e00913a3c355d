"""Tests of the parity check every exporter runs on its artefact."""

from __future__ import annotations

import numpy as np
import pytest


def check_parity(got, expected, **kwargs):
    from sklearn_isotropy.export._common import check_parity

    check_parity(
        got,
        expected,
        what="to_onnx",
        graph="the graph",
        n_checked="6 rows",
        owner="estimator",
        **kwargs,
    )


def row_cosines(A, B):
    return np.sum(A * B, axis=1) / np.linalg.norm(A, axis=1) / np.linalg.norm(B, axis=1)


def test_parity_check_compares_each_row_in_direction_and_length():
    # what the check saw on a static pipeline that whitened float32 round-off:
    # a text off the fitted support, stretched to 7e7, set the tolerance of
    # every entry, and the other rows, in other directions, passed
    rng = np.random.default_rng(0)
    expected = rng.normal(size=(6, 8))
    expected[0] *= 7e7
    got = expected.copy()
    got[1:] = rng.normal(size=(5, 8))
    assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()  # old rule
    lowest = row_cosines(got, expected).min()
    message = rf"a row's norm .* between a row and transform's is {lowest:.4f}"
    with pytest.raises(RuntimeError, match=message):
        check_parity(got, expected)
    with pytest.raises(RuntimeError, match="refit it on the embeddings as they are"):
        check_parity(got, expected, lengths=False)
    # float32 round-off passes, also of a row at zero (an output at the mean)
    expected[3] = 0.0
    near = expected + 1e-6 * np.abs(expected).max(axis=1, keepdims=True) * (
        rng.normal(size=expected.shape)
    )
    near[3] = 1e-6 * rng.normal(size=8)
    check_parity(near.astype(np.float32), expected)
    # lengths=False: a positive factor per row is no difference, a sign is
    factors = rng.uniform(0.1, 10.0, size=(6, 1))
    check_parity(expected * factors, expected, lengths=False)
    with pytest.raises(RuntimeError, match="by up to"):
        check_parity(expected * factors, expected)
    flipped = expected * factors
    flipped[5] *= -1
    with pytest.raises(RuntimeError, match=r"transform's is -1\.0000"):
        check_parity(flipped, expected, lengths=False)
    # NaN and a wrong shape are differences too
    broken = expected.copy()
    broken[2, 1] = np.nan
    with pytest.raises(RuntimeError, match="differs from transform"):
        check_parity(broken, expected)
    with pytest.raises(RuntimeError, match=r"shape \(6, 7\) where transform returns"):
        check_parity(expected[:, :7], expected)


def test_a_direction_only_check_exempts_the_rows_transform_returns_tiny():
    """The small-row exemption comes from ``transform``'s own row lengths.

    A static pipeline whose whitening was fitted on the words of one of the
    export's check texts maps that text to its fitted mean: a row 2e-7
    long, whose direction is round-off's. Compared at unit length every row
    used to count in full, and a correct model2vec or StaticEmbedding export
    was refused; lengths=True (ONNX) exempted the row from the start.
    """
    rng = np.random.default_rng(1)
    expected = rng.normal(size=(6, 8))
    expected[2] *= 2e-7 / np.linalg.norm(expected[2])
    factors = rng.uniform(0.1, 10.0, size=(6, 1))  # model2vec's per-text scale
    got = expected * factors
    got[2] = 2e-7 * rng.normal(size=8)  # round-off points anywhere
    assert row_cosines(got, expected)[2] < 0.9
    check_parity(got, expected, lengths=False)
    check_parity(expected + (got - expected * factors), expected)  # as ONNX
    # a row's direction counts in proportion to its length against the
    # median's: at 5% of it, a direction off by 1e-3 is round-off, one at
    # right angles is not
    median = np.median(np.linalg.norm(expected, axis=1))
    expected[4] *= 0.05 * median / np.linalg.norm(expected[4])
    near, turned = expected * factors, expected * factors
    side = np.linalg.svd(expected[[4]])[2][1]  # a unit vector at right angles
    near[4] += 1e-3 * np.linalg.norm(near[4]) * side
    turned[4] = np.linalg.norm(turned[4]) * side
    check_parity(near, expected, lengths=False)
    message = r"of a row's norm \(row 4, .* transform's is 0\.0000"
    with pytest.raises(RuntimeError, match=message):
        check_parity(turned, expected, lengths=False)
