"""Make sentence embeddings isotropic, the scikit-learn way.

sklearn-isotropy provides scikit-learn transformers that post-process
sentence embeddings so that cosine similarity becomes meaningful again:
BERT-whitening (:class:`WhiteningTransformer`), nulling the top principal
directions (:class:`NATSVTransformer`), per-dimension standardisation
(:class:`StandardNormalizer`) and BERT-flow (:class:`GlowFlowTransformer`).
"""

from __future__ import annotations

__version__ = "0.1.0.dev0"

from ._glow import GlowFlowTransformer

__all__ = ["GlowFlowTransformer"]
