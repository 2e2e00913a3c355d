"""Post-processors as ONNX graphs: linear chains directly, the flow via torch.

A linear chain is written here, as one affine map. A flow is not: its
estimator builds a torch module of its own fitted map
(``transform_module``), and torch's exporter traces the flow's layers
themselves, so nothing here knows what a flow layer computes.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import re
import warnings

import numpy as np

from .._utils import import_optional
from ..text import BertPoolingVectorizer
from ._affine import (
    _AFFINE_RULES,
    AffineMap,
    check_fitted,
    fold_affine,
    is_affine,
    split_steps,
)
from ._static import starts_with_static, static_to_onnx

__all__ = ["register_skl2onnx_converters", "to_onnx"]

_WHAT = "to_onnx"
_DEFAULT_OPSET = 18
# the lowest opset each kind of graph can be written in: the affine graph's
# Sub and Add broadcast from opset 7, and its weights are initializers apart
# from the graph inputs, which needs IR version 4 (opset 9); torch's exporter
# writes opset 18 and converts below it unreliably (an invalid Split at 16
# and 17, silently opset 18 below those)
_MIN_OPSET_AFFINE = 9
_MIN_OPSET_TORCH = 18
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


def _check_opset(onnx, target_opset, *, minimum, graph):
    """``target_opset`` as an int in ``[minimum, newest opset of onnx]``."""
    if target_opset is None:
        return _DEFAULT_OPSET
    if not isinstance(target_opset, numbers.Integral) or isinstance(target_opset, bool):
        raise TypeError(
            f"target_opset must be an integer or None; got {target_opset!r} of "
            f"type {type(target_opset).__name__}."
        )
    newest = int(onnx.defs.onnx_opset_version())
    if not minimum <= target_opset <= newest:
        raise ValueError(
            f"target_opset={target_opset} is out of range: {graph} needs opset "
            f"{minimum} or later, and the installed onnx {onnx.__version__} "
            f"knows opsets up to {newest}. Pass target_opset between {minimum} "
            f"and {newest}, or None for {_DEFAULT_OPSET}."
        )
    return int(target_opset)


def _finish(onnx, model, doc):
    """Give ``model`` the IR version of its opset and a description; check it.

    Every graph of :func:`to_onnx` has the lowest IR version its opset allows,
    so graphs exported with the same ``target_opset`` can be joined with
    :mod:`onnx.compose`. Torch's per-node notes (source lines, fx nodes) are
    dropped: they describe the tracing machine, not the model.
    """
    model.ir_version = onnx.helper.find_min_ir_version_for(
        list(model.opset_import), ignore_unknown=True
    )
    for node in model.graph.node:
        del node.metadata_props[:]
    model.producer_name = "sklearn-isotropy"
    model.doc_string = doc
    onnx.checker.check_model(model)
    return model


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
    return _finish(
        onnx,
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]),
        f"Z = (X - center) @ weight + bias: {', '.join(affine.steps)} folded "
        "into one affine map",
    )


def _safe(name):
    return "".join(c if c.isalnum() else "_" for c in str(name))


# ------------------------------------------------------- torch (the flow)
def _torch_modules(torch, steps, dtype):
    """One torch module per segment: folded linear runs, and each flow's own."""

    class Affine(torch.nn.Module):
        def __init__(self, affine):
            super().__init__()
            for name in ("center", "weight", "bias"):
                value = getattr(affine, name).astype(dtype)
                self.register_buffer(name, torch.from_numpy(value))

        def forward(self, x):
            return (x - self.center) @ self.weight + self.bias

    modules, linear_run = [], []
    for name, est in steps:
        if is_affine(est):
            linear_run.append((name, est))
            continue
        if linear_run:
            modules.append(Affine(fold_affine(linear_run, what=_WHAT)))
            linear_run = []
        check_fitted(name, est, what=_WHAT)
        modules.append(est.transform_module(dtype))
    if linear_run:
        modules.append(Affine(fold_affine(linear_run, what=_WHAT)))
    return torch.nn.Sequential(*modules).eval()


@contextlib.contextmanager
def _quiet_exporter(torch):
    """Silence what torch's exporter says about itself, not about the model.

    Its progress lines (``verbose=False`` stops them), its notes on optional
    packages it does not need here (torchvision), and deprecation notices of
    its own internals.
    """
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        logger.setLevel(level)


def _export_torch(onnx, torch, module, dtype, opset, n_features_in, steps):
    """ONNX of ``module`` by torch's exporter: see the Notes of :func:`to_onnx`."""
    import_optional("onnxscript", purpose=f"{_WHAT} of a flow", extra="export")
    example = torch.zeros((2, n_features_in), dtype=_torch_dtype(torch, dtype))
    names = ", ".join(
        n if n == type(e).__name__ else f"{n} ({type(e).__name__})" for n, e in steps
    )
    try:
        with _quiet_exporter(torch):
            program = torch.onnx.export(
                module,
                (example,),
                dynamo=True,
                input_names=["X"],
                output_names=["Z"],
                dynamic_shapes=({0: torch.export.Dim("N")},),
                opset_version=opset,
                verbose=False,
            )
    except Exception as exc:
        raise RuntimeError(
            f"{_WHAT}: torch.onnx.export could not export the steps {names} "
            f"({_first_line(exc)}). Every layer of a flow must trace with "
            "torch.export in evaluation mode (no Python branch on a tensor's "
            "value); see the traceback above."
        ) from exc
    model = program.model_proto
    written = {o.domain: o.version for o in model.opset_import}.get("")
    if written != opset:
        raise RuntimeError(
            f"{_WHAT}: torch's exporter wrote opset {written} when asked for "
            f"{opset}; pass a target_opset it writes directly, such as "
            f"{_DEFAULT_OPSET}."
        )
    return _finish(onnx, model, f"Z = transform(X) of {names}")


