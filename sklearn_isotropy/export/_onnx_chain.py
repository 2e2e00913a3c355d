"""Chains of post-processors as ONNX graphs: linear ones folded, the flow via torch.

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
from ._affine import AffineMap, check_fitted, fold_affine, is_affine, split_steps
from ._common import check_parity, exports

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


def onnx_type(dtype):
    """Return the ONNX element type of a float dtype."""
    from onnx import TensorProto

    return getattr(TensorProto, _DTYPES[np.dtype(dtype)])


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

    Every graph of ``to_onnx`` has the lowest IR version its opset allows, so
    graphs exported with the same ``target_opset`` can be joined with
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
def _affine_graph(affine: AffineMap, dtype, opset, n_features_in):
    import onnx
    from onnx import helper, numpy_helper

    elem = onnx_type(dtype)
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
def _torch_modules(steps, dtype):
    """Return one torch module per segment: folded linear runs, each flow's own."""
    import torch

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
def _quiet_exporter():
    """Silence what torch's exporter says about itself, not about the model.

    Its progress, its optional packages and the deprecations of its internals.
    """
    import torch

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


def _export_torch(module, dtype, opset, n_features_in, steps):
    """Return the ONNX of ``module`` by torch's exporter (the Notes of ``to_onnx``)."""
    import onnx
    import torch

    import_optional("onnxscript", purpose=f"{_WHAT} of a flow", extra="export")
    example = torch.zeros(
        (2, n_features_in), dtype=getattr(torch, np.dtype(dtype).name)
    )
    names = ", ".join(
        n if n == type(e).__name__ else f"{n} ({type(e).__name__})" for n, e in steps
    )
    try:
        with _quiet_exporter():
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
    check_parity(
        session.run(None, {"X": X})[0],
        _reference(steps, X),
        what=_WHAT,
        graph="the exported graph",
        n_checked=f"{len(X)} check rows",
        owner="estimator",
        rtol=1e-4 if dtype == np.float32 else 1e-9,
    )


@exports("to_onnx", None)
def chain_to_onnx(
    estimator_or_pipeline,
    n_features=None,
    *,
    dtype=np.float32,
    target_opset=None,
    X_check=None,
):
    """The graph of :func:`~sklearn_isotropy.export.to_onnx` for a chain.

    A chain of post-processors (no text vectorizer), from the same arguments.
    """
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
        model = _affine_graph(fold_affine(steps, what=_WHAT), dtype, opset, n_in)
    else:
        opset = _check_opset(
            onnx,
            target_opset,
            minimum=_MIN_OPSET_TORCH,
            graph="a chain with a flow (exported by torch)",
        )
        import_optional("torch", purpose=_WHAT, extra="flow")
        module = _torch_modules(steps, dtype)
        model = _export_torch(module, dtype, opset, n_in, steps)
        if X_check is None and hasattr(first, "sample"):
            X_check = first.sample(256, random_state=0)
    if X_check is not None:
        _check_parity(model, steps, X_check, dtype)
    return model
