"""Make sentence embeddings isotropic, the scikit-learn way.

sklearn-isotropy provides scikit-learn transformers that post-process
sentence embeddings so that cosine similarity becomes meaningful again:
BERT-whitening (:class:`WhiteningTransformer`), nulling the top principal
directions (:class:`NATSVTransformer`) and per-dimension standardisation
(:class:`StandardNormalizer`).
"""

from __future__ import annotations

from ._vectorizer import BertPoolingVectorizer

__version__ = "0.1.0.dev0"

__all__ = ["BertPoolingVectorizer"]
