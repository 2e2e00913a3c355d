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
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

#: BLAS threads for the small problems; None leaves BLAS as it is
SMALL_PROBLEM_THREADS: int | None = 1
#: widest matrix factorised on one thread (on an idle machine two threads
#: start to pay off beyond about 1,000: 0.43 s against 0.71 s at 1,536)
SMALL_PROBLEM_MAX_SIZE = 1024
#: largest product (multiply-adds) run on one thread: 15,457 x 384 rows
#: (2.3e9) are below, a 10,000-row batch of 768 features (5.9e9) above
SMALL_PRODUCT_MAX_FLOPS = 2**32

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


@contextmanager
def _limited(threads: int):
    with _controller().limit(limits=threads, user_api="blas"):
        yield
