"""Speed and memory of the linear post-processors.

Prints, in one run on the same data:

* fit time of ``WhiteningTransformer`` on 100,000 x 768 float32 rows against
  the float64 ``X.T @ X`` of the same rows (the floor of any fit that
  accumulates its statistics in float64), against
  ``PCA(whiten=True, svd_solver="covariance_eigh")`` and against the bare
  numpy recipe of the BERT-whitening code (mean, ``np.cov``, ``svd``);
* how far float32 fits (ours and PCA's) are from a float64 fit, on the
  benchmark rows and on any ``--embeddings`` files;
* transform time against a bare float32 matmul;
* the steps of that fit timed alone (the statistics with the rows split
  between threads and, unsplit, on one BLAS thread, the conversion alone,
  the products, the eigendecomposition on one and two threads);
* fit time and peak traced memory on wide data, 10 rows of 4,000 and of
  20,000 features (the dual form), next to the ``d x d`` (primal) fit of
  the 4,000-wide rows;
* ``partial_fit`` over 1,000,000 x 768 float32 rows in 100 chunks of 10,000
  (rows generated 100,000 at a time, never all held together, generation
  not timed), plus the one computation of the map at the end, against the
  float64 ``X.T @ X`` of the same rows, timed on each slice of 100,000 rows
  right after it was streamed; and the peak traced memory of the
  ``partial_fit`` calls.

Targets: fit <= 1.3x the float64 ``X.T @ X`` and faster than the numpy
recipe; streaming <= 1.3x the float64 ``X.T @ X`` of its rows with a peak
< 200 MB above one chunk. The transform, which centres before its product
(for accuracy), is reported against a bare matmul. Candidates are
timed round-robin for ``--repeat`` rounds (``--stream-repeat`` for the
streaming); the script prints the best time of each and, for every ratio,
both the ratio of best times and the median of the per-round ratios.

In the fit, transform and breakdown tables every timed call starts after
``--settle`` idle seconds (0.3 by default). OpenBLAS's worker threads spin
for about 0.1 s after each multi-threaded call (the breakdown prints the
CPU time they use), and a call timed in that window shares the cores with
them: a fit right after PCA's fit may pay for PCA's threads. The fit table
also reports the fit and the floor timed back to back, with no idle time.

Run: ``python benchmarks/bench_linear.py`` (``--quick`` for a small run).
"""

from __future__ import annotations

import argparse
import threading
import time
import tracemalloc
import warnings

import numpy as np
from _common import interleaved, machine_line
from sklearn.decomposition import PCA

from sklearn_isotropy import WhiteningTransformer
from sklearn_isotropy.datasets import make_cone
from sklearn_isotropy.exceptions import RankDeficiencyWarning


def idle_blas_spin(wait=0.3, rows=4000, d=768):
    """CPU seconds the process uses while idle for ``wait`` s after a product.

    Measured right after a float64 ``X.T @ X`` of ``rows x d`` on BLAS's
    default threads and on one thread: what BLAS's worker threads burn
    waiting for more work, which a call timed in that window competes with.
    """
    from threadpoolctl import threadpool_limits

    Y = np.random.default_rng(0).standard_normal((rows, d))
    out = {}
    for label, limit in (("BLAS's default threads", None), ("one BLAS thread", 1)):
        with threadpool_limits(limit, user_api="blas"):
            Y.T @ Y
        c0 = time.process_time()
        time.sleep(wait)
        out[label] = time.process_time() - c0
    return out


def ratio(times, name, ref):
    """(ratio of best times, median of the per-round ratios)."""
    a, b = times[name], times[ref]
    return a.min() / b.min(), float(np.median(a / b))


def embeddings(n, d, seed=0):
    """Anisotropic float32 rows: a common offset and a decaying spectrum."""
    rng = np.random.default_rng(seed)
    X = make_cone(n, d, spread=(3.0, 0.03), offset=2.0, rotate=False, random_state=rng)
    return X.astype(np.float32)


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
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--stream-repeat", type=int, default=3)
    parser.add_argument(
        "--settle",
        type=float,
        default=0.3,
        help="idle seconds before each timed call of the interleaved tables "
        "(BLAS's worker threads spin for about 0.1 s after a multi-threaded "
        "call; 0 times the candidates back to back)",
    )
    parser.add_argument("--quick", action="store_true", help="10x smaller sizes")
    parser.add_argument(
        "--embeddings",
        nargs="*",
        default=[],
        metavar="FILE.npy",
        help="also report the float32 accuracy on these saved embedding "
        "matrices (e.g. the .npy files bench_quality.py caches)",
    )
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=["fit", "breakdown", "wide", "stream"],
        default=["fit", "breakdown", "wide", "stream"],
        help="sections to run (fit includes accuracy and transform)",
    )
    args = parser.parse_args()
    if args.quick:
        args.n_samples //= 10
        args.stream_rows //= 10
    if "fit" in args.parts:
        bench_fit_transform(args)
        for path in args.embeddings:
            accuracy(np.load(path), path)
    if "breakdown" in args.parts:
        bench_breakdown(args)
    if "wide" in args.parts:
        bench_wide(args)
    if "stream" in args.parts:
        bench_streaming(args)


