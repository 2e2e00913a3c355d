"""Score sentence pairs through any transformer: the estimator GridSearchCV needs."""

from __future__ import annotations

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, _fit_context, clone
from sklearn.utils import get_tags
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.validation import check_array, check_is_fitted

from .._utils import DocLinkMixin
from ._scores import _row_cosine, spearman_score

__all__ = ["PairedCosineSimilarity", "cosine_spearman_scorer"]


def _check_pairs(X):
    """Validate sentence pairs.

    Returns ``(kind, items, n_pairs)`` where `kind` is ``"text"`` or
    ``"embeddings"`` and `items` holds the first items of every pair followed
    by the second items: a list of ``2 * n_pairs`` strings, or an array of
    shape ``(2 * n_pairs, n_features)``.
    """
    if isinstance(X, (str, bytes)):
        raise TypeError(
            "X_pairs must be an array of shape (n_pairs, 2) of texts or "
            "(n_pairs, 2, n_features) of embeddings, got a single string"
        )
    if sparse.issparse(X):
        raise TypeError("X_pairs cannot be a sparse matrix; pass a dense array")
    if hasattr(X, "to_numpy"):  # pandas DataFrame with two text columns
        X = X.to_numpy()
    try:
        X = np.asarray(X)
    except ValueError as exc:
        raise ValueError(
            "X_pairs could not be converted to an array of shape (n_pairs, 2) or "
            f"(n_pairs, 2, n_features): {exc}"
        ) from None
    if X.ndim not in (2, 3) or X.shape[1] != 2:
        raise ValueError(
            "X_pairs must have shape (n_pairs, 2) (texts) or (n_pairs, 2, "
            f"n_features) (embeddings), got shape {X.shape}"
        )
    n_pairs = X.shape[0]
    if n_pairs == 0:
        raise ValueError("X_pairs is empty: found 0 pairs, at least 1 is required")
    if X.ndim == 3:
        if X.dtype.kind not in "biuf":
            raise TypeError(
                "X_pairs of shape (n_pairs, 2, n_features) must hold numbers, got "
                f"dtype {X.dtype}"
            )
        items = np.concatenate([X[:, 0, :], X[:, 1, :]], axis=0)
        items = check_array(items, dtype=[np.float64, np.float32], input_name="X_pairs")
        return "embeddings", items, n_pairs
    if X.dtype.kind in "biufc":
        raise ValueError(
            f"X_pairs of shape {X.shape} holds numbers; a 2-D X_pairs must hold "
            "texts. For precomputed embeddings pass shape (n_pairs, 2, n_features)"
        )
    items = list(X[:, 0]) + list(X[:, 1])
    for i, item in enumerate(items):
        if not isinstance(item, str):
            pair, col = i % n_pairs, i // n_pairs
            raise TypeError(
                f"X_pairs[{pair}, {col}] is {type(item).__name__} {item!r}; every "
                "item of a text X_pairs must be a str"
            )
    return "text", [str(s) for s in items], n_pairs


def _unique(items):
    """Unique strings in first-seen order and the index of each item."""
    index = {}
    inverse = np.fromiter(
        (index.setdefault(s, len(index)) for s in items),
        dtype=np.intp,
        count=len(items),
    )
    return list(index), inverse


def _as_dense(Z, name):
    if sparse.issparse(Z):
        Z = Z.toarray()
    elif hasattr(Z, "to_numpy"):
        Z = Z.to_numpy()
    Z = np.asarray(Z)
    if Z.ndim != 2 or Z.dtype.kind not in "biuf":
        raise ValueError(
            f"{name}.transform must return a 2-D numeric array, got shape "
            f"{Z.shape} and dtype {Z.dtype}"
        )
    if not np.isfinite(Z).all():
        raise ValueError(
            f"{name}.transform returned non-finite values (NaN or inf); check its "
            "parameters (e.g. regularise a whitening with shrinkage)"
        )
    return Z


def _paired_cosine_through(transformer, kind, items, n_pairs):
    """Transform the items of every pair (each unique text once) and take cosines."""
    name = type(transformer).__name__
    if kind == "text":
        unique, inverse = _unique(items)
        Z = _as_dense(transformer.transform(unique), name)
        Z = Z[inverse]
    else:
        Z = _as_dense(transformer.transform(items), name)
    return _row_cosine(Z[:n_pairs], Z[n_pairs:])


