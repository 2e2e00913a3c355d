"""Speed and memory of the linear post-processors.

Prints, in one run on the same data:

* fit and transform time of ``WhiteningTransformer`` against
  ``PCA(whiten=True, svd_solver="covariance_eigh")`` and against the bare
  numpy recipe of the BERT-whitening code (mean, ``np.cov``, ``svd``), on
  100,000 x 768 float32 rows;
* the peak memory of ``partial_fit`` over 1,000,000 x 768 float32 rows in
  chunks of 10,000 (rows generated chunk by chunk, never held together).

Targets: fit <= 1.0x sklearn's, transform <= 1.1x a bare matmul, streaming
peak < 200 MB above one chunk. Timings are the best of ``--repeat`` runs.

Run: ``python benchmarks/bench_linear.py`` (``--quick`` for a small run).
"""

from __future__ import annotations

import argparse
import platform
import time
import tracemalloc
import warnings

import numpy as np
from sklearn.decomposition import PCA

from sklearn_isotropy import WhiteningTransformer


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def embeddings(n, d, seed=0):
    """Anisotropic float32 rows: a common offset and a decaying spectrum."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(3.0, 0.03, d).astype(np.float32)
    offset = rng.normal(size=d).astype(np.float32) * 2
    return rng.standard_normal((n, d), dtype=np.float32) * scales + offset


def naive_fit(X):
    mu = X.mean(axis=0, keepdims=True)
    cov = np.cov(X.T)
    u, s, _ = np.linalg.svd(cov)
    return mu, u @ np.diag(1.0 / np.sqrt(s))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=100_000)
    parser.add_argument("--n-features", type=int, default=768)
    parser.add_argument("--stream-rows", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="10x smaller sizes")
    args = parser.parse_args()
    if args.quick:
        args.n_samples //= 10
        args.stream_rows //= 10
    bench_fit_transform(args)
    bench_streaming(args)


def bench_fit_transform(args):
    n, d = args.n_samples, args.n_features
    print(
        f"machine: {platform.machine()}, {platform.processor() or '?'}; "
        f"numpy {np.__version__}"
    )
    X = embeddings(n, d)
    print(f"\n== fit / transform, {n:,} x {d} float32, best of {args.repeat} ==")

    t_ours, ours = best_of(lambda: WhiteningTransformer().fit(X), args.repeat)
    t_pca, pca = best_of(
        lambda: PCA(whiten=True, svd_solver="covariance_eigh").fit(X), args.repeat
    )
    t_naive, (mu, W) = best_of(lambda: naive_fit(X), args.repeat)
    print(f"fit   WhiteningTransformer   {t_ours:8.3f} s")
    print(
        f"fit   PCA(covariance_eigh)   {t_pca:8.3f} s   ratio ours/PCA   "
        f"{t_ours / t_pca:.2f}x  (target <= 1.0x)"
    )
    print(
        f"fit   numpy recipe (cov+svd) {t_naive:8.3f} s   ratio ours/numpy "
        f"{t_ours / t_naive:.2f}x"
    )

    # the same fit on float64 rows, where sklearn also works in float64
    X64 = X.astype(np.float64)
    t_ours64, _ = best_of(lambda: WhiteningTransformer().fit(X64), args.repeat)
    t_pca64, _ = best_of(
        lambda: PCA(whiten=True, svd_solver="covariance_eigh").fit(X64), args.repeat
    )
    print(
        f"fit float64 input: ours {t_ours64:.3f} s, PCA {t_pca64:.3f} s, "
        f"ratio {t_ours64 / t_pca64:.2f}x"
    )

    W32 = ours.whitening_.astype(np.float32)
    tt_ours, Z = best_of(lambda: ours.transform(X), args.repeat)
    tt_mm, _ = best_of(lambda: X @ W32, args.repeat)
    tt_pca, _ = best_of(lambda: pca.transform(X), args.repeat)
    W_naive = W.astype(np.float32)
    mu32 = mu.astype(np.float32)
    tt_naive, _ = best_of(lambda: (X - mu32) @ W_naive, args.repeat)
    print(
        f"transform WhiteningTransformer {tt_ours:8.3f} s   ratio vs bare matmul "
        f"{tt_ours / tt_mm:.2f}x  (target <= 1.1x)"
    )
    print(f"transform bare X @ W           {tt_mm:8.3f} s")
    print(f"transform PCA                  {tt_pca:8.3f} s")
    print(f"transform numpy (X - mu) @ W   {tt_naive:8.3f} s")
    assert Z.dtype == np.float32 and np.all(np.isfinite(Z))


def bench_streaming(args):
    d = args.n_features

    rows, chunk = args.stream_rows, args.chunk
    print(f"\n== partial_fit over {rows:,} x {d} float32 in chunks of {chunk:,} ==")
    rng = np.random.default_rng(1)
    scales = np.geomspace(3.0, 0.03, d).astype(np.float32)
    est = WhiteningTransformer()
    chunk_mb = chunk * d * 4 / 2**20
    tracemalloc.start()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(rows // chunk):
            block = rng.standard_normal((chunk, d), dtype=np.float32) * scales
            est.partial_fit(block)
            del block
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_mb = peak / 2**20
    print(f"rows seen {est.n_samples_seen_:,} in {elapsed:.1f} s")
    print(
        f"peak traced memory {peak_mb:.0f} MB; one chunk {chunk_mb:.0f} MB; "
        f"above one chunk {peak_mb - chunk_mb:.0f} MB  (target < 200 MB)"
    )


if __name__ == "__main__":
    main()
