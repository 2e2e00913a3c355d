"""Scatter kernels: one batch of rows multiplied into float64 statistics.

The heavy part of every fit, written once for every Array API namespace:
each block of rows is converted to float64 (the widest float its device
has) about a provisional centre, scaled by a power of two when its values
would underflow or overflow once squared, and multiplied into the scatter
matrix (or its diagonal) on the rows' own device, with the column sums and,
on request, the third and fourth moments of the centred row norms; only
these sums (``O(d**2)``) come to host memory, as float64 numpy arrays.
:func:`batch_statistics` turns them into the exact statistics of the batch
about its own mean; :class:`~sklearn_isotropy.MomentAccumulator` merges
them, with the formulas at the end of this module for the scale and the
higher moments of a merge.

Threads: the products run on one BLAS thread (:func:`one_blas_thread`, as
the map's factorisations do), and the product of a large batch of numpy
rows is split by rows into one share per CPU, each converted and
multiplied in its own Python thread (:func:`accumulate`), rather than one
product on BLAS's own threads: a choice measured in :ref:`scaling`
(``benchmarks/bench_threads.py``).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from ._array_api import float_dtype, namespace_of, to_host

__all__ = [
    "REFINE_RATIO",
    "SAFE_LOG2",
    "accumulate",
    "batch_statistics",
    "head_rows",
    "merged_exponent",
    "one_blas_thread",
    "safe_exponent",
    "shift_norm3",
    "shift_norm4",
    "unscale",
]

# float64 entries of one working block of rows (64 MiB): large enough for the
# matrix product to run at full speed with little per-block overhead, small
# enough to bound the temporaries (a 10,000 x 768 chunk is one block)
_BLOCK_ELEMENTS = 2**23
# centred values whose magnitude lies in [2**-SAFE_LOG2, 2**SAFE_LOG2] are
# accumulated as they are; beyond, the batch is scaled by a power of two so
# that squares and fourth powers can neither overflow nor underflow
SAFE_LOG2 = 200
# share of a diagonal entry of the scatter about the provisional centre that
# the correction to the batch mean may cancel before the batch is re-read
# about its mean (0.5: at most one bit of the result is lost)
REFINE_RATIO = 0.5
# float64 entries converted at a time inside a block of numpy rows (1 MiB),
# so that both steps of the conversion run in the core's cache
_CACHE_ELEMENTS = 2**17
# rows that set the provisional centre and the scale of a batch
_HEAD_ROWS = 256
# a product of numpy rows above this many multiply-adds is split by rows into
# at most _SPLIT_MAX_SHARES shares of at least _SPLIT_MIN_ROWS rows, whose
# own d x d matrices (two per share) take at most _SPLIT_MATRIX_BYTES: rows
# up to 2,048 wide are split in two, up to 1,448 wide in four
_SPLIT_MIN_FLOPS = 2**32
_SPLIT_MAX_SHARES = 4
_SPLIT_MIN_ROWS = 1024
_SPLIT_MATRIX_BYTES = 2**27


# ------------------------------------------------------------------ threads
@functools.cache
def _blas():
    """threadpoolctl's controller, scanned once (a scan takes milliseconds)."""
    import scipy.linalg  # noqa: F401  (its BLAS must be loaded to be found)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


_LIMIT = threading.Lock()


@contextmanager
def one_blas_thread():
    """Context in which BLAS runs on one thread (threadpoolctl's limit).

    An eigendecomposition is thousands of small BLAS calls, and a block's
    scatter product a few calls too short to repay the synchronisation of
    BLAS's threads: on a loaded machine every synchronisation waits for a
    thread that is not running (``benchmarks/bench_threads.py``). numpy's
    OpenBLAS has one thread count for the whole process, and two threads'
    threadpoolctl limiters, left in another order than they were entered,
    leave it on one thread for good; so one thread at a time holds the
    limit, and a fit that runs meanwhile in another thread runs under it or,
    once it is lifted, on BLAS's threads.
    """
    if not _LIMIT.acquire(blocking=False):
        yield
        return
    try:
        with _blas().limit(limits=1, user_api="blas"):
            yield
    finally:
        _LIMIT.release()


