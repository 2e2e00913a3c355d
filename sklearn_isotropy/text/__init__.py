"""From texts to pooled transformer embeddings, or static token means.

:class:`BertPoolingVectorizer` (``_vectorizer.py``) and
:class:`StaticEmbeddingVectorizer` (``_static.py``) are the estimators, and
``_base.py`` holds what they share. Beside the static one: its table
(``_static_table.py``, cached by ``_static_cache.py``), its token weighting
(``_static_weighting.py``), its weighted means (``_static_means.py``) and
the refinement of its table (``_static_refine.py``). Beside the contextual
one: model loading (``_loading.py``), hidden-state taps (``_taps.py``), the
pooling presets (``_pooling.py``, :data:`POOLING_PRESETS`,
:func:`register_pooling`), the per-sentence embedding cache (``_cache.py``),
the backends that run the encoder and the spec of what it computes
(``_encoders.py``: torch, or onnxruntime), the encoder exported to ONNX
(``_onnx.py``) and its disk cache (``_onnx_cache.py``), and the embedding of
dask collections (``_dask.py``). torch and transformers are imported only
when a model is loaded. :data:`ONNX_OUTPUT_NAME` and
:data:`ONNX_SESSION_OPTIONS` are the output of the exported encoder graphs
and the keyword arguments of ``onnxruntime.InferenceSession`` that run them
as the vectorizer does.
"""

from __future__ import annotations

from ._dask import embed_partitions
from ._onnx import OUTPUT_NAME as ONNX_OUTPUT_NAME
from ._onnx import SESSION_OPTIONS as ONNX_SESSION_OPTIONS
from ._pooling import POOLING_PRESETS, PoolingPreset, register_pooling
from ._static import StaticEmbeddingVectorizer
from ._vectorizer import BertPoolingVectorizer

__all__ = [
    "ONNX_OUTPUT_NAME",
    "ONNX_SESSION_OPTIONS",
    "POOLING_PRESETS",
    "BertPoolingVectorizer",
    "PoolingPreset",
    "StaticEmbeddingVectorizer",
    "embed_partitions",
    "register_pooling",
]
