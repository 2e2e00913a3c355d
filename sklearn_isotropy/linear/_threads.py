"""Thread policy of the linear estimators: small problems run on one BLAS thread.

An eigendecomposition (or SVD, or Cholesky factorisation) of a covariance is
thousands of small BLAS calls, and OpenBLAS synchronises its threads at every
one of them; a small matrix product is a few calls too short to amortise the
synchronisation. On an idle machine a second thread buys little there; on a
loaded one (other processes, or another thread pool such as torch's OpenMP
workers) every synchronisation waits for a thread that is not running. With
three other processes running BLAS on the 2-core benchmark machine,
``numpy.linalg.eigh`` of a 768 x 768 covariance took 1.05 s on two threads
and 0.46 s on one, and a whitening fit on 15,457 x 384 rows 1.14 s against
0.40 s with this policy (medians; ``benchmarks/bench_threads.py``, figures
in ``benchmarks/README.md``). So the estimators run, under a one-thread BLAS
limit (threadpoolctl):

* factorisations of matrices up to :data:`SMALL_PROBLEM_MAX_SIZE` wide
  (:func:`small_problem`), and
* the products of a batch or a transform of at most
  :data:`SMALL_PRODUCT_MAX_FLOPS` multiply-adds (:func:`small_product`),

and leave larger products, which are few big calls and do scale with
threads, to BLAS's own thread count.

A large product of rows into a scatter matrix (:func:`row_workers`) is
split differently: its rows are divided between as many Python threads as
BLAS may use, and each converts its rows to float64 and multiplies them on
one BLAS thread. The conversion, which BLAS cannot do, then runs on every
core instead of one while the BLAS threads wait, and no BLAS thread spins
between the blocks. The statistics of 100,000 x 768 float32 rows took 0.61 s
instead of 0.72 s (the float64 ``X.T @ X`` of the rows alone: 0.58 s), and a
whole fit on the loaded machine 1.6 s instead of 2.6 s (best times;
``benchmarks/bench_linear.py``, ``benchmarks/bench_threads.py``, figures in
``benchmarks/README.md``). The shares run in a fresh pool, never in the
calling thread, whose share was up to 30% slower on that machine.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext

#: BLAS threads for the small problems; None leaves BLAS as it is
SMALL_PROBLEM_THREADS: int | None = 1
#: widest matrix factorised on one thread (on an idle machine two threads
#: start to pay off beyond about 1,000: 0.43 s against 0.71 s at 1,536)
SMALL_PROBLEM_MAX_SIZE = 1024
#: largest product (multiply-adds) run on one thread: 15,457 x 384 rows
#: (2.3e9) are below, a 10,000-row batch of 768 features (5.9e9) above
SMALL_PRODUCT_MAX_FLOPS = 2**32
#: whether large scatter products are split by rows between threads
SPLIT_LARGE_PRODUCTS = True
#: widest rows split between threads: every thread keeps its own ``d x d``
#: matrices (two of 32 MiB at this width)
SPLIT_MAX_FEATURES = 2048
#: fewest rows a thread gets: below, one BLAS call on all the rows is as fast
SPLIT_MIN_ROWS = 1024

_CONTROLLER = None


def _controller():
    """threadpoolctl controller, cached (a scan of the libraries takes ~1 ms)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        import numpy  # noqa: F401  (its BLAS must be loaded to be found)
        import scipy.linalg  # noqa: F401  (and scipy's, used for Cholesky)
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


def small_problem(size: int):
    """Context in which BLAS runs on one thread, for a ``size``-wide problem.

    A no-op for problems wider than :data:`SMALL_PROBLEM_MAX_SIZE`, or when
    :data:`SMALL_PROBLEM_THREADS` is None.
    """
    threads = SMALL_PROBLEM_THREADS
    if threads is None or size > SMALL_PROBLEM_MAX_SIZE:
        return nullcontext()
    return _limited(threads)


def small_product(flops: float):
    """Context in which BLAS runs on one thread, for a product of ``flops``.

    A no-op for products of more than :data:`SMALL_PRODUCT_MAX_FLOPS`
    multiply-adds, or when :data:`SMALL_PROBLEM_THREADS` is None.
    """
    threads = SMALL_PROBLEM_THREADS
    if threads is None or flops > SMALL_PRODUCT_MAX_FLOPS:
        return nullcontext()
    return _limited(threads)


def row_workers(n_rows: int, n_features: int) -> int:
    """Threads to split the scatter product of ``n_rows`` rows between.

    1 (no split) for products small enough to run on one thread anyway
    (:data:`SMALL_PRODUCT_MAX_FLOPS`), for rows wider than
    :data:`SPLIT_MAX_FEATURES`, when :data:`SPLIT_LARGE_PRODUCTS` is off, or
    when BLAS is limited to one thread (e.g. by the caller's
    ``threadpoolctl.threadpool_limits(1)``); else as many threads as BLAS
    may use, each with at least :data:`SPLIT_MIN_ROWS` rows.
    """
    flops = float(n_rows) * n_features * n_features
    if (
        not SPLIT_LARGE_PRODUCTS
        or SMALL_PROBLEM_THREADS is None
        or flops <= SMALL_PRODUCT_MAX_FLOPS
        or n_features > SPLIT_MAX_FEATURES
    ):
        return 1
    blas = _controller().select(user_api="blas").lib_controllers
    threads = min((lib.num_threads for lib in blas), default=1)
    return max(1, min(threads, n_rows // SPLIT_MIN_ROWS))


def one_blas_thread():
    """Context in which BLAS runs on one thread (for the row workers)."""
    return _limited(1)


# BLAS has one thread count per process, and fits may run in several
# threads at once (dask's threaded scheduler, a user's thread pool). Nested
# limiters that each restored the count they saw on entry could leave BLAS on
# one thread for good (the second saw one thread and leaves last), so the
# first thread to enter sets the limit and the last to leave restores it.
_LOCK = threading.Lock()
_ACTIVE = {"depth": 0, "limiter": None}


@contextmanager
def _limited(threads: int):
    with _LOCK:
        if _ACTIVE["depth"] == 0:
            _take_control()
            _ACTIVE["limiter"] = _controller().limit(limits=threads, user_api="blas")
        _ACTIVE["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE["depth"] -= 1
            if _ACTIVE["depth"] == 0:
                limiter, _ACTIVE["limiter"] = _ACTIVE["limiter"], None
                _take_control()
                limiter.restore_original_limits()
                _take_control()  # and leave it free for any thread


def _take_control() -> None:
    """Let the calling thread change OpenBLAS's thread count.

    threadpoolctl >= 3.8 lets only one Python thread at a time change it
    (the first to try, until its limiter exits) and silently ignores the
    others; the thread that restores the count here may not be the one that
    set it.
    """
    from threadpoolctl import OpenBLASController

    clear = getattr(OpenBLASController, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)
