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

A large product of rows into a scatter matrix is split differently
(:func:`row_shares`): its rows are divided into one share per CPU (at most
:data:`SPLIT_MAX_SHARES`), each converted to float64 and multiplied on one
BLAS thread, run at once on as many Python threads as BLAS may use
(:func:`share_threads`) and added in a fixed order. The conversion, which
BLAS cannot do, then runs on every core instead of one while the BLAS
threads wait, and no BLAS thread spins between the blocks. The statistics of
100,000 x 768 float32 rows took 0.72 s instead of 0.87 s (the float64
``X.T @ X`` of the rows alone: 0.72 s), and a whole fit on the loaded
machine 1.6 s instead of 2.6 s (best times; ``benchmarks/bench_linear.py``,
``benchmarks/bench_threads.py``, figures in ``benchmarks/README.md``).
"""

from __future__ import annotations

import os
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
#: most shares a product is split into (more cores are left to BLAS itself)
SPLIT_MAX_SHARES = 4
#: bytes the shares' own ``d x d`` matrices (two per share) may take in all:
#: rows up to 2,048 wide are split in two, up to 1,448 wide in four
SPLIT_MATRIX_BYTES = 2**27
#: fewest rows a share gets: below, one BLAS call on all the rows is as fast
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


def row_shares(n_rows: int, n_features: int) -> int:
    """Shares to split the scatter product of ``n_rows`` rows into (1: none).

    1 for products small enough to run on one thread anyway
    (:data:`SMALL_PRODUCT_MAX_FLOPS`), when :data:`SPLIT_LARGE_PRODUCTS` is
    off or the policy is (``SMALL_PROBLEM_THREADS`` None), or on one CPU;
    else one share per CPU this process may use, at most
    :data:`SPLIT_MAX_SHARES`, as many as :data:`SPLIT_MATRIX_BYTES` allows,
    each of at least :data:`SPLIT_MIN_ROWS` rows. The count depends on the
    shape and the machine only, never on the thread count of the moment, so
    the same rows always give the same bits (:func:`share_threads` decides
    how many shares run at once, which does not change the result).
    """
    flops = float(n_rows) * n_features * n_features
    if (
        not SPLIT_LARGE_PRODUCTS
        or SMALL_PROBLEM_THREADS is None
        or flops <= SMALL_PRODUCT_MAX_FLOPS
    ):
        return 1
    by_memory = SPLIT_MATRIX_BYTES // (16 * n_features * n_features)
    shares = min(_cpus(), SPLIT_MAX_SHARES, by_memory, n_rows // SPLIT_MIN_ROWS)
    return max(1, shares)


def share_threads(shares: int) -> int:
    """Threads to run ``shares`` shares on now: at most BLAS's thread count.

    A caller's ``threadpoolctl.threadpool_limits(1)`` (or another thread
    inside this policy's limit) makes it 1: the shares then run one after
    the other in the calling thread, with the same result.
    """
    return max(1, min(shares, _shared_blas_threads()))


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _blas_libraries():
    """(process-wide, per-thread) BLAS controllers of the policy.

    An OpenBLAS built on OpenMP (faiss brings one) keeps a thread count per
    thread; every other BLAS has one count for the whole process.
    """
    libs = _controller().select(user_api="blas").lib_controllers
    local = [lib for lib in libs if getattr(lib, "threading_layer", "") == "openmp"]
    return [lib for lib in libs if lib not in local], local


def _shared_blas_threads() -> int:
    """BLAS threads allowed now: the process-wide count, else this thread's."""
    shared, local = _blas_libraries()
    return min((lib.num_threads for lib in shared or local), default=1)


def worker_blas_thread():
    """Context for a share's thread: per-thread BLAS counts limited to one.

    The process-wide counts are limited by the caller (:func:`one_blas_thread`).
    """
    _, local = _blas_libraries()
    return _limit_here(local, 1) or nullcontext()


def _limit_here(libs, threads: int):
    """A threadpoolctl limiter of ``libs`` to ``threads`` (None if no libs)."""
    if not libs:
        return None
    return _controller().limit(limits={lib.filepath: threads for lib in libs})


def one_blas_thread():
    """Context in which BLAS runs on one thread (around a split product)."""
    return _limited(1)


# A process-wide BLAS has one thread count, and fits may run in several
# threads at once (dask's threaded scheduler, a user's thread pool). Nested
# limiters that each restored the count they saw on entry could leave it on
# one thread for good (the second saw one thread and leaves last), so the
# first thread to enter sets the limit and the last to leave restores it.
# The first entrant's count holds for all (the policy only ever asks for one
# thread). A BLAS with per-thread counts (OpenMP) is limited in the calling
# thread alone, and restored there.
_LOCK = threading.Lock()
_ACTIVE = {"depth": 0, "limiter": None}


@contextmanager
def _limited(threads: int):
    shared, local = _blas_libraries()
    with _LOCK:
        if _ACTIVE["depth"] == 0 and shared:
            _take_control()
            _ACTIVE["limiter"] = _limit_here(shared, threads)
        _ACTIVE["depth"] += 1
    here = _limit_here(local, threads)
    try:
        yield
    finally:
        if here is not None:
            here.restore_original_limits()
        with _LOCK:
            _ACTIVE["depth"] -= 1
            if _ACTIVE["depth"] == 0 and _ACTIVE["limiter"] is not None:
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
