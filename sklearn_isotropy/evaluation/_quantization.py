"""The precisions of a retrieval index: float32, int8 and binary codes.

A precision turns unit-norm float vectors into index codes
(:data:`QUANTIZATIONS`, :func:`register_quantization`); the retrieval
task's ``--quantize`` choices and its reports read the registry, and its
settings check the names before any work (:func:`check_quantizations`).
What an index of each precision costs is measured here too: its memory
(``bytes_per_vector``) and its search time (:func:`time_searches`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .._utils import import_optional
from ..exceptions import EvaluationError
from ._methods import check_new_name

__all__ = [
    "QUANTIZATIONS",
    "Quantization",
    "check_quantizations",
    "register_quantization",
    "time_searches",
]


@dataclass(frozen=True)
class Quantization:
    """One output precision of the index.

    Parameters
    ----------
    name, help : str
        The ``--quantize`` name, and one line for ``--help`` and the reports.
    encode : callable
        ``encode(queries, corpus, calibration)`` returns the query and corpus
        codes of unit-norm float rows (``calibration``: the unit-norm output
        of the method on the fitting sentences).
    metric : {"ip", "hamming"}
        How codes are compared.
    bytes_per_vector : callable
        ``bytes_per_vector(d)`` is the index size of one vector of width ``d``.
    requires : tuple of str, default=()
        The modules ``encode`` imports, checked before a run starts.
    """

    name: str
    help: str
    encode: Callable
    metric: str
    bytes_per_vector: Callable
    requires: tuple = ()

    def missing(self) -> list[str]:
        """Return the required modules that cannot be imported here.

        Returns
        -------
        modules : list of str
            Names from ``requires``.
        """
        from importlib.util import find_spec

        return [m for m in self.requires if find_spec(m) is None]


#: Output precisions of the index, by name.
QUANTIZATIONS: dict[str, Quantization] = {}


def register_quantization(
    name: str,
    *,
    help: str,
    metric: str,
    bytes_per_vector: Callable[[int], int],
    requires: Sequence[str] = (),
) -> Callable:
    """Return a decorator that adds ``encode`` to :data:`QUANTIZATIONS`.

    Parameters
    ----------
    name : str
        The name, not taken yet.
    help, metric, bytes_per_vector, requires : see :class:`Quantization`
        The other fields of the precision.

    Returns
    -------
    decorator : callable
        Registers ``encode(queries, corpus, calibration)`` and returns it.
    """
    check_new_name(name, QUANTIZATIONS, "quantization")
    if metric not in ("ip", "hamming"):
        raise ValueError(f"metric must be 'ip' or 'hamming'; got {metric!r}")

    def decorator(encode):
        QUANTIZATIONS[name] = Quantization(
            name, help, encode, metric, bytes_per_vector, tuple(requires)
        )
        return encode

    return decorator


def check_quantizations(names):
    """Raise unless every precision of ``names`` is registered and can run here."""
    unknown = [q for q in names if q not in QUANTIZATIONS]
    if unknown:
        raise ValueError(
            f"unknown quantization(s) {unknown}; choose from {', '.join(QUANTIZATIONS)}"
        )
    missing = {q: QUANTIZATIONS[q].missing() for q in names}
    missing = {q: modules for q, modules in missing.items() if modules}
    if missing:
        needs = sorted({m for modules in missing.values() for m in modules})
        raise EvaluationError(
            f"the precision(s) {', '.join(missing)} need {', '.join(needs)}, which "
            'is not installed: pip install "sklearn-isotropy[retrieval]", or keep '
            "to float32 (--quantize float32)"
        )


def _quantize(precision, *arrays, **kwargs):
    st = import_optional(
        "sentence_transformers",
        purpose="int8 and binary quantisation (quantize_embeddings)",
        extra="retrieval",
    )
    return tuple(
        st.quantize_embeddings(a.astype(np.float32), precision=precision, **kwargs)
        for a in arrays
    )


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
    return _quantize("int8", queries, corpus, calibration_embeddings=cal)


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
    return _quantize("ubinary", queries - centre, corpus - centre)


@register_quantization(
    "binary-uncentred",
    requires=("sentence_transformers",),
    help="sign bits of the unit vectors without centring, Hamming distance",
    metric="hamming",
    bytes_per_vector=lambda d: -(-d // 8),
)
def _encode_binary_uncentred(queries, corpus, calibration):
    return _quantize("ubinary", queries, corpus)


def time_searches(index, queries, n_timed, seed, k):
    """Time one-query searches (median ms, one thread) and batches (best of 3).

    What an index of one precision costs in time, beside its
    ``bytes_per_vector``: the median of ``n_timed`` one-query top-``k``
    searches of randomly picked queries on one thread, and the best of three
    searches of every query, per query. ``(None, None)`` when ``n_timed`` is 0.
    """
    if n_timed <= 0:
        return None, None
    rng = np.random.RandomState(seed)
    picked = rng.permutation(queries.shape[0])[: min(n_timed, queries.shape[0])]
    times = []
    with index.one_thread():  # one query, one thread: a serving process's view
        index.search(queries[picked[:1]], k)  # warm-up
        for i in picked:
            start = time.perf_counter()
            index.search(queries[i : i + 1], k)
            times.append(time.perf_counter() - start)
    batch = np.inf
    for _ in range(3):  # the best of three: one slow moment is not the search
        start = time.perf_counter()
        index.search(queries, k)
        batch = min(batch, time.perf_counter() - start)
    return 1e3 * float(np.median(times)), 1e3 * batch / queries.shape[0]
