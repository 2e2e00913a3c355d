"""Fit WhiteningTransformer on a float32 .npy array on disk with Dask.

Writes an ``n_samples x n_features`` float32 ``.npy`` file (2,000,000 x 768,
5.7 GiB, by default) in a temporary directory, wraps it in a dask array
chunked by rows that reads each chunk from the memory-mapped file inside the
task, and fits :class:`sklearn_isotropy.WhiteningTransformer` on it with a
``LocalCluster`` of 1 and of 2 worker processes (one thread each). Reports
wall time, speed-up of 2 workers over 1, and the peak resident memory of
each worker (``ru_maxrss`` of the worker process) next to its resident
memory before the fit. For reference, the same array is loaded into memory
and fitted in this process when there is room (``--in-memory auto``), and
every dask fit is checked against it.

Run from the repository root::

    python benchmarks/bench_dask.py                      # 2,000,000 x 768
    python benchmarks/bench_dask.py --n-samples 1000000  # if disk is short

The file is read from the page cache when RAM allows (it was just written),
so the figures measure computation and task overhead, not disk speed.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import shutil
import sys
import tempfile
import time

import numpy as np
from _common import load_average, machine_line

from sklearn_isotropy import WhiteningTransformer


class NpyRows:
    """Array-like over a ``.npy`` file that reads only the requested rows.

    Pickles as its path, so the dask graph carries a few bytes, and each
    task opens the memory map, copies its chunk and closes it.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        head = np.load(path, mmap_mode="r")
        self.shape, self.dtype, self.ndim = head.shape, head.dtype, head.ndim
        del head

    def __getitem__(self, key):
        mm = np.load(self.path, mmap_mode="r")
        out = np.array(mm[key])
        del mm
        return out


def write_npy(path, n, d, chunk_rows, seed=0):
    """Correlated, anisotropic float32 rows: uniform noise + a rank-16 part.

    The covariance is ``diag(scales**2) / 12 + mixing.T @ mixing / 12``,
    eigenvalues from 0.02 to about 70: well conditioned, so the fitted maps
    can be compared to round-off.
    """
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(16, d)).astype(np.float32)
    scales = np.linspace(0.5, 2.0, d, dtype=np.float32)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for start in range(0, n, chunk_rows):
        stop = min(start + chunk_rows, n)
        u = rng.random((stop - start, d + 16), dtype=np.float32) - 0.5
        out[start:stop] = u[:, :d] * scales + u[:, d:] @ mixing + 1.0
    out.flush()
    del out


def _rss_mb():
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _cpu_s():
    import psutil

    t = psutil.Process().cpu_times()
    return t.user + t.system


def _reset_peak():
    """Reset this process's peak RSS (VmHWM); Linux >= 4.0."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_mb():
    """Peak RSS since the last reset (VmHWM), in MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**10
    except OSError:
        pass
    # not Linux: peak over the process lifetime (KiB on Linux, bytes on macOS)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def _rel(a, b):
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


def _diffs(est, ref):
    """Max-norm relative differences of the fitted statistics and map."""
    # W W^T is the inverse covariance: unlike W it does not depend on the
    # basis chosen inside clusters of nearly equal eigenvalues
    precision = est.whitening_ @ est.whitening_.T
    ref_precision = ref.whitening_ @ ref.whitening_.T
    return (
        f"mean_ {_rel(est.mean_, ref.mean_):.1e}, covariance_ "
        f"{_rel(est.covariance_, ref.covariance_):.1e}, whitening_ @ whitening_.T "
        f"{_rel(precision, ref_precision):.1e}"
    )


