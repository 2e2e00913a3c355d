"""Tests of the retrieval index's precisions (evaluation/_quantization.py)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from sklearn_isotropy.evaluation._quantization import (
    QUANTIZATIONS,
    check_quantizations,
    register_quantization,
    time_searches,
)
from sklearn_isotropy.exceptions import EvaluationError


def _unit_rows(n, d, seed):
    X = np.random.default_rng(seed).normal(size=(n, d)) + 0.3
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@pytest.fixture
def rows():
    return _unit_rows(40, 20, 0), _unit_rows(60, 20, 1), _unit_rows(200, 20, 2)


def test_bytes_per_vector_of_each_precision():
    sizes = {name: QUANTIZATIONS[name].bytes_per_vector for name in QUANTIZATIONS}
    assert sizes["float32"](384) == 1536
    assert sizes["int8"](384) == 384
    assert sizes["binary"](384) == 48 and sizes["binary"](385) == 49
    assert sizes["binary-uncentred"](1) == 1


def test_float32_codes_are_the_rows(rows):
    queries, corpus, calibration = rows
    q, c = QUANTIZATIONS["float32"].encode(queries, corpus, calibration)
    assert q.dtype == c.dtype == np.float32
    np.testing.assert_array_equal(q, queries.astype(np.float32))
    np.testing.assert_array_equal(c, corpus.astype(np.float32))


def test_binary_codes_are_the_signs_about_the_calibration_mean(rows):
    pytest.importorskip("sentence_transformers")
    queries, corpus, calibration = rows
    q, c = QUANTIZATIONS["binary"].encode(queries, corpus, calibration)
    centre = calibration.mean(axis=0)
    np.testing.assert_array_equal(q, np.packbits(queries - centre > 0, axis=1))
    np.testing.assert_array_equal(c, np.packbits(corpus - centre > 0, axis=1))
    assert q.shape == (40, QUANTIZATIONS["binary"].bytes_per_vector(20))
    # uncentred: the signs of the rows themselves, which the mean shifts
    q_raw, _ = QUANTIZATIONS["binary-uncentred"].encode(queries, corpus, calibration)
    np.testing.assert_array_equal(q_raw, np.packbits(queries > 0, axis=1))
    assert not np.array_equal(q_raw, q)


def test_int8_codes_use_the_calibration_ranges(rows):
    """255 steps between the calibration's minimum and maximum per feature.

    Computed independently in float64: the codes agree but for rounding at
    a step's edge (off by one, rarely), and rows outside the calibration's
    range clip to the ends.
    """
    pytest.importorskip("sentence_transformers")
    queries, corpus, calibration = rows
    q, c = QUANTIZATIONS["int8"].encode(queries, corpus, calibration)
    assert q.dtype == c.dtype == np.int8
    low, high = calibration.min(axis=0), calibration.max(axis=0)
    step = (high - low) / 255
    for codes, X in ((q, queries), (c, corpus)):
        expected = np.clip(np.floor((X - low) / step), 0, 255) - 128
        diff = np.abs(codes.astype(int) - expected)
        assert diff.max() <= 1 and np.mean(diff == 0) > 0.99
    # the calibration's own extremes are the ends of the code range
    cal_codes, _ = QUANTIZATIONS["int8"].encode(calibration, calibration, calibration)
    assert (cal_codes.min(axis=0) == -128).all()
    assert (cal_codes.max(axis=0) >= 126).all()


def test_registering_a_precision_and_checking_names():
    with pytest.raises(ValueError, match="metric must be 'ip' or 'hamming'"):
        register_quantization("x", help="", metric="l2", bytes_per_vector=len)
    with pytest.raises(ValueError, match="already"):
        register_quantization("int8", help="", metric="ip", bytes_per_vector=len)
    register_quantization(
        "test-needs-module",
        help="a precision whose module is missing",
        metric="ip",
        bytes_per_vector=lambda d: d,
        requires=("a_module_that_is_not_installed",),
    )(lambda queries, corpus, calibration: (queries, corpus))
    try:
        check_quantizations(["float32"])
        with pytest.raises(ValueError, match=r"unknown quantization\(s\) \['int4'\]"):
            check_quantizations(["float32", "int4"])
        with pytest.raises(EvaluationError, match="a_module_that_is_not_installed"):
            check_quantizations(["test-needs-module"])
    finally:
        del QUANTIZATIONS["test-needs-module"]


class _CountingIndex:
    def __init__(self):
        self.calls, self.threads = [], []

    @contextlib.contextmanager
    def one_thread(self):
        self.threads.append("in")
        yield
        self.threads.append("out")

    def search(self, queries, k):
        self.calls.append((queries.shape[0], k))


def test_time_searches_times_single_queries_then_batches():
    index, queries = _CountingIndex(), np.zeros((7, 4))
    single, batch = time_searches(index, queries, n_timed=5, seed=0, k=3)
    assert single > 0 and batch > 0
    # a warm-up, five single queries on one thread, then three full batches
    assert index.calls == [(1, 3)] * 6 + [(7, 3)] * 3
    assert index.threads == ["in", "out"]
    assert time_searches(index, queries, n_timed=0, seed=0, k=3) == (None, None)
