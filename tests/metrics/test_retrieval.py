"""Tests of the retrieval metrics (MRR@k, recall@k, nDCG@k) and the pair scorer.

The metrics are checked against hand-computed values and against a brute
force that averages over every order of tied documents; the scorer against a
computation from scratch on the distinct rows of the pairs.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import sparse
from sklearn.decomposition import PCA
from sklearn.metrics import ndcg_score
from sklearn.model_selection import GridSearchCV, KFold

from sklearn_isotropy.exceptions import NoRelevantDocumentWarning
from sklearn_isotropy.metrics import (
    PairedCosineSimilarity,
    make_retrieval_scorer,
    mrr_score,
    ndcg_at_k_score,
    pairs_to_qrels,
    recall_at_k_score,
    retrieval_scores,
)
from tests._data import RETRIEVAL_METRICS


# ------------------------------------------------------------ the metrics
def test_metrics_without_ties_by_hand():
    y_true = [[0, 1, 0, 0], [1, 0, 1, 0]]
    y_score = [[0.9, 0.8, 0.7, 0.1], [0.2, 0.9, 0.3, 0.5]]
    # query 0: relevant at rank 2; query 1: relevant at ranks 4 and 3
    got = retrieval_scores(
        y_true, y_score, metrics=[*RETRIEVAL_METRICS, "recall@3", "ndcg@3"]
    )
    assert got["mrr@10"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert got["recall@1"] == 0.0
    assert got["recall@10"] == 1.0
    assert got["recall@3"] == pytest.approx((1 + 0.5) / 2)
    each = retrieval_scores(y_true, y_score, average=False)
    assert_allclose(each["mrr@10"], [1 / 2, 1 / 3])
    ndcg0 = (1 / math.log2(3)) / 1.0
    ndcg1 = (1 / math.log2(4) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert got["ndcg@10"] == pytest.approx((ndcg0 + ndcg1) / 2)
    assert got["ndcg@3"] == pytest.approx(
        (ndcg0 + (1 / math.log2(4)) / (1 + 1 / math.log2(3))) / 2
    )


def test_ties_are_averaged_by_hand():
    # the relevant document ties with two others at the top
    y_true, y_score = [[1, 0, 0, 0]], [[0.5, 0.5, 0.5, 0.1]]
    assert mrr_score(y_true, y_score) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert recall_at_k_score(y_true, y_score, k=1) == pytest.approx(1 / 3)
    assert recall_at_k_score(y_true, y_score, k=2) == pytest.approx(2 / 3)
    assert ndcg_at_k_score(y_true, y_score) == pytest.approx(
        (1 + 1 / math.log2(3) + 1 / math.log2(4)) / 3
    )
    # a tie across the cut-off: ranks 2 or 3 with k = 2
    y_true, y_score = [[0, 1, 0]], [[0.9, 0.4, 0.4]]
    assert recall_at_k_score(y_true, y_score, k=2) == pytest.approx(0.5)
    assert mrr_score(y_true, y_score, k=2) == pytest.approx(0.5 * 1 / 2)
    # two relevant documents among three tied: the first is at place 1 with
    # probability 2/3, at place 2 with 1/3
    y_true, y_score = [[1, 1, 0]], [[0.3, 0.3, 0.3]]
    assert mrr_score(y_true, y_score) == pytest.approx(2 / 3 + 1 / 3 * 1 / 2)


def test_duplicates_in_the_corpus_tie():
    # document 1 is a copy of the relevant document 0: equal scores
    y_true, y_score = [[1, 0, 0]], [[0.8, 0.8, 0.2]]
    assert mrr_score(y_true, y_score) == pytest.approx(0.75)
    assert recall_at_k_score(y_true, y_score, k=1) == pytest.approx(0.5)
    # the order of the corpus does not matter
    assert mrr_score([[0, 1, 0]], [[0.8, 0.8, 0.2]]) == pytest.approx(0.75)


def test_minus_inf_ranks_last():
    got = retrieval_scores([[0, 1, 0]], [[-np.inf, 0.1, 0.5]])
    assert got["mrr@10"] == pytest.approx(0.5)


def test_query_without_relevant_document():
    y_true = [[0, 1, 0], [0, 0, 0]]
    y_score = [[0.1, 0.9, 0.5], [0.3, 0.2, 0.1]]
    with pytest.warns(NoRelevantDocumentWarning, match="1 of 2 queries"):
        skipped = retrieval_scores(y_true, y_score)
    assert skipped["mrr@10"] == 1.0 and skipped["ndcg@10"] == 1.0
    with pytest.warns(NoRelevantDocumentWarning):
        each = retrieval_scores(y_true, y_score, average=False)
    assert each["mrr@10"].tolist() == [1.0]  # the skipped query is left out
    zero = retrieval_scores(y_true, y_score, no_relevant="zero")
    each = retrieval_scores(y_true, y_score, no_relevant="zero", average=False)
    assert each["recall@10"].tolist() == [1.0, 0.0]
    assert zero["mrr@10"] == 0.5 and zero["recall@10"] == 0.5
    # "zero" is what sklearn's ndcg_score does with such a row
    assert zero["ndcg@10"] == pytest.approx(ndcg_score(y_true, y_score, k=10))
    with pytest.raises(ValueError, match="no relevant document"):
        retrieval_scores(y_true, y_score, no_relevant="raise")
    with pytest.raises(ValueError, match="none of the 1 queries"):
        retrieval_scores([[0, 0]], [[0.1, 0.2]])


def _brute_force(y_true, y_score, k):
    """Mean of each metric over every order of the tied documents."""
    out = {"mrr": [], "recall": [], "ndcg": []}
    for grades, scores in zip(y_true, y_score):
        n = len(scores)
        orders = [
            p
            for p in itertools.permutations(range(n))
            if all(scores[p[i]] >= scores[p[i + 1]] for i in range(n - 1))
        ]
        ideal = sum(
            g / math.log2(i + 2) for i, g in enumerate(sorted(grades, reverse=True)[:k])
        )
        n_rel = sum(g > 0 for g in grades)
        mrr, recall, ndcg = [], [], []
        for p in orders:
            ranks = [i for i, d in enumerate(p) if grades[d] > 0]
            mrr.append(1 / (ranks[0] + 1) if ranks[0] < k else 0.0)
            recall.append(sum(r < k for r in ranks) / n_rel)
            ndcg.append(sum(grades[d] / math.log2(i + 2) for i, d in enumerate(p[:k])))
            ndcg[-1] /= ideal
        out["mrr"].append(np.mean(mrr))
        out["recall"].append(np.mean(recall))
        out["ndcg"].append(np.mean(ndcg))
    return {key: float(np.mean(v)) for key, v in out.items()}


@pytest.mark.parametrize("seed", range(6))
def test_metrics_equal_a_brute_force_over_tie_orders(seed):
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, 3, size=(4, 7)) * (rng.random((4, 7)) < 0.4)
    y_true[:, 0] += y_true.sum(axis=1) == 0  # every query has a relevant one
    y_score = rng.integers(0, 3, size=(4, 7)).astype(float)  # many ties
    for k in (1, 2, 3, 5):
        got = retrieval_scores(
            y_true, y_score, metrics=[f"mrr@{k}", f"recall@{k}", f"ndcg@{k}"]
        )
        expected = _brute_force(y_true, y_score, k)
        assert got[f"mrr@{k}"] == pytest.approx(expected["mrr"], abs=1e-12)
        assert got[f"recall@{k}"] == pytest.approx(expected["recall"], abs=1e-12)
        assert got[f"ndcg@{k}"] == pytest.approx(expected["ndcg"], abs=1e-12)
        assert got[f"ndcg@{k}"] == pytest.approx(
            ndcg_score(y_true, y_score, k=k), abs=1e-12
        )


def test_sparse_judgements_equal_dense():
    rng = np.random.default_rng(3)
    y_true = (rng.random((20, 50)) < 0.05) * rng.integers(1, 3, size=(20, 50))
    y_true[:, 7] = 1
    y_score = rng.normal(size=(20, 50))
    dense = retrieval_scores(y_true, y_score)
    assert retrieval_scores(sparse.csr_matrix(y_true), y_score) == dense


@pytest.mark.parametrize(
    ("y_true", "y_score", "match"),
    [
        ([[1, 0]], [[np.nan, 0.1]], "NaN"),
        ([[1, 0]], [[np.inf, 0.1]], r"\+inf"),
        ([[-1, 1]], [[0.2, 0.1]], "negative"),
        ([[1, 0]], [[0.2, 0.1, 0.0]], "shape"),
    ],
)
def test_bad_metric_input(y_true, y_score, match):
    with pytest.raises(ValueError, match=match):
        retrieval_scores(y_true, y_score)


def test_unknown_metric_name():
    with pytest.raises(ValueError, match="unknown retrieval metric 'map@10'"):
        retrieval_scores([[1]], [[0.1]], metrics=["map@10"])
    with pytest.raises(ValueError, match="mrr@K"):
        make_retrieval_scorer("mrr@0")


def test_bad_parameters_name_the_parameter_and_the_function():
    with pytest.raises(ValueError, match="'no_relevant' parameter of retrieval_sco"):
        retrieval_scores([[1]], [[0.1]], no_relevant="ignore")
    with pytest.raises(ValueError, match=r"'k' parameter of mrr_score .* \[1, inf\)"):
        mrr_score([[1]], [[0.1]], k=0)
    with pytest.raises(TypeError, match="'symmetric' parameter of make_retrieval_sc"):
        make_retrieval_scorer(symmetric="yes")


# ------------------------------------------------- judgements from pairs
def test_pairs_to_qrels():
    pairs = [
        ["a", "b"],  # relevant
        ["c", "d"],  # not relevant
        ["a", "e"],  # relevant: a second answer for "a"
        ["f", "f"],  # the same sentence twice: no question
        ["b", "a"],  # exactly at the threshold
    ]
    q = pairs_to_qrels(pairs, [4.5, 3.9, 5.0, 5.0, 4.0], min_score=4.0)
    assert q.corpus == ["a", "b", "c", "d", "e", "f"]
    assert q.queries.tolist() == [0, 1]
    assert q.relevance.toarray().tolist() == [
        [0, 1, 0, 0, 1, 0],
        [1, 0, 0, 0, 0, 0],
    ]
    assert q.n_pairs_relevant == 4 and q.n_pairs_identical == 1
    both = pairs_to_qrels(pairs[:1], [4.5], symmetric=True)
    assert both.queries.tolist() == [0, 1]
    assert both.relevance.toarray().tolist() == [[0, 1], [1, 0]]


# ------------------------------------------------------------- the scorer
def _scorer_reference(Z_first, Z_second, y, min_score):
    """MRR@10 computed from scratch on the distinct rows of the pairs."""
    from sklearn_isotropy._utils import normalize_rows

    items = np.concatenate([Z_first, Z_second])
    keys = [row.tobytes() for row in items]
    distinct = list(dict.fromkeys(keys))
    where = {key: i for i, key in enumerate(distinct)}
    vectors = normalize_rows(items[[keys.index(key) for key in distinct]])[0]
    n = len(y)
    queries = list(
        dict.fromkeys(
            where[keys[i]]
            for i in range(n)
            if y[i] >= min_score and keys[i] != keys[n + i]
        )
    )
    rel = np.zeros((len(queries), len(distinct)))
    for i in range(n):
        if y[i] >= min_score and keys[i] != keys[n + i]:
            rel[queries.index(where[keys[i]]), where[keys[n + i]]] = 1
    S = vectors[queries] @ vectors.T
    S[np.arange(len(queries)), queries] = -np.inf
    return mrr_score(rel, S)


def test_scorer_equals_a_computation_from_scratch():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(80, 6))
    b = a + rng.normal(scale=0.8, size=a.shape)
    b[::7] = a[::7]  # a few pairs of identical items: not questions
    X_pairs = np.stack([a, b], axis=1)
    y = rng.uniform(0, 5, size=80)
    scorer = make_retrieval_scorer("mrr@10", min_score=3.0)
    model = PairedCosineSimilarity().fit(X_pairs)
    assert scorer(model, X_pairs, y) == pytest.approx(
        _scorer_reference(a, b, y, 3.0), abs=1e-12
    )
    pca = PCA(n_components=3).fit(np.concatenate([a, b]))
    assert scorer(pca, X_pairs, y) == pytest.approx(
        _scorer_reference(pca.transform(a), pca.transform(b), y, 3.0), abs=1e-12
    )
    assert "mrr@10" in repr(scorer)
    with pytest.raises(ValueError, match="no pair"):
        scorer(model, X_pairs, np.zeros(80))
    with pytest.raises(TypeError, match="transform"):
        scorer(object(), X_pairs, y)


def test_scorer_chooses_k_in_grid_search():
    # the pairs differ only in the low-variance directions: keeping the top
    # principal directions alone cannot tell the partners apart
    rng = np.random.default_rng(0)
    n, d = 120, 10
    scale = np.array([10, 9, 8, 1, 1, 1, 1, 1, 1, 1.0])
    a = rng.normal(size=(n, d)) * scale
    b = a.copy()
    b[:, :3] = rng.normal(size=(n, 3)) * scale[:3]  # top directions: noise
    b[:, 3:] += rng.normal(scale=0.05, size=(n, 7))
    X_pairs = np.stack([a, b], axis=1)
    y = np.full(n, 5.0)
    from sklearn_isotropy import WhiteningTransformer

    search = GridSearchCV(
        PairedCosineSimilarity(WhiteningTransformer()),
        {"transformer__n_components": [2, 3, None]},
        scoring=make_retrieval_scorer("mrr@10"),
        cv=KFold(3, shuffle=True, random_state=0),
    ).fit(X_pairs, y)
    assert search.best_params_ == {"transformer__n_components": None}
    scores = search.cv_results_["mean_test_score"]
    assert scores[2] > 0.5 > 0.2 > scores[1] > 0.0
    # each fold's score is the scorer's on the held-out pairs
    train, test = next(KFold(3, shuffle=True, random_state=0).split(X_pairs))
    fitted = PairedCosineSimilarity(WhiteningTransformer()).fit(X_pairs[train])
    assert search.cv_results_["split0_test_score"][2] == pytest.approx(
        make_retrieval_scorer()(fitted, X_pairs[test], y[test])
    )


def test_scorer_on_text_pairs_with_a_text_pipeline():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    pairs = np.array(
        [
            ["the cat sat on the mat", "a cat sat on a mat"],
            ["dogs run fast", "the dog ran fast"],
            ["a red car", "the blue sky"],
            ["the man reads", "a man is reading"],
        ]
    )
    y = np.array([4.8, 4.2, 0.2, 4.5])
    dense = FunctionTransformer(lambda X: X.toarray(), accept_sparse=True)
    model = PairedCosineSimilarity(make_pipeline(TfidfVectorizer(), dense))
    model.fit(pairs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = make_retrieval_scorer("recall@1")(model, pairs, y)
    vec = model.transformer_
    corpus = list(dict.fromkeys(pairs.ravel()))
    Z = vec.transform(corpus)
    from sklearn_isotropy._utils import normalize_rows

    U = normalize_rows(Z)[0]
    q_idx = [corpus.index(p) for p in pairs[[0, 1, 3], 0]]
    S = U[q_idx] @ U.T
    S[np.arange(3), q_idx] = -np.inf
    rel = np.zeros((3, len(corpus)))
    for row, target in enumerate(pairs[[0, 1, 3], 1]):
        rel[row, corpus.index(target)] = 1
    assert value == pytest.approx(recall_at_k_score(rel, S, k=1))
