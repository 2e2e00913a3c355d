"""Fit, transform and embed beyond one machine with Dask.

Nothing imports dask (the ``dask`` extra) unless given a dask collection.
The linear post-processors fit on a row-chunked :class:`dask.array.Array`
exactly (per-chunk float64 statistics merged by a tree reduction) and
transform it lazily; :func:`embed_partitions` embeds a dask column or Bag of
texts, loading the model once per worker. See :ref:`scaling`.

Examples
--------
Fitting on a dask array gives the same model as fitting in memory:

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
"""

from __future__ import annotations

from .text import embed_partitions

__all__ = ["embed_partitions"]
