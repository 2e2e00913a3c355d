"""The linear post-processors and the exact streaming statistics behind them.

Each estimator is fitted from the count, mean and scatter matrix of its
training rows, accumulated in float64 by :class:`MomentAccumulator`
(``_moments.py``: exact and mergeable, so ``partial_fit`` and Dask fits
equal an in-memory fit) with the blocked, scaled and threaded products of
``_scatter_kernels.py``. ``_base.py`` holds what the estimators share (the
streaming ``fit``/``partial_fit``, the one checked transform of a fitted
``LinearMap``, the eigen helpers) and ``_dask.py`` the tree
reduction of the statistics on a cluster. ``_array_api.py`` lets them take
torch tensors and other Array API arrays on their device (with
``sklearn.set_config(array_api_dispatch=True)``).
"""

from __future__ import annotations

from ._moments import MomentAccumulator
from ._natsv import NATSVTransformer
from ._standard import StandardNormalizer
from ._whitening import WhiteningTransformer

__all__ = [
    "MomentAccumulator",
    "NATSVTransformer",
    "StandardNormalizer",
    "WhiteningTransformer",
]
