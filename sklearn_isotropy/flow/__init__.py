"""BERT-flow: a Glow normalizing flow on embeddings.

``_layers.py`` holds the torch bijectors (one contract: ``forward(x) -> (z,
log_det)`` and ``inverse(z) -> (x, log_det)``) and the module a fitted flow
is exported through, and imports torch;
``_training.py`` the presets and training (early stopping, progress lines);
``_input.py`` the fixed float64 map in front of the Glow (standardisation,
initial whitening);
``_runtime.py`` the fitted flow at work (chunked inference, the export
module, the pickled state);
``_glow.py`` the scikit-learn estimator, which imports torch only when it
is fitted or used.
"""

from __future__ import annotations

from ._glow import GlowFlowTransformer
from ._training import FLOW_PRESETS

__all__ = ["FLOW_PRESETS", "GlowFlowTransformer"]
