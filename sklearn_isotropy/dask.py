"""Fit, transform and embed beyond one machine with Dask.

Install the optional extra with ``pip install sklearn-isotropy[dask]``.
Nothing in sklearn-isotropy imports dask unless you pass it a dask
collection, so the extra costs nothing to users who do not need it.

There are three entry points, all working on any dask scheduler: the
distributed scheduler of a :class:`dask.distributed.Client` (a laptop's
``LocalCluster``, or a cluster of many machines), the threaded scheduler, or
the synchronous one.

1. ``fit`` on a dask array (recommended)
----------------------------------------

:class:`~sklearn_isotropy.WhiteningTransformer`,
:class:`~sklearn_isotropy.NATSVTransformer` and
:class:`~sklearn_isotropy.StandardNormalizer` accept a
:class:`dask.array.Array` of shape ``(n_samples, n_features)`` chunked by rows
(a dask DataFrame of numeric columns works too, and records its column
names). Their ``fit`` computes, on the workers and in parallel, the exact
float64 count, mean and scatter matrix of every row-chunk
(:class:`~sklearn_isotropy.MomentAccumulator`), combines them with a tree
reduction of :meth:`~sklearn_isotropy.MomentAccumulator.merge` (eight
statistics per combine task), and fits the map on the client from the merged
statistics. The fitted estimator is the one an in-memory ``fit`` on the same
rows gives, to float64 round-off (the tests check 1e-10 relative on
200,000 x 384), and it is an ordinary estimator: pickle it, use it on numpy
arrays, ``partial_fit`` it further.

No task holds more than its chunk and a few ``n_features x n_features``
matrices (4.7 MB each for 768 features), so the data size is bounded only by
the storage the chunks are read from -- ``dask.array.from_zarr``, a ``.npy``
memmap wrapped in ``dask.array.from_array``, or the output of
:func:`embed_partitions`. Keep the columns in one chunk (they are rechunked
otherwise) and make row-chunks of a few tens of megabytes or more.

``sample_weight`` may be a 1-D dask array (rechunked to the row-chunks of
``X`` when their sizes are known) or a numpy array. ``partial_fit`` accepts a
dask array too and merges its statistics into the previous ones.

Invalid input is reported once, on the client: a NaN or infinity in a chunk
raises a ``ValueError`` naming the chunk, the global row and the column,
instead of a traceback from a worker.

``transform`` (and so ``fit_transform``) of a dask array returns a lazy dask
array with the same row-chunks, computed chunk by chunk when you ask for it:
whiten 100 million rows straight to disk with ``.to_zarr(...)`` without ever
materialising them. The fitted estimator is one key of the task graph, sent
to each worker once. Keep scikit-learn's default output for this:
``set_output(transform="pandas")`` makes scikit-learn's output wrapper turn
the lazy result into an in-memory pandas DataFrame.

2. ``dask_ml.wrappers.Incremental``
-----------------------------------

If your pipeline already uses dask-ml, wrap the estimator in
:class:`dask_ml.wrappers.Incremental`: it calls ``partial_fit`` on one chunk
after another, which the streaming accumulator makes exact as well. The
chunks are processed one at a time, so this path is sequential; prefer
``fit`` on the dask array when you want the workers to run in parallel.
``Incremental.transform`` is block-wise and lazy. dask-ml insists on a
``scoring`` for estimators without a ``score`` method; any scorer callable
will do, it is only used if you call ``Incremental.score``.

3. Embedding texts by partition: :func:`embed_partitions`
---------------------------------------------------------

:func:`embed_partitions` applies a fitted vectorizer -- a
``BertPoolingVectorizer`` or any object whose ``transform(list_of_str)``
returns an ``(n_texts, n_features)`` array -- to a dask DataFrame column or
dask Bag of strings, partition by partition, and returns a dask array in the
original row order with known chunk sizes, ready for ``fit`` above. The
vectorizer is one key of the graph: each worker receives it once, and the
first copy a worker process sees is reused for all its partitions, so a
model is loaded once per worker and not once per partition.

Examples
--------
Fitting on a dask array gives the same model as fitting in memory. The
synchronous scheduler keeps this example small; with a
``dask.distributed.Client`` the same code runs on the cluster.

>>> import dask
>>> import dask.array as da
>>> import numpy as np
>>> from sklearn_isotropy import WhiteningTransformer
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(2000, 6)) @ rng.normal(size=(6, 6)) + 1.0
>>> X_dask = da.from_array(X, chunks=(500, 6))
>>> with dask.config.set(scheduler="synchronous"):
...     whitener = WhiteningTransformer().fit(X_dask)
...     Z = whitener.transform(X_dask)  # lazy, nothing computed yet
...     Z_values = Z.compute()
>>> type(Z).__name__, Z.chunks
('Array', ((500, 500, 500, 500), (6,)))
>>> reference = WhiteningTransformer().fit(X)
>>> np.allclose(whitener.whitening_, reference.whitening_)
True
>>> np.allclose(np.cov(Z_values, rowvar=False), np.eye(6))
True

The same through dask-ml's ``Incremental`` wrapper (``partial_fit`` on
each chunk in turn):

>>> from dask_ml.wrappers import Incremental
>>> def no_score(estimator, X, y=None):  # dask-ml requires a scorer
...     return 0.0
>>> with dask.config.set(scheduler="synchronous"):
...     inc = Incremental(WhiteningTransformer(), scoring=no_score).fit(X_dask)
...     Z_inc = inc.transform(X_dask).compute()
>>> np.allclose(inc.estimator_.whitening_, reference.whitening_)
True
>>> np.allclose(Z_inc, Z_values)
True
"""

