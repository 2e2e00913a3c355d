"""Make sentence embeddings isotropic, the scikit-learn way.

sklearn-isotropy provides scikit-learn transformers that post-process
sentence embeddings so that cosine similarity becomes meaningful again:
BERT-whitening (:class:`WhiteningTransformer`), nulling the top principal
directions (:class:`NATSVTransformer`) and per-dimension standardisation
(:class:`StandardNormalizer`).
"""

from __future__ import annotations

from ._moments import MomentAccumulator
from ._natsv import NATSVTransformer
from ._standard import StandardNormalizer
from ._whitening import WhiteningTransformer
from .metrics import (
    PairedCosineSimilarity,
    cosine_spearman_score,
    cosine_spearman_scorer,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "MomentAccumulator",
    "NATSVTransformer",
    "PairedCosineSimilarity",
    "StandardNormalizer",
    "WhiteningTransformer",
    "cosine_spearman_score",
    "cosine_spearman_scorer",
]
