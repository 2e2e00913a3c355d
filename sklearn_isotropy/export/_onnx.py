"""Post-processors and text pipelines as ONNX graphs: the public entry points.

:func:`to_onnx` sends a pipeline to the exporter that the one table of
:mod:`._common` names for its first step: a chain of post-processors to
:mod:`._onnx_chain`, a text pipeline to :mod:`._pipeline` (which joins that
chain's graph to the encoder's), a static one to :mod:`._static`;
:func:`register_skl2onnx_converters` teaches skl2onnx the linear
post-processors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, DTypeLike
from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline

from .._utils import import_optional

# the exporters this entry point dispatches to (they register themselves)
from . import _onnx_chain, _pipeline, _static  # noqa: F401
from ._affine import _AFFINE_RULES, fold_affine
from ._common import exporter
from ._onnx_chain import onnx_type

if TYPE_CHECKING:
    import onnx

__all__ = ["register_skl2onnx_converters", "to_onnx"]


def to_onnx(
    estimator_or_pipeline: BaseEstimator | Pipeline | list,
    n_features: int | None = None,
    *,
    dtype: DTypeLike = np.float32,
    target_opset: int | None = None,
    X_check: ArrayLike | None = None,
) -> onnx.ModelProto:
    """Export fitted post-processors (linear or the flow) as an ONNX model.

    The graph has one input ``"X"`` of shape ``(N, n_features)`` and one
    output ``"Z"`` of shape ``(N, n_features_out)``, both of ``dtype``, and
    computes what ``transform`` computes. Linear post-processors and chains
    of them become one affine map (``Sub``, ``MatMul``, ``Add``); a
    :class:`~sklearn_isotropy.GlowFlowTransformer` is traced through torch.
    A pipeline that starts with a text vectorizer becomes one graph from
    token ids, as :func:`save_onnx_pipeline` writes it.

    Parameters
    ----------
    estimator_or_pipeline : estimator, Pipeline or list of estimators
        A fitted :class:`~sklearn_isotropy.WhiteningTransformer`,
        :class:`~sklearn_isotropy.NATSVTransformer`,
        :class:`~sklearn_isotropy.StandardNormalizer` or
        :class:`~sklearn_isotropy.GlowFlowTransformer`, or a chain of them
        (a :class:`~sklearn.pipeline.Pipeline` or a list, applied in order),
        possibly after a vectorizer.
    n_features : int, default=None
        Width of the input; must equal the first step's ``n_features_in_``.
    dtype : {numpy.float32, numpy.float64}, default=numpy.float32
        Element type of the input, output and weights.
    target_opset : int, default=None
        ONNX opset of the graph's default domain; 18 when None. A linear chain
        can be written in opsets 9 and later, a chain with a flow in 18 and
        later, up to the newest the installed onnx knows.
    X_check : array-like of shape (n_samples, n_features), default=None
        Rows on which the graph is run with onnxruntime and compared with
        ``transform``; for a flow, rows drawn from it when None.

    Returns
    -------
    model : onnx.ModelProto
        Checked by ``onnx.checker``, with the lowest IR version its opset
        allows, so models of one ``target_opset`` join with
        :mod:`onnx.compose`. Save it with ``onnx.save(model, path)``.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If a step is not fitted.
    TypeError
        For a step that cannot be exported, naming it.
    ValueError
        For a ``target_opset`` the graph cannot be written in, before any
        export work.
    RuntimeError
        If the graph differs from ``transform`` on ``X_check`` beyond float
        round-off, in any row's direction or length relative to its norm (a
        bug, or a pipeline that amplifies round-off), or torch cannot export
        a flow.

    See Also
    --------
    register_skl2onnx_converters : Convert the linear post-processors with
        ``skl2onnx.to_onnx``, e.g. inside a larger scikit-learn pipeline.
    to_faiss : The linear map as a faiss pre-transform.

    Notes
    -----
    A flow is traced by ``torch.onnx.export(..., dynamo=True)`` (the
    ``onnxscript`` package) from the module its estimator builds, so nothing
    here knows a flow layer; that exporter writes opset 18 and later, hence
    the floor of ``target_opset`` for a flow. See :ref:`deploying`.

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
    export = exporter(estimator_or_pipeline, "to_onnx")
    kwargs = {"n_features": n_features, "dtype": dtype, "target_opset": target_opset}
    return export(estimator_or_pipeline, X_check=X_check, **kwargs)


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
    elem = onnx_type(dtype)
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


def register_skl2onnx_converters() -> list[type]:
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
