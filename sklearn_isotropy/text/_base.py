"""What the text vectorizers share: input checks, cloning, the text API.

:class:`TextVectorizerMixin` writes once what both vectorizers
(:class:`~sklearn_isotropy.BertPoolingVectorizer` and
:class:`~sklearn_isotropy.StaticEmbeddingVectorizer`) do alike:
``fit_transform`` reading its texts once, the tags of an estimator of
texts, and clones that share a model object.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, KeysView, Mapping, Set
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator, clone

if TYPE_CHECKING:
    import torch

__all__ = [
    "TextVectorizerMixin",
    "clone_sharing_model",
    "is_model_name",
    "validate_texts",
]


def validate_texts(X):
    """Return ``X`` as a list of str, with sklearn's text-vectorizer errors."""
    if isinstance(X, (str, bytes)):
        # the exact error of sklearn's CountVectorizer for a bare string
        raise ValueError(
            "Iterable over raw text documents expected, string object received."
        )
    if isinstance(X, Mapping):
        raise TypeError(
            "Expected a sequence of texts (list, tuple, 1-D array or pandas "
            f"Series); got a {type(X).__name__}, whose rows would be its keys. "
            "Pass list(X.values()) to encode the texts it maps to, or list(X) "
            "for its keys."
        )
    if isinstance(X, Set) and not isinstance(X, KeysView):
        raise TypeError(
            "Expected a sequence of texts in a fixed order (list, tuple, 1-D "
            f"array or pandas Series); got a {type(X).__name__}, whose order is "
            "arbitrary, so the output rows could not be matched to the texts. "
            "Pass a list, e.g. sorted(X)."
        )
    ndim = getattr(X, "ndim", 1)
    if ndim != 1:
        raise ValueError(
            "Expected a 1-D sequence of texts (list, tuple, 1-D array or pandas "
            f"Series); got an object of type {type(X).__name__} with "
            f"shape {getattr(X, 'shape', None)}. Select the text column first, "
            "e.g. X['sentence'] or X[:, 0]."
        )
    try:
        texts = list(X)
    except TypeError as exc:
        raise TypeError(
            "Expected an iterable of texts (list, tuple, 1-D array or pandas "
            f"Series of str); got {type(X).__name__}."
        ) from exc
    if not texts:
        raise ValueError(
            "Received an empty sequence of texts; pass at least one string "
            "(empty strings are fine and are encoded)."
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(
                f"All texts must be str; the item at index {i} is "
                f"{type(text).__name__} ({text!r:.60}). Convert or drop "
                "non-string items (e.g. missing values) first."
            )
    texts = [str(t) for t in texts]
    try:  # one pass over all texts; the loop below runs only on failure
        "".join(texts).encode("utf-8")
    except UnicodeEncodeError:
        _raise_unencodable(texts)
    return texts


def _raise_unencodable(texts):
    """Name the first text that is not valid Unicode (a lone surrogate)."""
    for i, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            char = text[exc.start]
            raise ValueError(
                f"The text at index {i} is not valid Unicode: it holds a lone "
                f"surrogate {char!r} at character {exc.start} ({text!r:.60}), "
                "which no tokenizer can encode. Such characters come from "
                "decoding bytes with errors='surrogateescape' or from broken "
                "\\u escapes in JSON; re-decode the source bytes correctly, or "
                "replace them: text.encode('utf-8', 'replace').decode('utf-8')."
            ) from None


def _is_pandas_series(X):
    """Whether ``X`` is a pandas Series, without importing pandas."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(X, pandas.Series)


def is_model_name(model):
    """Whether ``model`` names an encoder (None, a hub name or a path)."""
    return model is None or isinstance(model, (str, os.PathLike))


def clone_sharing_model(estimator):
    """``clone(estimator)`` sharing a model object.

    ``clone`` would deep-copy its weights into every clone, though inference
    never modifies them.
    """
    if is_model_name(estimator.model):
        return BaseEstimator.__sklearn_clone__(estimator)
    params = {
        name: value if name == "model" else clone(value, safe=False)
        for name, value in estimator.get_params(deep=False).items()
    }
    new = type(estimator)(**params)
    if hasattr(estimator, "_sklearn_output_config"):
        new._sklearn_output_config = dict(estimator._sklearn_output_config)
    return new


class TextVectorizerMixin:
    """``fit_transform``, tags and cloning of a vectorizer of texts.

    Put it before scikit-learn's ``TransformerMixin`` among the bases, whose
    ``fit_transform`` it replaces. The vectorizer has a ``model`` parameter
    (see :func:`clone_sharing_model`).
    """

    def fit_transform(self, X: Iterable[str], y=None) -> np.ndarray | torch.Tensor:
        """Fit, then encode ``X``; same as ``fit(X).transform(X)``.

        ``X`` is read once, so a generator or ``map`` works as a list does.
        With ``set_output(transform="pandas")``, the DataFrame carries the
        index of a pandas Series ``X``, as scikit-learn's own transformers
        do, so that a ``ColumnTransformer`` can put it beside their columns.

        Parameters
        ----------
        X : iterable of str
            Texts.
        y : None
            Ignored.

        Returns
        -------
        X_new : ndarray, DataFrame or torch.Tensor of shape (n_texts, n_features)
            The encoded texts, as :meth:`transform` returns them (a tensor
            only from :class:`~sklearn_isotropy.BertPoolingVectorizer` with
            ``output="torch"``).
        """
        texts = validate_texts(X)
        self.fit(texts, y)
        # transform's set_output wrapper gives its DataFrame the index of a
        # pandas input, and fit_transform's keeps the index of a DataFrame it
        # is handed: transform the Series itself (it can be read twice), not
        # the list of its texts, whose DataFrame would get a new RangeIndex
        return self.transform(X if _is_pandas_series(X) else texts)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.requires_fit = True
        tags.transformer_tags.preserves_dtype = []
        return tags

    def __sklearn_clone__(self):
        return clone_sharing_model(self)