def bench_fit_transform(args):
    n, d = args.n_samples, args.n_features
    print(machine_line(cpu_model=True))
    X = embeddings(n, d)
    X64 = X.astype(np.float64)
    print(
        f"\n== fit, {n:,} x {d}, {args.repeat} interleaved rounds, "
        f"{args.settle:g} s idle before each call (best time; ratio of best "
        "times, median of per-round ratios) =="
    )

    def pca():
        return PCA(whiten=True, svd_solver="covariance_eigh")

    candidates = {
        "ours": lambda: WhiteningTransformer().fit(X),
        "gram64": lambda: X64.T @ X64,
        "pca": lambda: pca().fit(X),
        "numpy": lambda: naive_fit(X),
        "ours64": lambda: WhiteningTransformer().fit(X64),
        "pca64": lambda: pca().fit(X64),
    }
    # in the same rounds, with no pause: the fit right after PCA's float64
    # fit, the floor right after that fit
    pairs = ("ours, back to back", "gram64, back to back")
    candidates[pairs[0]] = candidates["ours"]
    candidates[pairs[1]] = candidates["gram64"]
    t = interleaved(candidates, args.repeat, args.settle, back_to_back=pairs)
    best, med = ratio(t, "ours", "gram64")
    print(f"fit   WhiteningTransformer   {t['ours'].min():8.3f} s")
    print(
        f"float64 X.T @ X alone        {t['gram64'].min():8.3f} s   ours/X.T@X "
        f"{best:.2f}x (median {med:.2f}x)  (target <= 1.3x)"
    )
    best, med = ratio(t, "ours", "numpy")
    print(
        f"fit   numpy recipe (cov+svd) {t['numpy'].min():8.3f} s   ours/numpy "
        f"{best:.2f}x (median {med:.2f}x)  (target < 1.0x)"
    )
    best, med = ratio(t, "ours", "pca")
    print(
        f"fit   PCA(covariance_eigh)   {t['pca'].min():8.3f} s   ours/PCA "
        f"{best:.2f}x (median {med:.2f}x)  (float32 statistics; see accuracy)"
    )
    best, med = ratio(t, "gram64", "pca")
    print(
        f"      float64 X.T @ X / PCA's whole float32 fit: {best:.2f}x "
        f"(median {med:.2f}x)"
    )
    best, med = ratio(t, "ours64", "pca64")
    print(
        f"fit on float64 input: ours {t['ours64'].min():.3f} s, PCA "
        f"{t['pca64'].min():.3f} s, ours/PCA {best:.2f}x (median {med:.2f}x)"
    )
    best, med = ratio(t, *pairs)
    print(
        f"back to back (no pause; the fit right after PCA's float64 fit): fit "
        f"{t[pairs[0]].min():.3f} s, X.T @ X {t[pairs[1]].min():.3f} s, "
        f"ours/X.T@X {best:.2f}x (median {med:.2f}x)"
    )

    ours = WhiteningTransformer().fit(X)
    sk = pca().fit(X)
    accuracy(X, "the float32 rows above")

    print(f"\n== transform, {n:,} x {d} float32, {args.repeat} interleaved rounds ==")
    W32 = ours.whitening_.astype(np.float32)
    W_naive = naive_fit(X)[1].astype(np.float32)
    mu32 = X.mean(axis=0)
    t = interleaved(
        {
            "ours": lambda: ours.transform(X),
            "bare": lambda: X @ W32,
            "pca": lambda: sk.transform(X),
            "numpy": lambda: (X - mu32) @ W_naive,
        },
        args.repeat,
        args.settle,
    )
    best, med = ratio(t, "ours", "bare")
    print(
        f"transform WhiteningTransformer {t['ours'].min():8.3f} s   ours/bare matmul "
        f"{best:.2f}x (median {med:.2f}x)"
    )
    print(f"transform bare X @ W           {t['bare'].min():8.3f} s")
    print(f"transform PCA                  {t['pca'].min():8.3f} s")
    print(f"transform numpy (X - mu) @ W   {t['numpy'].min():8.3f} s")
    Z = ours.transform(X)
    assert Z.dtype == np.float32 and np.all(np.isfinite(Z))


