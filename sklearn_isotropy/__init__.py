"""Make sentence embeddings isotropic, the scikit-learn way.

sklearn-isotropy provides scikit-learn estimators that turn text into pooled
transformer embeddings (:class:`BertPoolingVectorizer`) and post-process
sentence embeddings so that cosine similarity becomes meaningful again:
BERT-whitening (:class:`WhiteningTransformer`), the BERT-flow normalizing flow
(:class:`GlowFlowTransformer`), nulling the top principal directions
(:class:`NATSVTransformer`) and per-dimension standardisation
(:class:`StandardNormalizer`). torch and transformers are imported only when
the estimators that need them are used.

The names below are imported from their subpackages on first use (PEP 562):
``import sklearn_isotropy`` loads neither scikit-learn nor scipy, so the
command line (``sklearn_isotropy.cli``) handles a Ctrl-C from its first
moment, and ``from sklearn_isotropy import WhiteningTransformer`` works as
any import does. The public submodules are attributes the same way: after
a bare ``import sklearn_isotropy``, the first use of
``sklearn_isotropy.exceptions`` imports that module, whatever ran before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from .flow import GlowFlowTransformer
    from .linear import (
        MomentAccumulator,
        NATSVTransformer,
        StandardNormalizer,
        WhiteningTransformer,
    )
    from .metrics import (
        PairedCosineSimilarity,
        cosine_spearman_score,
        cosine_spearman_scorer,
        make_retrieval_scorer,
    )
    from .text import BertPoolingVectorizer, StaticEmbeddingVectorizer

__all__ = [
    "BertPoolingVectorizer",
    "GlowFlowTransformer",
    "MomentAccumulator",
    "NATSVTransformer",
    "PairedCosineSimilarity",
    "StandardNormalizer",
    "StaticEmbeddingVectorizer",
    "WhiteningTransformer",
    "cosine_spearman_score",
    "cosine_spearman_scorer",
    "make_retrieval_scorer",
]

#: The subpackage that defines each name of ``__all__``.
_HOMES = {
    "BertPoolingVectorizer": "text",
    "GlowFlowTransformer": "flow",
    "MomentAccumulator": "linear",
    "NATSVTransformer": "linear",
    "PairedCosineSimilarity": "metrics",
    "StandardNormalizer": "linear",
    "StaticEmbeddingVectorizer": "text",
    "WhiteningTransformer": "linear",
    "cosine_spearman_score": "metrics",
    "cosine_spearman_scorer": "metrics",
    "make_retrieval_scorer": "metrics",
}

#: The public submodules, each imported by the first access to it as an
#: attribute: ``sklearn_isotropy.exceptions.IsotropyWarning`` works after a
#: bare ``import sklearn_isotropy``, whatever was imported before.
_SUBMODULES = (
    "cli",
    "dask",
    "datasets",
    "diagnostics",
    "evaluation",
    "exceptions",
    "export",
    "flow",
    "linear",
    "metrics",
    "text",
)


def __getattr__(name):
    if name in _HOMES:
        value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    elif name == "__version__":
        value = importlib.import_module("._utils._conventions", __name__).VERSION
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # imported once; later lookups do not come here
    return value


def __dir__():
    return sorted({*globals(), *__all__, *_SUBMODULES, "__version__"})
