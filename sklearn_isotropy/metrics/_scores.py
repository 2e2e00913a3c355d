"""Row-wise cosine similarity and the cosine-Spearman score of STS evaluation."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import rankdata
from sklearn.utils.validation import check_array, check_consistent_length

from .._utils import normalize_rows, warn
from .._utils._sklearn import validate_params
from ..exceptions import UndefinedCorrelationWarning

__all__ = ["cosine_spearman_score", "paired_cosine_similarity", "spearman_score"]


def _row_cosine(a, b):
    """Return the cosine of each row pair; a zero-norm row gets 0 (warned)."""
    a, zero_a = normalize_rows(a)
    b, zero_b = normalize_rows(b)
    zero = zero_a | zero_b
    cos = np.einsum("ij,ij->i", a, b)
    cos[zero] = 0.0
    np.clip(cos, -1.0, 1.0, out=cos)
    if zero.any():
        warn(
            f"{int(zero.sum())} of {zero.size} pairs contain a zero-norm vector; "
            "their cosine similarity is undefined and set to 0.0",
            UndefinedCorrelationWarning,
        )
    return cos


def _as_score_vectors(y_true, y_pred):
    """Return both as float64 vectors of one length, or raise a ValueError."""
    y_true = np.asarray(y_true, dtype=np.float64).ravel()
    y_pred = np.asarray(y_pred, dtype=np.float64).ravel()
    check_consistent_length(y_true, y_pred)
    return y_true, y_pred


@validate_params(
    {"y_true": ["array-like"], "y_pred": ["array-like"]},
    prefer_skip_nested_validation=True,
)
def spearman_score(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Compute Spearman's rank correlation, with a stated value for constant input.

    The STS metric once the similarities are computed: the Pearson
    correlation of the average ranks (ties share their mean rank), as
    :func:`scipy.stats.spearmanr`. Where that is undefined (fewer than two
    values, or either side constant) it returns 0.0 with an
    :class:`~sklearn_isotropy.exceptions.UndefinedCorrelationWarning`
    instead of NaN, so a grid search can rank such a candidate last.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Gold scores.
    y_pred : array-like of shape (n_samples,)
        Predicted similarities.

    Returns
    -------
    rho : float
        In [-1, 1].

    Examples
    --------
    >>> from sklearn_isotropy.metrics import spearman_score
    >>> spearman_score([1, 2, 3, 4], [0.1, 0.4, 0.3, 0.9])
    0.8
    """
    y_true, y_pred = _as_score_vectors(y_true, y_pred)
    if y_true.size < 2 or np.ptp(y_true) == 0 or np.ptp(y_pred) == 0:
        which = "gold scores" if y_true.size < 2 or np.ptp(y_true) == 0 else "cosines"
        warn(
            f"Spearman's rho is undefined: the {which} are constant "
            f"(n={y_true.size}); returning 0.0",
            UndefinedCorrelationWarning,
        )
        return 0.0
    # Pearson correlation of average ranks = Spearman's rho with ties
    rt = rankdata(y_true)
    rp = rankdata(y_pred)
    rt -= rt.mean()
    rp -= rp.mean()
    rho = float(np.dot(rt, rp) / np.sqrt(np.dot(rt, rt) * np.dot(rp, rp)))
    return float(np.clip(rho, -1.0, 1.0))


def check_same_shape(a, b, names, meaning):
    """Raise a ValueError naming both shapes unless ``a`` and ``b`` agree."""
    if a.shape != b.shape:
        raise ValueError(
            f"{names[0]} has shape {a.shape} but {names[1]} has shape {b.shape}; "
            f"{meaning}"
        )


def _check_embedding_pair(emb_a, emb_b):
    emb_a = check_array(emb_a, dtype=[np.float64, np.float32], input_name="emb_a")
    emb_b = check_array(emb_b, dtype=[np.float64, np.float32], input_name="emb_b")
    check_same_shape(
        emb_a,
        emb_b,
        ("emb_a", "emb_b"),
        "row i of each must embed the two sides of "
        "pair i, so both must have the same shape",
    )
    return emb_a, emb_b


@validate_params(
    {"emb_a": ["array-like"], "emb_b": ["array-like"]},
    prefer_skip_nested_validation=True,
)
def paired_cosine_similarity(emb_a: ArrayLike, emb_b: ArrayLike) -> np.ndarray:
    """Compute the cosine similarity of row ``i`` of `emb_a` and row ``i`` of `emb_b`.

    Parameters
    ----------
    emb_a, emb_b : array-like of shape (n_pairs, n_features)
        Embeddings of the first and second item of each pair.

    Returns
    -------
    cosine : ndarray of shape (n_pairs,)
        Values in [-1, 1], float64. A pair containing a zero vector has an
        undefined cosine; it is set to 0.0 and an
        :class:`~sklearn_isotropy.exceptions.UndefinedCorrelationWarning` is
        emitted.

    See Also
    --------
    sklearn.metrics.pairwise.paired_cosine_distances : One minus this value.

    Examples
    --------
    >>> from sklearn_isotropy.metrics import paired_cosine_similarity
    >>> paired_cosine_similarity([[1.0, 0.0], [1.0, 1.0]], [[0.0, 2.0], [3.0, 3.0]])
    array([0., 1.])
    """
    emb_a, emb_b = _check_embedding_pair(emb_a, emb_b)
    return _row_cosine(emb_a, emb_b)


@validate_params(
    {"emb_a": ["array-like"], "emb_b": ["array-like"], "y_true": ["array-like"]},
    prefer_skip_nested_validation=True,
)
def cosine_spearman_score(
    emb_a: ArrayLike, emb_b: ArrayLike, y_true: ArrayLike
) -> float:
    """Compute Spearman's rho of gold similarities and row-wise cosine similarity.

    This is the standard unsupervised STS evaluation (SentEval, BERT-flow,
    BERT-whitening): embed both sentences of each pair, take their cosine,
    and correlate the cosines with the gold scores by rank.

    Parameters
    ----------
    emb_a, emb_b : array-like of shape (n_pairs, n_features)
        Embeddings of the first and second sentence of each pair. Must be
        finite.
    y_true : array-like of shape (n_pairs,)
        Gold similarity scores.

    Returns
    -------
    rho : float
        Spearman's rank correlation in [-1, 1] (ties get average ranks).
        Never NaN: when the correlation is undefined (constant gold scores,
        constant cosines, or fewer than two pairs) the value is **0.0** and an
        :class:`~sklearn_isotropy.exceptions.UndefinedCorrelationWarning` is
        emitted. A pair containing a zero-norm vector gets cosine 0.0, also
        with that warning.

    See Also
    --------
    cosine_spearman_scorer : The same score for fitted estimators.
    PairedCosineSimilarity : Meta-estimator scoring pairs through a transformer.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy.metrics import cosine_spearman_score
    >>> a = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    >>> b = np.array([[1.0, 0.1], [1.0, 1.0], [0.0, 1.0]])
    >>> cosine_spearman_score(a, b, [5.0, 2.5, 0.0])
    1.0
    """
    emb_a, emb_b = _check_embedding_pair(emb_a, emb_b)
    y_true = check_array(
        y_true, ensure_2d=False, dtype=np.float64, input_name="y_true"
    ).ravel()
    check_consistent_length(emb_a, y_true)
    return spearman_score(y_true, _row_cosine(emb_a, emb_b))
