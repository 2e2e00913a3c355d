"""The precisions of a retrieval index: float32, int8 and binary codes.

A precision turns unit-norm float vectors into index codes
(:data:`QUANTIZATIONS`, :func:`register_quantization`); the retrieval
task's ``--quantize`` choices and its reports read the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .._utils import import_optional
from ._methods import check_new_name

__all__ = ["QUANTIZATIONS", "Quantization", "register_quantization"]


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
