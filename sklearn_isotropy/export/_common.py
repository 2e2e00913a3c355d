"""What the exporters share: the dispatch by first step, and the parity check.

Three public entry points (:func:`~sklearn_isotropy.export.to_onnx`,
:func:`~sklearn_isotropy.export.save_onnx_pipeline`,
:func:`~sklearn_isotropy.export.to_sentence_transformers`) each serve a
static pipeline (:mod:`._static`), a text pipeline (:mod:`._pipeline`,
:mod:`._sentence_transformers`) and, for ``to_onnx``, a chain of
post-processors (:mod:`._onnx_chain`). One table, :data:`EXPORTERS`, says
which exporter an entry point calls for what a pipeline starts with, as
sentence-transformers' ``backend/load.py`` picks a loader per backend;
each exporter registers itself there with :func:`exports`.

Every export is run once on check inputs and compared with the pipeline's
``transform`` (:func:`check_parity`), row by row (direction and relative
error), with one tolerance and one message.
"""

from __future__ import annotations

import json

import numpy as np

from .._utils import normalize_rows
from ..text import StaticEmbeddingVectorizer
from ._affine import split_steps

__all__ = [
    "EXPORTERS",
    "SETTINGS_FILE",
    "check_parity",
    "exporter",
    "exports",
    "starts_with",
    "write_settings",
]

#: The file of a saved graph's settings, for programs (beside its README).
SETTINGS_FILE = "sklearn_isotropy_onnx.json"

#: ``first step's class -> {entry point: exporter}``; the key None holds the
#: exporters of anything else (a chain of post-processors, or what the
#: exporter then refuses with an error that says what it takes).
EXPORTERS: dict = {}


def starts_with(obj, kind=StaticEmbeddingVectorizer):
    """True for a ``kind`` estimator, or a Pipeline or list starting with one."""
    if isinstance(obj, kind):
        return True
    try:
        steps = split_steps(obj, what="export")
    except (TypeError, ValueError):  # not a chain of estimators: the caller says
        return False
    return isinstance(steps[0][1], kind)


def exports(entry, *first_steps):
    """Register the decorated function as ``entry``'s exporter of ``first_steps``.

    ``entry`` is the public entry point's name; a first step of None
    registers the exporter of anything no other entry claims.
    """

    def decorator(func):
        for first_step in first_steps:
            EXPORTERS.setdefault(first_step, {})[entry] = func
        return func

    return decorator


def exporter(obj, entry):
    """Return the exporter ``entry`` calls for ``obj``, by its first step."""
    for first_step, by_entry in EXPORTERS.items():
        if (
            first_step is not None
            and entry in by_entry
            and starts_with(obj, first_step)
        ):
            return by_entry[entry]
    return EXPORTERS[None][entry]


def check_parity(
    got, expected, *, what, graph, n_checked, owner, rtol=1e-4, lengths=True
):
    """Raise unless an export's output ``got`` matches ``transform``'s ``expected``.

    Row by row, as users read the rows: each row's error is measured against
    its own norm, ``||got_i - expected_i|| <= rtol * ||expected_i||``, so
    that the cosine similarities a user computes are the pipeline's, even
    when other rows are far larger. Rows smaller than the median row are
    measured against the median instead: near the mean of the training rows
    an output is small, and its float32 round-off is not (rows of zeros
    only against 1). Apart from that error, the cosine of every row with its
    reference must be at least ``1 - rtol`` (a row within ``rtol`` of its
    norm is), except for rows under 1% of the median row, whose direction
    is round-off's. The sizes that decide both exemptions are those of
    ``expected``'s rows as ``transform`` returns them, also where only
    directions are compared. A wrong shape is as wrong as a wrong number.

    Export and ``transform`` compute in another order, and differ by
    round-off only, unless the pipeline amplifies round-off; the message
    names that cause as well as a bug.

    Parameters
    ----------
    got, expected : ndarray of shape (n_rows, n_features)
        The export's output and the pipeline's, on the same check inputs.
    what : str
        The public entry point, first in the message.
    graph : str
        What differs ("the exported graph", ...).
    n_checked : str
        The check inputs, in words ("4 texts").
    owner : str
        Whose parameters a report should give ("pipeline", "estimator").
    rtol : float, default=1e-4
        The relative tolerance.
    lengths : bool, default=True
        False for an export whose rows are ``transform``'s times a positive
        number per row (model2vec, sentence-transformers'
        ``StaticEmbedding``): the rows are compared at unit length, their
        directions alone. A row's error in direction then counts in
        proportion to its length against the median row's (as an error in
        length does, measured against the median), and rows under 1% of the
        median have no direction to check. Those lengths are taken before
        normalising: at unit length every row would count in full, and a
        row that ``transform`` returns at 1e-7 of the others (the mean of the
        training rows, after a whitening) would refuse a correct export.
    """
    got, expected = np.asarray(got), np.asarray(expected)
    if np.shape(got) != np.shape(expected) or expected.ndim != 2:
        raise RuntimeError(
            f"{what}: {graph} returns an array of shape {np.shape(got)} where "
            f"transform returns {np.shape(expected)} on {n_checked}; the export "
            f"is wrong, please report it with the {owner}'s parameters."
        )
    # NaN or infinity in got makes its error NaN, which fails the test below
    with np.errstate(invalid="ignore", over="ignore"):
        got_rows, _ = normalize_rows(got)
        expected_rows, _ = normalize_rows(expected)
        cosine = np.sum(got_rows * expected_rows, axis=1)
        # the rows' sizes as transform returns them, before any normalising
        norms = _row_norms(expected)
        scale = np.maximum(norms, np.median(norms))
        scale[scale == 0] = 1.0
        if lengths:
            error = _row_norms(got.astype(np.float64) - expected) / scale
        else:  # the error in direction, times the row's size against scale
            error = _row_norms(got_rows - expected_rows) * (norms / scale)
    # the rows whose direction float32 round-off leaves meaningful
    directed = norms >= 1e-2 * np.median(norms)
    cosine = np.where(directed & (norms > 0), cosine, 1.0)
    if np.all(error <= rtol) and np.all(cosine >= 1.0 - rtol):
        return
    worst = int(np.argmax(np.where(np.isfinite(error), error, np.inf)))
    raise RuntimeError(
        f"{what}: {graph} differs from transform on {n_checked}: by up to "
        f"{error[worst]:.3g} of a row's norm (row {worst}, tolerance {rtol:.3g}), "
        f"and the lowest cosine between a row and transform's is "
        f"{np.nanmin(cosine):.4f}. Export and transform round differently, "
        "which only shows where the pipeline amplifies round-off, as a "
        "WhiteningTransformer fitted on float64 copies of float32 embeddings "
        "can (with whitening_ entries far above the others): refit it on "
        "the embeddings as they are, or with shrinkage > 0. Otherwise the "
        f"export is wrong: please report it with the {owner}'s parameters."
    )


def _row_norms(X):
    """L2 norm of each row of ``X``, in float64, without overflow."""
    X = np.asarray(X, dtype=np.float64)
    if not X.shape[1]:
        return np.zeros(X.shape[0])
    top = np.max(np.abs(X), axis=1)
    safe = np.where(top > 0, top, 1.0)
    return top * np.linalg.norm(X / safe[:, None], axis=1)


def write_settings(directory, settings, readme):
    """Write a saved graph's settings (:data:`SETTINGS_FILE`) and README."""
    (directory / SETTINGS_FILE).write_text(
        json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    (directory / "README.md").write_text(readme, encoding="utf-8")
