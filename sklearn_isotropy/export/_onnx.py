"""Post-processors as ONNX graphs: linear chains directly, the flow via torch."""

from __future__ import annotations

import copy
import io
import warnings

import numpy as np

from .._utils import import_optional
from ..flow import GlowFlowTransformer
from ..text import BertPoolingVectorizer
from ._affine import (
    _AFFINE_RULES,
    AffineMap,
    check_fitted,
    fold_affine,
    is_affine,
    split_steps,
)

__all__ = ["register_skl2onnx_converters", "to_onnx"]

_WHAT = "to_onnx"
_DEFAULT_OPSET = 17
# IR version 8 is the one of opsets 15-17: every onnxruntime since 1.11 runs it
_IR_VERSION = 8
_DTYPES = {np.dtype(np.float32): "FLOAT", np.dtype(np.float64): "DOUBLE"}


def _onnx_type(onnx, dtype):
    return getattr(onnx.TensorProto, _DTYPES[np.dtype(dtype)])


def _check_dtype(dtype):
    try:
        dtype = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be float32 or float64; got {dtype!r}.") from exc
    if dtype not in _DTYPES:
        raise ValueError(
            f"dtype must be numpy.float32 or numpy.float64; got {dtype}. The "
            "post-processors compute in the dtype of their input, so export the "
            "dtype your embeddings have."
        )
    return dtype


# ------------------------------------------------------------ linear chains
def _affine_graph(onnx, affine: AffineMap, dtype, opset, n_features_in):
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    elem = _onnx_type(onnx, dtype)
    initializers = [
        numpy_helper.from_array(affine.weight.astype(dtype), name="weight"),
        numpy_helper.from_array(affine.bias.astype(dtype), name="bias"),
    ]
    nodes = [
        helper.make_node("MatMul", ["Xc", "weight"], ["XW"], name="matmul"),
        helper.make_node("Add", ["XW", "bias"], ["Z"], name="add_bias"),
    ]
    if np.any(affine.center):  # centre first, as the estimators do
        initializers.append(
            numpy_helper.from_array(affine.center.astype(dtype), name="center")
        )
        nodes.insert(0, helper.make_node("Sub", ["X", "center"], ["Xc"], name="center"))
    else:
        nodes[0].input[0] = "X"
    graph = helper.make_graph(
        nodes,
        "sklearn_isotropy_" + "_".join(_safe(s) for s in affine.steps),
        [helper.make_tensor_value_info("X", elem, ["N", n_features_in])],
        [helper.make_tensor_value_info("Z", elem, ["N", affine.n_features_out])],
        initializer=initializers,
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        ir_version=_IR_VERSION,
        producer_name="sklearn-isotropy",
        doc_string=(
            f"Z = (X - center) @ weight + bias: {', '.join(affine.steps)} folded "
            "into one affine map"
        ),
    )


def _safe(name):
    return "".join(c if c.isalnum() else "_" for c in str(name))