def bench_breakdown(args):
    """Where a fit's time goes: its steps timed alone, round-robin."""
    from threadpoolctl import ThreadpoolController

    from sklearn_isotropy import MomentAccumulator
    from sklearn_isotropy.linear import _scatter_kernels as kernels

    n, d = args.n_samples, args.n_features
    X = embeddings(n, d)
    X64 = X.astype(np.float64)
    step = kernels._block_rows(n, d)
    buf = np.empty((step, d))
    shift = X[:256].mean(axis=0, dtype=np.float64)
    piece = kernels._CACHE_ELEMENTS // d
    cov = np.cov(X64[:20_000], rowvar=False)
    controller = ThreadpoolController()
    shares = kernels._row_shares(n, d)

    def convert():
        for lo in range(0, n, step):
            rows = X[lo : lo + step]
            kernels._centre_block(buf[: len(rows)], rows, shift, 0, None, piece)

    def statistics(split):
        original = kernels._row_shares
        kernels._row_shares = original if split else (lambda n, d: 1)
        try:
            MomentAccumulator(d, fourth_moments=False).update(X)
        finally:
            kernels._row_shares = original

    def blocks64():
        S = np.zeros((d, d))
        for lo in range(0, n, step):
            Y = X64[lo : lo + step]
            S += Y.T @ Y

    def eigh(threads):
        with controller.limit(limits=threads, user_api="blas"):
            np.linalg.eigh(cov)

    print(
        f"\n== where a fit of {n:,} x {d} float32 goes, {args.repeat} "
        f"interleaved rounds, {args.settle:g} s idle before each call "
        "(best, median) =="
    )
    t = interleaved(
        {
            "fit WhiteningTransformer": lambda: WhiteningTransformer().fit(X),
            "float64 X.T @ X alone": lambda: X64.T @ X64,
            "float64 X.T @ X in blocks": blocks64,
            f"statistics, rows split ({shares} shares)": lambda: statistics(True),
            "statistics, not split, 1 thread": lambda: statistics(False),
            "convert + centre + sums": convert,
            f"eigh {d} x {d}, 1 thread": lambda: eigh(1),
            f"eigh {d} x {d}, 2 threads": lambda: eigh(2),
        },
        args.repeat,
        args.settle,
    )
    for name, ts in t.items():
        print(f"{name:33s} {ts.min():8.3f} s {np.median(ts):8.3f} s")
    spins = [idle_blas_spin() for _ in range(3)]
    print("CPU time used while idle for 0.3 s right after a float64 4,000 x 768")
    for label in spins[0]:
        runs = ", ".join(f"{sp[label]:.3f}" for sp in spins)
        print(f"  X.T @ X on {label:22s} {runs} s (3 runs)")


def accuracy(X, label):
    """Print how far float32 fits of ``X`` are from a float64 fit of it.

    Both estimators keep the components of the float64 fit (its numerical
    rank), so a rank-deficient input compares like with like.
    """
    X = np.asarray(X, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankDeficiencyWarning)
        ref = WhiteningTransformer().fit(X.astype(np.float64))
        k = ref.n_components_
        fits = {
            "WhiteningTransformer": WhiteningTransformer(k).fit(X),
            "PCA(float32)": PCA(k, whiten=True, svd_solver="covariance_eigh").fit(X),
        }
    print(f"\n== accuracy on {label} ({X.shape[0]:,} x {X.shape[1]}, {k} components)")
    print("   against a float64 fit of the same rows ==")
    for name, est in fits.items():
        ev = est.explained_variance_
        err = np.max(np.abs(ev - ref.explained_variance_) / ref.explained_variance_)
        Z = est.transform(X).astype(np.float64)
        dev = np.abs(np.cov(Z, rowvar=False) - np.eye(k)).max()
        print(
            f"{name:21s} max relative eigenvalue error {err:8.1e}; "
            f"max |cov(whitened) - I| {dev:8.1e}"
        )