class PairedCosineSimilarity(DocLinkMixin, BaseEstimator):
    """Cosine similarity of sentence pairs after a transformer, scored by Spearman.

    A meta-estimator that turns any embedding post-processor (or a whole text
    pipeline) into something :class:`~sklearn.model_selection.GridSearchCV`
    can tune on labelled sentence pairs. :meth:`fit` fits a clone of
    `transformer` on the items of both columns (unsupervised: the gold scores
    are not used); :meth:`predict` returns the cosine similarity of each pair
    in the transformed space; :meth:`score` returns Spearman's rho against
    the gold scores (the STS evaluation of SentEval and of the BERT-flow and
    BERT-whitening papers).

    Parameters
    ----------
    transformer : estimator with fit and transform, "passthrough" or None, \
            default=None
        The transformer mapping items to vectors: a post-processor such as
        :class:`~sklearn_isotropy.WhiteningTransformer` for precomputed
        embeddings, or a pipeline starting with a text vectorizer for text
        pairs. ``"passthrough"`` or None compares the input embeddings as
        they are (only for embedding input).

    Attributes
    ----------
    transformer_ : estimator or None
        The fitted clone of `transformer` (None for passthrough).
    input_kind_ : {"text", "embeddings"}
        The kind of pairs seen in :meth:`fit`.
    n_features_in_ : int
        Embedding width seen in :meth:`fit` (embedding input only).

    See Also
    --------
    cosine_spearman_scorer : The same score for an already-fitted transformer.
    cosine_spearman_score : The score on two embedding matrices.

    Notes
    -----
    ``X_pairs`` is either an array of shape ``(n_pairs, 2)`` of strings or an
    array of shape ``(n_pairs, 2, n_features)`` of precomputed embeddings.
    :meth:`fit` passes the ``2 * n_pairs`` items (all first items, then all
    second items, duplicates kept) to ``transformer.fit``, so the fitted
    statistics match fitting on the sentence list directly. At prediction, a
    text that occurs several times is transformed once (transformers map rows
    independently, so this does not change the result). Across a grid search
    a text pipeline re-encodes the sentences for every candidate unless its
    vectorizer caches encodings (``memory=``); precomputed embeddings avoid
    encoding altogether.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.decomposition import PCA
    >>> from sklearn.model_selection import GridSearchCV
    >>> from sklearn_isotropy.metrics import PairedCosineSimilarity
    >>> rng = np.random.RandomState(0)
    >>> X_pairs = rng.normal(size=(40, 2, 6))
    >>> y = rng.uniform(0, 5, size=40)
    >>> model = PairedCosineSimilarity(PCA(whiten=True)).fit(X_pairs)
    >>> model.predict(X_pairs[:3]).shape
    (3,)
    >>> search = GridSearchCV(
    ...     PairedCosineSimilarity(PCA()), {"transformer__n_components": [2, 4]}, cv=2
    ... ).fit(X_pairs, y)
    >>> search.best_params_["transformer__n_components"] in (2, 4)
    True
    """

    _parameter_constraints: dict = {
        "transformer": [
            HasMethods(["fit", "transform"]),
            StrOptions({"passthrough"}),
            None,
        ],
    }

    def __init__(self, transformer=None):
        self.transformer = transformer

    def _is_passthrough(self):
        return self.transformer is None or (
            isinstance(self.transformer, str) and self.transformer == "passthrough"
        )

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X_pairs, y=None):
        """Fit a clone of `transformer` on the items of both columns.

        Parameters
        ----------
        X_pairs : array-like of shape (n_pairs, 2) or (n_pairs, 2, n_features)
            Text pairs or embedding pairs.
        y : Ignored
            Not used; the fit is unsupervised. Present for API consistency.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        kind, items, n_pairs = _check_pairs(X_pairs)
        self.input_kind_ = kind
        if kind == "embeddings":
            self.n_features_in_ = items.shape[1]
        elif hasattr(self, "n_features_in_"):
            del self.n_features_in_
        if self._is_passthrough():
            if kind == "text":
                raise ValueError(
                    "transformer=None/'passthrough' needs embedding pairs of shape "
                    "(n_pairs, 2, n_features); for text pairs pass a transformer "
                    "that embeds texts, e.g. a BertPoolingVectorizer pipeline"
                )
            self.transformer_ = None
        else:
            self.transformer_ = clone(self.transformer).fit(items)
        return self

    def predict(self, X_pairs):
        """Cosine similarity of each pair in the transformed space.

        Parameters
        ----------
        X_pairs : array-like of shape (n_pairs, 2) or (n_pairs, 2, n_features)
            Pairs of the same kind as in :meth:`fit`.

        Returns
        -------
        cosine : ndarray of shape (n_pairs,)
            Values in [-1, 1]; a pair with a zero vector gets 0.0 (warned).
        """
        check_is_fitted(self, "transformer_")
        kind, items, n_pairs = _check_pairs(X_pairs)
        if kind != self.input_kind_:
            raise ValueError(
                f"X_pairs holds {kind} but this estimator was fitted on "
                f"{self.input_kind_}; pass pairs of the same kind"
            )
        if kind == "embeddings" and items.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X_pairs has {items.shape[1]} features per item, but "
                f"PairedCosineSimilarity was fitted with {self.n_features_in_}"
            )
        if self.transformer_ is None:
            return _row_cosine(items[:n_pairs], items[n_pairs:])
        return _paired_cosine_through(self.transformer_, kind, items, n_pairs)

    def score(self, X_pairs, y, sample_weight=None):
        """Spearman's rho between the pair cosines and the gold scores `y`.

        Parameters
        ----------
        X_pairs : array-like of shape (n_pairs, 2) or (n_pairs, 2, n_features)
            Pairs to score.
        y : array-like of shape (n_pairs,)
            Gold similarity scores.
        sample_weight : None
            Not supported; must be None.

        Returns
        -------
        rho : float
            Spearman's rank correlation; 0.0 with an
            :class:`~sklearn_isotropy.exceptions.UndefinedCorrelationWarning`
            when undefined (constant scores or cosines).
        """
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported by a rank correlation")
        y = _check_y(y, X_pairs)
        return spearman_score(y, self.predict(X_pairs))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.three_d_array = True
        tags.target_tags.required = False
        if not self._is_passthrough():
            tags.non_deterministic = get_tags(self.transformer).non_deterministic
        return tags


def _check_y(y, X_pairs):
    y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y").ravel()
    n = len(X_pairs)
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} scores but X_pairs has {n} pairs")
    return y


def cosine_spearman_scorer(estimator, X_pairs, y):
    """Score a fitted estimator on sentence pairs by cosine-Spearman.

    Usable as ``scoring=cosine_spearman_scorer`` in scikit-learn's model
    selection tools, and directly on an already-fitted bare transformer or
    pipeline (fitted on sentences or embeddings, not on pairs).

    Parameters
    ----------
    estimator : fitted estimator
        A fitted :class:`PairedCosineSimilarity` (or a pipeline ending in one),
        whose cosines are used; or any fitted transformer/pipeline with
        ``transform``, applied to both items of each pair.
    X_pairs : array-like of shape (n_pairs, 2) or (n_pairs, 2, n_features)
        Text pairs or embedding pairs.
    y : array-like of shape (n_pairs,)
        Gold similarity scores.

    Returns
    -------
    rho : float
        Spearman's rho between the gold scores and the pair cosines (0.0 with
        a warning when undefined).

    See Also
    --------
    cosine_spearman_score : The score on two embedding matrices.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sklearn_isotropy.metrics import cosine_spearman_scorer
    >>> rng = np.random.RandomState(0)
    >>> X_pairs = rng.normal(size=(30, 2, 4))
    >>> scaler = StandardScaler().fit(X_pairs.reshape(-1, 4))
    >>> rho = cosine_spearman_scorer(scaler, X_pairs, rng.uniform(0, 5, size=30))
    >>> -1.0 <= rho <= 1.0
    True
    """
    if isinstance(estimator, PairedCosineSimilarity):
        return estimator.score(X_pairs, y)
    y = _check_y(y, X_pairs)
    if hasattr(estimator, "predict"):
        return spearman_score(
            y, np.asarray(estimator.predict(X_pairs), dtype=np.float64)
        )
    if hasattr(estimator, "transform"):
        check_is_fitted(estimator)
        kind, items, n_pairs = _check_pairs(X_pairs)
        return spearman_score(
            y, _paired_cosine_through(estimator, kind, items, n_pairs)
        )
    raise TypeError(
        "cosine_spearman_scorer needs a fitted PairedCosineSimilarity or a fitted "
        f"transformer with a transform method, got {type(estimator).__name__}"
    )