def fit_on_cluster(path, chunk_rows, n_workers):
    import dask.array as da
    from distributed import Client, LocalCluster

    rows = NpyRows(path)
    X = da.from_array(rows, chunks=(chunk_rows, rows.shape[1]), lock=False)
    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        # warm-up: import sklearn_isotropy and BLAS on every worker
        small = da.from_array(np.random.default_rng(0).normal(size=(400, 8)), 100)
        WhiteningTransformer().fit(small)
        before = client.run(_rss_mb)
        client.run(_reset_peak)
        cpu0 = client.run(_cpu_s)
        t0 = time.perf_counter()
        est = WhiteningTransformer().fit(X)
        wall = time.perf_counter() - t0
        cpu = sum(client.run(_cpu_s).values()) - sum(cpu0.values())
        peak = client.run(_peak_mb)
    workers = sorted(before)
    return est, wall, cpu, [before[w] for w in workers], [peak[w] for w in workers]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=2_000_000)
    parser.add_argument("--n-features", type=int, default=768)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds of cluster fits (best kept)"
    )
    parser.add_argument(
        "--in-memory",
        choices=["auto", "yes", "no"],
        default="auto",
        help="also fit the array loaded in this process (auto: if RAM allows)",
    )
    parser.add_argument("--dir", default=None, help="where to write the .npy")
    args = parser.parse_args(argv)

    import psutil

    n, d = args.n_samples, args.n_features
    nbytes = n * d * 4
    tmp = tempfile.mkdtemp(prefix="bench_dask_", dir=args.dir)
    try:
        free = shutil.disk_usage(tmp).free
        if free < 1.2 * nbytes:
            sys.exit(
                f"only {free / 2**30:.1f} GiB free in {tmp}; need "
                f"{nbytes / 2**30:.1f} GiB. Pass --n-samples 1000000 or --dir."
            )
        path = os.path.join(tmp, "X.npy")
        print(
            f"{machine_line(cpu_model=True)}; "
            f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
        )
        t0 = time.perf_counter()
        write_npy(path, n, d, args.chunk_rows)
        print(
            f"wrote {n:,} x {d} float32 ({nbytes / 2**30:.2f} GiB) in "
            f"{time.perf_counter() - t0:.1f} s; chunks of {args.chunk_rows:,} rows "
            f"({args.chunk_rows * d * 4 / 2**20:.0f} MiB), "
            f"{-(-n // args.chunk_rows)} chunks"
        )

        results = {}
        for rep in range(args.repeats):
            # alternate the order so a change of background load hits both
            order = args.workers if rep % 2 == 0 else args.workers[::-1]
            for k in order:
                load = load_average()
                est, wall, cpu, before, peak = fit_on_cluster(path, args.chunk_rows, k)
                if k not in results or wall < results[k][1]:
                    results[k] = (est, wall)
                mem = ", ".join(f"{b:.0f} -> {p:.0f}" for b, p in zip(before, peak))
                print(
                    f"LocalCluster {k} worker(s) x 1 thread: fit {wall:.1f} s wall, "
                    f"{cpu:.1f} s CPU in the workers; worker RSS before fit -> "
                    f"peak (MiB): {mem}; load avg {load:.1f} -> "
                    f"{load_average():.1f}"
                )
        if 1 in results and 2 in results:
            print(
                f"speed-up 2 workers vs 1 (best wall times): "
                f"{results[1][1] / results[2][1]:.2f}x"
            )
        ks = sorted(results)
        for k in ks[1:]:
            print(f"{k} vs {ks[0]} workers: {_diffs(results[k][0], results[ks[0]][0])}")

        avail = psutil.virtual_memory().available
        if args.in_memory == "yes" or (
            args.in_memory == "auto" and avail > 2.5 * nbytes
        ):
            rss0 = _rss_mb()
            _reset_peak()
            t0 = time.perf_counter()
            X = np.load(path)
            load = time.perf_counter() - t0
            t0 = time.perf_counter()
            ref = WhiteningTransformer().fit(X)
            wall = time.perf_counter() - t0
            print(
                f"in memory (this process, {os.cpu_count()} BLAS threads): load "
                f"{load:.1f} s, fit {wall:.1f} s; RSS {rss0:.0f} -> peak "
                f"{_peak_mb():.0f} MiB"
            )
            for k, (est, w) in results.items():
                print(
                    f"  {k} worker(s): {wall / w:.2f}x the in-memory speed; "
                    f"vs in-memory fit: {_diffs(est, ref)}"
                )
        else:
            print(
                f"in-memory fit skipped: {avail / 2**30:.1f} GiB available, "
                f"{nbytes / 2**30:.1f} GiB needed"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
