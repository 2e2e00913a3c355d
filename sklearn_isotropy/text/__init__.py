"""From texts to pooled transformer embeddings, or static token means.

:class:`BertPoolingVectorizer` (``_vectorizer.py``) and
:class:`StaticEmbeddingVectorizer` (the subpackage ``static/``, which holds
its token table, the table's cache, its token weighting, its weighted means
and the refinement of its table) are the estimators, and ``_base.py`` holds
what they share. Beside the contextual one: model loading (``_loading.py``),
hidden-state taps (``_taps.py``), the pooling presets (``_pooling.py``,
:data:`POOLING_PRESETS`, :func:`register_pooling`), the per-sentence
embedding cache (``_cache.py``), the backends that run the encoder and the
spec of what it computes (``_encoders.py``: torch, or onnxruntime), the
encoder exported to ONNX (``_onnx_graph.py``) and its disk cache
(``_onnx_cache.py``), and the embedding of dask collections (``_dask.py``).
:func:`refine_table` fits a token table to sentence embeddings, as the
static vectorizer's refinement does. torch and transformers are imported
only when a model is loaded. :data:`ONNX_OUTPUT_NAME` and
:data:`ONNX_SESSION_OPTIONS` are the output of the exported encoder graphs
and the keyword arguments of ``onnxruntime.InferenceSession`` that run them
as the vectorizer does.
"""

from __future__ import annotations

from ._dask import embed_partitions
from ._onnx_graph import OUTPUT_NAME as ONNX_OUTPUT_NAME
from ._onnx_graph import SESSION_OPTIONS as ONNX_SESSION_OPTIONS
from ._pooling import POOLING_PRESETS, PoolingPreset, register_pooling
from ._vectorizer import BertPoolingVectorizer
from .static import StaticEmbeddingVectorizer, refine_table

__all__ = [
    "ONNX_OUTPUT_NAME",
    "ONNX_SESSION_OPTIONS",
    "POOLING_PRESETS",
    "BertPoolingVectorizer",
    "PoolingPreset",
    "StaticEmbeddingVectorizer",
    "embed_partitions",
    "refine_table",
    "register_pooling",
]
