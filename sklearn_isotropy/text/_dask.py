"""Embedding a dask collection of texts, partition by partition."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import DTypeLike
from sklearn.base import TransformerMixin

from .._utils import import_optional, is_dask_collection

if TYPE_CHECKING:
    import dask.array

__all__ = ["embed_partitions"]

# ------------------------------------------------------------------ embedding
# vectorizers in use in this process, keyed by the token of the call that
# shipped them; at most _CACHE_SIZE are kept so finished calls free their model
_CACHE_SIZE = 1
_VECTORIZERS: OrderedDict = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _cached_vectorizer(vectorizer, token):
    """Return the first copy of ``vectorizer`` this process saw under ``token``.

    Every partition of a call runs with the same object, so a vectorizer that
    loads its model on first use loads it once per worker process.
    """
    with _CACHE_LOCK:
        cached = _VECTORIZERS.get(token)
        if cached is None:
            _VECTORIZERS[token] = cached = vectorizer
            while len(_VECTORIZERS) > _CACHE_SIZE:
                _VECTORIZERS.popitem(last=False)
        else:
            _VECTORIZERS.move_to_end(token)
        return cached


def _partition_texts(partition) -> list:
    if hasattr(partition, "columns"):  # one-column pandas DataFrame
        partition = partition.iloc[:, 0]
    if hasattr(partition, "tolist"):
        return partition.tolist()
    return list(partition)


def _count(partition) -> int:
    if hasattr(partition, "__len__"):
        return len(partition)
    return sum(1 for _ in partition)


def _embed_partition(partition, vectorizer, token, dtype=None):
    texts = _partition_texts(partition)
    vectorizer = _cached_vectorizer(vectorizer, token)
    out = vectorizer.transform(texts)
    if hasattr(out, "toarray"):  # sparse output (e.g. HashingVectorizer)
        out = out.toarray()
    out = np.asarray(out, dtype=dtype)
    if out.ndim != 2 or out.shape[0] != len(texts):
        raise ValueError(
            f"{type(vectorizer).__name__}.transform returned shape {out.shape} for "
            f"{len(texts)} texts; expected ({len(texts)}, n_features)."
        )
    return out


def _text_partitions(texts):
    """Return the delayed partitions of a dask Series, one-column DataFrame or Bag."""
    if not is_dask_collection(texts) or not hasattr(texts, "to_delayed"):
        raise TypeError(
            "embed_partitions needs a dask DataFrame column (dask Series), a "
            "one-column dask DataFrame or a dask Bag of strings; got "
            f"{type(texts).__module__}.{type(texts).__qualname__}. For an "
            "in-memory list call vectorizer.transform(texts) directly."
        )
    meta = getattr(texts, "_meta", None)
    if meta is not None and getattr(meta, "ndim", 1) == 2:
        if meta.shape[1] != 1:
            raise ValueError(
                "embed_partitions needs one column of texts; got a dask DataFrame "
                f"with columns {list(meta.columns)}. Select one, e.g. df['text']."
            )
    elif meta is not None and getattr(meta, "ndim", 1) != 1:
        raise TypeError(
            "embed_partitions needs a dask Series, one-column DataFrame or Bag; "
            f"got a collection of {getattr(meta, 'ndim', '?')}-D partitions."
        )
    return list(texts.to_delayed())


def embed_partitions(
    vectorizer: TransformerMixin,
    texts: object,
    *,
    n_features: int | None = None,
    dtype: DTypeLike = None,
) -> dask.array.Array:
    """Embed a dask DataFrame column or dask Bag of texts, partition by partition.

    Parameters
    ----------
    vectorizer : fitted transformer
        An object with ``transform(list_of_str)`` returning an array (or a
        scipy sparse matrix) of shape ``(n_texts, n_features)``, typically a
        ``BertPoolingVectorizer``, already fitted so that every worker
        produces the same embedding.
    texts : dask Series, one-column dask DataFrame or dask Bag of str
        The texts; each partition (best thousands of texts) is one task.
    n_features : int, default=None
        Width of the embeddings; with ``dtype``, saves a one-text probe.
    dtype : numpy dtype, default=None
        Dtype of the embeddings, which are cast to it; probed when None.

    Returns
    -------
    embeddings : dask.array.Array of shape (n_texts, n_features)
        Lazy embeddings in the order of ``texts``, one chunk per partition,
        with known chunk sizes (the texts are read once to count them).

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If ``vectorizer`` is not fitted.
    TypeError
        If ``texts`` is not a dask Series, one-column DataFrame or Bag.

    See Also
    --------
    sklearn_isotropy.WhiteningTransformer.fit : Accepts the returned array.

    Notes
    -----
    The vectorizer is one key of the task graph, sent to each worker once and
    reused for every partition of the call, so a model is loaded once per
    worker (see :ref:`scaling`); only the latest call's vectorizer is kept.

    Examples
    --------
    Any fitted vectorizer works; here sklearn's stateless
    :class:`~sklearn.feature_extraction.text.HashingVectorizer` stands in for
    ``BertPoolingVectorizer(...).fit(["any text"])`` so the example needs no
    model.

    >>> import dask
    >>> import dask.dataframe as dd
    >>> import numpy as np
    >>> import pandas as pd
    >>> from sklearn.feature_extraction.text import HashingVectorizer
    >>> from sklearn_isotropy.dask import embed_partitions
    >>> texts = pd.Series([f"sentence number {i}" for i in range(10)])
    >>> column = dd.from_pandas(texts, npartitions=3)
    >>> vectorizer = HashingVectorizer(n_features=8, alternate_sign=False)
    >>> with dask.config.set(scheduler="synchronous"):
    ...     E = embed_partitions(vectorizer, column)
    ...     E_values = E.compute()
    >>> E.shape, E.chunks[0]
    ((10, 8), (4, 3, 3))
    >>> np.allclose(E_values, vectorizer.transform(list(texts)).toarray())
    True
    """
    from sklearn.utils.validation import check_is_fitted

    dask = import_optional("dask", purpose="embed_partitions", extra="dask")
    da = import_optional("dask.array", purpose="embed_partitions", extra="dask")

    if not hasattr(vectorizer, "transform"):
        raise TypeError(
            "vectorizer must have a transform(list_of_str) method, got "
            f"{type(vectorizer).__qualname__}."
        )
    if hasattr(vectorizer, "fit"):  # an estimator: it must be fitted
        check_is_fitted(
            vectorizer,
            msg=(
                "This %(name)s instance is not fitted yet; embed_partitions sends "
                "the fitted vectorizer to the workers. Call its fit first (for "
                "BertPoolingVectorizer, fit only loads the model)."
            ),
        )
    parts = _text_partitions(texts)
    token = f"{type(vectorizer).__name__}-{uuid.uuid4().hex}"
    # one key holds the vectorizer: it is sent to each worker once, and
    # _cached_vectorizer keeps a single copy per worker process
    vec = dask.delayed(vectorizer, name=f"isotropy-vectorizer-{token}")
    lengths = [
        dask.delayed(_count, pure=True)(p, dask_key_name=f"isotropy-len-{i}-{token}")
        for i, p in enumerate(parts)
    ]
    probe = None
    if n_features is None or dtype is None:
        probe = dask.delayed(_embed_partition)(
            ["width probe"], vec, token, dask_key_name=f"isotropy-probe-{token}"
        )
    *lengths, sample = dask.compute(*lengths, probe)
    if sample is not None:
        n_features, dtype = sample.shape[1], sample.dtype
    dtype = np.dtype(dtype)
    blocks = [
        da.from_delayed(
            dask.delayed(_embed_partition, pure=True)(
                p, vec, token, dtype, dask_key_name=f"isotropy-embed-{i}-{token}"
            ),
            shape=(int(n), int(n_features)),
            dtype=dtype,
            meta=np.empty((0, int(n_features)), dtype=dtype),
        )
        for i, (p, n) in enumerate(zip(parts, lengths))
    ]
    if not blocks:
        return da.empty((0, int(n_features)), dtype=dtype, chunks=((0,), (n_features,)))
    return da.concatenate(blocks, axis=0)
