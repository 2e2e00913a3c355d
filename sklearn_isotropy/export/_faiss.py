"""Linear post-processors as a faiss pre-transform."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline

from .._utils import import_optional
from ._affine import fold_affine, split_steps

if TYPE_CHECKING:
    import faiss

__all__ = ["to_faiss"]

_WHAT = "to_faiss"


def to_faiss(
    estimator_or_chain: BaseEstimator | Pipeline | list,
) -> faiss.LinearTransform:
    """Make a ``faiss.LinearTransform`` applying fitted linear post-processors.

    Wrap an index with it, ``faiss.IndexPreTransform(to_faiss(whiten),
    index)``, and faiss whitens the database vectors on ``add`` and the
    queries on ``search``: the serving side never calls scikit-learn.

    Parameters
    ----------
    estimator_or_chain : estimator, Pipeline or list of estimators
        A fitted :class:`~sklearn_isotropy.WhiteningTransformer`,
        :class:`~sklearn_isotropy.NATSVTransformer` or
        :class:`~sklearn_isotropy.StandardNormalizer`, or a chain of them
        (a :class:`~sklearn.pipeline.Pipeline` or a list, applied in order),
        folded into one affine map.

    Returns
    -------
    transform : faiss.LinearTransform
        Trained, with ``d_in = n_features_in_`` and ``d_out`` the width of
        the chain's output. faiss applies ``A x + b`` with ``A = W.T`` and
        ``b = -mean @ W`` (float32), so ``transform.apply(X)`` equals the
        chain's ``transform(X)`` to float32 round-off.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If an estimator is not fitted.
    TypeError
        If a step is not a linear post-processor, naming it.

    See Also
    --------
    to_onnx : The same map as an ONNX graph.

    Notes
    -----
    faiss implements ``reverse_transform`` for orthonormal maps only, which a
    whitening is not; map back with
    :meth:`~sklearn_isotropy.WhiteningTransformer.inverse_transform`.

    Examples
    --------
    >>> import faiss
    >>> import numpy as np
    >>> from sklearn_isotropy import WhiteningTransformer
    >>> from sklearn_isotropy.export import to_faiss
    >>> rng = np.random.default_rng(0)
    >>> X = (rng.normal(size=(500, 16)) @ rng.normal(size=(16, 16)) + 3.0)
    >>> X = X.astype(np.float32)
    >>> whiten = WhiteningTransformer(n_components=8).fit(X)
    >>> index = faiss.IndexPreTransform(to_faiss(whiten), faiss.IndexFlatIP(8))
    >>> index.add(X)
    >>> scores, ids = index.search(X[:2], 3)

    The same search in NumPy, on rows whitened by scikit-learn:

    >>> Z = whiten.transform(X)
    >>> bool(np.array_equal(ids[:, 0], np.argmax(Z[:2] @ Z.T, axis=1)))
    True
    """
    faiss = import_optional("faiss", purpose=_WHAT, extra="export")
    affine = fold_affine(split_steps(estimator_or_chain, what=_WHAT), what=_WHAT)
    transform = faiss.LinearTransform(affine.n_features_in, affine.n_features_out, True)
    # faiss stores A as a row-major (d_out, d_in) matrix and computes A x + b
    A = np.ascontiguousarray(affine.weight.T, dtype=np.float32)
    faiss.copy_array_to_vector(A.ravel(), transform.A)
    faiss.copy_array_to_vector(affine.offset.astype(np.float32), transform.b)
    transform.is_trained = True
    transform.set_is_orthonormal()
    return transform
