"""scikit-learn's estimator checks for every estimator of the package."""

from __future__ import annotations

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

import sklearn_isotropy
from sklearn_isotropy import (
    GlowFlowTransformer,
    NATSVTransformer,
    StandardNormalizer,
    WhiteningTransformer,
)

# method="zca" and "cholesky" keep the input coordinates and reject the
# n_components=1 that several checks force; tests/test_whitening.py covers them.
ESTIMATORS = [
    WhiteningTransformer(),
    WhiteningTransformer(n_components=2, power=0.5, shrinkage="ledoit-wolf"),
    NATSVTransformer(),
    NATSVTransformer(n_components=1, center=False),
    StandardNormalizer(),
    # a small flow trained two epochs: each of the ~50 fits stays well under
    # a second
    GlowFlowTransformer(depth=1, hidden_size=4, max_iter=2),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def test_all_names_importable():
    assert sklearn_isotropy.__all__ == sorted(sklearn_isotropy.__all__)
    for name in sklearn_isotropy.__all__:
        assert getattr(sklearn_isotropy, name) is not None


@pytest.mark.parametrize("name", sklearn_isotropy.__all__)
def test_public_names_have_docstring_examples(name):
    obj = getattr(sklearn_isotropy, name)
    doc = getattr(obj, "__doc__", "") or ""
    assert "Examples" in doc, f"{name} has no Examples section in its docstring"
