"""Exact search, numpy and faiss: the top documents and every tie, by brute force.

The codes are small integers (as floats, or packed bits), so that every
score is exact in float32 too: both backends must then find the same ties
as the float64 brute force.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import sparse

from sklearn_isotropy.metrics import SEARCH_BACKENDS, exact_index, search_candidates

HAS_FAISS = importlib.util.find_spec("faiss") is not None
BACKENDS = [
    "numpy",
    pytest.param(
        "faiss", marks=pytest.mark.skipif(not HAS_FAISS, reason="faiss not installed")
    ),
]


def _codes(metric, n, seed):
    """``n`` codes with many exact ties: integer vectors, or one byte of bits."""
    rng = np.random.default_rng(seed)
    if metric == "hamming":
        return rng.integers(0, 256, size=(n, 1), dtype=np.uint8)
    return rng.integers(-2, 3, size=(n, 6)).astype(np.float32)


def _brute_scores(queries, corpus, metric):
    """Every score in float64: the inner product (of the ``±1`` bits)."""
    if metric == "hamming":
        queries = np.unpackbits(queries, axis=1) * 2.0 - 1
        corpus = np.unpackbits(corpus, axis=1) * 2.0 - 1
    return queries.astype(np.float64) @ corpus.astype(np.float64).T


@pytest.mark.parametrize("metric", ["ip", "hamming"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_index_returns_the_best_documents_first(backend, metric):
    corpus, queries = _codes(metric, 40, seed=0), _codes(metric, 5, seed=1)
    index = exact_index(corpus, metric, backend)
    assert index.backend == backend
    scores, ids = index.search(queries, 7)
    S = _brute_scores(queries, corpus, metric)
    assert_array_equal(scores, np.take_along_axis(S, ids, axis=1))
    assert_array_equal(scores, -np.sort(-S, axis=1)[:, :7])  # ties: any order
    # asking for more than the corpus holds returns all of it
    scores, ids = index.search(queries, 100)
    assert ids.shape == (5, 40)
    assert_array_equal(np.sort(ids, axis=1), np.tile(np.arange(40), (5, 1)))


def test_auto_is_faiss_when_it_can_be_imported():
    index = exact_index(_codes("ip", 10, seed=0))
    assert index.backend == ("faiss" if HAS_FAISS else "numpy")
    assert set(SEARCH_BACKENDS) == {"numpy", "faiss"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_int8_codes_too_wide_for_float32_are_searched_in_float64(backend):
    # 128 * 128 * 1100 > 2**24: float32 sums of such products are not exact
    rng = np.random.default_rng(2)
    corpus = rng.integers(-128, 128, size=(12, 1100), dtype=np.int8)
    queries = rng.integers(-128, 128, size=(3, 1100), dtype=np.int8)
    index = exact_index(corpus, "ip", backend)
    assert index.backend == "numpy"
    scores, ids = index.search(queries, 12)
    exact = queries.astype(np.int64) @ corpus.astype(np.int64).T
    assert_array_equal(scores, np.take_along_axis(exact, ids, axis=1))


@pytest.mark.parametrize("metric", ["ip", "hamming"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_candidates_hold_every_document_tied_with_the_kth(backend, metric):
    corpus, queries = _codes(metric, 60, seed=3), _codes(metric, 8, seed=4)
    corpus[30:40] = corpus[:10]  # identical documents score identically
    rng = np.random.default_rng(5)
    exclude = sparse.random(8, 60, density=0.1, format="csr", random_state=rng)
    S = _brute_scores(queries, corpus, metric)
    S[exclude.toarray() != 0] = -np.inf  # never returned, never counted
    k = 3
    documents, scores = search_candidates(
        queries, corpus, k=k, metric=metric, backend=backend, exclude=exclude
    )
    for q in range(len(queries)):
        kth = -np.sort(-S[q])[k - 1]
        assert set(documents[q]) == set(np.flatnonzero(S[q] >= kth)), q
        assert_allclose(scores[q], S[q, documents[q]], rtol=0)
        assert np.all(np.diff(scores[q]) <= 0)  # best first


def test_bad_parameters_are_named():
    codes = _codes("ip", 10, seed=0)
    with pytest.raises(ValueError, match="'metric' parameter of exact_index"):
        exact_index(codes, metric="cosine")
    with pytest.raises(ValueError, match="'backend' parameter of exact_index"):
        exact_index(codes, backend="annoy")
    with pytest.raises(ValueError, match="'k' parameter of search_candidates"):
        search_candidates(codes, codes, k=0)
    with pytest.raises(TypeError, match="'codes' parameter of exact_index"):
        exact_index(codes.tolist())
