"""Whitening fits on a loaded machine: which thread pools fight, and the fix.

A whitening fit is a few large products (the statistics) and one
eigendecomposition of a ``d x d`` covariance. This script times, in fresh
processes, ``WhiteningTransformer().fit`` on 15,457 x 384 float32 rows (the
size of the distinct STS-B sentences with the default encoder) and
``numpy.linalg.eigh`` of covariances of several widths:

* on an idle machine and on a loaded one: ``--load`` background processes
  each run a float64 matrix-product loop on numpy's default BLAS threads
  (what another job on the machine does);
* without and with torch having run in the process just before (a torch
  matrix product on torch's default intra-op threads before every fit, as
  when embeddings were just encoded);
* with three thread policies, interleaved round by round: ``all threads``
  (BLAS's default everywhere, the behaviour before this policy existed),
  ``small on 1`` (the package's policy, ``sklearn_isotropy.linear._threads``:
  factorisations up to 1,024 wide and products of at most 2**32
  multiply-adds on one BLAS thread, larger products on all of them; for
  these rows that is everything) and ``all on 1`` (a one-thread BLAS limit
  around the whole fit).

For each cell it prints the best and the median of ``--repeat`` timings.
Run it under the exclusive CPU lock so that the only load is the one it
makes: ``flock -x /tmp/isotropy-cpu.lock python benchmarks/bench_threads.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

POLICIES = ("all threads", "small on 1", "all on 1")
LOAD_SCRIPT = (
    "import numpy as np\n"
    "a = np.random.default_rng(0).random((1500, 1500))\n"
    "while True:\n"
    "    a @ a\n"
)


def embeddings(n, d, seed=0):
    """Anisotropic float32 rows: a common offset and a decaying spectrum."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(3.0, 0.03, d).astype(np.float32)
    offset = rng.normal(size=d).astype(np.float32) * 2
    return rng.standard_normal((n, d), dtype=np.float32) * scales + offset


# ------------------------------------------------------------------ child
def child(args) -> dict:
    """Time the fits and eigendecompositions in this process; return the times."""
    from threadpoolctl import ThreadpoolController

    from sklearn_isotropy import WhiteningTransformer
    from sklearn_isotropy.linear import _threads

    torch_op = None
    if args.torch:
        import torch

        a = torch.randn(1000, 1000)

        def torch_op():
            a @ a

        torch_op()
    X = embeddings(args.n_samples, args.n_features)
    # one scan of the loaded libraries; limiting through it costs microseconds
    controller = ThreadpoolController()
    covs = {
        d: np.cov(embeddings(4 * d, d, seed=1).astype(np.float64), rowvar=False)
        for d in args.eigh_sizes
    }

    def fit(policy):
        _threads.SMALL_PROBLEM_THREADS = None if policy == "all threads" else 1
        if torch_op is not None:
            torch_op()
        t0 = time.perf_counter()
        if policy == "all on 1":
            with controller.limit(limits=1, user_api="blas"):
                WhiteningTransformer().fit(X)
        else:
            WhiteningTransformer().fit(X)
        return time.perf_counter() - t0

    def eigh(cov, threads):
        if torch_op is not None:
            torch_op()
        with controller.limit(limits=threads, user_api="blas"):
            t0 = time.perf_counter()
            np.linalg.eigh(cov)
            return time.perf_counter() - t0

    fit("small on 1")  # warm-up: imports, first allocations
    times = {f"fit / {p}": [] for p in POLICIES}
    for _ in range(args.repeat):
        for policy in POLICIES:
            times[f"fit / {policy}"].append(fit(policy))
    for d, cov in covs.items():
        for threads in (2, 1):
            times[f"eigh {d} / {threads} thread(s)"] = [
                eigh(cov, threads) for _ in range(args.eigh_repeat)
            ]
    return times


# ----------------------------------------------------------------- parent
def run_child(args, torch_first: bool) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--n-samples",
        str(args.n_samples),
        "--n-features",
        str(args.n_features),
        "--repeat",
        str(args.repeat),
        "--eigh-repeat",
        str(args.eigh_repeat),
        "--eigh-sizes",
        *map(str, args.eigh_sizes),
    ]
    if torch_first:
        cmd.append("--torch")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def start_load(n_procs: int) -> list:
    return [
        subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT]) for _ in range(n_procs)
    ]


def stop_load(procs) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=15_457)
    parser.add_argument("--n-features", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--eigh-repeat", type=int, default=3)
    parser.add_argument("--eigh-sizes", type=int, nargs="*", default=[384, 768, 1536])
    parser.add_argument(
        "--load", type=int, default=1, help="background BLAS processes when loaded"
    )
    parser.add_argument("--no-torch", action="store_true", help="skip torch runs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--torch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return

    print(
        f"machine: {platform.machine()}, {platform.processor() or '?'}, "
        f"{os.cpu_count()} logical CPUs; numpy {np.__version__}; fit on "
        f"{args.n_samples:,} x {args.n_features} float32; best / median of "
        f"{args.repeat} fits ({args.eigh_repeat} for eigh), seconds"
    )
    torch_options = [False] if args.no_torch else [False, True]
    results = {}
    for loaded in (False, True):
        for torch_first in torch_options:
            procs = start_load(args.load) if loaded else []
            try:
                time.sleep(1.0 if loaded else 0.0)  # let the load start
                before = os.getloadavg()[0]
                times = run_child(args, torch_first)
                after = os.getloadavg()[0]
            finally:
                stop_load(procs)
            label = (
                f"{'loaded' if loaded else 'idle'}, "
                f"{'torch ran first' if torch_first else 'no torch'}"
            )
            results[label] = times
            print(f"\n== {label} (load average {before:.1f} -> {after:.1f}) ==")
            for name, ts in times.items():
                ts = np.array(ts)
                print(f"{name:28s} {ts.min():8.3f} {np.median(ts):8.3f}")


if __name__ == "__main__":
    main()
