"""Tests of the flow's fixed input map (standardisation, initial whitening)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

pytest.importorskip("torch")

from sklearn_isotropy import GlowFlowTransformer  # noqa: E402
from sklearn_isotropy.datasets import make_cone  # noqa: E402
from sklearn_isotropy.flow._input import (  # noqa: E402
    bypass_log_density,
    fit_input_map,
    input_log_det,
    standardization,
)

PARAMS = {"standardize": True, "early_stopping": False, "init": "whitening"}


def _hyperplane_rows(dtype, n=400, d=8, seed=0):
    """Rows centred on their own mean, as LayerNorm leaves them: rank d - 1.

    In exact arithmetic every row sums to zero; computed in ``dtype``, the
    normal direction holds that dtype's round-off and nothing else.
    """
    Y = make_cone(
        n, d, spread=(3, 0.3), offset=np.full(d, 2.0), rotate=False, random_state=seed
    ).astype(dtype)
    return Y - Y.mean(axis=1, keepdims=True, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rank_counts_round_off_at_the_inputs_precision(dtype):
    """float32 rows on a hyperplane have rank d - 1, as float64 ones do.

    The map computes in float64; judged at float64's precision, the float32
    round-off off the hyperplane would count as a direction of variance, and
    the whitening would scale it up to unit variance.
    """
    X = _hyperplane_rows(dtype)
    # the independent check: the spectrum, and its smallest eigenvalue at
    # the input's round-off relative to the largest
    lam = np.linalg.eigvalsh(np.cov(X.astype(np.float64), rowvar=False))
    assert lam[0] / lam[-1] < 1e-12
    assert lam[1] / lam[-1] > 1e-3
    rng = np.random.RandomState(0)
    *_, rank, U, _ = fit_input_map(X, rng, {**PARAMS, "shrinkage": "auto"})
    assert rank == X.shape[1] - 1
    est = GlowFlowTransformer(max_iter=0, early_stopping=False).fit(X)
    assert est.rank_ == X.shape[1] - 1
    # the coordinate past the rank bypasses the flow at (shrunk) round-off
    # level, never at unit variance
    assert np.std(est.transform(X)[:, -1]) < 1e-2


def test_standardisation_treats_float32_round_off_as_constant():
    rng = np.random.RandomState(0)
    X = rng.standard_normal((300, 4)).astype(np.float32)
    X[:, 2] = (1e-9 * rng.standard_normal(300)).astype(np.float32)
    # float32 round-off of rows of norm ~2 is ~2e-7: the 1e-9 spread is noise
    mean32, scale32 = standardization(X)
    # constant: the input's magnitude (a power of two), not its 1e-9 spread
    amax = np.abs(X).max()
    assert scale32[2] == 2.0 ** np.floor(np.log2(amax))
    assert_allclose(scale32[[0, 1, 3]], X[:, [0, 1, 3]].astype(np.float64).std(0))
    # the same values given in float64 are resolved: a real (tiny) feature
    _, scale64 = standardization(X.astype(np.float64))
    assert_allclose(scale64[2], X[:, 2].astype(np.float64).std(), rtol=1e-12)
    est = GlowFlowTransformer(max_iter=0, early_stopping=False).fit(X)
    assert est.scale_[2] == scale32[2]
    assert np.abs(est.transform(X)).max() < 10  # no round-off blown up


def test_input_log_det_and_bypass_density_against_numpy():
    X = _hyperplane_rows(np.float64, n=300, d=5)
    est = GlowFlowTransformer(max_iter=0, early_stopping=False).fit(X)
    expected = (
        -np.log(est.scale_).sum() + np.linalg.slogdet(est.whitener_.whitening_)[1]
    )
    assert input_log_det(est.scale_, est.whitener_) == pytest.approx(expected)
    U = np.random.RandomState(1).standard_normal((6, 5))
    rest = U[:, 4:]
    assert_allclose(
        bypass_log_density(U, 4),
        -0.5 * (rest**2).sum(1) - 0.5 * np.log(2 * np.pi),
    )
    assert_allclose(bypass_log_density(U, 5), 0)
