"""Fit, transform and embed beyond one machine with Dask.

Install the optional extra with ``pip install sklearn-isotropy[dask]``;
nothing in sklearn-isotropy imports dask unless it is given a dask collection.
The user guide's page "Corpora that do not fit in memory" explains the three
ways in:

1. ``fit`` / ``partial_fit`` / ``transform`` of
   :class:`~sklearn_isotropy.WhiteningTransformer`,
   :class:`~sklearn_isotropy.NATSVTransformer` and
   :class:`~sklearn_isotropy.StandardNormalizer` accept a
   :class:`dask.array.Array` (or a dask DataFrame) chunked by rows: the exact
   float64 statistics of every chunk are computed on the workers and merged
   by a tree reduction, so the model equals an in-memory fit; ``transform``
   is lazy and block-wise. A NaN or infinity in a chunk is one
   ``ValueError`` on the client naming the chunk, row and column.
2. :class:`dask_ml.wrappers.Incremental` calls ``partial_fit`` chunk by
   chunk (exact too, but sequential).
3. :func:`embed_partitions` turns a dask column or Bag of texts into a dask
   array of embeddings, loading the model once per worker.

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

from .text import embed_partitions

__all__ = ["embed_partitions"]
