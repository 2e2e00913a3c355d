"""Score sentence pairs through any transformer: the estimator GridSearchCV needs."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy import sparse
from sklearn.base import BaseEstimator, clone
from sklearn.externals import array_api_compat
from sklearn.utils import get_tags
from sklearn.utils.validation import check_array, check_is_fitted

from .._utils import DocLinkMixin
from .._utils._sklearn import (
    HasMethods,
    StrOptions,
    _convert_to_numpy,
    _fit_context,
    get_namespace,
    validate_params,
)
from ._scores import _row_cosine, spearman_score

__all__ = ["PairedCosineSimilarity", "cosine_spearman_scorer", "transform_pairs"]


def _host(a):
    """Return ``a`` as a numpy array in host memory if another namespace holds it."""
    if isinstance(a, np.ndarray) or not array_api_compat.is_array_api_obj(a):
        return a
    return _convert_to_numpy(a, array_api_compat.array_namespace(a))


def _check_pairs(X):
    """Validate sentence pairs.

    Returns ``(kind, items, n_pairs)`` where `kind` is ``"text"`` or
    ``"embeddings"`` and `items` holds the first items of every pair followed
    by the second items: a list of ``2 * n_pairs`` strings, or an array of
    shape ``(2 * n_pairs, n_features)``, in the namespace and on the device
    of `X` under ``array_api_dispatch`` (as the estimators take them).
    """
    if isinstance(X, (str, bytes)):
        raise TypeError(
            "X_pairs must be an array of shape (n_pairs, 2) of texts or "
            "(n_pairs, 2, n_features) of embeddings, got a single string"
        )
    if sparse.issparse(X):
        raise TypeError("X_pairs cannot be a sparse matrix; pass a dense array")
    xp, dispatched = get_namespace(X)
    on_device = dispatched and not array_api_compat.is_numpy_namespace(xp)
    if hasattr(X, "to_numpy"):  # pandas DataFrame with two text columns
        X = X.to_numpy()
    try:
        X = X if on_device else np.asarray(X)
    except ValueError as exc:
        raise ValueError(
            "X_pairs could not be converted to an array of shape (n_pairs, 2) or "
            f"(n_pairs, 2, n_features): {exc}"
        ) from None
    shape = tuple(X.shape)
    if len(shape) not in (2, 3) or shape[1] != 2:
        raise ValueError(
            "X_pairs must have shape (n_pairs, 2) (texts) or (n_pairs, 2, "
            f"n_features) (embeddings), got shape {shape}"
        )
    n_pairs = shape[0]
    if n_pairs == 0:
        raise ValueError("X_pairs is empty: found 0 pairs, at least 1 is required")
    if len(shape) == 3:
        if not on_device and X.dtype.kind not in "biuf":
            raise TypeError(
                "X_pairs of shape (n_pairs, 2, n_features) must hold numbers, got "
                f"dtype {X.dtype}"
            )
        items = xp.concat([X[:, 0, :], X[:, 1, :]], axis=0)
        dtype = "numeric" if on_device else [np.float64, np.float32]
        return (
            "embeddings",
            check_array(items, dtype=dtype, input_name="X_pairs"),
            n_pairs,
        )
    if on_device or X.dtype.kind in "biufc":
        raise ValueError(
            f"X_pairs of shape {shape} holds numbers; a 2-D X_pairs must hold "
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


def _distinct(kind, items):
    """Return the distinct items (texts first-seen, rows sorted), each item's index."""
    if kind == "text":
        index = {}
        inverse = [index.setdefault(s, len(index)) for s in items]
        return list(index), np.asarray(inverse, dtype=np.intp)
    _, first, inverse = np.unique(
        _host(items), axis=0, return_index=True, return_inverse=True
    )
    if isinstance(items, np.ndarray):
        return items[first], inverse.ravel()
    xp = array_api_compat.array_namespace(items)
    where = xp.asarray(first, device=array_api_compat.device(items))
    return xp.take(items, where, axis=0), inverse.ravel()


def _as_dense(Z, name):
    if sparse.issparse(Z):
        Z = Z.toarray()
    elif hasattr(Z, "to_numpy"):
        Z = Z.to_numpy()
    Z = np.asarray(_host(Z))
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


