"""Scoring sentence embeddings on semantic textual similarity.

:func:`cosine_spearman_score` is the STS metric (Spearman's rho between gold
scores and cosine similarity); :class:`PairedCosineSimilarity` wraps any
transformer so that :class:`~sklearn.model_selection.GridSearchCV` can tune it
on labelled pairs; :func:`cosine_spearman_scorer` scores fitted estimators;
:func:`transform_pairs` is what all three compare, the distinct items of
the pairs transformed once (arrays of any namespace the estimators take).

Retrieval: :func:`retrieval_scores` (one score each: :func:`mrr_score`,
:func:`recall_at_k_score`, :func:`ndcg_at_k_score`) scores a ranking with
ties averaged; :func:`pairs_to_qrels` makes queries and judgements from
rated pairs, and :func:`make_retrieval_scorer` scores a fitted transformer
that way; :func:`search_scores` scores an exact search
(:func:`search_candidates` over an :func:`exact_index`) per query.
"""

from __future__ import annotations

from ._paired import PairedCosineSimilarity, cosine_spearman_scorer, transform_pairs
from ._retrieval import (
    DEFAULT_RETRIEVAL_METRICS,
    make_retrieval_scorer,
    mrr_score,
    ndcg_at_k_score,
    pairs_to_qrels,
    recall_at_k_score,
    retrieval_scores,
    search_scores,
)
from ._scores import (
    cosine_spearman_score,
    paired_cosine_similarity,
    spearman_score,
)
from ._search import SEARCH_BACKENDS, exact_index, search_candidates

__all__ = [
    "DEFAULT_RETRIEVAL_METRICS",
    "SEARCH_BACKENDS",
    "PairedCosineSimilarity",
    "cosine_spearman_score",
    "cosine_spearman_scorer",
    "exact_index",
    "make_retrieval_scorer",
    "mrr_score",
    "ndcg_at_k_score",
    "paired_cosine_similarity",
    "pairs_to_qrels",
    "recall_at_k_score",
    "retrieval_scores",
    "search_candidates",
    "search_scores",
    "spearman_score",
    "transform_pairs",
]
