"""Thread policy of the linear estimators: small dense problems run on one thread.

An eigendecomposition (or SVD, or Cholesky factorisation) of a covariance is
thousands of small BLAS calls, and OpenBLAS synchronises its threads at every
one of them. On an idle machine a second thread buys little there; on a
loaded one (other processes, or another thread pool such as torch's OpenMP
workers still spinning after a forward pass) every synchronisation waits for
a thread that is not running, and ``numpy.linalg.eigh`` of a 768 x 768
covariance went from 0.17 s on one thread to 6.5 s on two
(``benchmarks/bench_threads.py``). So the estimators run these steps under a
one-thread BLAS limit (:func:`small_problem`), for matrices up to
:data:`SMALL_PROBLEM_MAX_SIZE` wide, and leave the large products that
accumulate the statistics, which are few big calls and do scale, to BLAS's
own thread count.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

#: BLAS threads for the small dense problems; None leaves BLAS as it is
SMALL_PROBLEM_THREADS: int | None = 1
#: widest matrix (features) treated as a small problem
SMALL_PROBLEM_MAX_SIZE = 4096

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


@contextmanager
def _limited(threads: int):
    with _controller().limit(limits=threads, user_api="blas"):
        yield
