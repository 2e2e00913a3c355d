"""Fixtures of the export tests: embeddings, and a flow fitted on them."""

from __future__ import annotations

import warnings

import pytest

from sklearn_isotropy import GlowFlowTransformer


@pytest.fixture(scope="session")
def cone(make_cone):
    """400 anisotropic rows of 12 features: the post-processors' training data."""
    return make_cone(400, 12, seed=1)


@pytest.fixture(scope="session")
def flow(cone):
    """A flow fitted on ``cone``, two steps a level.

    Consecutive steps and both levels, in two thirds of the export time of
    the default three (the tests of single flows have one step a level).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GlowFlowTransformer(
            depth=2, max_iter=2, coupling="affine", hidden_size=8, random_state=0
        ).fit(cone)