def bench_wide(args):
    """Fits on 10 rows of many features: the dual form against the primal."""
    from sklearn_isotropy import MomentAccumulator

    print("\n== wide data: 10 rows, fit time and peak traced memory ==")
    rng = np.random.default_rng(2)
    with warnings.catch_warnings():  # warm-up: one-time imports and set-up
        warnings.simplefilter("ignore", RankDeficiencyWarning)
        WhiteningTransformer().fit(rng.normal(size=(10, 50)))
    for d, primal in ((4_000, True), (20_000, False)):
        X = make_cone(
            10, d, spread=(5.0, 0.5), offset=3.0, rotate=False, random_state=rng
        )
        runs = [("dual form (rows kept)", WhiteningTransformer)]
        if primal:

            class Primal(WhiteningTransformer):
                def _new_moments(self, n_features):
                    return MomentAccumulator(n_features, keep_rows=False)

            runs.append(("d x d scatter (primal)", Primal))
        for label, cls in runs:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RankDeficiencyWarning)
                tracemalloc.start()
                t0 = time.perf_counter()
                est = cls().fit(X)
                elapsed = time.perf_counter() - t0
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
            print(
                f"10 x {d:>6,}  {label:24s} {elapsed:8.3f} s   peak "
                f"{peak / 2**20:8.1f} MB   ({est.n_components_} components)"
            )


def stream_chunk(i, chunk, d, scales):
    """Chunk ``i`` of the streamed rows (the same rows whenever asked for)."""
    rng = np.random.default_rng([1, i])
    return rng.standard_normal((chunk, d), dtype=np.float32) * scales + 0.5


def bench_streaming(args):
    d, rows, chunk = args.n_features, args.stream_rows, args.chunk
    n_chunks = rows // chunk
    scales = np.geomspace(3.0, 0.03, d).astype(np.float32)
    print(
        f"\n== partial_fit over {rows:,} x {d} float32 in {n_chunks} chunks of "
        f"{chunk:,}, {args.stream_repeat} interleaved rounds =="
    )

    per_slice = max(1, 100_000 // chunk)

    def stream(with_floor=True):
        """Seconds in partial_fit (and the final map), and in the floor.

        The floor, float64 ``X.T @ X``, is timed on every slice of 100,000
        streamed rows right after those rows were streamed, so that both
        see the same machine (the conversion of the slice is not timed).
        Without the floor, rows are generated one chunk at a time (for the
        memory measurement).
        """
        est = WhiteningTransformer()
        spent = floor = 0.0
        step = per_slice if with_floor else 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for lo in range(0, n_chunks, step):
                ids = range(lo, min(lo + step, n_chunks))
                blocks = [stream_chunk(i, chunk, d, scales) for i in ids]
                for block in blocks:
                    t0 = time.perf_counter()
                    est.partial_fit(block)
                    spent += time.perf_counter() - t0
                if with_floor:
                    X64 = np.concatenate(blocks).astype(np.float64)
                    t0 = time.perf_counter()
                    X64.T @ X64
                    floor += time.perf_counter() - t0
                    del X64
                del blocks
            t0 = time.perf_counter()
            est.whitening_  # noqa: B018  (the map is computed here, once)
            spent += time.perf_counter() - t0
        assert est.n_samples_seen_ == n_chunks * chunk
        return spent, floor

    times = {"stream": [], "floor": []}
    for _ in range(args.stream_repeat):
        spent, floor = stream()
        times["stream"].append(spent)
        times["floor"].append(floor)
    t = {k: np.array(v) for k, v in times.items()}
    best, med = ratio(t, "stream", "floor")
    print(
        f"partial_fit x {n_chunks} + map    {t['stream'].min():8.2f} s  "
        f"(median {np.median(t['stream']):.2f} s)"
    )
    print(
        f"float64 X.T @ X, same rows   {t['floor'].min():8.2f} s  "
        f"(median {np.median(t['floor']):.2f} s)   streaming/X.T@X {best:.2f}x "
        f"(median {med:.2f}x)  (target <= 1.3x)"
    )

    # memory, in a separate (untimed) pass: tracing allocations slows them.
    # Traced from just before each partial_fit call, so that the generator's
    # temporaries do not count, and in a fresh thread, so that the per-thread
    # work block is allocated (and counted) here.
    chunk_mb = chunk * d * 4 / 2**20
    worst = [0]

    def memory_pass():
        est = WhiteningTransformer()
        tracemalloc.start()
        for i in range(n_chunks):
            block = stream_chunk(i, chunk, d, scales)
            tracemalloc.reset_peak()
            est.partial_fit(block)
            worst[0] = max(worst[0], tracemalloc.get_traced_memory()[1])
            del block
        tracemalloc.reset_peak()
        est.whitening_  # noqa: B018
        worst[0] = max(worst[0], tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()

    thread = threading.Thread(target=memory_pass)
    thread.start()
    thread.join()
    peak_mb = worst[0] / 2**20
    print(
        f"peak traced memory during partial_fit {peak_mb:.0f} MB (the chunk "
        f"passed in, {chunk_mb:.0f} MB, included); above one chunk "
        f"{peak_mb - chunk_mb:.0f} MB  (target < 200 MB)"
    )


if __name__ == "__main__":
    main()
