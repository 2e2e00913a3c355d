"""Make sentence embeddings isotropic, the scikit-learn way.

sklearn-isotropy provides scikit-learn transformers that post-process
sentence embeddings so that cosine similarity becomes meaningful again:
BERT-whitening (:class:`WhiteningTransformer`), nulling the top principal
directions (:class:`NATSVTransformer`) and per-dimension standardisation
(:class:`StandardNormalizer`).
"""

from __future__ import annotations

__version__ = "0.1.0.dev0"

from .metrics import (
    PairedCosineSimilarity,
    cosine_spearman_score,
    cosine_spearman_scorer,
)

__all__ = [
    "PairedCosineSimilarity",
    "cosine_spearman_score",
    "cosine_spearman_scorer",
]
