"""From texts to pooled transformer embeddings.

:class:`BertPoolingVectorizer` is the estimator. Beside it: model loading
(``_loading.py``), the hidden-state taps that read intermediate layers
(``_taps.py``), the pooling presets (``_pooling.py``, the registry
:data:`POOLING_PRESETS`, extended with :func:`register_pooling`), the
per-sentence embedding cache (``_cache.py``), the backends that run the
encoder (``_encoders.py``: torch, or onnxruntime for ``backend="onnx"``),
the encoder exported to ONNX (``_onnx.py``) and its disk cache
(``_onnx_cache.py``), and the partition-wise embedding of dask collections
(``_dask.py``). torch and transformers are imported only when a model is
loaded.
"""

from __future__ import annotations

from ._dask import embed_partitions
from ._onnx import OUTPUT_NAME as ONNX_OUTPUT_NAME
from ._onnx import SESSION_OPTIONS as ONNX_SESSION_OPTIONS
from ._pooling import POOLING_PRESETS, PoolingPreset, register_pooling
from ._vectorizer import BertPoolingVectorizer

#: The output of the exported encoder graphs, and the keyword arguments of
#: ``onnxruntime.InferenceSession`` that run them as the vectorizer does.
__all__ = [
    "ONNX_OUTPUT_NAME",
    "ONNX_SESSION_OPTIONS",
    "POOLING_PRESETS",
    "BertPoolingVectorizer",
    "PoolingPreset",
    "embed_partitions",
    "register_pooling",
]