# ------------------------------------------------------- torch (the flow)
def _torch_modules(torch, steps, dtype):
    """One torch module per segment: folded linear runs and flows."""

    class Affine(torch.nn.Module):
        def __init__(self, affine):
            super().__init__()
            for name in ("center", "weight", "bias"):
                value = getattr(affine, name).astype(dtype)
                self.register_buffer(name, torch.from_numpy(value))

        def forward(self, x):
            return (x - self.center) @ self.weight + self.bias

    class Flow(torch.nn.Module):
        # the estimator's transform: its fixed input map in float64 (as
        # GlowFlowTransformer computes it, whatever the input dtype) --
        # standardisation with mean_/scale_, then the initial whitening
        # whitener_ if any -- then the Glow's forward, whose contract is
        # forward(x) -> (z, log_det), on the first rank_ coordinates; the
        # others bypass it (see GlowFlowTransformer.rank_)
        def __init__(self, est):
            super().__init__()
            tdtype = torch.float64 if dtype == np.float64 else torch.float32
            self.flow = copy.deepcopy(est.flow_).to(device="cpu", dtype=tdtype).eval()
            self._buffer("mean", est.mean_)
            self._buffer("scale", est.scale_)
            whitener = getattr(est, "whitener_", None)
            self.whiten = whitener is not None
            if self.whiten:
                self._buffer("w_mean", whitener.mean_)
                self._buffer("w_matrix", whitener.whitening_)
            # the latent is as wide as the input
            self.rank = int(getattr(est, "rank_", None) or est.n_features_in_)

        def _buffer(self, name, value):
            value = np.ascontiguousarray(value, dtype=np.float64)
            self.register_buffer(name, torch.from_numpy(value))

        def forward(self, x):
            u = (x.double() - self.mean) / self.scale
            if self.whiten:
                u = (u - self.w_mean) @ self.w_matrix
            u = u.to(x.dtype)
            z = self.flow(u[:, : self.rank])[0]
            if self.rank < u.shape[1]:
                z = torch.cat([z, u[:, self.rank :]], dim=1)
            return z

    modules, linear_run = [], []
    for name, est in steps:
        if is_affine(est):
            linear_run.append((name, est))
            continue
        if linear_run:
            modules.append(Affine(fold_affine(linear_run, what=_WHAT)))
            linear_run = []
        if type(est) is not GlowFlowTransformer:
            raise TypeError(
                f"{_WHAT} cannot export step {name!r} ({type(est).__name__}); it "
                "exports WhiteningTransformer, NATSVTransformer, StandardNormalizer "
                "and GlowFlowTransformer, and chains of them."
            )
        check_fitted(name, est, what=_WHAT)
        modules.append(Flow(est))
    if linear_run:
        modules.append(Affine(fold_affine(linear_run, what=_WHAT)))
    return torch.nn.Sequential(*modules).eval()


def _trace_to_onnx(onnx, torch, module, dtype, opset, n_features_in):
    """ONNX of ``module`` by tracing: see the Notes of :func:`to_onnx`."""
    example = torch.zeros(
        (2, n_features_in), dtype=torch.from_numpy(np.zeros(0, dtype=dtype)).dtype
    )
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        # the TorchScript tracer and exporter are deprecated in favour of
        # torch.export, which cannot trace the flow (see to_onnx); their
        # deprecation notices and the tracer's note on ActNorm's constant
        # branch are expected here
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message="no signature found for")
        traced = torch.jit.trace(module, (example,), check_trace=False)
        frozen = torch.jit.freeze(traced)
        torch.onnx.export(
            frozen,
            (example,),
            buffer,
            dynamo=False,
            input_names=["X"],
            output_names=["Z"],
            dynamic_axes={"X": {0: "N"}, "Z": {0: "N"}},
            opset_version=opset,
        )
    return onnx.load_from_string(buffer.getvalue())


# ------------------------------------------------------------------ checks
def _reference(steps, X):
    out = X
    for _, est in steps:
        out = est.transform(out)
    return out


def _check_parity(model, steps, X_check, dtype):
    ort = import_optional("onnxruntime", purpose=_WHAT, extra="export")
    X = np.ascontiguousarray(X_check, dtype=dtype)
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    got = session.run(None, {"X": X})[0]
    expected = _reference(steps, X)
    scale = max(1.0, float(np.max(np.abs(expected))))
    tol = (1e-4 if dtype == np.float32 else 1e-9) * scale
    error = float(np.max(np.abs(got - expected)))
    if not error <= tol:
        raise RuntimeError(
            f"{_WHAT}: the exported graph differs from transform by up to {error:.3g} "
            f"(tolerance {tol:.3g}) on {len(X)} check rows; the export is wrong, "
            "please report it with the estimator's parameters."
        )


