"""Scatter kernels: one batch of rows multiplied into float64 statistics.

The heavy part of every fit: each block of rows is converted to float64
about a provisional centre, scaled by a power of two when its values would
underflow or overflow once squared, and multiplied into the scatter matrix
(or its diagonal), with the column sums and, on request, the third and
fourth moments of the centred row norms. A large batch is split by rows
between threads (see :mod:`._threads`). :func:`batch_statistics` turns the
sums into the exact statistics of the batch about its own mean;
:class:`~sklearn_isotropy.MomentAccumulator` merges them, with the
formulas at the end of this module for the scale and the higher moments of
a merge.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ._array_api import float_dtype, namespace_of, to_host

__all__ = [
    "REFINE_RATIO",
    "SAFE_LOG2",
    "accumulate",
    "batch_statistics",
    "head_rows",
    "merged_exponent",
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
# float64 entries converted at a time inside a block (1 MiB), so that both
# steps of the conversion run in the core's cache
_CACHE_ELEMENTS = 2**17
# rows that set the provisional centre and the scale of a batch
_HEAD_ROWS = 256


def _block_rows(n: int, d: int, n_slots: int = 1) -> int:
    """Rows per working block: equal blocks of at most ``_BLOCK_ELEMENTS``.

    With a batch split into ``n_slots`` shares, each gets blocks of at most
    ``_BLOCK_ELEMENTS / n_slots`` entries (the same memory in all).
    """
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


def _work_buffer(rows: int, d: int, slot: int = 0, n_slots: int = 1) -> np.ndarray:
    """A ``(rows, d)`` float64 scratch block, reused between calls per thread.

    A fresh block costs a page fault per 4 KiB page on first write, about as
    much as converting the rows into it; a stream of ``partial_fit`` calls
    reuses the calling thread's blocks instead: ``n_slots`` of them, one per
    share of a split batch, of at most ``_BLOCK_ELEMENTS / n_slots`` entries
    (64 MiB in all, kept per thread that fitted).
    """
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


def _centre_block(dst, src, shift, e, sums, weights=None) -> None:
    """``dst = (float64(src) - shift) * 2**-e`` in place, and its column sums.

    Casting into a contiguous buffer and subtracting in place is about twice
    as fast as a mixed-type ``np.subtract`` (which casts through small
    buffers). Doing it a few hundred rows at a time keeps each piece in the
    core's cache between the steps, where its (weighted) column sums are
    added to ``sums`` almost for free, instead of in another pass over the
    block.
    """
    step = max(1, _CACHE_ELEMENTS // max(1, src.shape[1]))
    ones = np.ones(min(step, len(src))) if weights is None else None
    for lo in range(0, len(src), step):
        out = dst[lo : lo + step]
        out[...] = src[lo : lo + step]
        out -= shift
        if e:
            np.ldexp(out, -e, out=out)  # exact, even from subnormal values
        w = ones[: len(out)] if weights is None else weights[lo : lo + step]
        sums += w @ out


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

    A large product is split by rows into shares (see
    :func:`~sklearn_isotropy.linear._threads.row_shares`), each converted and
    multiplied on one BLAS thread, run at once on as many threads as BLAS may
    use and added in a fixed order: the result depends on the rows and the
    machine, not on how many shares ran at once or which finished first.

    Rows of another Array API namespace are multiplied on their own device
    (:func:`_accumulate_on_device`); the sums come back as numpy arrays.
    """
    from ._threads import one_blas_thread, row_shares, share_threads

    if not isinstance(X, np.ndarray):
        return _accumulate_on_device(X, w, kind, fourth, shift, e)
    n, d = X.shape
    k = row_shares(n, d) if kind == "full" else 1
    if k == 1:
        step = _block_rows(n, d)
        return _accumulate_rows(X, w, kind, fourth, shift, e, _work_buffer(step, d))
    bounds = [n * i // k for i in range(k + 1)]
    shares = []
    for i in range(k):
        lo, hi = bounds[i], bounds[i + 1]
        buf = _work_buffer(_block_rows(hi - lo, d, k), d, i, k)
        shares.append((X[lo:hi], None if w is None else w[lo:hi], buf))
    threads = share_threads(k)  # read before the limit below
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
    waits: a share run in the calling thread itself was up to 30% slower
    than the other on the benchmark machine, and the fit waits for the
    slowest. The caller's floating-point error state is passed on (numpy
    before 2.0 keeps it per thread). At interpreter shutdown, when no thread
    may start, the shares left run here.
    """
    from ._threads import worker_blas_thread

    err = np.geterr()

    def run(share):
        Xi, wi, buf = share
        with np.errstate(**err), worker_blas_thread():
            return _accumulate_rows(Xi, wi, *args, buf)

    futures = []
    if threads > 1:
        pool = ThreadPoolExecutor(threads)
        try:
            try:
                for share in shares:
                    futures.append(pool.submit(run, share))
            except RuntimeError:  # "cannot schedule new futures after shutdown"
                pass
            results = [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True)
    else:
        results = []
    return results + [run(share) for share in shares[len(futures) :]]


def _accumulate_rows(X, w, kind, fourth, shift, e, buf):
    """One thread's pass over ``X`` in blocks of ``len(buf)`` rows."""
    n, d = X.shape
    step = len(buf)
    full = kind == "full"
    S = np.zeros((d, d)) if full else np.zeros(d)
    product = np.empty((d, d)) if full and n > step else None
    s = np.zeros(d)
    n3 = np.zeros(d) if fourth else None
    n4 = 0.0
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        Y = buf[: hi - lo]
        wb = None if w is None else w[lo:hi]
        _centre_block(Y, X[lo:hi], shift, e, s, wb)
        if fourth:
            q = np.einsum("ij,ij->i", Y, Y)
            wq = q if wb is None else q * wb
            n3 += wq @ Y
            n4 += float(wq @ q)
        if full:
            if wb is not None:
                Y *= np.sqrt(wb)[:, None]
            # numpy runs Y.T @ Y as a symmetric rank-k update (syrk) and
            # returns an exactly symmetric matrix. Calling scipy's BLAS here
            # instead interleaves two OpenBLAS thread pools whose spinning
            # threads stall each other (about 2x slower on 2 cores). The
            # first block writes into S directly; the others into a reused
            # buffer (a fresh 4.7 MB result per block costs page faults).
            if lo == 0:
                np.matmul(Y.T, Y, out=S)
            else:
                np.matmul(Y.T, Y, out=product)
                S += product
        elif wb is None:
            S += np.einsum("ij,ij->j", Y, Y)
        else:
            S += np.einsum("i,ij,ij->j", wb, Y, Y)
    return S, s, n3, n4


