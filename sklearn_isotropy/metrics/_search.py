"""Exact search for retrieval metrics: numpy or faiss, same results.

An index (:func:`exact_index`) holds the corpus codes (float vectors scored
by inner product, or packed bits scored by ``n_bits - 2 * hamming``, the
inner product of the ``±1`` vectors) and answers ``search(queries, K) ->
(scores, indices)``, the ``K`` best documents of each query, best first, as
faiss does.
:func:`search_candidates` builds on it what exact metrics with averaged ties
need: for each query every document scored at least as high as its
``k``-th, however many tie there, with identical corpus vectors scored
identically and excluded documents left out.
"""

from __future__ import annotations

from contextlib import contextmanager
from numbers import Integral

import numpy as np
from scipy import sparse

from .._utils import import_optional
from .._utils._sklearn import Interval, StrOptions, validate_params

__all__ = ["SEARCH_BACKENDS", "exact_index", "search_candidates"]

# elements of one (queries x documents) score block: bounds the memory of a
# numpy search (16 MB of float32) whatever the corpus size
_BLOCK_ELEMENTS = 1 << 22
# bits set in each byte value (np.bitwise_count needs numpy >= 2)
_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def _exact_in_float32(width):
    """Whether int8 inner products of this width are exact in float32.

    Every partial sum stays below ``2**24`` (``128 * 128 * width``), the
    largest range of consecutive integers float32 holds.
    """
    return 128 * 128 * width <= 2**24


def _top(S, K):
    """Return the top ``K`` of each row of ``S``, best first: (scores, indices)."""
    n = S.shape[1]
    if K >= n:
        idx = np.argsort(-S, axis=1, kind="stable")
    else:
        idx = np.argpartition(-S, K - 1, axis=1)[:, :K]
        order = np.argsort(-np.take_along_axis(S, idx, axis=1), axis=1, kind="stable")
        idx = np.take_along_axis(idx, order, axis=1)
    return np.take_along_axis(S, idx, axis=1).astype(np.float64), idx


class NumpyIndex:
    """Exact search with numpy matrix products, in blocks of queries."""

    def __init__(self, codes, metric):
        self.codes = codes
        self.metric = metric
        n, width = codes.shape
        if metric == "hamming":
            self.n_bits = 8 * width
            per_query = max(n * width, 1)
        else:  # float codes keep their precision
            if codes.dtype.kind != "f":
                exact32 = _exact_in_float32(width)
                self.codes = codes.astype(np.float32 if exact32 else np.float64)
            per_query = max(n, 1)
        self.step = max(1, _BLOCK_ELEMENTS // per_query)

    def _scores(self, Q):
        if self.metric == "hamming":
            xor = np.bitwise_xor(Q[:, None, :], self.codes[None, :, :])
            hamming = _POPCOUNT[xor].sum(axis=2, dtype=np.int64)
            return self.n_bits - 2 * hamming
        return Q.astype(self.codes.dtype, copy=False) @ self.codes.T

    @contextmanager
    def one_thread(self):
        """Run searches on one BLAS thread (for per-query latency)."""
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1):
            yield

    def search(self, Q, K):
        K = min(K, self.codes.shape[0])
        scores = np.empty((Q.shape[0], K))
        indices = np.empty((Q.shape[0], K), dtype=np.int64)
        for start in range(0, Q.shape[0], self.step):
            part = slice(start, start + self.step)
            scores[part], indices[part] = _top(self._scores(Q[part]), K)
        return scores, indices


class FaissIndex:
    """Exact search with a flat faiss index (``IndexFlatIP`` / ``IndexBinaryFlat``)."""

    def __init__(self, codes, metric):
        faiss = import_optional(
            "faiss", purpose="the faiss search backend", extra="retrieval"
        )
        self.metric = metric
        self.n = codes.shape[0]
        if metric == "hamming":
            self.n_bits = 8 * codes.shape[1]
            self.index = faiss.IndexBinaryFlat(self.n_bits)
            self.index.add(np.ascontiguousarray(codes, dtype=np.uint8))
        else:
            self.index = faiss.IndexFlatIP(codes.shape[1])
            self.index.add(np.ascontiguousarray(codes, dtype=np.float32))

    @contextmanager
    def one_thread(self):
        """Run searches on one OpenMP thread (for per-query latency).

        faiss parallelises even a one-query search over its OpenMP threads;
        on a machine whose cores are busy that costs tens of milliseconds of
        thread synchronisation per call, which is not search time.
        """
        from threadpoolctl import threadpool_limits

        faiss = import_optional("faiss", purpose="the faiss search backend")
        before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            with threadpool_limits(limits=1):
                yield
        finally:
            faiss.omp_set_num_threads(before)

    def search(self, Q, K):
        K = min(K, self.n)
        if self.metric == "hamming":
            dist, ids = self.index.search(np.ascontiguousarray(Q, dtype=np.uint8), K)
            return self.n_bits - 2.0 * dist, ids
        sims, ids = self.index.search(np.ascontiguousarray(Q, dtype=np.float32), K)
        return sims.astype(np.float64), ids


_BACKENDS = {"numpy": NumpyIndex, "faiss": FaissIndex}

#: The exact search engines (``"auto"`` picks faiss when it is installed).
SEARCH_BACKENDS = tuple(_BACKENDS)


_METRICS = StrOptions({"ip", "hamming"})
_BACKEND_NAMES = StrOptions({"auto", *_BACKENDS})