def to_onnx(
    estimator_or_pipeline,
    n_features=None,
    *,
    dtype=np.float32,
    target_opset=None,
    X_check=None,
):
    """Export fitted post-processors (linear or the flow) as an ONNX model.

    The graph has one input ``"X"`` of shape ``(N, n_features)`` and one
    output ``"Z"``, both of ``dtype``, and computes what ``transform``
    computes. Linear post-processors and chains of them become one affine
    map, ``Sub`` (the centring, kept apart from the product for float32
    accuracy), ``MatMul`` and ``Add``; a :class:`~sklearn_isotropy.GlowFlowTransformer`
    (alone or chained with linear steps) is traced through torch.

    Parameters
    ----------
    estimator_or_pipeline : estimator, Pipeline or list of estimators
        A fitted :class:`~sklearn_isotropy.WhiteningTransformer`,
        :class:`~sklearn_isotropy.NATSVTransformer`,
        :class:`~sklearn_isotropy.StandardNormalizer` or
        :class:`~sklearn_isotropy.GlowFlowTransformer`, or a chain of them
        (a :class:`~sklearn.pipeline.Pipeline` or a list, applied in order).
    n_features : int, default=None
        Width of the input; must equal the first step's ``n_features_in_``
        (the default).
    dtype : {numpy.float32, numpy.float64}, default=numpy.float32
        Element type of the input, output and weights.
    target_opset : int, default=None
        ONNX opset of the graph; 17 by default.
    X_check : array-like of shape (n_samples, n_features), default=None
        Rows on which the exported graph is run with onnxruntime and
        compared with the estimators' ``transform`` (a RuntimeError if they
        differ beyond float round-off). For a chain that starts with a
        flow, rows drawn from the flow (``sample``) are used when None.

    Returns
    -------
    model : onnx.ModelProto
        Save it with ``onnx.save(model, "whitening.onnx")``.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If a step is not fitted.
    TypeError
        For a step that cannot be exported (the text vectorizer: use
        :func:`to_sentence_transformers`), naming it.

    See Also
    --------
    register_skl2onnx_converters : Convert the linear post-processors with
        ``skl2onnx.to_onnx``, e.g. inside a larger scikit-learn pipeline.
    to_faiss : The linear map as a faiss pre-transform.

    Notes
    -----
    The flow is traced with ``torch.jit.trace``, frozen (which folds every
    computation on parameters alone, such as the LU-parametrised mixing
    matrices, into constants) and written by torch's TorchScript-based ONNX
    exporter (``dynamo=False``). torch's newer ``torch.export``-based
    exporter (``dynamo=True``, which would also need the ``onnxscript``
    package) cannot trace it: ActNorm's ``if not initialized`` is a branch
    on a tensor value, which ``torch.export`` refuses; and the
    TorchScript exporter has no ``aten::diag``, which freezing removes. So
    no ``onnxscript`` is needed. The graph standardises its input in float64,
    as the estimator does, and then uses only ``MatMul``/``Gemm``, ``Add``,
    ``Sub``, ``Mul``, ``Div``, ``Exp``, ``Tanh``, ``Relu``, ``Concat``,
    ``Slice``, ``Gather``, ``Shape`` and ``Cast`` (opset 17 by default).

    Examples
    --------
    >>> import numpy as np
    >>> import onnxruntime as ort
    >>> from sklearn_isotropy import WhiteningTransformer
    >>> from sklearn_isotropy.export import to_onnx
    >>> rng = np.random.default_rng(0)
    >>> X = (rng.normal(size=(300, 8)) @ rng.normal(size=(8, 8))).astype(np.float32)
    >>> whiten = WhiteningTransformer(n_components=4).fit(X)
    >>> model = to_onnx(whiten)
    >>> session = ort.InferenceSession(model.SerializeToString(),
    ...                                providers=["CPUExecutionProvider"])
    >>> Z = session.run(None, {"X": X})[0]
    >>> bool(np.allclose(Z, whiten.transform(X), atol=1e-5))
    True
    """
    from . import _pipeline  # the whole text pipeline: see save_onnx_pipeline

    if _pipeline.starts_with_vectorizer(estimator_or_pipeline):
        return _pipeline.text_pipeline_to_onnx(
            estimator_or_pipeline,
            n_features=n_features,
            dtype=dtype,
            target_opset=target_opset,
            X_check=X_check,
        )
    onnx = import_optional("onnx", purpose=_WHAT, extra="export")
    dtype = _check_dtype(dtype)
    opset = _DEFAULT_OPSET if target_opset is None else int(target_opset)
    steps = split_steps(estimator_or_pipeline, what=_WHAT)
    for name, est in steps:
        if isinstance(est, BertPoolingVectorizer):
            raise TypeError(
                f"{_WHAT} exports post-processors of embeddings; step {name!r} is "
                "the text encoder. Export the whole text pipeline with "
                "to_sentence_transformers, or the post-processors alone with "
                "to_onnx(pipe[1:])."
            )
    first = steps[0][1]
    check_fitted(steps[0][0], first, what=_WHAT)
    n_in = int(first.n_features_in_)
    if n_features is not None and int(n_features) != n_in:
        raise ValueError(
            f"n_features={n_features} but the first step {steps[0][0]!r} was fitted "
            f"on {n_in} features; pass n_features={n_in} or None."
        )
    if all(is_affine(est) for _, est in steps):
        model = _affine_graph(onnx, fold_affine(steps, what=_WHAT), dtype, opset, n_in)
    else:
        torch = import_optional("torch", purpose=_WHAT, extra="flow")
        module = _torch_modules(torch, steps, dtype)
        model = _trace_to_onnx(onnx, torch, module, dtype, opset, n_in)
        if X_check is None and hasattr(first, "sample"):
            X_check = first.sample(256, random_state=0)
    onnx.checker.check_model(model)
    if X_check is not None:
        _check_parity(model, steps, X_check, dtype)
    return model