# ---------------------------------------------------------------- devices
class _DeviceSum:
    """Running sum of arrays on a device; Kahan-compensated in float32."""

    def __init__(self, compensated: bool) -> None:
        self.compensated = compensated
        self.total = self.error = None

    def add(self, part) -> None:
        if self.total is None:
            self.total, self.error = part, part * 0
        elif not self.compensated:
            self.total = self.total + part
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


def _accumulate_on_device(X, w, kind, fourth, shift, e):
    """:func:`accumulate` for the rows of another Array API namespace.

    The rows stay on their device: each block is converted to the widest
    float dtype the device supports, centred, scaled, multiplied, and added
    there; only the sums (``O(d**2)``) come to host memory, as float64 numpy
    arrays, and ``w`` (host float64) goes to the device block by block.

    A device with float64 (CPUs, CUDA) computes exactly what the numpy
    kernel does, to round-off. A device without it (Apple's MPS) works in
    float32: each block's product is as accurate as float32 allows, and the
    blocks are added with Kahan's compensated summation, so that the error
    does not grow with the number of rows. The float32 centre it subtracts
    differs from ``shift`` by round-off; the sums are moved to ``shift``
    exactly on the host (:func:`_recentred`).
    """
    xp, device = namespace_of(X)
    dtype = float_dtype(xp, device)
    compensated = dtype == xp.float32
    n, d = X.shape
    full = kind == "full"
    centre = xp.asarray(shift, dtype=dtype, device=device)
    sums = [_DeviceSum(compensated) for _ in range(4 if fourth else 2)]
    step = _block_rows(n, d)
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        # a converted copy, centred in place: one fresh array a block (a
        # subtraction across dtypes is several times slower in torch)
        Y = xp.astype(X[lo:hi, :], dtype, copy=True)
        Y -= centre
        _times_pow2(Y, -e)
        wb = None if w is None else xp.asarray(w[lo:hi], dtype=dtype, device=device)
        sums[1].add(xp.sum(Y, axis=0) if wb is None else wb @ Y)
        if fourth:
            q = xp.sum(Y * Y, axis=1)
            wq = q if wb is None else q * wb
            sums[2].add(wq @ Y)
            sums[3].add(xp.sum(wq * q))
        if not full:
            sums[0].add(xp.sum(Y * Y, axis=0) if wb is None else wb @ (Y * Y))
        else:
            if wb is not None:
                Y *= xp.sqrt(wb)[:, None]
            sums[0].add(Y.T @ Y)
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
    ``d``: the fourth moment of the rows moved by ``d``, for a merge.
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
