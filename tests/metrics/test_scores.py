"""Tests of the cosine-Spearman score and paired cosine similarity.

References are scipy's ``spearmanr`` and scikit-learn's
``paired_cosine_distances``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.metrics.pairwise import paired_cosine_distances

from sklearn_isotropy.exceptions import UndefinedCorrelationWarning
from sklearn_isotropy.metrics import cosine_spearman_score, paired_cosine_similarity
from tests._references import spearman_of_cosines


def test_score_matches_scipy_and_sklearn(emb_pairs):
    a, b, y = emb_pairs
    np.testing.assert_allclose(
        cosine_spearman_score(a, b, y), spearman_of_cosines(a, b, y), rtol=1e-12
    )
    # ties in y are ranked by average, as scipy does
    y_tied = np.round(y)
    np.testing.assert_allclose(
        cosine_spearman_score(a, b, y_tied),
        spearman_of_cosines(a, b, y_tied),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        paired_cosine_similarity(a, b), 1.0 - paired_cosine_distances(a, b), atol=1e-12
    )


def test_score_float32_and_lists(emb_pairs):
    a, b, y = emb_pairs
    got = cosine_spearman_score(a.astype(np.float32).tolist(), b.astype(np.float32), y)
    np.testing.assert_allclose(got, spearman_of_cosines(a, b, y), atol=1e-5)


@pytest.mark.parametrize("which", ["pred", "gold"])
def test_constant_correlation_is_zero_with_warning(which):
    a = np.ones((5, 3))
    b = np.ones((5, 3)) if which == "pred" else np.eye(5, 3) + 1
    y = np.arange(5.0) if which == "pred" else np.full(5, 2.0)
    with pytest.warns(UndefinedCorrelationWarning, match="constant"):
        assert cosine_spearman_score(a, b, y) == 0.0


def test_zero_norm_rows_get_cosine_zero_with_warning():
    a = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    b = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    with pytest.warns(UndefinedCorrelationWarning, match="2 of 4 pairs"):
        cos = paired_cosine_similarity(a, b)
    np.testing.assert_array_equal(cos, [0.0, 1.0, 0.0, 0.0])
    with pytest.warns(UndefinedCorrelationWarning):
        rho = cosine_spearman_score(a, b, [1.0, 3.0, 0.5, 2.0])
    assert np.isfinite(rho)
    np.testing.assert_allclose(rho, spearmanr([1.0, 3.0, 0.5, 2.0], cos).statistic)


def test_extreme_magnitudes_stay_finite():
    a = np.array([[1e300, 1e300], [1e-300, 0.0], [3.0, 4.0]])
    b = np.array([[1e300, -1e300], [1e-300, 1e-300], [4.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cos = paired_cosine_similarity(a, b)
    np.testing.assert_allclose(cos, [0.0, np.sqrt(0.5), 24 / 25], atol=1e-12)


def test_score_rejects_bad_input(emb_pairs):
    a, b, y = emb_pairs
    with pytest.raises(ValueError, match="same shape"):
        cosine_spearman_score(a, b[:, :3], y)
    with pytest.raises(ValueError, match="inconsistent"):
        cosine_spearman_score(a, b, y[:-1])
    bad = a.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cosine_spearman_score(bad, b, y)
    with pytest.raises(ValueError, match="y_true"):
        cosine_spearman_score(a, b, np.full(len(y), np.inf))
