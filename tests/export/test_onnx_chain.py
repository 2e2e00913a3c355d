"""Tests of post-processor chains as ONNX graphs: linear steps folded, the flow.

Every graph is run with onnxruntime and compared with ``transform``: linear
chains to 1e-5 in float32 and 1e-10 in float64, flows (both presets, both
couplings, a singular covariance, a layer only the test defines) to 1e-4 in
float32.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_isotropy import (
    BertPoolingVectorizer,
    GlowFlowTransformer,
    NATSVTransformer,
    StandardNormalizer,
    WhiteningTransformer,
)
from sklearn_isotropy.export import to_onnx
from tests._data import LINEAR
from tests._references import run_onnx


@pytest.mark.parametrize("make", LINEAR)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_parity_linear(make, dtype, cone):
    pytest.importorskip("onnx")
    est = make().fit(cone)
    X = cone.astype(dtype)
    got = run_onnx(to_onnx(est, dtype=dtype), X)
    assert got.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert_allclose(got, est.transform(X), rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_chain_is_one_affine_map(dtype, cone):
    onnx = pytest.importorskip("onnx")
    pipe = make_pipeline(StandardNormalizer(), WhiteningTransformer(n_components=5))
    pipe.fit(cone)
    model = to_onnx(pipe, n_features=12, dtype=dtype, X_check=cone)
    assert [n.op_type for n in model.graph.node] == ["Sub", "MatMul", "Add"]
    onnx.checker.check_model(model)
    X = cone.astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert_allclose(run_onnx(model, X), pipe.transform(X), rtol=0, atol=tol)
    # a list is a chain too
    as_list = to_onnx(list(pipe), dtype=dtype)
    assert_allclose(run_onnx(as_list, X), pipe.transform(X), rtol=0, atol=tol)


@pytest.fixture(scope="module")
def flow_onnx(flow):
    """``to_onnx(flow, dtype=dtype)``, exported once per dtype."""
    pytest.importorskip("onnx")
    models = {}

    def get(dtype):
        if dtype not in models:
            models[dtype] = to_onnx(flow, dtype=dtype)  # checked on sample() rows
        return models[dtype]

    return get


# The exported flow against transform. float32: 1e-4; the Glow runs in
# float32 in both, and onnxruntime's kernels (exp, tanh, products) and the
# exporter's folded constants differ from torch's in the last bits, which the
# flow carries to about 2e-5 on latents of magnitude 30 -- as far as float32
# transform itself is from float64 there. float64: 1e-10.
FLOW_TOL = {np.float32: 1e-4, np.float64: 1e-10}


def _assert_flow_parity(model, X, expected):
    got = run_onnx(model, X)
    assert got.dtype == X.dtype and got.shape == expected.shape
    assert_allclose(got, expected, rtol=0, atol=FLOW_TOL[X.dtype.type])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_flow_parity(flow, flow_onnx, dtype, make_cone):
    X = make_cone(300, 12, seed=2).astype(dtype)  # new rows, another batch size
    _assert_flow_parity(flow_onnx(dtype), X, flow.transform(X))
    _assert_flow_parity(flow_onnx(dtype), X[:1], flow.transform(X[:1]))


def test_onnx_flow_parity_rank_deficient(make_cone):
    # a singular covariance makes the Glow see only rank_ coordinates while
    # the others bypass it
    pytest.importorskip("onnx")
    X = make_cone(200, 8, seed=3)
    X = np.hstack([X, X[:, :2] + X[:, 2:4]])  # two dependent columns
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = GlowFlowTransformer(
            depth=1,  # one step a level has every kind of layer, exports faster
            max_iter=2,
            coupling="affine",
            hidden_size=8,
            random_state=0,
        ).fit(X)
    assert est.rank_ == 8 < X.shape[1]
    model = to_onnx(est, X_check=X[:20])
    X = X.astype(np.float32)
    _assert_flow_parity(model, X, est.transform(X))


def test_onnx_linear_then_flow_without_initial_whitening(make_cone):
    """A linear chain, then a flow of init="bert-flow", in one graph.

    The flow has no initial whitening; the linear steps fold into one affine
    map before the Glow.
    """
    pytest.importorskip("onnx")
    X = make_cone(200, 8, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flow = GlowFlowTransformer(
            init="bert-flow",
            depth=1,
            max_iter=2,
            coupling="affine",
            hidden_size=8,
            random_state=0,
        ).fit(X)
    assert flow.whitener_ is None
    pipe = make_pipeline(StandardNormalizer(), NATSVTransformer(1)).fit(X)
    chain = [*pipe, flow]  # the flow was fitted on the raw rows: any input works
    model = to_onnx(chain, X_check=X[:20])
    X = X.astype(np.float32)
    _assert_flow_parity(model, X, flow.transform(pipe.transform(X)))


def _preset_flow(preset, X):
    """A flow of ``preset`` with one step a level (every kind of layer)."""
    return GlowFlowTransformer.from_preset(
        preset,
        depth=1,  # one step a level has every kind of layer, and exports faster
        hidden_size=8,
        max_iter=2,
        early_stopping=False,  # so the couplings surely move off the identity
        learning_rate=1e-2,
        random_state=0,
    ).fit(X)


# The two presets, whose couplings are additive (the affine ones are tested
# above with either initialisation), each on an odd width, so the couplings
# and the factoring-out split unevenly; each graph is written in the opset
# asked for, with the lowest IR version of that opset (opsets whose IR
# versions differ, from onnx's release table): "bert-flow" in opset 21 (IR
# 10) here, "density" in the default opset 18 (IR 8) with a new layer below.
def test_onnx_flow_parity_presets(make_cone):
    pytest.importorskip("onnx")
    est = _preset_flow("bert-flow", make_cone(300, 7, seed=4))
    model = to_onnx(est, target_opset=21)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 21)]
    assert model.ir_version == 10
    X = make_cone(200, 7, seed=5).astype(np.float32)
    _assert_flow_parity(model, X, est.transform(X))


def test_onnx_flow_with_a_new_layer_needs_no_export_code(make_cone):
    """A flow with a layer defined here exports and matches transform.

    The layer (in the "density" preset) is inside the flow's first level: the
    graph is traced from the layers themselves.
    """
    pytest.importorskip("onnx")
    torch = pytest.importorskip("torch")

    class SinhArcsinh(torch.nn.Module):
        """A flow layer no export code knows of: ``z = sinh(a asinh(x) + b)``.

        The sinh-arcsinh map of Jones and Pewsey (2009), per feature with
        ``a = exp(log_a) > 0``, written to the layer contract only:
        ``forward(x) -> (z, log_det)`` and ``inverse(z) -> (x, log_det)``.
        """

        def __init__(self, n_features):
            super().__init__()
            gen = torch.Generator().manual_seed(0)
            self.log_a = torch.nn.Parameter(
                0.5 * torch.randn(n_features, generator=gen)
            )
            self.b = torch.nn.Parameter(0.5 * torch.randn(n_features, generator=gen))

        def forward(self, x):
            y = torch.exp(self.log_a) * torch.asinh(x) + self.b
            log_det = self.log_a + torch.log(torch.cosh(y)) - 0.5 * torch.log1p(x**2)
            return torch.sinh(y), log_det.sum(1)

        def inverse(self, z):
            y = torch.asinh(z)
            x = torch.sinh((y - self.b) * torch.exp(-self.log_a))
            log_det = -self.log_a - torch.log(torch.cosh(y)) + 0.5 * torch.log1p(x**2)
            return x, log_det.sum(1)

    X = make_cone(300, 7, seed=4)
    est = _preset_flow("density", X)
    layer = SinhArcsinh(est.rank_)
    u = torch.randn(5, est.rank_, dtype=torch.float64)
    with torch.no_grad():  # it keeps the contract
        z, log_det = layer.double()(u)
        u_back, inv_log_det = layer.inverse(z)
    assert_allclose(u_back.numpy(), u.numpy(), atol=1e-10)
    assert_allclose(inv_log_det.numpy(), -log_det.numpy(), atol=1e-10)
    before = est.transform(X)
    est.flow_.levels[0].layers.insert(1, layer.float())
    Z = est.transform(X)
    assert np.abs(Z - before).max() > 0.1  # the new layer is part of the map
    assert_allclose(est.inverse_transform(Z), X, atol=1e-4)

    model = to_onnx(est)  # checked on sample() rows inside, through the inverse
    assert {"Asinh", "Sinh"} <= {node.op_type for node in model.graph.node}
    # the default opset, with its lowest IR version
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 18)]
    assert model.ir_version == 8
    X32 = X.astype(np.float32)
    _assert_flow_parity(model, X32, est.transform(X32))


def test_onnx_flow_layer_that_cannot_trace_is_named(make_cone):
    """A layer with a Python branch on a tensor's value cannot be traced.

    torch.export refuses it: the error says so and names the step.
    """
    pytest.importorskip("onnx")
    torch = pytest.importorskip("torch")

    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # a branch on a value: not traceable
                return x, x.new_zeros(x.shape[0])
            return -x, x.new_zeros(x.shape[0])

    X = make_cone(100, 4, seed=8)
    est = GlowFlowTransformer(depth=1, hidden_size=8, max_iter=0).fit(X)
    # first in the flow: the trace stops there, at once
    est.flow_.levels[0].layers.insert(0, Branchy())
    with pytest.raises(
        RuntimeError, match=r"steps GlowFlowTransformer \(.*\)\. .*no Python branch"
    ):
        to_onnx(est)


def test_onnx_models_of_one_opset_compose(cone, flow, flow_onnx):
    """A linear model and a flow model exported apart join into one graph.

    With onnx.compose (same opset, same IR version), "Z" feeding "X".
    """
    onnx = pytest.importorskip("onnx")
    pipe = make_pipeline(StandardNormalizer(), NATSVTransformer(1)).fit(cone)
    linear = onnx.compose.add_prefix(to_onnx(pipe), "linear/")
    glow = onnx.compose.add_prefix(flow_onnx(np.float32), "flow/")
    merged = onnx.compose.merge_models(linear, glow, io_map=[("linear/Z", "flow/X")])
    X = cone.astype(np.float32)
    _assert_flow_parity(merged, X, flow.transform(pipe.transform(X)))


def test_onnx_target_opset_is_checked_before_any_export(cone, flow, monkeypatch):
    onnx = pytest.importorskip("onnx")
    torch = pytest.importorskip("torch")
    newest = onnx.defs.onnx_opset_version()
    whiten = WhiteningTransformer().fit(cone)

    def no_export(*args, **kwargs):
        raise AssertionError("export work started")

    monkeypatch.setattr(torch.onnx, "export", no_export)
    for est, opset, lowest in [
        (whiten, 3, 9),
        (whiten, newest + 1, 9),
        (flow, 3, 18),
        (flow, 17, 18),
        (flow, newest + 1, 18),
        ([whiten, flow], 17, 18),
    ]:
        match = (
            rf"target_opset={opset} is out of range: .* needs opset {lowest} or "
            rf"later, .* knows opsets up to {newest}\. Pass target_opset between "
            rf"{lowest} and {newest}"
        )
        with pytest.raises(ValueError, match=match):
            to_onnx(est, target_opset=opset)
    for opset in ["18", 18.0, True]:
        with pytest.raises(TypeError, match="target_opset must be an integer"):
            to_onnx(whiten, target_opset=opset)
    # both ends of the range are written as asked, and run
    for opset in (9, newest):
        model = to_onnx(whiten, target_opset=opset, X_check=cone[:10])
        assert model.opset_import[0].version == opset


def test_onnx_errors(tiny_bert, cone):
    pytest.importorskip("onnx")
    with pytest.raises(NotFittedError, match="not fitted"):
        to_onnx(WhiteningTransformer())
    with pytest.raises(NotFittedError, match="not fitted"):
        to_onnx(GlowFlowTransformer())
    whiten = WhiteningTransformer().fit(cone)
    with pytest.raises(ValueError, match="n_features=5"):
        to_onnx(whiten, n_features=5)
    with pytest.raises(ValueError, match="float32 or numpy.float64"):
        to_onnx(whiten, dtype=np.float16)
    # a text pipeline is exported whole (test_pipeline.py); a
    # vectorizer anywhere else is refused
    vec = BertPoolingVectorizer(tiny_bert)
    with pytest.raises(TypeError, match="to_sentence_transformers"):
        to_onnx([whiten, vec])
    with pytest.raises(TypeError, match="StandardScaler"):
        to_onnx([whiten, StandardScaler().fit(cone)])
    with pytest.raises(ValueError, match="expects 12 features"):
        to_onnx([WhiteningTransformer(n_components=3).fit(cone), whiten])