def _first_line(exc):
    """``"Type: first line"`` of the innermost cause of ``exc``, plain text."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()  # terminal colours
    return f"{type(exc).__name__}: {(text.splitlines() or [''])[0]}"


def _has_module(est):
    """Whether ``est`` gives a torch module of its transform (the flow)."""
    return callable(getattr(est, "transform_module", None))


def _torch_dtype(torch, dtype):
    return torch.float64 if np.dtype(dtype) == np.float64 else torch.float32


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
    output ``"Z"`` of shape ``(N, n_features_out)``, both of ``dtype``, with
    the batch axis ``N`` dynamic, and computes what ``transform`` computes.
    Linear post-processors and chains of them become one affine map, ``Sub``
    (the centring, kept apart from the product for float32 accuracy),
    ``MatMul`` and ``Add``; a :class:`~sklearn_isotropy.GlowFlowTransformer`
    (alone or chained with linear steps) is traced through torch, from the
    torch module of its own fitted map
    (:meth:`~sklearn_isotropy.GlowFlowTransformer.transform_module`).

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
        ONNX opset of the graph (of its default domain); 18 by default. A
        linear chain can be written in opsets 9 and later, a chain with a
        flow in 18 and later; the newest is the one the installed onnx
        knows (``onnx.defs.onnx_opset_version()``).
    X_check : array-like of shape (n_samples, n_features), default=None
        Rows on which the exported graph is run with onnxruntime and
        compared with the estimators' ``transform`` (a RuntimeError if they
        differ beyond float round-off). For a chain that starts with a
        flow, rows drawn from the flow (``sample``) are used when None.

    Returns
    -------
    model : onnx.ModelProto
        Checked by ``onnx.checker``, with the opset ``target_opset`` and the
        lowest IR version that opset allows, so models exported with the
        same ``target_opset`` can be joined with :mod:`onnx.compose` (the
        ``"Z"`` of one feeding the ``"X"`` of the next). Save it with
        ``onnx.save(model, "whitening.onnx")``.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If a step is not fitted.
    TypeError
        For a step that cannot be exported (the text vectorizer: use
        :func:`to_sentence_transformers`), naming it.
    ValueError
        For a ``target_opset`` the graph cannot be written in, before any
        export work.
    RuntimeError
        If the exported graph differs from ``transform`` on ``X_check``, or
        torch cannot export a flow.

    See Also
    --------
    register_skl2onnx_converters : Convert the linear post-processors with
        ``skl2onnx.to_onnx``, e.g. inside a larger scikit-learn pipeline.
    to_faiss : The linear map as a faiss pre-transform.

    Notes
    -----
    A flow is exported by torch's ``torch.export``-based exporter
    (``torch.onnx.export(..., dynamo=True)``, which needs the ``onnxscript``
    package) from the module its estimator builds
    (:meth:`~sklearn_isotropy.GlowFlowTransformer.transform_module`): the
    fitted flow's own layers behind its fixed input map. Nothing in this
    exporter knows a flow layer, so a layer that keeps the layer contract
    exports with no code here; its ``forward`` must trace with
    ``torch.export`` in evaluation mode. The exporter's optimiser folds
    every computation on parameters alone (such as the LU-parametrised
    mixing matrices) into constants. The graph standardises its input in
    float64, as the estimator does; the Glow runs in ``dtype``. This
    exporter writes opset 18 and later itself and converts to older opsets
    unreliably, hence the floor of ``target_opset`` for a flow; torch's
    older TorchScript exporter (``dynamo=False``) is deprecated.

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

    text = static_to_onnx if starts_with_static(estimator_or_pipeline) else None
    if text is None and _pipeline.starts_with_vectorizer(estimator_or_pipeline):
        text = _pipeline.text_pipeline_to_onnx
    if text is not None:
        return text(
            estimator_or_pipeline,
            n_features=n_features,
            dtype=dtype,
            target_opset=target_opset,
            X_check=X_check,
        )
    onnx = import_optional("onnx", purpose=_WHAT, extra="export")
    dtype = _check_dtype(dtype)
    steps = split_steps(estimator_or_pipeline, what=_WHAT)
    for name, est in steps:
        if isinstance(est, BertPoolingVectorizer):
            raise TypeError(
                f"{_WHAT} exports post-processors of embeddings; step {name!r} is "
                "the text encoder. Export the whole text pipeline with "
                "to_sentence_transformers, or the post-processors alone with "
                "to_onnx(pipe[1:])."
            )
        if not (is_affine(est) or _has_module(est)):
            raise TypeError(
                f"{_WHAT} cannot export step {name!r} ({type(est).__name__}); it "
                "exports WhiteningTransformer, NATSVTransformer, StandardNormalizer "
                "and GlowFlowTransformer (any estimator with a transform_module "
                "method), and chains of them."
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
        opset = _check_opset(
            onnx, target_opset, minimum=_MIN_OPSET_AFFINE, graph="a linear chain"
        )
        model = _affine_graph(onnx, fold_affine(steps, what=_WHAT), dtype, opset, n_in)
    else:
        opset = _check_opset(
            onnx,
            target_opset,
            minimum=_MIN_OPSET_TORCH,
            graph="a chain with a flow (exported by torch)",
        )
        torch = import_optional("torch", purpose=_WHAT, extra="flow")
        module = _torch_modules(torch, steps, dtype)
        model = _export_torch(onnx, torch, module, dtype, opset, n_in, steps)
        if X_check is None and hasattr(first, "sample"):
            X_check = first.sample(256, random_state=0)
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
