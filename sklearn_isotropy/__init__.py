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

from importlib import metadata as _metadata

from . import _compat
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

_compat.install()  # pickles of 0.1.0.dev0 name the modules of the flat layout

try:  # the version is written once, in pyproject.toml
    __version__ = _metadata.version("sklearn-isotropy")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

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
