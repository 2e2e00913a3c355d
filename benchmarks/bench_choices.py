"""Small choices in the linear code, each against the alternative it replaced.

Each docstring or comment that names one of these choices points here
(``benchmarks/README.md``, "Choices measured once"). Every pair is timed in
one process, interleaved round by round (``_common.interleaved``), on one
BLAS thread; the table gives the best time of each and the ratio of the
choice to its alternative (best times, and the median of the per-round
ratios):

1. ``sorted_eigh`` (``_utils/_eigen.py``): ``scipy.linalg.eigh(driver=
   "evd")`` against ``numpy.linalg.eigh``, on a 768 x 768 covariance;
2. the scatter kernels' centring (``linear/_scatter_kernels.py``): float32
   rows cast into a float64 block and centred there in place, against a
   mixed-type subtraction;
3. the transform's block of input (``linear/_base.py``): 4,096 rows of 768
   against 512 at a time, each block centred and multiplied;
4. the cache-sized blocks of the other maps (``linear/_base.py``): a
   NATSV-like projection, ``Y - (Y @ U) @ U.T`` with ``U`` 768 x 5, in
   blocks of 2**18 bytes against blocks of 2**24;
5. the transform's product written into its output rows (``out=``), against
   the product followed by a copy into them;
6. ``MomentAccumulator.update`` with ``fourth_moments=True`` (the sums
   ``ledoit_wolf_shrinkage`` needs) against ``False``.

Run from the repository root::

    python benchmarks/bench_choices.py --repeat 9
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import interleaved, load_average, machine_line, markdown_table
from bench_linear import embeddings
from scipy import linalg
from threadpoolctl import threadpool_limits

from sklearn_isotropy import MomentAccumulator


def _blocks(n_rows, rows):
    return [slice(lo, lo + rows) for lo in range(0, n_rows, rows)]


def _transform(X, mu, W, out, rows):
    for block in _blocks(len(X), rows):
        np.matmul(X[block] - mu, W, out=out[block])


def _projection(Y, U, out, block_bytes):
    rows = max(1, block_bytes // (Y.shape[1] * Y.itemsize))
    for block in _blocks(len(Y), rows):
        part = Y[block]
        out[block] = part - (part @ U) @ U.T


def _copied(Y, W, out):
    product = Y @ W
    out[...] = product


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--settle", type=float, default=0.3)
    parser.add_argument("--n-samples", type=int, default=100_000)
    args = parser.parse_args()
    n, d = args.n_samples, 768  # the width the choices were made at
    rng = np.random.default_rng(0)
    X = embeddings(n, d)
    X64 = X.astype(np.float64)
    mu = X64.mean(axis=0)
    mu32 = mu.astype(np.float32)  # a float32 transform centres in float32
    cov = np.cov(X64[:20_000], rowvar=False)
    W = np.linalg.eigh(cov)[1].astype(np.float32)
    U = np.linalg.qr(rng.standard_normal((d, 5)))[0]
    out32, out64 = np.empty((n, d), np.float32), np.empty((n, d))
    work = np.empty((min(n, 8192), d))

    def centre_in_place():
        for block in _blocks(n, len(work)):
            Y = work[: len(X[block])]
            Y[...] = X[block]
            Y -= mu

    def centre_mixed():
        for block in _blocks(n, len(work)):
            X[block] - mu  # noqa: B018  (the subtraction is what is timed)

    # (the choice, how it runs, the alternative, how that runs)
    pairs = [
        (
            "eigh: scipy evd",
            lambda: linalg.eigh(cov, driver="evd", check_finite=False),
            "eigh: numpy",
            lambda: np.linalg.eigh(cov),
        ),
        (
            "centring: cast, in place",
            centre_in_place,
            "centring: mixed-type subtraction",
            centre_mixed,
        ),
        (
            "transform: blocks of 4,096 rows",
            lambda: _transform(X, mu32, W, out32, 4096),
            "transform: blocks of 512 rows",
            lambda: _transform(X, mu32, W, out32, 512),
        ),
        (
            "projection: 2**18-byte blocks",
            lambda: _projection(X64, U, out64, 2**18),
            "projection: 2**24-byte blocks",
            lambda: _projection(X64, U, out64, 2**24),
        ),
        (
            "product: out=",
            lambda: np.matmul(X, W, out=out32),
            "product: then a copy",
            lambda: _copied(X, W, out32),
        ),
        (
            "update: fourth moments",
            lambda: MomentAccumulator(d, fourth_moments=True).update(X),
            "update: without",
            lambda: MomentAccumulator(d, fourth_moments=False).update(X),
        ),
    ]
    load_before = load_average()
    rows = []
    with threadpool_limits(1, user_api="blas"):
        for choice, chosen, other, alternative in pairs:
            t = interleaved(
                {choice: chosen, other: alternative}, args.repeat, args.settle
            )
            a, b = t[choice], t[other]
            rows.append(
                [
                    f"{choice} / {other.partition(': ')[2]}",
                    f"{a.min():.4f} s",
                    f"{b.min():.4f} s",
                    f"{a.min() / b.min():.2f}x ({np.median(a / b):.2f}x)",
                ]
            )
    print(
        f"{machine_line()} (after; {load_before:.2f} before); {n:,} x {d} float32 "
        f"rows, {args.repeat} interleaved rounds, one BLAS thread"
    )
    header = ["choice / alternative", "choice", "alternative", "ratio (median)"]
    print("\n".join(markdown_table(header, rows)))


if __name__ == "__main__":
    main()