# the estimator and the pairs are checked inside (by transform_pairs and
# _check_pairs), whose messages name what is accepted and how to fix the rest;
# nested validation stays on: the estimator's own methods validate themselves
@validate_params(
    {"estimator": "no_validation", "X_pairs": "no_validation"},
    prefer_skip_nested_validation=False,
)
def transform_pairs(
    estimator: BaseEstimator, X_pairs: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """Transform the distinct items of sentence pairs with a fitted estimator.

    Each distinct item (a text, or an embedding row) is transformed once:
    transformers map rows independently, so repeats add nothing. This is
    what :class:`PairedCosineSimilarity`, :func:`cosine_spearman_scorer`
    and :func:`make_retrieval_scorer` compare.

    Parameters
    ----------
    estimator : fitted estimator
        A fitted :class:`PairedCosineSimilarity` (its ``transformer_``, or
        the items as they are for passthrough), or any fitted transformer or
        pipeline with ``transform``, fitted on sentences or embeddings.
    X_pairs : array-like of shape (n_pairs, 2) or (n_pairs, 2, n_features)
        Text pairs or embedding pairs; under ``array_api_dispatch``, an
        array of the namespace and device the estimator was fitted on.

    Returns
    -------
    Z : ndarray of shape (n_distinct, n_components)
        The transformed distinct items, finite, in host memory.
    index : ndarray of int of shape (n_pairs, 2)
        The row of ``Z`` of each item: ``Z[index[:, 0]]`` are the first items.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sklearn_isotropy.metrics import transform_pairs
    >>> X_pairs = np.array([[[0.0, 1.0], [1.0, 0.0]], [[0.0, 1.0], [2.0, 2.0]]])
    >>> scaler = StandardScaler().fit(X_pairs.reshape(-1, 2))
    >>> Z, index = transform_pairs(scaler, X_pairs)
    >>> Z.shape, index.tolist()
    ((3, 2), [[0, 1], [0, 2]])
    """
    kind, items, n_pairs = _check_pairs(X_pairs)
    if isinstance(estimator, PairedCosineSimilarity):
        check_is_fitted(estimator, "transformer_")
        if kind != estimator.input_kind_:
            raise ValueError(
                f"X_pairs holds {kind} but the estimator was fitted on "
                f"{estimator.input_kind_}; pass pairs of the same kind"
            )
        if kind == "embeddings" and items.shape[1] != estimator.n_features_in_:
            raise ValueError(
                f"X_pairs has {items.shape[1]} features per item, but "
                f"PairedCosineSimilarity was fitted with {estimator.n_features_in_}"
            )
        transformer = estimator.transformer_
    elif hasattr(estimator, "transform"):
        check_is_fitted(estimator)
        transformer = estimator
    else:
        raise TypeError(
            "scoring pairs needs a fitted PairedCosineSimilarity or a fitted "
            "transformer with a transform method, got "
            f"{type(estimator).__name__}"
        )
    distinct, inverse = _distinct(kind, items)
    if transformer is not None:
        distinct = transformer.transform(distinct)
    Z = _as_dense(distinct, type(transformer).__name__)
    return Z, inverse.reshape(2, n_pairs).T


def _pair_cosines(estimator, X_pairs):
    Z, index = transform_pairs(estimator, X_pairs)
    return _row_cosine(Z[index[:, 0]], Z[index[:, 1]])


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
    :meth:`fit` passes the ``2 * n_pairs`` items (all first items, then all
    second items, duplicates kept) to ``transformer.fit``; at prediction a
    repeated item is transformed once. See :ref:`model_selection` for grid
    searches that encode each sentence once.

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
    def fit(self, X_pairs: ArrayLike, y=None) -> PairedCosineSimilarity:
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
            self.n_features_in_ = int(items.shape[1])
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

    def predict(self, X_pairs: ArrayLike) -> np.ndarray:
        """Compute the cosine similarity of each pair in the transformed space.

        Parameters
        ----------
        X_pairs : array-like of shape (n_pairs, 2) or (n_pairs, 2, n_features)
            Pairs of the same kind as in :meth:`fit`.

        Returns
        -------
        cosine : ndarray of shape (n_pairs,)
            Values in [-1, 1]; a pair with a zero vector gets 0.0 (warned).
        """
        return _pair_cosines(self, X_pairs)

    def score(
        self, X_pairs: ArrayLike, y: ArrayLike, sample_weight: None = None
    ) -> float:
        """Compute Spearman's rho of the pair cosines and the gold scores `y`.

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
            raise ValueError("a rank correlation takes no sample_weight; pass None")
        return cosine_spearman_scorer(self, X_pairs, y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.three_d_array = True
        tags.target_tags.required = False
        if not self._is_passthrough():
            tags.non_deterministic = get_tags(self.transformer).non_deterministic
        return tags


def _check_y(y, n_pairs):
    y = _host(y)
    y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y").ravel()
    if y.shape[0] != n_pairs:
        raise ValueError(f"y has {y.shape[0]} scores but X_pairs has {n_pairs} pairs")
    return y


@validate_params(
    {
        "estimator": "no_validation",  # as for transform_pairs
        "X_pairs": "no_validation",
        "y": ["array-like"],
    },
    prefer_skip_nested_validation=False,
)
def cosine_spearman_scorer(
    estimator: BaseEstimator, X_pairs: ArrayLike, y: ArrayLike
) -> float:
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
    if hasattr(estimator, "predict") and not isinstance(
        estimator, PairedCosineSimilarity
    ):  # e.g. a pipeline ending in PairedCosineSimilarity
        cos = np.asarray(_host(estimator.predict(X_pairs)), dtype=np.float64)
    else:
        cos = _pair_cosines(estimator, X_pairs)
    return spearman_score(_check_y(y, len(cos)), cos)
