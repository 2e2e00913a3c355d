"""Does the thread policy of the linear estimators pay? Each part against its reference.

The linear estimators use two thread policies (``sklearn_isotropy/linear/
_kernels.py``): the factorisations of a covariance (``eigh``, SVD,
Cholesky, QR) run under ``threadpoolctl``'s one-thread BLAS limit, and the
scatter product of a large batch is split by rows into one share per CPU
(at most four), each converted to float64 and multiplied on one BLAS thread
in its own Python thread. This script times each policy against what BLAS
does without it, interleaved round by round in one process, so that every
ratio compares calls that saw the same machine:

* ``eigh`` of a ``d x d`` covariance on one BLAS thread and on BLAS's
  default threads;
* the float64 scatter ``Y.T @ Y`` of float32 rows (converted block by block
  into float64, as the estimators do): on BLAS's default threads, on one
  BLAS thread, and split by rows into shares on Python threads, one BLAS
  thread each (the policy);
* ``WhiteningTransformer().fit`` of the same rows, for scale.

It prints the best and median time of each, and for each policy the ratio
of best times and the median of the per-round ratios against its reference,
with the number of rounds the policy won. It makes no load of its own: the
load average is printed before and after, and the result holds for the
machine as it was.

Run: ``python benchmarks/bench_threads.py`` (``--quick``: 20,000 rows).
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from _common import interleaved, load_average, machine_line
from threadpoolctl import threadpool_info, threadpool_limits

from sklearn_isotropy import WhiteningTransformer
from sklearn_isotropy.datasets import make_cone


def embeddings(n, d, seed=0):
    """Anisotropic float32 rows: a common offset and a decaying spectrum."""
    rng = np.random.default_rng(seed)
    X = make_cone(n, d, spread=(3.0, 0.03), offset=2.0, rotate=False, random_state=rng)
    return X.astype(np.float32)


def scatter(X, block=10_000):
    """float64 ``Y.T @ Y`` of float32 rows, converted block by block."""
    d = X.shape[1]
    S = np.zeros((d, d))
    buf = np.empty((min(block, len(X)), d))
    for lo in range(0, len(X), block):
        Y = buf[: len(X[lo : lo + block])]
        Y[...] = X[lo : lo + block]
        S += Y.T @ Y
    return S


def split_scatter(X, shares):
    """:func:`scatter` of ``shares`` row shares on as many threads, one BLAS thread."""
    bounds = np.linspace(0, len(X), shares + 1).astype(int)
    parts = [X[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(shares) as pool:
        return sum(pool.map(scatter, parts))


def one_thread(fn, *args):
    with threadpool_limits(1, user_api="blas"):
        return fn(*args)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=100_000)
    parser.add_argument("--n-features", type=int, default=768)
    parser.add_argument("--eigh-sizes", type=int, nargs="*", default=[384, 768])
    parser.add_argument("--shares", type=int, default=min(os.cpu_count() or 1, 4))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--settle", type=float, default=0.3)
    parser.add_argument("--quick", action="store_true", help="20,000 rows")
    args = parser.parse_args()
    if args.quick:
        args.n_samples = 20_000
    n, d = args.n_samples, args.n_features
    blas = max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
    print(
        f"{machine_line()}; BLAS default {blas} threads; {n:,} x {d} float32; "
        f"{args.repeat} interleaved rounds, {args.settle:g} s idle before each call"
    )
    X = embeddings(n, d)
    covs = {
        k: np.cov(embeddings(4 * k, k, seed=1).astype(np.float64), rowvar=False)
        for k in args.eigh_sizes
    }
    candidates = {}
    for k, cov in covs.items():
        candidates[f"eigh {k}, default threads"] = lambda c=cov: np.linalg.eigh(c)
        candidates[f"eigh {k}, 1 thread"] = lambda c=cov: one_thread(np.linalg.eigh, c)
    candidates.update(
        {
            "scatter, default threads": lambda: scatter(X),
            "scatter, 1 thread": lambda: one_thread(scatter, X),
            f"scatter, {args.shares} shares": lambda: split_scatter(X, args.shares),
            "fit WhiteningTransformer": lambda: WhiteningTransformer().fit(X),
        }
    )
    load_before = load_average()
    times = interleaved(candidates, args.repeat, settle=args.settle)
    print(f"load average {load_before:.1f} before, {load_average():.1f} after\n")
    for name, t in times.items():
        print(f"{name:28s} best {t.min():7.3f} s   median {np.median(t):7.3f} s")
    pairs = [(f"eigh {k}, 1 thread", f"eigh {k}, default threads") for k in covs]
    pairs += [
        (f"scatter, {args.shares} shares", "scatter, default threads"),
        (f"scatter, {args.shares} shares", "scatter, 1 thread"),
    ]
    print()
    for policy, ref in pairs:
        a, b = times[policy], times[ref]
        per_round = a / b
        print(
            f"{policy} / {ref}: {a.min() / b.min():.2f}x best, "
            f"{np.median(per_round):.2f}x median per round, faster in "
            f"{int(np.sum(per_round < 1))} of {len(a)} rounds"
        )


if __name__ == "__main__":
    main()