from __future__ import annotations

from ._dask import embed_partitions as _embed_partitions

__all__ = ["embed_partitions"]


def embed_partitions(vectorizer, texts, *, n_features=None, dtype=None):
    """Embed a dask DataFrame column or dask Bag of texts, partition by partition.

    Parameters
    ----------
    vectorizer : fitted transformer
        An object with ``transform(list_of_str)`` returning an array (or a
        scipy sparse matrix) of shape ``(n_texts, n_features)``, typically a
        fitted ``BertPoolingVectorizer``. It must already be fitted (for
        ``BertPoolingVectorizer`` fitting only loads the model), because every
        worker must produce the same embedding.
    texts : dask Series, one-column dask DataFrame or dask Bag of str
        The texts, e.g. ``dask.dataframe.read_parquet(...)["text"]``. Each
        partition is embedded by one task; make partitions large enough
        (thousands of texts) that the per-task overhead does not matter.
    n_features : int, default=None
        Width of the embeddings. With ``dtype``, lets the helper skip the
        one-text probe it otherwise runs on a worker to learn the width and
        dtype of the output.
    dtype : numpy dtype, default=None
        Dtype of the embeddings (``float32`` for ``BertPoolingVectorizer``).
        The output is cast to it. Inferred with ``n_features`` when None.

    Returns
    -------
    embeddings : dask.array.Array of shape (n_texts, n_features)
        Lazy embeddings in the order of ``texts``, one chunk per partition,
        with known chunk sizes (the partition lengths are computed once, which
        reads the texts but does not embed them). Pass it to ``fit`` /
        ``transform`` of the linear estimators, ``.persist()`` it, or write it
        with ``.to_zarr(...)``.

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
    The vectorizer is a single key of the task graph, so the distributed
    scheduler sends it to each worker once (pickled; a vectorizer whose
    pickle leaves out the model weights reloads them on its first
    ``transform`` in each worker). Within a worker process the first copy
    received for a call is cached and reused for every partition of that
    call, so a model is loaded once per worker, not once per partition. Only
    the most recent call's vectorizer is cached, so a finished call frees its
    model. Worker processes started by ``dask.distributed`` limit BLAS and
    OpenMP (hence torch) to one thread each; run one worker process per core.

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
    return _embed_partitions(vectorizer, texts, n_features=n_features, dtype=dtype)
