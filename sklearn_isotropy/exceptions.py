"""Warnings and errors raised by sklearn-isotropy.

Every warning the package emits derives from :class:`IsotropyWarning`, so one
filter silences or escalates all of them::

    import warnings
    from sklearn_isotropy.exceptions import IsotropyWarning
    warnings.simplefilter("error", IsotropyWarning)
"""

from __future__ import annotations

from sklearn.exceptions import ConvergenceWarning

__all__ = [
    "CacheWarning",
    "DensityUnderflowWarning",
    "DeviceWarning",
    "DoubleWeightingWarning",
    "EvaluationError",
    "EvaluationWarning",
    "FlowTrainingError",
    "FlowTrainingWarning",
    "IsotropyDeprecationWarning",
    "IsotropyWarning",
    "ModelChangedWarning",
    "ModelNotFoundError",
    "NoRelevantDocumentWarning",
    "NoSplitColumnError",
    "RankDeficiencyWarning",
    "TruncationWarning",
    "UncheckedModelWarning",
    "UndefinedCorrelationWarning",
]


class ModelNotFoundError(OSError):
    """No encoder could be loaded from any of the sources tried.

    The message lists every source (installed package, local path, hub name)
    and why each failed. Subclass of :class:`OSError`, which is what
    ``transformers`` raises for a model it cannot find.
    """


class EvaluationError(ValueError):
    """An evaluation cannot run: data or model missing, or too little data.

    The message is one line saying what to pass instead; the command line
    prints it and exits with status 1.
    """


class NoSplitColumnError(ValueError):
    """``load_sts(path, split=...)`` was given one file that has no split column.

    The file holds pairs of one split only; read it without ``split=`` (all
    of its rows), or pass a directory with one file per split.
    """


class IsotropyWarning(UserWarning):
    """Base class of every warning emitted by sklearn-isotropy."""


class RankDeficiencyWarning(IsotropyWarning):
    """The fitted covariance has fewer usable directions than requested.

    Raised when components beyond the numerical rank of the covariance are
    dropped, typically because ``n_samples <= n_features``.
    """


class TruncationWarning(IsotropyWarning):
    """Some texts were longer than ``max_length`` tokens and were truncated."""


class UndefinedCorrelationWarning(IsotropyWarning):
    """A correlation is undefined (constant input) and a documented value is used."""


class NoRelevantDocumentWarning(IsotropyWarning):
    """Some queries have no relevant document; their retrieval scores are undefined.

    :func:`~sklearn_isotropy.metrics.retrieval_scores` leaves them out of the
    averages (``no_relevant="skip"``) and says how many.
    """


class FlowTrainingWarning(IsotropyWarning, ConvergenceWarning):
    """Normalizing-flow training did not end cleanly.

    Its loss became non-finite or rose by orders of magnitude; the fitted
    flow keeps the last parameters that were still good, and the message
    gives the figures and what to change.
    """


class FlowTrainingError(ValueError):
    """Normalizing-flow training produced no usable model.

    Raised when even the parameters a failed training falls back to give
    non-finite or runaway outputs; the message says what to change
    (``learning_rate``, ``standardize``, ``coupling``).
    """


class DensityUnderflowWarning(IsotropyWarning):
    """Some rows lie so far from a fitted density that they score ``-inf``.

    Their log-likelihood overflows its dtype. Raised by
    :meth:`~sklearn_isotropy.GlowFlowTransformer.score_samples`, which
    scores the other rows as it would alone.
    """


class IsotropyDeprecationWarning(IsotropyWarning, FutureWarning):
    """A name that is going away: the message says what to use instead.

    A :class:`FutureWarning` too, so it is shown by default and caught by the
    filters scikit-learn's users already set for deprecations.
    """


class ModelChangedWarning(IsotropyWarning):
    """An unpickled vectorizer found another encoder than the one it was fitted with.

    Raised by :class:`~sklearn_isotropy.BertPoolingVectorizer` when, after
    unpickling, the encoder it loads again (from its folder or hub name) has
    other weights, configuration or tokenizer than at fit: the folder was
    saved again (after fine-tuning, say) or the hub name's revision moved.
    Its embeddings are not those the steps after it were fitted on; refit
    the pipeline, or restore the model it was fitted with. Escalate it with
    ``warnings.simplefilter("error", ModelChangedWarning)`` to refuse such
    a pickle.
    """


class UncheckedModelWarning(IsotropyWarning):
    """An unpickled vectorizer cannot check that its encoder is the fitted one.

    Raised once per process and encoder by
    :class:`~sklearn_isotropy.BertPoolingVectorizer` unpickled from a
    version that recorded no ``model_fingerprint_``: it encodes with the
    encoder it loads, unchecked. Refit it (or fit and pickle it again) to
    have the check; escalate the warning with
    ``warnings.simplefilter("error", UncheckedModelWarning)`` to refuse
    such a pickle.
    """


class DoubleWeightingWarning(IsotropyWarning):
    """A static folder written by this package is read with a token weighting.

    Raised by :class:`~sklearn_isotropy.StaticEmbeddingVectorizer` given an
    explicit ``weighting`` other than ``"uniform"`` for a folder that
    :func:`~sklearn_isotropy.export.to_model2vec` or
    :func:`~sklearn_isotropy.export.to_sentence_transformers` wrote: its
    rows carry their token weights already, so the weighting applies them a
    second time and the output is no longer the exported pipeline's. The
    default ``weighting="auto"`` reads such a folder uniformly.
    """


class DeviceWarning(IsotropyWarning):
    """A model set up for a device that is not available here runs on the CPU."""


class CacheWarning(IsotropyWarning):
    """The embedding cache could not be used as it is; no result is affected.

    Raised by ``BertPoolingVectorizer(memory=...)`` when a cache database or
    some of its rows are damaged (set aside, their sentences encoded again),
    or when the cache cannot be opened or written (the embeddings are
    returned, not stored).
    """


class EvaluationWarning(IsotropyWarning):
    """A method warned while an evaluation ran it.

    :func:`~sklearn_isotropy.evaluation.evaluate` records the warnings of
    each method with its result and raises each distinct one again, once, as
    this class, prefixed with the pooling and the method (``"[mean] grid:
    RankDeficiencyWarning: ..."``).
    """
