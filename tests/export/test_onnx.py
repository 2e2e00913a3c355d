"""Tests of the skl2onnx converters of the linear post-processors."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_isotropy import NATSVTransformer, WhiteningTransformer
from sklearn_isotropy.export import register_skl2onnx_converters
from tests._references import run_onnx


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_skl2onnx_converts_them_inside_a_pipeline(dtype, cone):
    skl2onnx = pytest.importorskip("skl2onnx")
    register_skl2onnx_converters()
    pipe = make_pipeline(
        StandardScaler(),  # a scikit-learn step between ours
        NATSVTransformer(1),
        WhiteningTransformer(n_components=4),
    ).fit(cone)
    X = cone.astype(dtype)
    model = skl2onnx.to_onnx(pipe, X[:1])
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert_allclose(run_onnx(model, X), pipe.transform(X), rtol=0, atol=tol)
