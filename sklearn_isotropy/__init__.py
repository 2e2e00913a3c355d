"""Make sentence embeddings isotropic, the scikit-learn way.

sklearn-isotropy provides scikit-learn estimators that turn text into pooled
transformer embeddings (:class:`BertPoolingVectorizer`) and post-process
sentence embeddings so that cosine similarity becomes meaningful again:
BERT-whitening (:class:`WhiteningTransformer`), the BERT-flow normalizing flow
(:class:`GlowFlowTransformer`), nulling the top principal directions
(:class:`NATSVTransformer`) and per-dimension standardisation
(:class:`StandardNormalizer`). torch and transformers are imported only when
the estimators that need them are used.
"""

from __future__ import annotations

from ._utils._conventions import VERSION as __version__  # noqa: F401 (metadata)
from .flow import GlowFlowTransformer
from .linear import (
    MomentAccumulator,
    NATSVTransformer,
    StandardNormalizer,
    WhiteningTransformer,
)
from .metrics import (
    PairedCosineSimilarity,
    cosine_spearman_score,
    cosine_spearman_scorer,
    make_retrieval_scorer,
)
from .text import BertPoolingVectorizer

__all__ = [
    "BertPoolingVectorizer",
    "GlowFlowTransformer",
    "MomentAccumulator",
    "NATSVTransformer",
    "PairedCosineSimilarity",
    "StandardNormalizer",
    "WhiteningTransformer",
    "cosine_spearman_score",
    "cosine_spearman_scorer",
    "make_retrieval_scorer",
]
