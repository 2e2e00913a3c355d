"""scikit-learn's estimator checks for every estimator of the package.

The post-processors are discovered from ``sklearn_isotropy.__all__`` (every
exported transformer of dense 2-D arrays), so a new one is checked as soon as
it is exported; :data:`FAST_PARAMS` only makes slow ones quick and
:data:`VARIANTS` adds option combinations worth checking too.
"""

from __future__ import annotations

import pytest
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import parametrize_with_checks

import sklearn_isotropy
from sklearn_isotropy import (
    GlowFlowTransformer,
    NATSVTransformer,
    WhiteningTransformer,
)


def _post_processors():
    """Exported transformers whose input is a dense numeric 2-D array."""
    found = []
    for name in sklearn_isotropy.__all__:
        obj = getattr(sklearn_isotropy, name)
        if not (
            isinstance(obj, type)
            and issubclass(obj, BaseEstimator)
            and issubclass(obj, TransformerMixin)
        ):
            continue
        tags = get_tags(obj())
        if tags.input_tags.two_d_array and not tags.input_tags.string:
            found.append(obj)
    return found


POST_PROCESSORS = _post_processors()

# a small flow trained two epochs: each of the ~50 fits stays well under a second
FAST_PARAMS = {GlowFlowTransformer: {"depth": 1, "hidden_size": 4, "max_iter": 2}}

# method="zca" and "cholesky" keep the input coordinates and reject the
# n_components=1 that several checks force; tests/linear/test_whitening.py
# covers them.
VARIANTS = [
    WhiteningTransformer(n_components=2, power=0.5, shrinkage="ledoit-wolf"),
    WhiteningTransformer(noise_variance="auto"),
    NATSVTransformer(n_components=1, center=False),
]

ESTIMATORS = [cls(**FAST_PARAMS.get(cls, {})) for cls in POST_PROCESSORS] + VARIANTS


def test_every_post_processor_is_discovered():
    names = {cls.__name__ for cls in POST_PROCESSORS}
    assert names == {
        "GlowFlowTransformer",
        "NATSVTransformer",
        "StandardNormalizer",
        "WhiteningTransformer",
    }


# scikit-learn's checks fit on tiny, collinear data on purpose (a handful of
# rows, duplicated columns): the rank warning is expected there
@pytest.mark.filterwarnings("ignore::sklearn_isotropy.exceptions.RankDeficiencyWarning")
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
