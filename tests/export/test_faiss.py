"""Tests of linear post-processors as a faiss pre-transform."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline, make_pipeline

from sklearn_isotropy import NATSVTransformer, StandardNormalizer, WhiteningTransformer
from sklearn_isotropy.export import to_faiss
from tests._data import LINEAR


def test_faiss_linear_transform_parity(cone):
    faiss = pytest.importorskip("faiss")
    pipe = make_pipeline(
        StandardNormalizer(), WhiteningTransformer(n_components=6)
    ).fit(cone)
    transform = to_faiss(pipe)
    assert isinstance(transform, faiss.LinearTransform)
    assert (transform.d_in, transform.d_out) == (12, 6)
    assert transform.is_trained and transform.have_bias
    X = cone.astype(np.float32)
    assert_allclose(transform.apply(X), pipe.transform(X), rtol=0, atol=1e-5)


@pytest.mark.parametrize("make", LINEAR)
def test_faiss_parity_each_estimator(make, cone):
    pytest.importorskip("faiss")
    est = make().fit(cone)
    X = cone.astype(np.float32)
    assert_allclose(to_faiss(est).apply(X), est.transform(X), rtol=0, atol=1e-5)


def test_faiss_index_pre_transform_whitens_database_and_queries(cone, make_cone):
    faiss = pytest.importorskip("faiss")
    whiten = WhiteningTransformer(n_components=8).fit(cone)
    index = faiss.IndexPreTransform(to_faiss(whiten), faiss.IndexFlatIP(8))
    database = cone.astype(np.float32)
    queries = make_cone(20, 12, seed=3).astype(np.float32)
    index.add(database)
    scores, ids = index.search(queries, 5)
    Zq, Zd = whiten.transform(queries), whiten.transform(database)
    brute = Zq @ Zd.T
    expected = np.argsort(-brute, axis=1, kind="stable")[:, :5]
    assert_allclose(scores, np.take_along_axis(brute, expected, 1), rtol=1e-4)
    assert np.array_equal(ids[:, 0], expected[:, 0])


def test_faiss_errors(cone, flow):
    pytest.importorskip("faiss")
    with pytest.raises(NotFittedError):
        to_faiss(NATSVTransformer())
    with pytest.raises(TypeError, match="GlowFlowTransformer"):
        to_faiss([WhiteningTransformer().fit(cone), flow])
    with pytest.raises(ValueError, match="no estimator"):
        to_faiss(Pipeline([("skip", "passthrough")]))