# ------------------------------------------------------------------ skl2onnx
def _skl2onnx_shape(operator):
    est = operator.raw_operator
    affine = fold_affine([(type(est).__name__, est)], what="skl2onnx")
    source = operator.inputs[0]
    n_rows = source.get_first_dimension()
    operator.outputs[0].type = source.type.__class__([n_rows, affine.n_features_out])


def _skl2onnx_convert(scope, operator, container):
    from skl2onnx.common.data_types import DoubleTensorType

    est = operator.raw_operator
    source = operator.inputs[0]
    dtype = np.float64 if isinstance(source.type, DoubleTensorType) else np.float32
    onnx = import_optional("onnx", purpose="skl2onnx", extra="export")
    elem = _onnx_type(onnx, dtype)
    affine = fold_affine([(type(est).__name__, est)], what="skl2onnx")
    names = {k: scope.get_unique_variable_name(k) for k in ("center", "weight", "bias")}
    for key in names:
        value = getattr(affine, key).astype(dtype)
        container.add_initializer(names[key], elem, list(value.shape), value.ravel())
    centred = scope.get_unique_variable_name("xc")
    product = scope.get_unique_variable_name("xw")
    container.add_node(
        "Sub",
        [source.full_name, names["center"]],
        [centred],
        name=scope.get_unique_operator_name("Sub"),
    )
    container.add_node(
        "MatMul",
        [centred, names["weight"]],
        [product],
        name=scope.get_unique_operator_name("MatMul"),
    )
    container.add_node(
        "Add",
        [product, names["bias"]],
        [operator.outputs[0].full_name],
        name=scope.get_unique_operator_name("Add"),
    )


def register_skl2onnx_converters():
    """Teach skl2onnx to convert the linear post-processors.

    After this call, ``skl2onnx.to_onnx`` converts
    :class:`~sklearn_isotropy.WhiteningTransformer`,
    :class:`~sklearn_isotropy.NATSVTransformer` and
    :class:`~sklearn_isotropy.StandardNormalizer`, alone or inside any
    pipeline skl2onnx can convert (a whitening followed by a scikit-learn
    classifier, say), in float32 or float64. Each becomes ``Sub`` (the
    centring), ``MatMul`` and ``Add``. Calling it again is harmless.

    Returns
    -------
    registered : list of type
        The estimator classes registered.

    See Also
    --------
    to_onnx : Export without skl2onnx, folding a chain into one map.

    Examples
    --------
    >>> import numpy as np
    >>> import skl2onnx
    >>> from sklearn_isotropy import StandardNormalizer
    >>> from sklearn_isotropy.export import register_skl2onnx_converters
    >>> X = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    >>> _ = register_skl2onnx_converters()
    >>> model = skl2onnx.to_onnx(StandardNormalizer().fit(X), X[:1])
    >>> [node.op_type for node in model.graph.node]
    ['Sub', 'MatMul', 'Add']
    """
    skl2onnx = import_optional("skl2onnx", purpose="register_skl2onnx_converters")
    registered = []
    for cls in _AFFINE_RULES:
        skl2onnx.update_registered_converter(
            cls,
            f"SklearnIsotropy{cls.__name__}",
            _skl2onnx_shape,
            _skl2onnx_convert,
            overwrite=True,
        )
        registered.append(cls)
    return registered
