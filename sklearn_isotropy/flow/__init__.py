"""BERT-flow: a Glow normalizing flow on embeddings.

``_layers.py`` holds the torch bijectors (one contract: ``forward(x) -> (z,
log_det)`` and ``inverse(z) -> (x, log_det)``) and the module a fitted flow
is exported through, and imports torch;
``_training.py`` the training loop (early stopping, progress lines);
``_input.py`` the fixed float64 map in front of the Glow (standardisation,
initial whitening);
``_glow.py`` the scikit-learn estimator and its presets, which import torch
only when the estimator is fitted or used.
"""

from __future__ import annotations

from ._glow import FLOW_PRESETS, GlowFlowTransformer

__all__ = ["FLOW_PRESETS", "GlowFlowTransformer"]
