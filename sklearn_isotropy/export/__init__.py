"""Carry a fitted pipeline to where embeddings are served.

- :func:`to_sentence_transformers`: a fitted text pipeline (vectorizer and
  linear post-processors) as a sentence-transformers model directory;
- :func:`to_onnx`: the linear post-processors, chains of them, and the
  normalizing flow as ONNX graphs, and a whole text pipeline (vectorizer
  and post-processors) as one graph from token ids, which
  :func:`save_onnx_pipeline` writes with its tokenizer for serving without
  torch; :func:`register_skl2onnx_converters`
  lets ``skl2onnx.to_onnx`` convert them inside any scikit-learn pipeline;
- :func:`to_faiss`: the linear post-processors as a ``faiss.LinearTransform``
  for an ``IndexPreTransform``;
- :func:`to_model2vec`: a fitted static pipeline (a
  ``StaticEmbeddingVectorizer`` and linear post-processors) as a model2vec
  model folder, its rows in float32, float16 or int8.

A chain of linear post-processors is one affine map ``y = x @ W + b``,
folded in float64 from the estimators' public fitted attributes. The runtimes
(sentence-transformers, onnx, onnxruntime, skl2onnx, faiss, model2vec) are
imported when an exporter is called; ``pip install "sklearn-isotropy[export]"``
installs them.
"""

from __future__ import annotations

from ._faiss import to_faiss
from ._model2vec import to_model2vec
from ._onnx import register_skl2onnx_converters, to_onnx
from ._pipeline import save_onnx_pipeline
from ._sentence_transformers import to_sentence_transformers

__all__ = [
    "register_skl2onnx_converters",
    "save_onnx_pipeline",
    "to_faiss",
    "to_model2vec",
    "to_onnx",
    "to_sentence_transformers",
]
