"""make_cone: its draws, its spectrum and offset, and its errors, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from sklearn_isotropy.datasets import make_cone


def test_the_draws_are_numpys_in_the_documented_order():
    n, d = 50, 6
    scales = np.geomspace(3.0, 0.3, d)
    rng = np.random.default_rng(4)
    expected = rng.normal(size=(n, d)) * scales
    basis = np.linalg.qr(rng.normal(size=(d, d)))[0]
    expected = expected @ basis.T + 2.0 * rng.normal(size=d)
    got = make_cone(n, d, spread=(3.0, 0.3), offset=2.0, random_state=4)
    assert got.dtype == np.float64
    # an int seeds a RandomState, as in scikit-learn; a Generator is drawn from
    assert not np.allclose(got, expected)
    rng = np.random.default_rng(4)
    got = make_cone(n, d, spread=(3.0, 0.3), offset=2.0, random_state=rng)
    assert_array_equal(got, expected)
    # ... and is left just past them
    fresh = np.random.default_rng(4)
    fresh.normal(size=n * d + d * d + d)
    assert rng.normal() == fresh.normal()
    # unrotated with an array offset: rng.normal(size=(n, d)) * s + m
    rs = np.random.RandomState(0)
    mean = np.arange(d, dtype=float)
    assert_array_equal(
        make_cone(n, d, spread=scales, offset=mean, rotate=False, random_state=0),
        rs.normal(size=(n, d)) * scales + mean,
    )


def test_same_seed_same_rows():
    assert_array_equal(make_cone(random_state=3), make_cone(random_state=3))
    assert not np.array_equal(make_cone(random_state=3), make_cone(random_state=4))


@pytest.mark.parametrize("rotate", [False, True])
def test_spectrum_and_mean_are_the_requested_ones(rotate):
    # 20,000 rows: sample eigenvalues within a few sqrt(2 / n) = 1% of the
    # population's, the mean within 4 standard errors of the offset
    n, d = 20_000, 5
    spread = np.array([4.0, 2.0, 1.0, 0.5, 0.25])
    offset = np.array([3.0, -1.0, 0.0, 2.0, 5.0])
    X = make_cone(
        n, d, spread=(4.0, 0.25), offset=offset, rotate=rotate, random_state=0
    )
    eigenvalues = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    assert_allclose(eigenvalues, spread**2, rtol=0.05)
    standard_error = np.sqrt(np.diag(np.cov(X, rowvar=False)) / n)
    assert np.all(np.abs(X.mean(axis=0) - offset) < 4 * standard_error)
    # the principal axes are the coordinates (uncorrelated, up to 1 / sqrt(n)
    # = 0.007) only without the rotation
    correlation = np.corrcoef(X, rowvar=False)[np.triu_indices(d, 1)]
    assert bool(np.abs(correlation).max() > 0.05) is rotate


def test_the_rotation_keeps_each_rows_distance_to_the_offset():
    offset = np.linspace(-1.0, 1.0, 7)
    kept = make_cone(30, 7, offset=offset, rotate=False, random_state=2)
    turned = make_cone(30, 7, offset=offset, rotate=True, random_state=2)
    assert_allclose(
        np.linalg.norm(turned - offset, axis=1),
        np.linalg.norm(kept - offset, axis=1),
        rtol=1e-12,
    )
    assert not np.allclose(turned, kept)


def test_a_far_offset_and_a_steep_spread_make_a_narrow_cone():
    def mean_cosine(X):
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        return (U @ U.T)[np.triu_indices(len(X), 1)].mean()

    wide = make_cone(300, 16, offset=0.0, spread=(1.0, 1.0), random_state=0)
    narrow = make_cone(300, 16, offset=10.0, spread=(1.0, 0.01), random_state=0)
    assert abs(mean_cosine(wide)) < 0.05
    assert mean_cosine(narrow) > 0.95


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"spread": (1.0, 2.0, 3.0)}, "2 values .* or n_features=10"),
        ({"spread": (1.0, 0.0)}, "positive finite"),
        ({"spread": (1.0, np.nan)}, "positive finite"),
        ({"offset": np.ones(3)}, "10 finite values"),
        ({"offset": np.inf}, "'offset' parameter"),
        ({"n_samples": 0}, "'n_samples' parameter"),
        ({"random_state": "seed"}, "'random_state' parameter"),
    ],
)
def test_bad_parameters_are_named(params, match):
    with pytest.raises(ValueError, match=match):
        make_cone(**params)
