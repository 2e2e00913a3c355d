"""The registries of the retrieval evaluation: methods, precisions, settings.

A retrieval method turns a dimension ``k`` into an unfitted transformer
(:data:`RETRIEVAL_METHODS`, :func:`register_retrieval_method`); a
precision turns unit-norm float vectors into index codes
(:data:`QUANTIZATIONS`, :func:`register_quantization`). The command line's
``--retrieval-methods`` and ``--quantize`` choices, the report labels and
:func:`~sklearn_isotropy.evaluation.run_compression_study` all read them,
so one registration adds a method or a precision everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._utils import import_optional
from ..metrics import DEFAULT_RETRIEVAL_METRICS
from ._methods import check_new_name

__all__ = [
    "DEFAULT_DIMENSIONS",
    "DEFAULT_QUANTIZATIONS",
    "DEFAULT_RETRIEVAL_METHODS",
    "QUANTIZATIONS",
    "RETRIEVAL_METHODS",
    "RETRIEVAL_PROTOCOLS",
    "TASKS",
    "Quantization",
    "RetrievalMethod",
    "RetrievalSettings",
    "register_quantization",
    "register_retrieval_method",
]

#: Dimensions ``k`` of the compression study (those below the embedding width).
DEFAULT_DIMENSIONS = (32, 64, 128, 256)
DEFAULT_RETRIEVAL_METHODS = ("raw", "pca", "whitening", "natsv", "truncate")
DEFAULT_QUANTIZATIONS = ("float32", "int8", "binary")

#: The evaluations ``sklearn-isotropy evaluate --task`` runs, with one line each.
TASKS = {
    "sts": "Spearman x100 of pair cosines against gold scores (the STS test split)",
    "retrieval": (
        "search quality (MRR@10, recall@1/@10, nDCG@10), index memory and latency "
        "per method, dimension k and precision"
    ),
}

#: What each fitting protocol of the retrieval evaluation means, for reports.
RETRIEVAL_PROTOCOLS = {
    "train": (
        "post-processors fitted on the sentences of the train split only; the "
        "queries and their relevant sentences come from held-out splits"
    ),
    "corpus": (
        "post-processors fitted on every corpus document (the collection being "
        "indexed, queries' own sentences included when they are in it)"
    ),
}


# --------------------------------------------------------------- settings
@dataclass
class RetrievalSettings:
    """Options of the retrieval evaluation (the command line's flags).

    Parameters
    ----------
    dimensions : tuple of int, default=(32, 64, 128, 256)
        Output dimensions ``k`` of the methods that take one; those not
        below the embedding width are skipped.
    power : float, default=1.0
        Power of ``whitening`` (1 whitens fully, 0 is PCA).
    natsv_components : int, default=5
        Top directions removed by ``natsv`` (at most ``d - 1``).
    metrics : tuple of str, default=("mrr@10", "recall@1", "recall@10", \
"ndcg@10")
        Scores to report (see :func:`~sklearn_isotropy.metrics.retrieval_scores`).
    backend : {"auto", "numpy", "faiss"}, default="auto"
        Exact search engine; ``"auto"`` is faiss when installed.
    latency_queries : int, default=100
        Queries timed one at a time for the latency figure (0: no timing).
    seed : int, default=0
        Seeds the choice of timed queries.
    per_query : bool, default=False
        Also keep every query's scores in each record (``"per_query"``: a
        dict of metric to list, in query order), for paired comparisons.
    """

    dimensions: tuple = DEFAULT_DIMENSIONS
    power: float = 1.0
    natsv_components: int = 5
    metrics: tuple = DEFAULT_RETRIEVAL_METRICS
    backend: str = "auto"
    latency_queries: int = 100
    seed: int = 0
    per_query: bool = False


# ---------------------------------------------------------------- methods
@dataclass(frozen=True)
class RetrievalMethod:
    """One method of the compression study.

    Parameters
    ----------
    name : str
        The ``--retrieval-methods`` name.
    label : str
        Table label; ``{k}`` is replaced by the output dimension and
        ``{settings.<field>}`` by a field of :class:`RetrievalSettings`.
    help : str
        One line for ``--help``.
    build : callable
        ``build(k, n_features, settings)`` returns the unfitted transformer
        (or ``"passthrough"``) for output dimension ``k`` (None: the full
        width, or the method's own width if it does not take ``k``).
    uses_k : bool
        Whether the method is run at each dimension of the study.
    full_width : bool
        Whether a method that uses ``k`` also runs at the full width.
    """

    name: str
    label: str
    help: str
    build: Callable
    uses_k: bool = False
    full_width: bool = True

    def dimensions(self, n_features, settings):
        """The ``k`` values to run: None is the full width."""
        if not self.uses_k:
            return [None]
        ks = sorted({int(k) for k in settings.dimensions if 0 < k < n_features})
        return ks + ([None] if self.full_width else [])


#: The methods of the compression study, by name, in report order.
RETRIEVAL_METHODS: dict[str, RetrievalMethod] = {}


def register_retrieval_method(
    name, *, label=None, help="", uses_k=False, full_width=True
):
    """Decorator that adds ``build`` to :data:`RETRIEVAL_METHODS` under ``name``.

    Parameters
    ----------
    name : str
        The method's name; must not be taken.
    label : str, default=None
        Table label (``{k}`` is the output dimension); the name when None.
    help : str, default=""
        One line for ``--help``.
    uses_k : bool, default=False
        Run the method at every dimension ``k`` of the study.
    full_width : bool, default=True
        With `uses_k`, also run it at the full width.

    Returns
    -------
    decorator : callable
        Registers and returns ``build(k, n_features, settings)``.

    Examples
    --------
    >>> from sklearn.random_projection import GaussianRandomProjection
    >>> from sklearn_isotropy.evaluation import (
    ...     RETRIEVAL_METHODS, register_retrieval_method)
    >>> @register_retrieval_method("projection", label="random-{k}", uses_k=True,
    ...                            full_width=False, help="random projection")
    ... def build(k, n_features, settings):
    ...     return GaussianRandomProjection(k, random_state=settings.seed)
    >>> "projection" in RETRIEVAL_METHODS
    True
    >>> del RETRIEVAL_METHODS["projection"]  # keep the registry as it was
    """
    check_new_name(name, RETRIEVAL_METHODS, "retrieval method")

    def decorator(build):
        RETRIEVAL_METHODS[name] = RetrievalMethod(
            name, label or name, help, build, uses_k, full_width
        )
        return build

    return decorator


@register_retrieval_method("raw", label="raw", help="the embeddings as they are")
def _build_raw(k, n_features, settings):
    return "passthrough"


@register_retrieval_method(
    "pca",
    label="PCA-{k}",
    uses_k=True,
    help="centre and keep the top k principal directions (whitening, power 0)",
)
def _build_pca(k, n_features, settings):
    from ..linear import WhiteningTransformer

    return WhiteningTransformer(n_components=k, power=0.0)


@register_retrieval_method(
    "whitening",
    label="whitening-{k}",
    uses_k=True,
    help="BERT-whitening keeping k dimensions, at --power",
)
def _build_whitening(k, n_features, settings):
    from ..linear import WhiteningTransformer

    return WhiteningTransformer(n_components=k, power=settings.power)


@register_retrieval_method(
    "natsv",
    label="NATSV-{settings.natsv_components}",
    help="null the top --natsv-components principal directions (no compression)",
)
def _build_natsv(k, n_features, settings):
    from ..linear import NATSVTransformer

    return NATSVTransformer(n_components=min(settings.natsv_components, n_features - 1))


def _first_columns(X, k):
    return np.asarray(X)[:, :k]


@register_retrieval_method(
    "truncate",
    label="truncate-{k}",
    uses_k=True,
    full_width=False,
    help="keep the first k coordinates of the raw embeddings",
)
def _build_truncate(k, n_features, settings):
    from sklearn.preprocessing import FunctionTransformer

    return FunctionTransformer(_first_columns, kw_args={"k": k})


# ---------------------------------------------------------- quantizations
@dataclass(frozen=True)
class Quantization:
    """One output precision of the index.

    Parameters
    ----------
    name : str
        The ``--quantize`` name.
    help : str
        One line for ``--help`` and the reports.
    encode : callable
        ``encode(queries, corpus, calibration)`` returns the query and corpus
        codes from unit-norm float rows; `calibration` is the unit-norm
        output of the method on the fitting sentences.
    metric : {"ip", "hamming"}
        How codes are compared.
    bytes_per_vector : callable
        ``bytes_per_vector(d)``: the index size of one vector of width ``d``.
    requires : tuple of str, default=()
        Modules ``encode`` imports, checked before a run starts.
    """

    name: str
    help: str
    encode: Callable
    metric: str
    bytes_per_vector: Callable
    requires: tuple = ()

    def missing(self):
        """The required modules that cannot be imported here."""
        from importlib.util import find_spec

        return [m for m in self.requires if find_spec(m) is None]


#: Output precisions of the index, by name.
QUANTIZATIONS: dict[str, Quantization] = {}


def register_quantization(name, *, help, metric, bytes_per_vector, requires=()):
    """Decorator that adds ``encode`` to :data:`QUANTIZATIONS` under ``name``.

    Parameters
    ----------
    name : str
        The precision's name; must not be taken.
    help : str
        One line describing it.
    metric : {"ip", "hamming"}
        Inner product of the codes, or Hamming distance of packed bits.
    bytes_per_vector : callable
        ``bytes_per_vector(d) -> int``.
    requires : tuple of str, default=()
        Modules ``encode`` needs (checked before a run).

    Returns
    -------
    decorator : callable
        Registers and returns ``encode(queries, corpus, calibration)``.
    """
    if name in QUANTIZATIONS:
        raise ValueError(f"The quantization {name!r} is already registered.")
    if metric not in ("ip", "hamming"):
        raise ValueError(f"metric must be 'ip' or 'hamming'; got {metric!r}")

    def decorator(encode):
        QUANTIZATIONS[name] = Quantization(
            name, help, encode, metric, bytes_per_vector, tuple(requires)
        )
        return encode

    return decorator


def _quantize(embeddings, precision, **kwargs):
    st = import_optional(
        "sentence_transformers",
        purpose="int8 and binary quantisation (quantize_embeddings)",
        extra="retrieval",
    )
    return st.quantize_embeddings(embeddings, precision=precision, **kwargs)


@register_quantization(
    "float32",
    help="float32 unit vectors, inner product (= cosine)",
    metric="ip",
    bytes_per_vector=lambda d: 4 * d,
)
def _encode_float32(queries, corpus, calibration):
    return queries.astype(np.float32), corpus.astype(np.float32)


@register_quantization(
    "int8",
    requires=("sentence_transformers",),
    help="int8 codes of the unit vectors (sentence-transformers' quantize_embeddings, "
    "ranges calibrated on the fitting sentences), integer inner product (computed "
    "exactly in float32)",
    metric="ip",
    bytes_per_vector=lambda d: d,
)
def _encode_int8(queries, corpus, calibration):
    cal = calibration.astype(np.float32)
    return (
        _quantize(queries.astype(np.float32), "int8", calibration_embeddings=cal),
        _quantize(corpus.astype(np.float32), "int8", calibration_embeddings=cal),
    )


@register_quantization(
    "binary",
    requires=("sentence_transformers",),
    help="sign bits of the unit vectors centred on the fitting sentences' mean "
    "(quantize_embeddings 'ubinary'), Hamming distance",
    metric="hamming",
    bytes_per_vector=lambda d: -(-d // 8),
)
def _encode_binary(queries, corpus, calibration):
    centre = calibration.mean(axis=0)
    return (
        _quantize((queries - centre).astype(np.float32), "ubinary"),
        _quantize((corpus - centre).astype(np.float32), "ubinary"),
    )


@register_quantization(
    "binary-uncentred",
    requires=("sentence_transformers",),
    help="sign bits of the unit vectors without centring, Hamming distance",
    metric="hamming",
    bytes_per_vector=lambda d: -(-d // 8),
)
def _encode_binary_uncentred(queries, corpus, calibration):
    return (
        _quantize(queries.astype(np.float32), "ubinary"),
        _quantize(corpus.astype(np.float32), "ubinary"),
    )
