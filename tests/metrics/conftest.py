"""Fixtures of the metric tests: embedded sentence pairs with gold scores."""

from __future__ import annotations

import numpy as np
import pytest

from sklearn_isotropy.datasets import make_cone


@pytest.fixture
def emb_pairs():
    """``(a, b, y)``: 60 pairs of anisotropic 8-d embeddings and their scores."""
    rng = np.random.RandomState(0)
    scales = np.linspace(3, 0.1, 8)
    base = make_cone(
        60, 8, spread=scales, offset=np.full(8, 2.0), rotate=False, random_state=rng
    )
    a = base + rng.normal(scale=0.5, size=base.shape)
    b = base + rng.normal(scale=rng.uniform(0.1, 3, size=(60, 1)), size=base.shape)
    y = -np.linalg.norm(a - b, axis=1) + rng.normal(scale=0.3, size=60)
    return a, b, y
