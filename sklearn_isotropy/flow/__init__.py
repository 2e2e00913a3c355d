"""BERT-flow: a Glow normalizing flow on embeddings.

``_layers.py`` holds the torch bijectors (one contract: ``forward(x) -> (z,
log_det)`` and ``inverse(z) -> (x, log_det)``) and imports torch;
``_glow.py`` holds the scikit-learn estimator, which imports torch only when
it is fitted or used.
"""

from __future__ import annotations

from ._glow import GlowFlowTransformer

__all__ = ["GlowFlowTransformer"]
