"""Tests of the fold of linear post-processors into one affine map (float64)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.pipeline import make_pipeline

from sklearn_isotropy import NATSVTransformer, StandardNormalizer, WhiteningTransformer
from sklearn_isotropy.export._affine import fold_affine
from tests._data import LINEAR


@pytest.mark.parametrize("make", LINEAR)
def test_fold_is_the_transform_in_float64(make, cone):
    est = make().fit(cone)
    affine = fold_affine([("step", est)], what="test")
    X = cone[:50] * 1.5 - 0.3  # rows the estimator was not fitted on
    assert_allclose(affine.apply(X), est.transform(X), rtol=1e-12, atol=1e-12)
    assert_allclose(X @ affine.weight + affine.offset, est.transform(X), atol=1e-9)


def test_fold_keeps_standard_normalizer_constant_features(cone):
    X = cone.copy()
    X[:, 3] = 7.0  # a constant feature: scale_ is 1 there, not 0
    est = StandardNormalizer().fit(X)
    affine = fold_affine([("sn", est)], what="test")
    assert np.all(np.isfinite(affine.weight))
    assert_allclose(affine.apply(X), est.transform(X), atol=1e-12)


def test_fold_of_a_chain_is_the_composition(cone):
    pipe = make_pipeline(
        StandardNormalizer(), NATSVTransformer(1), WhiteningTransformer(n_components=4)
    ).fit(cone)
    affine = fold_affine(list(pipe.steps), what="test")
    assert affine.steps == (
        "standardnormalizer",
        "natsvtransformer",
        "whiteningtransformer",
    )
    assert (affine.n_features_in, affine.n_features_out) == (12, 4)
    assert_allclose(affine.apply(cone), pipe.transform(cone), atol=1e-10)