def resolve_backend(backend="auto"):
    """Return ``"numpy"`` or ``"faiss"``; ``"auto"`` is faiss when importable."""
    if backend == "auto":
        try:
            import faiss  # noqa: F401
        except ImportError:
            return "numpy"
        return "faiss"
    return backend


@validate_params(
    {"codes": [np.ndarray], "metric": [_METRICS], "backend": [_BACKEND_NAMES]},
    prefer_skip_nested_validation=True,
)
def exact_index(
    codes: np.ndarray, metric: str = "ip", backend: str = "auto"
) -> NumpyIndex | FaissIndex:
    """Build an exact index over ``codes``.

    faiss scores in float32; integer codes too wide for exact float32 sums
    are searched with numpy (in float64) instead, so results stay exact.

    Parameters
    ----------
    codes : ndarray of shape (n_documents, width)
        Float or integer vectors (``metric="ip"``) or packed bits
        (``metric="hamming"``, uint8).
    metric : {"ip", "hamming"}, default="ip"
        Inner product, or ``n_bits - 2 * hamming`` (the inner product of the
        ``±1`` vectors).
    backend : {"auto", "numpy", "faiss"}, default="auto"
        The search engine; ``"auto"`` is faiss when it can be imported.

    Returns
    -------
    index : object
        ``index.search(queries, K) -> (scores, indices)``, the ``K`` best
        documents of each query, best first; ``index.one_thread()``, a
        context that runs searches on one thread; ``index.backend``, the
        engine's name.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy.metrics import exact_index
    >>> index = exact_index(np.eye(3, dtype=np.float32), backend="numpy")
    >>> index.search(np.array([[0.1, 0.9, 0.0]]), 2)[1].tolist()
    [[1, 0]]
    """
    backend = resolve_backend(backend)
    if codes.dtype.kind in "iu" and metric == "ip":
        if not _exact_in_float32(codes.shape[1]):
            backend = "numpy"
    index = _BACKENDS[backend](codes, metric)
    index.backend = backend
    return index


@validate_params(
    {
        "queries": [np.ndarray],
        "corpus": [np.ndarray],
        "k": [Interval(Integral, 1, None, closed="left")],
        "metric": [_METRICS],
        "backend": [_BACKEND_NAMES],
        "exclude": ["sparse matrix", None],
    },
    prefer_skip_nested_validation=True,
)
def search_candidates(
    queries: np.ndarray,
    corpus: np.ndarray,
    *,
    k: int,
    metric: str = "ip",
    backend: str = "auto",
    exclude: sparse.spmatrix | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Find each query's documents scored at least as high as its ``k``-th.

    Identical corpus rows are indexed once, so copies of a document get the
    same score (an exact tie) whatever the backend. A document excluded for
    a query does not count towards its ``k``. The index is searched for a
    few more than ``k`` vectors, then again with twice as many for the
    queries whose ``k``-th score is still tied with the last one returned,
    until every tied document is in.

    Parameters
    ----------
    queries : ndarray of shape (n_queries, width)
        Query codes.
    corpus : ndarray of shape (n_documents, width)
        Document codes.
    k : int
        The deepest cut-off of the metrics.
    metric : {"ip", "hamming"}, default="ip"
        Inner product of vectors, or Hamming distance of packed bits.
    backend : {"auto", "numpy", "faiss"}, default="auto"
        The search engine.
    exclude : scipy.sparse.csr_matrix of shape (n_queries, n_documents), \
            default=None
        Nonzero where a document must not be returned to a query.

    Returns
    -------
    documents : list of ndarray
        For each query, the document indices, best first.
    scores : list of ndarray
        Their scores (float64).
    """
    view = np.ascontiguousarray(corpus).view(
        np.dtype((np.void, corpus.dtype.itemsize * corpus.shape[1]))
    )
    _, first, inverse = np.unique(view.ravel(), return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    members_order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[members_order], np.arange(first.size + 1))
    index = exact_index(corpus[first], metric, backend)
    n_unique = first.size

    excluded = [()] * queries.shape[0]
    most_excluded = 0
    if exclude is not None:
        exclude = exclude.tocsr()
        excluded = [
            set(exclude.indices[exclude.indptr[q] : exclude.indptr[q + 1]].tolist())
            for q in range(queries.shape[0])
        ]
        most_excluded = max((len(e) for e in excluded), default=0)

    def expand(q, scores, ids, everything):
        docs, out_scores, count, cut = [], [], 0, None
        for score, u in zip(scores, ids):
            if cut is not None and score < cut:
                break
            members = members_order[bounds[u] : bounds[u + 1]]
            if excluded[q]:
                members = [m for m in members if m not in excluded[q]]
            docs.extend(members)
            out_scores.extend([score] * len(members))
            count += len(members)
            if cut is None and count >= k:
                cut = score
        if not everything and (cut is None or scores[-1] >= cut):
            return None  # documents tied with the k-th may not all be in
        return np.asarray(docs, dtype=np.int64), np.asarray(out_scores)

    documents = [None] * queries.shape[0]
    scores_out = [None] * queries.shape[0]
    pending = np.arange(queries.shape[0])
    depth = min(n_unique, k + most_excluded + 8)
    while pending.size:
        S, ids = index.search(queries[pending], depth)
        everything = depth >= n_unique
        retry = []
        for row, q in enumerate(pending):
            found = expand(q, S[row], ids[row], everything)
            if found is None:
                retry.append(q)
            else:
                documents[q], scores_out[q] = found
        pending = np.asarray(retry, dtype=np.intp)
        depth = min(n_unique, 2 * depth)
    return documents, scores_out
