"""Tests of the scatter kernels' threads: one BLAS thread, rows split in shares.

Small products run on one BLAS thread, and the limit is restored; large
batches are split by rows between threads, with results equal to the bit to
those of one thread and exact against a two-pass numpy reference.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import scipy.linalg

from sklearn_isotropy import MomentAccumulator, WhiteningTransformer, datasets
from tests._references import two_pass


# ------------------------------------------------------------------ threads
def _blas_threads():
    from threadpoolctl import threadpool_info

    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def test_small_problems_run_on_one_blas_thread(monkeypatch, make_cone):
    from threadpoolctl import threadpool_limits

    seen = []
    original = scipy.linalg.eigh

    def spy(*args, **kwargs):
        seen.append(_blas_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(scipy.linalg, "eigh", spy)
    with threadpool_limits(2, user_api="blas"):
        WhiteningTransformer().fit(make_cone(500, 20))
        assert seen == [1]  # the eigendecomposition ran on one thread
        assert _blas_threads() == 2  # and the limit was lifted afterwards


def test_large_products_are_split_by_rows_into_fixed_shares(monkeypatch):
    from threadpoolctl import threadpool_limits

    from sklearn_isotropy.linear import _scatter_kernels as kernels

    cpus = {"n": 8}
    monkeypatch.setattr(kernels.os, "sched_getaffinity", lambda pid: range(cpus["n"]))
    large = 2**32 // 768**2 + 8192  # rows of 768 above 2**32 multiply-adds
    assert kernels._row_shares(large, 768) == 4  # at most four
    assert kernels._row_shares(1000, 768) == 1  # a small product
    assert kernels._row_shares(10**6, 2048) == 2  # the d x d copies' budget
    assert kernels._row_shares(10**6, 4096) == 1
    cpus["n"] = 2
    assert kernels._row_shares(large, 768) == 2
    # the shares do not depend on the thread count of the moment, only how
    # many run at once does
    with threadpool_limits(1, user_api="blas"):
        assert kernels._row_shares(large, 768) == 2
        assert kernels._blas_threads() == 1


def test_a_split_fit_runs_at_interpreter_shutdown(tmp_path):
    # a fit in a thread still running when the main thread has returned: no
    # new thread may start then, so the shares run in the calling thread
    import subprocess
    import sys

    script = tmp_path / "late_fit.py"
    script.write_text(
        "import threading, time\n"
        "import numpy as np\n"
        "from sklearn_isotropy import MomentAccumulator\n"
        "from sklearn_isotropy.linear import _scatter_kernels\n"
        "_scatter_kernels._row_shares = lambda n, d: 2\n"
        "_scatter_kernels._blas_threads = lambda: 2\n"
        "X = np.random.default_rng(0).normal(size=(3000, 8))\n"
        "def late():\n"
        "    time.sleep(0.5)\n"
        "    acc = MomentAccumulator(8).update(X)\n"
        "    ok = np.allclose(acc.covariance(), np.cov(X, rowvar=False))\n"
        "    print('ok' if ok else 'wrong')\n"
        "threading.Thread(target=late).start()\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_interleaved_blas_limits_restore_the_original_thread_count():
    # two fits in two threads: A limits, B enters, A leaves, B leaves. Two
    # threadpoolctl limiters left in that order leave a process-wide BLAS on
    # one thread for good (B's limiter restores the count it saw on entry);
    # one thread holds the limit at a time, so B runs under A's limit and
    # then on BLAS's threads, and the count is restored when A leaves
    import threading

    from threadpoolctl import threadpool_info

    from sklearn_isotropy.linear import _scatter_kernels

    def _blas_threads():
        # a BLAS built on OpenMP (faiss brings one) counts threads per thread:
        # nothing leaks from one thread into another there, so it is left out
        infos = threadpool_info()
        shared = [i for i in infos if i["user_api"] == "blas"]
        return max(
            i["num_threads"] for i in shared if i.get("threading_layer") != "openmp"
        )

    original = _blas_threads()
    if original < 2:
        pytest.skip("BLAS runs on one thread here: no limit to restore")
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def a():
        with _scatter_kernels.one_blas_thread():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    seen = {}

    def b():
        a_in.wait(10)
        with _scatter_kernels.one_blas_thread():
            seen["b, under a's limit"] = _blas_threads()
            b_in.set()
            a_out.wait(10)
            seen["b, after a left"] = _blas_threads()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"b, under a's limit": 1, "b, after a left": original}
    assert _blas_threads() == original


# --------------------------------------------------- rows split by threads
@pytest.fixture
def split_rows(monkeypatch):
    """Split every full-kind batch between 3 threads, in blocks of 64 rows.

    Returns the list of thread idents that ran a share, filled as batches
    are accumulated.
    """
    from sklearn_isotropy.linear import _scatter_kernels

    ran = []
    original = _scatter_kernels._accumulate_rows

    def spy(*args):
        ran.append(threading.get_ident())
        return original(*args)

    monkeypatch.setattr(
        _scatter_kernels, "_row_shares", lambda n, d: 3 if n >= 3 else 1
    )
    monkeypatch.setattr(_scatter_kernels, "_blas_threads", lambda: 3)  # all at once
    monkeypatch.setattr(_scatter_kernels, "_accumulate_rows", spy)
    monkeypatch.setattr(_scatter_kernels, "_BLOCK_ELEMENTS", 64 * 3 * 12)
    return ran


@pytest.mark.parametrize("weighted", [False, True])
def test_rows_split_between_threads_are_exact(weighted, split_rows, make_cone):
    X = make_cone(1000, 12, seed=21, offset=50.0, dtype=np.float32)
    w = np.random.default_rng(21).uniform(0.0, 3.0, len(X)) if weighted else None
    acc = MomentAccumulator(12).update(X, w)
    # three shares, each in a pool thread (the caller only waits)
    assert len(split_rows) == 3 and threading.get_ident() not in split_rows
    mean, scatter = two_pass(X, w)
    np.testing.assert_allclose(acc.mean, mean, rtol=1e-13)
    np.testing.assert_allclose(acc.scatter, scatter, rtol=1e-10)
    Y = X.astype(np.float64) - mean
    sq = np.sum(Y**2, axis=1)
    wt = np.ones(len(X)) if w is None else w
    np.testing.assert_allclose(acc.norm4, np.sum(wt * sq**2), rtol=1e-10)
    np.testing.assert_allclose(acc.norm3, (wt * sq) @ Y, rtol=1e-8, atol=1e-6)
    # the shares are added in a fixed order: the same rows give the same bits
    # whether they run at once or one after the other in the caller (as
    # under threadpool_limits(1))
    from sklearn_isotropy.linear import _scatter_kernels

    _scatter_kernels._blas_threads = lambda: 1  # restored by split_rows
    serial = MomentAccumulator(12).update(X, w)
    assert split_rows[3:] == [threading.get_ident()] * 3
    np.testing.assert_array_equal(serial.scatter, acc.scatter)
    np.testing.assert_array_equal(serial.norm3, acc.norm3)
    np.testing.assert_array_equal(serial.mean, acc.mean)


def test_rows_split_between_threads_stream_and_report_bad_input(split_rows, make_cone):
    import warnings

    from sklearn_isotropy import WhiteningTransformer

    X = make_cone(24_000, 12, seed=22, offset=5.0)
    est = WhiteningTransformer()
    for chunk in np.array_split(X, 4):  # about the running mean, split
        est.partial_fit(chunk)
    assert len(split_rows) == 4 * 3
    ref = WhiteningTransformer().fit(X)
    np.testing.assert_allclose(est.moments_.scatter, two_pass(X)[1], rtol=1e-10)
    np.testing.assert_allclose(est.whitening_, ref.whitening_, rtol=1e-8, atol=1e-10)
    before = est.moments_.scatter.copy()
    # batches above 2**16 entries are checked for NaN/inf on their statistics
    # only, so these rows reach the shares
    bad = X[:6000].copy()
    bad[0, 3] = np.inf  # the provisional centre is infinite: inf - inf in a share
    bad[5000, 1] = np.nan
    ran = len(split_rows)
    with warnings.catch_warnings():
        # a worker thread runs in the caller's np.errstate: no RuntimeWarning
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="Input X contains (infinity|NaN)"):
            est.partial_fit(bad)
        with pytest.raises(ValueError, match="Input X contains (infinity|NaN)"):
            WhiteningTransformer().fit(bad)
    assert len(split_rows) > ran  # the shares did see the bad rows
    np.testing.assert_array_equal(est.moments_.scatter, before)
    # finite rows whose squares overflow, in a worker's share: the workers run
    # in the caller's np.errstate, so the overflow is reported as one error
    huge = X[:6000].copy()
    huge[5000] = 1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="overflow"):
            est.partial_fit(huge)
    np.testing.assert_array_equal(est.moments_.scatter, before)


def test_a_batch_above_the_split_threshold_is_split_and_exact(monkeypatch):
    # the real policy end to end: 7,300 rows of 768 are above 2**32
    # multiply-adds, so two CPUs mean two shares
    from sklearn_isotropy.linear import _scatter_kernels

    monkeypatch.setattr(_scatter_kernels.os, "sched_getaffinity", lambda pid: {0, 1})
    ran = []
    original = _scatter_kernels._accumulate_rows

    def spy(X, *args):
        ran.append(len(X))
        return original(X, *args)

    monkeypatch.setattr(_scatter_kernels, "_accumulate_rows", spy)
    rng = np.random.default_rng(31)
    offset = np.full(768, 2.0)
    X = datasets.make_cone(
        7300, 768, spread=(3, 0.03), offset=offset, rotate=False, random_state=rng
    ).astype(np.float32)
    acc = MomentAccumulator(768, fourth_moments=False).update(X)
    assert ran == [3650, 3650]
    mean, scatter = two_pass(X)
    np.testing.assert_allclose(acc.mean, mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(acc.scatter, scatter, rtol=1e-10, atol=1e-10)
