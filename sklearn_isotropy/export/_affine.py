"""A chain of fitted linear post-processors, folded into one affine map.

Every exporter reads the fitted pipeline through this module: it splits the
steps, checks that each is fitted and exportable, and folds consecutive
linear post-processors into ``y = (x - center) @ weight + bias`` in
float64, from their public fitted attributes only (``mean_``,
``whitening_``, ``components_``, ``scale_``). One rule per estimator
lives in ``_AFFINE_RULES``; an estimator without a rule is reported by
name, never silently skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from ..linear import NATSVTransformer, StandardNormalizer, WhiteningTransformer
from ..text import BertPoolingVectorizer

__all__ = [
    "AffineMap",
    "affine_rule",
    "check_fitted",
    "fold_affine",
    "is_affine",
    "split_steps",
    "split_text_pipeline",
]


@dataclass(frozen=True)
class AffineMap:
    """``y = (x - center) @ weight + bias``, the fold of one or more linear steps.

    The first step's centring is kept apart from the product: embeddings
    share a large common offset (the "cone"), and subtracting it before the
    product, as the estimators do, keeps float32 round-off at the scale of
    the spread instead of the offset. ``offset`` gives the single
    ``x @ weight + offset`` form for runtimes that have only that.

    Attributes
    ----------
    center : ndarray of shape (n_features_in,), float64
    weight : ndarray of shape (n_features_in, n_features_out), float64
    bias : ndarray of shape (n_features_out,), float64
    steps : tuple of str
        Names of the folded steps, in order (for messages and model cards).
    """

    center: np.ndarray
    weight: np.ndarray
    bias: np.ndarray
    steps: tuple[str, ...]

    @property
    def n_features_in(self) -> int:
        return self.weight.shape[0]

    @property
    def n_features_out(self) -> int:
        return self.weight.shape[1]

    @property
    def offset(self) -> np.ndarray:
        """``bias - center @ weight``: the map is also ``x @ weight + offset``."""
        return self.bias - self.center @ self.weight

    def apply(self, X):
        """``(X - center) @ weight + bias`` in float64 (a reference for checks)."""
        return (np.asarray(X, dtype=np.float64) - self.center) @ self.weight + self.bias


# ``type -> rule(estimator) -> (center, weight)``, the step's transform being
# ``(x - center) @ weight``. Exact types only: a subclass may override
# ``transform``, and exporting it with its parent's formula would be
# silently wrong.
_AFFINE_RULES = {}


def affine_rule(cls):
    """Register ``rule(estimator) -> (center, weight)`` for estimators of ``cls``."""

    def register(rule):
        _AFFINE_RULES[cls] = rule
        return rule

    return register


@affine_rule(WhiteningTransformer)
def _whitening(est):
    # transform: (X - mean_) @ whitening_
    return np.asarray(est.mean_, np.float64), np.asarray(est.whitening_, np.float64)


@affine_rule(NATSVTransformer)
def _natsv(est):
    # transform: Y - (Y @ C.T) @ C = Y @ (I - C.T @ C), with Y = X - mean_
    # (center=True) or Y = X (center=False, mean_ is None)
    C = np.asarray(est.components_, dtype=np.float64)
    d = C.shape[1]
    center = np.asarray(est.mean_, np.float64) if est.center else np.zeros(d)
    return center, np.eye(d) - C.T @ C


@affine_rule(StandardNormalizer)
def _standard(est):
    # transform: (X - mean_) / scale_, each part only if with_mean/with_std;
    # scale_ already holds 1 for the constant features
    d = est.n_features_in_
    center = np.asarray(est.mean_, np.float64) if est.with_mean else np.zeros(d)
    if not est.with_std:
        return center, np.eye(d)
    return center, np.diag(1.0 / np.asarray(est.scale_, dtype=np.float64))


def is_affine(estimator) -> bool:
    """Whether ``estimator`` has a folding rule (an exact registered type)."""
    return type(estimator) in _AFFINE_RULES


def _exportable_names():
    return ", ".join(sorted(cls.__name__ for cls in _AFFINE_RULES))


def split_steps(obj, *, what):
    """``[(name, estimator), ...]`` of a Pipeline, a list of estimators or one.

    ``"passthrough"`` and None steps of a Pipeline are dropped (they are the
    identity), and a Pipeline nested in a Pipeline is flattened into its
    steps (``"outer__inner"`` names them). ``what`` names the caller in
    error messages.
    """
    if isinstance(obj, Pipeline):
        steps = []
        for n, e in obj.steps:
            if e is None or (isinstance(e, str) and e == "passthrough"):
                continue
            if isinstance(e, Pipeline):
                steps += [(f"{n}__{m}", f) for m, f in split_steps(e, what=what)]
            else:
                steps.append((n, e))
    elif isinstance(obj, (list, tuple)):
        steps = [(f"step {i}", e) for i, e in enumerate(obj)]
    else:
        steps = [(type(obj).__name__, obj)]
    if not steps:
        raise ValueError(
            f"{what} received no estimator to export (an empty chain, or only "
            "'passthrough' steps); pass a fitted estimator or pipeline."
        )
    for name, est in steps:
        if not hasattr(est, "fit") or isinstance(est, type):
            raise TypeError(
                f"{what} expects fitted estimators; step {name!r} is "
                f"{est!r:.80} of type {type(est).__name__}."
            )
    return steps


def split_text_pipeline(pipeline, *, what):
    """``(vectorizer, [(name, step), ...])`` of a fitted text pipeline.

    ``pipeline`` is a Pipeline (or list) whose first step is a fitted
    :class:`~sklearn_isotropy.BertPoolingVectorizer`, or such a vectorizer
    alone; the other steps are returned as they are, unchecked.
    """
    if isinstance(pipeline, BertPoolingVectorizer):
        steps = [("vectorizer", pipeline)]
    else:
        steps = split_steps(pipeline, what=what)
    name, vec = steps[0]
    if not isinstance(vec, BertPoolingVectorizer):
        raise TypeError(
            f"{what} exports a pipeline that starts with a BertPoolingVectorizer; "
            f"its first step {name!r} is a {type(vec).__name__}. To export "
            "post-processors of precomputed embeddings, use to_onnx or to_faiss."
        )
    check_fitted(name, vec, what=what)
    return vec, steps[1:]


def check_fitted(name, estimator, *, what):
    """Raise NotFittedError naming the step when ``estimator`` is not fitted."""
    try:
        check_is_fitted(estimator)
    except NotFittedError as exc:
        raise NotFittedError(
            f"{what}: step {name!r} ({type(estimator).__name__}) is not fitted. "
            "Fit the pipeline (e.g. pipe.fit(texts)) before exporting it."
        ) from exc


def fold_affine(steps, *, what):
    """Fold fitted linear steps ``[(name, est), ...]`` into one :class:`AffineMap`.

    Raises
    ------
    NotFittedError
        If a step is not fitted.
    TypeError
        If a step has no affine rule (e.g. the normalizing flow), naming it.
    ValueError
        If a step's input width differs from the previous step's output.
    """
    center = weight = bias = None
    names = []
    for name, est in steps:
        rule = _AFFINE_RULES.get(type(est))
        if rule is None:
            hint = (
                " It is nonlinear: export it with sklearn_isotropy.export.to_onnx."
                if type(est).__name__ == "GlowFlowTransformer"
                else " Export the other steps, and apply this one yourself."
            )
            raise TypeError(
                f"{what} cannot export step {name!r} ({type(est).__name__}): it is "
                f"not one of the linear post-processors it folds into an affine "
                f"map ({_exportable_names()}).{hint}"
            )
        check_fitted(name, est, what=what)
        c, W = rule(est)
        if weight is None:
            center, weight, bias = c, W, np.zeros(W.shape[1])
        else:
            if W.shape[0] != weight.shape[1]:
                raise ValueError(
                    f"{what}: step {name!r} ({type(est).__name__}) expects "
                    f"{W.shape[0]} features but the steps before it output "
                    f"{weight.shape[1]}; the chain was not fitted together."
                )
            # ((x - center) @ weight + bias - c) @ W
            weight, bias = weight @ W, (bias - c) @ W
        names.append(name)
    return AffineMap(
        np.ascontiguousarray(center),
        np.ascontiguousarray(weight),
        np.ascontiguousarray(bias),
        tuple(names),
    )
