"""scikit-learn's estimator checks over every estimator, with fast settings."""

from __future__ import annotations

import importlib.util

from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_isotropy import GlowFlowTransformer

HAS_TORCH = importlib.util.find_spec("torch") is not None

ESTIMATORS = []
if HAS_TORCH:
    # small flow, two epochs: each of the ~50 fits in the checks stays well
    # under a second
    ESTIMATORS.append(GlowFlowTransformer(depth=1, hidden_size=4, max_iter=2))

# Every expected failure carries the reason it is expected.
EXPECTED_FAILED_CHECKS = {}


@parametrize_with_checks(
    ESTIMATORS,
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS.get(
        type(est).__name__, {}
    ),
)
def test_sklearn_compatible(estimator, check):
    check(estimator)
