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
    "FlowTrainingWarning",
    "IsotropyWarning",
    "ModelNotFoundError",
    "RankDeficiencyWarning",
    "TruncationWarning",
    "UndefinedCorrelationWarning",
]


class ModelNotFoundError(OSError):
    """No encoder could be loaded from any of the sources tried.

    The message lists every source (installed package, local path, hub name)
    and why each failed. Subclass of :class:`OSError`, which is what
    ``transformers`` raises for a model it cannot find.
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


class FlowTrainingWarning(IsotropyWarning, ConvergenceWarning):
    """Normalizing-flow training did not end cleanly (non-finite loss)."""
