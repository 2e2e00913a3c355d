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
``transform`` (:func:`check_parity`), with one tolerance and one message.
"""

from __future__ import annotations

import json

import numpy as np

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


def check_parity(got, expected, *, what, graph, n_checked, owner, rtol=1e-4):
    """Raise unless an export's output ``got`` matches ``transform``'s ``expected``.

    The tolerance is ``rtol`` times the largest magnitude of ``expected``
    (at least 1): float32 round-off of the computation, whatever the scale
    of the embeddings. A wrong shape is as wrong as a wrong number.

    Parameters
    ----------
    got, expected : ndarray
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
    """
    tolerance = rtol * max(1.0, float(np.max(np.abs(expected))))
    error = np.inf
    if np.shape(got) == np.shape(expected):
        error = float(np.max(np.abs(got - expected)))
    if not error <= tolerance:
        raise RuntimeError(
            f"{what}: {graph} differs from transform by up to {error:.3g} "
            f"(tolerance {tolerance:.3g}) on {n_checked}; the export is wrong, "
            f"please report it with the {owner}'s parameters."
        )


def write_settings(directory, settings, readme):
    """Write a saved graph's settings (:data:`SETTINGS_FILE`) and README."""
    (directory / SETTINGS_FILE).write_text(
        json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    (directory / "README.md").write_text(readme, encoding="utf-8")