def _row_shares(n: int, d: int) -> int:
    """Shares to split the scatter product of ``n`` numpy rows into (1: none).

    One per CPU this process may use, within the limits above. It depends on
    the shape and the machine only, never on the thread count of the moment,
    so the same rows always give the same bits.
    """
    if float(n) * d * d <= _SPLIT_MIN_FLOPS:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    by_memory = _SPLIT_MATRIX_BYTES // (16 * d * d)
    return max(1, min(cpus, _SPLIT_MAX_SHARES, by_memory, n // _SPLIT_MIN_ROWS))


def _blas_threads() -> int:
    """BLAS threads allowed now: 1 under a caller's one-thread limit."""
    libs = _blas().select(user_api="blas").lib_controllers
    return min((lib.num_threads for lib in libs), default=1)


# ------------------------------------------------------------------ blocks
def _block_rows(n: int, d: int, n_slots: int = 1) -> int:
    """Rows per working block: equal blocks of ``_BLOCK_ELEMENTS / n_slots``."""
    cap = max(1, _BLOCK_ELEMENTS // (d * n_slots))
    n_blocks = -(-n // cap)
    return -(-n // n_blocks)


def safe_exponent(top: float) -> int:
    """0 if values of magnitude ``top`` square safely, else their exponent."""
    if not (top > 0 and math.isfinite(top)):
        return 0
    e = math.frexp(top)[1]
    return 0 if -SAFE_LOG2 <= e <= SAFE_LOG2 else e


def unscale(a, e: int):
    """``a * 2**e``, exactly (``a`` itself when ``e == 0``)."""
    return a if e == 0 else np.ldexp(a, e)


_WORK = threading.local()


def _work_buffer(X, rows: int, dtype, slot: int = 0, n_slots: int = 1):
    """A ``(rows, d)`` scratch block for the rows ``X``, in their namespace.

    A fresh numpy block costs a page fault per 4 KiB page on first write,
    about as much as converting the rows into it, so each thread keeps its
    ``n_slots`` blocks (64 MiB in all); a device's allocator caches its own.
    """
    d = X.shape[1]
    if not isinstance(X, np.ndarray):
        xp, device = namespace_of(X)
        return xp.empty((rows, d), dtype=dtype, device=device)
    size = rows * d
    cap = _BLOCK_ELEMENTS // n_slots
    bufs = getattr(_WORK, "buffers", None) or []
    if len(bufs) != n_slots:
        # keep what fits the new share of the budget
        bufs = [b for b in bufs[:n_slots] if b is not None and b.size <= cap]
        bufs += [None] * (n_slots - len(bufs))
        _WORK.buffers = bufs
    buf = bufs[slot]
    if buf is None or buf.size < size:
        buf = np.empty(size)
        if size <= cap:
            bufs[slot] = buf
    return buf[:size].reshape(rows, d)


def head_rows(X) -> np.ndarray:
    """The first ``_HEAD_ROWS`` rows of ``X``, as a new float64 numpy array."""
    return np.array(to_host(X[: min(_HEAD_ROWS, X.shape[0]), ...]), dtype=np.float64)


def _centre_block(Y, X, centre, e, w, piece):
    """``Y = (X - centre) * 2**-e`` in ``Y``'s dtype; return its column sums.

    The rows are cast into the work block and centred there, in place,
    rather than by a mixed-type subtraction (a measured choice:
    ``benchmarks/README.md``, "Choices measured once"); ``piece`` rows at a
    time stay in the core's cache, where their column sums come almost for
    free.
    """
    xp, _ = namespace_of(Y)
    sums = None
    n = Y.shape[0]
    for lo in range(0, n, piece):
        rows = slice(lo, min(lo + piece, n))
        out = Y[rows, :]
        out[...] = X[rows, :]
        out -= centre
        if e:
            _times_pow2(out, -e)  # exact, even from subnormal values
        part = xp.sum(out, axis=0) if w is None else w[rows] @ out
        sums = part if sums is None else sums + part
    return sums


def batch_statistics(X, w, sw, kind, fourth, shift):
    """(mean, scatter, norm3, norm4, exponent) of one batch of rows.

    Each block of rows is converted to float64 about a provisional centre
    ``K`` (``shift``, else the mean of the first 256 rows) and multiplied into
    ``S = sum w y y^T`` while the sums ``s = sum w y`` are kept, ``y = x - K``;
    the scatter about the batch mean is then exactly ``S - s s^T / sw``. That
    subtraction loses accuracy only when ``K`` is far from the mean (by more
    than the spread of the data, for drifting or sorted data), so when it
    would cancel more than half of a diagonal entry the batch is read a
    second time about the mean just found, which makes the correction
    negligible. Either way the result is the exact scatter about the mean to
    float64 round-off, as the two-pass algorithm gives.

    Values are scaled by ``2**-e`` when the first rows, centred, are below
    ``2**-200`` or above ``2**200``, so that squares neither
    underflow nor overflow; the statistics are returned in those units.
    """
    # the provisional centre and the scale come from the first rows; a poor
    # centre only costs the second pass below, never accuracy
    Y0 = head_rows(X)
    if shift is None:
        w0 = None if w is None else w[: len(Y0)]
        if w0 is not None and not w0.sum() > 0:
            w0 = None
        shift = np.average(Y0, axis=0, weights=w0)
    Y0 -= shift
    e = safe_exponent(float(np.max(np.abs(Y0))))
    for attempt in range(2):
        S, s, n3, n4 = accumulate(X, w, kind, fourth, shift, e)
        c = s / sw  # batch mean minus K, in scaled units
        diag = np.diagonal(S) if kind == "full" else S
        u = s / math.sqrt(sw)
        with np.errstate(divide="ignore", invalid="ignore"):
            cancelled = np.where(diag > 0, u * u / diag, 0.0)
        if attempt or not np.max(cancelled, initial=0.0) > REFINE_RATIO:
            break
        shift = shift + unscale(c, e)
    trace = float(np.sum(diag))
    if fourth:
        Sc = S @ c
        cc = float(c @ c)
        n4 = n4 + 4.0 * float(c @ Sc) - 4.0 * float(c @ n3)
        n4 += 2.0 * cc * trace - 3.0 * sw * cc * cc
        n3 = n3 - trace * c - 2.0 * Sc + (2.0 * sw * cc) * c
    if kind == "full":
        S -= np.outer(u, u)  # exactly symmetric, as S is
    else:
        S -= u * u
    mean = shift + unscale(c, e)
    return mean, S, n3, n4, e


def accumulate(X, w, kind, fourth, shift, e):
    """One pass: ``S``, ``s`` (and third/fourth sums) about ``shift``.

    A large product of numpy rows is split into shares (:func:`_row_shares`)
    added in a fixed order: the result does not depend on how many ran at once.
    """
    xp, device = namespace_of(X)
    dtype = float_dtype(xp, device)
    n, d = X.shape
    k = _row_shares(n, d) if kind == "full" and isinstance(X, np.ndarray) else 1
    bounds = [n * i // k for i in range(k + 1)]
    shares = []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        buf = _work_buffer(X, _block_rows(hi - lo, d, k), dtype, i, k)
        shares.append((X[lo:hi, ...], None if w is None else w[lo:hi], buf))
    threads = min(k, _blas_threads())  # read before the limit below
    with one_blas_thread():
        results = _run_shares(shares, threads, (kind, fourth, shift, e))
    S, s, n3, n4 = results[0]
    for Si, si, n3i, n4i in results[1:]:
        S += Si
        s += si
        if fourth:
            n3 += n3i
            n4 += n4i
    return S, s, n3, n4


def _run_shares(shares, threads, args):
    """``_accumulate_rows`` of every share, in order, on ``threads`` threads.

    With several threads every share runs in a pool thread while the caller
    waits, rather than one share in the calling thread itself, since the
    fit waits for the slowest share (a choice measured in :ref:`scaling`).
    The caller's floating-point error state is passed on (numpy
    keeps it per thread). At interpreter shutdown, when no thread may start,
    the shares run here.
    """
    err = np.geterr()

    def run(share):
        with np.errstate(**err):
            return _accumulate_rows(*share, *args)

    if threads > 1:
        try:
            with ThreadPoolExecutor(threads) as pool:
                return list(pool.map(run, shares))
        except RuntimeError:  # "cannot schedule new futures after shutdown"
            pass
    return [run(share) for share in shares]


def _accumulate_rows(X, w, buf, kind, fourth, shift, e):
    """One thread's pass over the rows ``X``, in blocks of ``len(buf)`` rows.

    Each block of rows is converted into ``buf`` (of the widest float dtype
    the device of ``X`` supports), centred, scaled, multiplied and added there;
    only the sums come to host memory, as float64 numpy arrays, and ``w``
    (host float64) goes to the device block by block.

    A device with float64 (CPUs, CUDA) computes what the numpy rows do, to
    round-off. A device without it (Apple's MPS) works in float32: each
    block's product is as accurate as float32 allows, and the blocks are
    added with Kahan's compensated summation, so that the error does not
    grow with the number of rows. The float32 centre it subtracts differs
    from ``shift`` by round-off; the sums are moved to ``shift`` exactly on
    the host (:func:`_recentred`).
    """
    xp, device = namespace_of(X)
    dtype = buf.dtype
    n, d = X.shape
    step = buf.shape[0]
    piece = max(1, _CACHE_ELEMENTS // d) if isinstance(X, np.ndarray) else step
    full = kind == "full"
    centre = xp.asarray(shift, dtype=dtype, device=device)
    sums = [_Sum(dtype == xp.float32) for _ in range(4 if fourth else 2)]
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        Y = buf[: hi - lo, :]
        wb = None if w is None else xp.asarray(w[lo:hi], dtype=dtype, device=device)
        sums[1].add(_centre_block(Y, X[lo:hi, :], centre, e, wb, piece))
        if fourth:
            q = xp.vecdot(Y, Y)
            wq = q if wb is None else q * wb
            sums[2].add(wq @ Y)
            sums[3].add(xp.sum(wq * q))
        if full:
            if wb is not None:
                Y *= xp.sqrt(wb)[:, None]
            # numpy runs Y.T @ Y as a symmetric rank-k update (syrk)
            sums[0].add(Y.T @ Y)
        else:
            Y *= Y
            sums[0].add(xp.sum(Y, axis=0) if wb is None else wb @ Y)
    S, s = sums[0].to_host(), sums[1].to_host()
    if full:
        S = (S + S.T) / 2  # a device's product need not be exactly symmetric
    n3 = sums[2].to_host() if fourth else None
    n4 = float(sums[3].to_host()) if fourth else 0.0
    delta = unscale(np.array(to_host(centre), dtype=np.float64) - shift, -e)
    if np.any(delta):
        sw = float(n) if w is None else float(w.sum())
        S, s, n3, n4 = _recentred(S, s, n3, n4, sw, delta, full)
    return S, s, n3, n4


class _Sum:
    """Running sum of arrays of one namespace; Kahan-compensated in float32."""

    def __init__(self, compensated: bool) -> None:
        self.compensated = compensated
        self.total = self.error = None

    def add(self, part) -> None:
        if self.total is None:
            self.total = part
            self.error = part * 0 if self.compensated else None
        elif not self.compensated:
            self.total += part  # the first part is a fresh array of its own
        else:
            # Kahan: the low-order bits each addition loses are carried to
            # the next one, so the error does not grow with the blocks
            y = part - self.error
            t = self.total + y
            self.error = (t - self.total) - y
            self.total = t

    def to_host(self) -> np.ndarray:
        total = np.array(to_host(self.total), dtype=np.float64)
        if self.compensated:
            total -= to_host(self.error)
        return total


def _times_pow2(Y, k: int) -> None:
    """``Y *= 2**k`` (exact), in steps that stay in float64's range."""
    while k:
        step = max(-1000, min(1000, k))
        Y *= 2.0**step
        k -= step


def _recentred(S, s, n3, n4, sw, delta, full):
    """The sums of ``y + delta`` from the sums of rows ``y`` (about any centre).

    With ``y' = y + delta`` (``S = sum w y y^T``, ``s = sum w y``,
    ``n3 = sum w |y|^2 y``, ``n4 = sum w |y|^4``), expanding the products.
    """
    dd = float(delta @ delta)
    sd = float(s @ delta)
    if full:
        Sd = S @ delta
        trace = float(np.trace(S))
        S = S + np.outer(s, delta) + np.outer(delta, s) + sw * np.outer(delta, delta)
    else:
        S = S + 2.0 * s * delta + sw * delta * delta
    if n3 is not None:
        n4 = (
            n4
            + 4.0 * float(delta @ n3)
            + 4.0 * float(delta @ Sd)
            + 2.0 * dd * trace
            + 4.0 * dd * sd
            + sw * dd * dd
        )
        n3 = n3 + trace * delta + 2.0 * Sd + dd * s + 2.0 * sd * delta + sw * dd * delta
    return S, s + sw * delta, n3, n4


# ------------------------------------------------------------------ merges
def merged_exponent(ea: int, eb: int, t: np.ndarray) -> int:
    """Exponent of a merge: the parts' larger one, or the between-term's."""
    e = max(ea, eb)
    with np.errstate(over="ignore", invalid="ignore"):
        top = float(np.max(np.abs(t))) if t.size else 0.0
    if top > 0 and math.isfinite(top):
        et = math.frexp(top)[1]
        if et - e > SAFE_LOG2:
            return safe_exponent(top) or et
    return e


def shift_norm4(part, d: np.ndarray) -> float:
    """``sum w ||y + d||^4`` from a part's moments about its own mean.

    ``part`` holds ``sum_weights``, ``scatter``, ``norm3`` and ``norm4`` of
    rows ``y`` about their own mean (``sum w y = 0``), all in the units of
    ``d``: the fourth moment of the rows moved by ``d``, for a merge. The
    expansion leaves out the term ``4 (d @ d) (sum w y) @ d``, which is zero
    only about the part's own mean: moments about any other centre give a
    wrong result.
    """
    dd = float(d @ d)
    return (
        part.norm4
        + 4.0 * float(d @ part.scatter @ d)
        + 4.0 * float(part.norm3 @ d)
        + 2.0 * dd * float(np.trace(part.scatter))
        + part.sum_weights * dd * dd
    )


def shift_norm3(part, d: np.ndarray) -> np.ndarray:
    """``sum w ||y + d||^2 (y + d)`` from a part's moments about its own mean."""
    dd = float(d @ d)
    return (
        part.norm3
        + np.trace(part.scatter) * d
        + 2.0 * (part.scatter @ d)
        + part.sum_weights * dd * d
    )
