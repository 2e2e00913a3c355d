"""Scoring sentence embeddings on semantic textual similarity.

:func:`cosine_spearman_score` is the STS metric (Spearman's rho between gold
scores and cosine similarity); :class:`PairedCosineSimilarity` wraps any
transformer so that :class:`~sklearn.model_selection.GridSearchCV` can tune it
on labelled pairs; :func:`cosine_spearman_scorer` scores fitted estimators.
"""

from __future__ import annotations

from ._paired import PairedCosineSimilarity, cosine_spearman_scorer
from ._scores import (
    cosine_spearman_score,
    paired_cosine_similarity,
    spearman_score,
)

__all__ = [
    "PairedCosineSimilarity",
    "cosine_spearman_score",
    "cosine_spearman_scorer",
    "paired_cosine_similarity",
    "spearman_score",
]
