"""Retrieval scores (MRR@k, recall@k, nDCG@k) with ties averaged, and a pair scorer.

The scores take a relevance matrix and a score matrix, both of shape
``(n_queries, n_documents)``, as :func:`sklearn.metrics.ndcg_score` does.
Ties are averaged: a score is its expected value when tied documents are
put in a uniformly random order (McSherry & Najork, ECIR 2008), so it never
depends on the order of the corpus. :func:`pairs_to_qrels` turns rated
sentence pairs into queries, a corpus and relevance judgements, and
:func:`make_retrieval_scorer` scores a fitted transformer that way, for
:class:`~sklearn.model_selection.GridSearchCV`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from scipy import sparse
from sklearn.base import BaseEstimator
from sklearn.utils import Bunch
from sklearn.utils.validation import check_array

from .._utils import normalize_rows, warn
from .._utils._sklearn import Interval, StrOptions, validate_params
from ..exceptions import NoRelevantDocumentWarning
from ._paired import _check_y, transform_pairs
from ._scores import check_same_shape
from ._search import _BACKEND_NAMES, _METRICS, search_candidates

__all__ = [
    "DEFAULT_RETRIEVAL_METRICS",
    "make_retrieval_scorer",
    "mrr_score",
    "ndcg_at_k_score",
    "pairs_to_qrels",
    "recall_at_k_score",
    "retrieval_scores",
    "search_scores",
]

#: The scores a retrieval evaluation reports unless told otherwise.
DEFAULT_RETRIEVAL_METRICS = ("mrr@10", "recall@1", "recall@10", "ndcg@10")

_METRIC_NAME = re.compile(r"^(mrr|recall|ndcg)@([1-9][0-9]*)$")
_NO_RELEVANT = StrOptions({"skip", "zero", "raise"})
# elements of one (entries x documents) comparison block: 32 MB of float64
_BLOCK_ELEMENTS = 1 << 22


def _parse_metric(name):
    """Parse ``"mrr@10"`` into ``("mrr", 10)``, or raise a ValueError."""
    match = _METRIC_NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise ValueError(
            f"unknown retrieval metric {name!r}; use 'mrr@K', 'recall@K' or "
            "'ndcg@K' with an integer K >= 1, e.g. 'mrr@10'"
        )
    return match.group(1), int(match.group(2))


# ----------------------------------------------------------------- checks
def _check_scores(y_true, y_score):
    """Return relevance as CSR float64 (explicit zeros dropped), scores as float64."""
    if sparse.issparse(y_true):
        y_true = sparse.csr_matrix(y_true, dtype=np.float64)
        values = y_true.data
    else:
        y_true = check_array(y_true, dtype=np.float64, input_name="y_true")
        values = y_true
    if not np.isfinite(values).all():
        raise ValueError("y_true holds NaN or inf; relevance grades must be finite")
    if (values < 0).any():
        raise ValueError(
            "y_true holds negative relevance grades; grades must be >= 0 (0 = not "
            "relevant); map negative judgements to 0 first"
        )
    y_true = sparse.csr_matrix(y_true)
    y_true.eliminate_zeros()
    if sparse.issparse(y_score):
        raise TypeError("y_score must be a dense array; got a sparse matrix")
    y_score = check_array(
        y_score, dtype=np.float64, ensure_all_finite=False, input_name="y_score"
    )
    if np.isnan(y_score).any() or np.isposinf(y_score).any():
        raise ValueError(
            "y_score holds NaN or +inf; scores must be finite, or -inf for a "
            "document ranked last (e.g. excluded from a query's results)"
        )
    check_same_shape(
        y_true, y_score, ("y_true", "y_score"), "both must be (n_queries, n_documents)"
    )
    return y_true, y_score


def _rank_statistics(y_true, y_score):
    """Count, per relevant entry, the documents scored higher and those tied.

    ``greater[e]`` counts the documents of the entry's query scored strictly
    higher than the entry's document and ``tied[e]`` those scored equal (the
    document itself included), so its rank is uniform on
    ``greater + 1 ... greater + tied`` when ties are put in random order.
    """
    n_docs = y_score.shape[1]
    rows = np.repeat(np.arange(y_true.shape[0]), np.diff(y_true.indptr))
    cols, grades = y_true.indices, y_true.data
    own = y_score[rows, cols]
    greater = np.empty(rows.size, dtype=np.int64)
    tied = np.empty(rows.size, dtype=np.int64)
    step = max(1, _BLOCK_ELEMENTS // max(n_docs, 1))
    for start in range(0, rows.size, step):
        part = slice(start, start + step)
        block = y_score[rows[part]]
        greater[part] = (block > own[part, None]).sum(axis=1)
        tied[part] = (block == own[part, None]).sum(axis=1)
    return rows, grades, own, greater, tied


def _discounts(n):
    """Return ``cum``, ``cum[m]`` the sum of ``1 / log2(r + 1)`` for ``r <= m``."""
    cum = np.zeros(n + 1)
    cum[1:] = np.cumsum(1.0 / np.log2(np.arange(2, n + 2)))
    return cum


# ----------------------------------------------------- per-query scores
def _recall(stats, n_queries, k):
    rows, _, _, greater, tied = stats
    inside = np.clip(k - greater, 0, tied) / tied  # P(rank <= k) of each entry
    hits = np.bincount(rows, weights=inside, minlength=n_queries)
    n_relevant = np.bincount(rows, minlength=n_queries)
    return hits / np.maximum(n_relevant, 1)


def _ndcg(stats, n_queries, k):
    rows, grades, _, greater, tied = stats
    cum = _discounts(k)
    # expected discount of a rank uniform on greater+1 .. greater+tied, cut at k
    expected = (cum[np.minimum(greater + tied, k)] - cum[np.minimum(greater, k)]) / tied
    dcg = np.bincount(rows, weights=grades * expected, minlength=n_queries)
    # ideal DCG: the query's grades sorted in decreasing order, cut at k
    order = np.lexsort((-grades, rows))
    sorted_rows, sorted_grades = rows[order], grades[order]
    first = np.searchsorted(sorted_rows, sorted_rows, side="left")
    position = np.arange(sorted_rows.size) - first  # 0-based rank in its query
    keep = position < k
    ideal = np.bincount(
        sorted_rows[keep],
        weights=sorted_grades[keep] / np.log2(position[keep] + 2.0),
        minlength=n_queries,
    )
    return dcg / np.where(ideal > 0, ideal, 1.0)


def _mrr(stats, n_queries, k):
    rows, _, own, greater, tied = stats
    best = np.full(n_queries, -np.inf)
    np.maximum.at(best, rows, own)
    top = own == best[rows]  # relevant entries in the query's highest tie group
    r = np.bincount(rows[top], minlength=n_queries)  # relevant in that group
    a = np.zeros(n_queries, dtype=np.int64)  # documents above the group
    t = np.ones(n_queries, dtype=np.int64)  # documents in the group
    a[rows[top]], t[rows[top]] = greater[top], tied[top]
    has = r > 0
    a, t, r = a[has], t[has], r[has]
    # first relevant at place j of the group: P(j) = C(t-j, r-1) / C(t, r), by
    # P(1) = r / t and P(j+1) = P(j) (t-j-r+1) / (t-j); only a + j <= k counts
    out = np.zeros(n_queries)
    value = np.zeros(a.size)
    p = r / t
    for j in range(1, k + 1):
        rank = a + j
        value += np.where(rank <= k, p / rank, 0.0)
        remaining = t - j
        ratio = np.where(
            remaining > 0, (remaining - r + 1) / np.maximum(remaining, 1), 0
        )
        p = p * np.clip(ratio, 0.0, None)
    out[has] = value
    return out


_PER_QUERY = {"mrr": _mrr, "recall": _recall, "ndcg": _ndcg}


@validate_params(
    {
        "y_true": ["array-like", "sparse matrix"],
        "y_score": ["array-like"],  # a sparse one is refused with its reason
        "metrics": [str, "array-like"],
        "no_relevant": [_NO_RELEVANT],
        "average": ["boolean"],
    },
    prefer_skip_nested_validation=True,
)
def retrieval_scores(
    y_true: ArrayLike,
    y_score: ArrayLike,
    *,
    metrics: Sequence[str] = DEFAULT_RETRIEVAL_METRICS,
    no_relevant: str = "skip",
    average: bool = True,
) -> dict:
    """Compute MRR@k, recall@k and nDCG@k of a ranking, averaged over queries.

    Each query ranks every document by decreasing score; a document is
    relevant when its grade in `y_true` is positive. ``"mrr@k"`` is the
    reciprocal rank of the first relevant document (0 below ``k``),
    ``"recall@k"`` the share of relevant documents in the first ``k``, and
    ``"ndcg@k"`` the gain of the first ``k`` (the grade, discounted by
    ``1 / log2(rank + 1)``) over the ideal ranking's, as
    :func:`sklearn.metrics.ndcg_score` and ``trec_eval``'s ``ndcg_cut``.

    Parameters
    ----------
    y_true : array-like or sparse matrix of shape (n_queries, n_documents)
        Relevance grades, >= 0; 0 is not relevant.
    y_score : array-like of shape (n_queries, n_documents)
        Scores, higher ranks first; ``-inf`` ranks a document last (one
        excluded from a query's results); NaN and ``+inf`` are rejected.
    metrics : sequence of str, default=("mrr@10", "recall@1", "recall@10", \
"ndcg@10")
        Names of the form ``"mrr@K"``, ``"recall@K"`` or ``"ndcg@K"``.
    no_relevant : {"skip", "zero", "raise"}, default="skip"
        What a query without any relevant document counts for: ``"skip"``
        leaves it out of the averages (with a
        :class:`~sklearn_isotropy.exceptions.NoRelevantDocumentWarning`),
        ``"zero"`` counts it as 0 (as BEIR does), ``"raise"`` raises.
    average : bool, default=True
        Return each metric's mean; False, every evaluated query's value.

    Returns
    -------
    scores : dict of str to float or ndarray
        Each metric's mean over the evaluated queries, in [0, 1]; with
        ``average=False`` an array of shape (n_evaluated,) per metric, in
        the order of the rows (queries left out by ``"skip"`` omitted).

    Raises
    ------
    ValueError
        For negative or non-finite grades, NaN or ``+inf`` scores, shapes
        that differ, an unknown metric, or when no query has a relevant
        document and ``no_relevant="skip"``.

    See Also
    --------
    mrr_score, recall_at_k_score, ndcg_at_k_score : One score each.
    make_retrieval_scorer : The same scores for a fitted transformer on pairs.

    Notes
    -----
    Ties (documents with equal scores, duplicates of a text among them) are
    averaged: each score is its expected value when the tied documents are
    ordered uniformly at random, computed exactly (McSherry & Najork 2008).
    See :ref:`retrieval`.

    References
    ----------
    F. McSherry and M. Najork, "Computing information retrieval performance
    measures efficiently in the presence of tied scores", ECIR 2008.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy.metrics import retrieval_scores
    >>> y_true = np.array([[0, 1, 0], [1, 0, 0]])
    >>> y_score = np.array([[0.9, 0.8, 0.1], [0.5, 0.5, 0.1]])  # 2nd row: a tie
    >>> {m: round(v, 4) for m, v in retrieval_scores(y_true, y_score).items()}
    {'mrr@10': 0.625, 'recall@1': 0.25, 'recall@10': 1.0, 'ndcg@10': 0.7232}
    """
    if isinstance(metrics, str):
        metrics = [metrics]
    parsed = {name: _parse_metric(name) for name in metrics}
    if not parsed:
        raise ValueError("metrics is empty; name at least one, e.g. 'mrr@10'")
    y_true, y_score = _check_scores(y_true, y_score)
    n_queries = y_true.shape[0]
    if n_queries == 0:
        raise ValueError("y_true has no query (0 rows); at least 1 is required")
    has_relevant = np.diff(y_true.indptr) > 0
    n_empty = int(n_queries - has_relevant.sum())
    if n_empty and no_relevant == "raise":
        raise ValueError(
            f"{n_empty} of {n_queries} queries have no relevant document; drop "
            "them or pass no_relevant='skip' or 'zero'"
        )
    if n_empty == n_queries and no_relevant == "skip":
        raise ValueError(
            f"none of the {n_queries} queries has a relevant document (a grade "
            "> 0), so no score is defined; check the relevance judgements"
        )
    if n_empty and no_relevant == "skip":
        warn(
            f"{n_empty} of {n_queries} queries have no relevant document; they "
            "are left out of the averages (pass no_relevant='zero' to count "
            "them as 0)",
            NoRelevantDocumentWarning,
        )
    stats = _rank_statistics(y_true, y_score)
    evaluated = has_relevant if no_relevant == "skip" else np.ones(n_queries, bool)
    out = {}
    for name, (kind, k) in parsed.items():
        per_query = np.clip(_PER_QUERY[kind](stats, n_queries, k)[evaluated], 0, 1)
        out[name] = float(per_query.mean()) if average else per_query
    return out


def _single(kind, y_true, y_score, k, no_relevant):
    name = f"{kind}@{k}"
    return retrieval_scores(y_true, y_score, metrics=[name], no_relevant=no_relevant)[
        name
    ]


_SHARED_PARAMETERS = """\
    y_true : array-like or sparse matrix of shape (n_queries, n_documents)
        Relevance grades, >= 0 (0 = not relevant).
    y_score : array-like of shape (n_queries, n_documents)
        Scores, higher first; ``-inf`` ranks a document last.
    k : int, default=10
        Cut-off.
    no_relevant : {"skip", "zero", "raise"}, default="skip"
        What a query without relevant documents counts for (see
        :func:`retrieval_scores`)."""


def _shared_parameters(func):
    """Fill in the parameters that every single-metric score shares."""
    func.__doc__ = func.__doc__.replace("    <shared parameters>", _SHARED_PARAMETERS)
    return func


_SINGLE_SCORE_CONSTRAINTS = {
    "y_true": ["array-like", "sparse matrix"],
    "y_score": ["array-like"],
    "k": [Interval(Integral, 1, None, closed="left")],
    "no_relevant": [_NO_RELEVANT],
}


@validate_params(_SINGLE_SCORE_CONSTRAINTS, prefer_skip_nested_validation=True)
@_shared_parameters
def mrr_score(
    y_true: ArrayLike, y_score: ArrayLike, *, k: int = 10, no_relevant: str = "skip"
) -> float:
    """Compute the mean reciprocal rank of the first relevant document, cut at ``k``.

    A first relevant document below rank ``k`` counts 0. Ties are averaged
    (see :func:`retrieval_scores`).

    Parameters
    ----------
    <shared parameters>

    Returns
    -------
    mrr : float
        In [0, 1].

    Examples
    --------
    >>> from sklearn_isotropy.metrics import mrr_score
    >>> mrr_score([[0, 0, 1]], [[0.9, 0.5, 0.7]])  # relevant ranked second
    0.5
    """
    return _single("mrr", y_true, y_score, k, no_relevant)


@validate_params(_SINGLE_SCORE_CONSTRAINTS, prefer_skip_nested_validation=True)
@_shared_parameters
def recall_at_k_score(
    y_true: ArrayLike, y_score: ArrayLike, *, k: int = 10, no_relevant: str = "skip"
) -> float:
    """Compute the share of each query's relevant documents in its first ``k``.

    Ties are averaged (see :func:`retrieval_scores`).

    Parameters
    ----------
    <shared parameters>

    Returns
    -------
    recall : float
        In [0, 1].

    Examples
    --------
    >>> from sklearn_isotropy.metrics import recall_at_k_score
    >>> recall_at_k_score([[1, 0, 1]], [[0.9, 0.5, 0.1]], k=2)
    0.5
    """
    return _single("recall", y_true, y_score, k, no_relevant)


@validate_params(_SINGLE_SCORE_CONSTRAINTS, prefer_skip_nested_validation=True)
@_shared_parameters
def ndcg_at_k_score(
    y_true: ArrayLike, y_score: ArrayLike, *, k: int = 10, no_relevant: str = "skip"
) -> float:
    """Compute the normalised discounted cumulative gain of the first ``k``.

    Linear gains (the grade) and the ``1 / log2(rank + 1)`` discount; ties
    are averaged. With every query holding a relevant document this equals
    :func:`sklearn.metrics.ndcg_score` with the same ``k``.

    Parameters
    ----------
    <shared parameters>

    Returns
    -------
    ndcg : float
        In [0, 1].

    Examples
    --------
    >>> from sklearn_isotropy.metrics import ndcg_at_k_score
    >>> round(ndcg_at_k_score([[0, 1]], [[0.9, 0.1]]), 4)  # 1 / log2(3)
    0.6309
    """
    return _single("ndcg", y_true, y_score, k, no_relevant)


# ----------------------------------------------------------------- pairs
@validate_params(
    {
        "pairs": ["array-like"],
        "scores": ["array-like"],
        "min_score": [Interval(Real, None, None, closed="neither")],
        "symmetric": ["boolean"],
    },
    prefer_skip_nested_validation=True,
)
def pairs_to_qrels(
    pairs: ArrayLike,
    scores: ArrayLike,
    *,
    min_score: float = 4.0,
    symmetric: bool = False,
) -> Bunch:
    """Make queries, a corpus and relevance judgements from rated sentence pairs.

    Every pair rated at least `min_score` makes its first item a query and
    its second a relevant document (and, with `symmetric`, the other way
    round). The corpus is every distinct item of the pairs; each query is
    one of them, to be left out of its own results.

    Parameters
    ----------
    pairs : array-like of shape (n_pairs, 2)
        Hashable items (texts, or other keys such as the bytes of an
        embedding); equal items are one corpus document.
    scores : array-like of shape (n_pairs,)
        Gold similarity of each pair.
    min_score : float, default=4.0
        Pairs rated ``>= min_score`` are relevant (4.0 is 80% of STS-B's
        0-5 scale).
    symmetric : bool, default=False
        Also make the second item of each such pair a query for the first.

    Returns
    -------
    qrels : sklearn.utils.Bunch
        ``corpus`` (the distinct items, first-seen order), ``queries`` (the
        corpus index of each query), ``relevance`` (CSR, n_queries x
        n_corpus, 1.0 per relevant pair), ``n_pairs_relevant`` (pairs rated
        ``>= min_score``) and ``n_pairs_identical`` (of those, pairs of one
        item twice, left out).

    Raises
    ------
    ValueError
        For shapes that do not match or non-finite scores.

    Examples
    --------
    >>> from sklearn_isotropy.metrics import pairs_to_qrels
    >>> pairs = [["a cat", "a kitten"], ["a dog", "a car"], ["a cat", "one cat"]]
    >>> q = pairs_to_qrels(pairs, [4.5, 1.0, 4.0])
    >>> q.corpus
    ['a cat', 'a kitten', 'a dog', 'a car', 'one cat']
    >>> q.queries.tolist(), q.relevance.toarray().tolist()
    ([0], [[0.0, 1.0, 0.0, 0.0, 1.0]])
    """
    pairs = np.asarray(pairs, dtype=object)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must have shape (n_pairs, 2); got {pairs.shape}")
    scores = check_array(
        scores, ensure_2d=False, dtype=np.float64, input_name="scores"
    ).ravel()
    if scores.shape[0] != pairs.shape[0]:
        raise ValueError(
            f"scores has {scores.shape[0]} values but pairs has {pairs.shape[0]} rows"
        )
    index = {}
    for item in pairs.ravel():
        index.setdefault(item, len(index))
    high = scores >= min_score
    questions = [(pairs[i, 0], pairs[i, 1]) for i in np.flatnonzero(high)]
    if symmetric:
        questions += [(b, a) for a, b in questions]
    query_of = {}
    entries = set()
    identical = 0
    for query, target in questions:
        if query == target:
            identical += 1
            continue
        row = query_of.setdefault(index[query], len(query_of))
        entries.add((row, index[target]))
    ordered = np.array(sorted(entries), dtype=np.intp).reshape(-1, 2)
    rows, cols = ordered[:, 0], ordered[:, 1]
    relevance = sparse.csr_matrix(
        (np.ones(rows.size), (rows, cols)), shape=(len(query_of), len(index))
    )
    return Bunch(
        corpus=list(index),
        queries=np.fromiter(query_of, dtype=np.intp, count=len(query_of)),
        relevance=relevance,
        n_pairs_relevant=int(high.sum()),
        n_pairs_identical=identical // (2 if symmetric else 1),
    )


@validate_params(
    {
        "queries": [np.ndarray],
        "corpus": [np.ndarray],
        "relevance": ["array-like", "sparse matrix"],
        "metrics": ["array-like"],
        "exclude": ["sparse matrix", None],
        "metric": [_METRICS],
        "backend": [_BACKEND_NAMES],
    },
    prefer_skip_nested_validation=True,
)
def search_scores(
    queries: np.ndarray,
    corpus: np.ndarray,
    relevance: sparse.spmatrix,
    *,
    metrics: Sequence[str] = DEFAULT_RETRIEVAL_METRICS,
    exclude: sparse.spmatrix | None = None,
    metric: str = "ip",
    backend: str = "auto",
) -> dict[str, np.ndarray]:
    """Score each query's ranking when the corpus is searched exactly.

    The ranking of :func:`~sklearn_isotropy.metrics.search_candidates`
    (identical documents tie, excluded ones are never returned) scored by
    :func:`retrieval_scores` with ties averaged, without a full score matrix.

    Parameters
    ----------
    queries, corpus : ndarray of shape (n_queries, width), (n_documents, width)
        Codes compared by `metric` (unit-norm float vectors for cosine).
    relevance : sparse matrix of shape (n_queries, n_documents)
        Relevance grades; every query needs a relevant document.
    metrics : sequence of str, default=("mrr@10", "recall@1", "recall@10", \
"ndcg@10")
        As for :func:`retrieval_scores`.
    exclude : sparse matrix of shape (n_queries, n_documents), default=None
        Nonzero where a document is never returned to a query.
    metric : {"ip", "hamming"}, default="ip"
        Inner product, or Hamming distance of packed bits.
    backend : {"auto", "numpy", "faiss"}, default="auto"
        The search engine.

    Returns
    -------
    scores : dict of str to ndarray of shape (n_queries,)
        Each metric's value for every query.
    """
    k = max(_parse_metric(name)[1] for name in metrics)
    documents, scores = search_candidates(
        queries, corpus, k=k, metric=metric, backend=backend, exclude=exclude
    )
    # column j of row q: the j-th candidate of query q, then its relevant
    # documents that are not candidates (score -inf); ranks up to k, all
    # that the metrics read, are those of the full ranking
    rel = sparse.csr_matrix(relevance)
    rows_rel, rows_score = [], []
    for q in range(len(documents)):
        lo, hi = rel.indptr[q], rel.indptr[q + 1]
        grade_of = dict(zip(rel.indices[lo:hi].tolist(), rel.data[lo:hi].tolist()))
        rows_rel.append([grade_of.pop(d, 0.0) for d in documents[q].tolist()])
        rows_rel[-1] += grade_of.values()
        rows_score.append([*scores[q], *[-np.inf] * len(grade_of)])
    width = max(len(r) for r in rows_rel)
    y_true = np.zeros((len(documents), width))
    y_score = np.full((len(documents), width), -np.inf)
    for q, (g, s) in enumerate(zip(rows_rel, rows_score)):
        y_true[q, : len(g)], y_score[q, : len(s)] = g, s
    return retrieval_scores(y_true, y_score, metrics=metrics, average=False)


class _PairRetrievalScorer:
    """Score one retrieval metric on rated pairs: ``scorer(estimator, X_pairs, y)``."""

    def __init__(self, metric, min_score, symmetric):
        self.metric = metric
        self.min_score = min_score
        self.symmetric = symmetric

    def __repr__(self):
        return (
            f"make_retrieval_scorer({self.metric!r}, min_score={self.min_score!r}, "
            f"symmetric={self.symmetric!r})"
        )

    def __call__(self, estimator, X_pairs, y):
        # equal items are one document, and equal vectors tie exactly
        Z, index = transform_pairs(estimator, X_pairs)
        qrels = pairs_to_qrels(
            index,
            _check_y(y, len(index)),
            min_score=self.min_score,
            symmetric=self.symmetric,
        )
        n_queries = qrels.queries.size
        if n_queries == 0:
            raise ValueError(
                f"no pair of the {len(index)} scored has a distinct second item and "
                f"a gold score >= min_score={self.min_score}, so there is no query; "
                "lower min_score or score more pairs per fold (fewer folds)"
            )
        U, _ = normalize_rows(Z[qrels.corpus])
        exclude = sparse.csr_matrix(  # a query is not its own answer
            (np.ones(n_queries), (np.arange(n_queries), qrels.queries)),
            shape=qrels.relevance.shape,
        )
        per_query = search_scores(
            U[qrels.queries],
            U,
            qrels.relevance,
            metrics=[self.metric],
            exclude=exclude,
            backend="numpy",
        )
        return float(per_query[self.metric].mean())


@validate_params(
    {
        "metric": [str],
        "min_score": [Interval(Real, None, None, closed="neither")],
        "symmetric": ["boolean"],
    },
    prefer_skip_nested_validation=True,
)
def make_retrieval_scorer(
    metric: str = "mrr@10", *, min_score: float = 4.0, symmetric: bool = False
) -> Callable[[BaseEstimator, ArrayLike, ArrayLike], float]:
    """Make a scorer of retrieval quality on rated sentence pairs, for GridSearchCV.

    The scorer turns the scored pairs into a retrieval task with
    :func:`~sklearn_isotropy.metrics.pairs_to_qrels` (a query never
    retrieves itself), embeds the distinct sentences with the fitted
    estimator, ranks the corpus (the scored pairs' sentences: a held-out
    fold in a cross-validation) by cosine similarity and returns `metric`.

    Parameters
    ----------
    metric : str, default="mrr@10"
        ``"mrr@K"``, ``"recall@K"`` or ``"ndcg@K"`` (see
        :func:`~sklearn_isotropy.metrics.retrieval_scores`).
    min_score : float, default=4.0
        Gold score from which a pair is relevant (4.0 on STS-B's 0-5 scale).
    symmetric : bool, default=False
        Also query with the second sentence of each relevant pair.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X_pairs, y) -> float`` for a fitted
        :class:`PairedCosineSimilarity`, transformer or pipeline, text or
        embedding pairs and their gold scores; a ValueError when no pair
        reaches `min_score`.

    See Also
    --------
    cosine_spearman_scorer : The STS score of the same estimators.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.decomposition import PCA
    >>> from sklearn.model_selection import GridSearchCV
    >>> from sklearn_isotropy.metrics import (
    ...     PairedCosineSimilarity, make_retrieval_scorer)
    >>> rng = np.random.RandomState(0)
    >>> a = rng.normal(size=(60, 8))
    >>> X_pairs = np.stack([a, a + rng.normal(scale=0.5, size=a.shape)], axis=1)
    >>> y = np.where(np.arange(60) % 2 == 0, 5.0, 1.0)
    >>> search = GridSearchCV(
    ...     PairedCosineSimilarity(PCA()),
    ...     {"transformer__n_components": [2, 8]},
    ...     scoring=make_retrieval_scorer("mrr@10"),
    ...     cv=3,
    ... ).fit(X_pairs, y)
    >>> search.best_params_
    {'transformer__n_components': 8}
    """
    _parse_metric(metric)
    return _PairRetrievalScorer(metric, min_score, bool(symmetric))
