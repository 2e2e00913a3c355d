"""A fitted text pipeline as a sentence-transformers model directory."""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import clone
from sklearn.pipeline import Pipeline

from .._utils import check_target, import_optional, publish_directory
from ..exceptions import TruncationWarning
from ..text import POOLING_PRESETS, BertPoolingVectorizer

# the exporters this entry point dispatches to (they register themselves)
from . import _static  # noqa: F401
from ._affine import fold_affine, split_text_pipeline
from ._common import check_parity, exporter, exports

# the parity check's texts, those of the text pipeline's ONNX export
from ._pipeline import _CHECK_TEXTS

if TYPE_CHECKING:
    import sentence_transformers

__all__ = ["to_sentence_transformers"]

_WHAT = "to_sentence_transformers"


def _import_st():
    st = import_optional("sentence_transformers", purpose=_WHAT, extra="export")
    # sentence-transformers >= 6 keeps the modules here (and checks the
    # module types of a saved model against this namespace)
    modules = import_optional(
        "sentence_transformers.sentence_transformer.modules",
        purpose=_WHAT + " (sentence-transformers >= 6)",
        extra="export",
    )
    import_optional("torch", purpose=_WHAT, extra="export")
    return st, modules


def _check_parity(model, vec, post, texts):
    """Raise unless the model's ``encode`` returns what the pipeline computes.

    Row by row, in direction and relative error (:func:`check_parity`),
    against the vectorizer's own encoding followed by the post-processors'
    ``transform``. The vectorizer is a clone on the torch backend, without
    ``memory=``: the exported model runs the torch encoder in float32 (an
    ``"onnx-int8"`` vectorizer's quantisation is not exported), and the
    check texts stay out of the user's embedding cache.
    """
    encoder = clone(vec).set_params(
        backend="torch", memory=None, output="numpy", show_progress_bar=False
    )
    with warnings.catch_warnings():
        # a model with few positions truncates some check texts, as the
        # exported model then does too
        warnings.simplefilter("ignore", TruncationWarning)
        expected = encoder.fit(texts).transform(texts)
    for _, step in post:
        expected = step.transform(expected)
    got = model.encode(list(texts), convert_to_numpy=True, show_progress_bar=False)
    check_parity(
        got,
        np.asarray(expected),
        what=_WHAT,
        graph="sentence-transformers' encode of the exported model",
        n_checked=f"{len(texts)} texts",
        owner="pipeline",
    )


# ------------------------------------------------------- pooling, by reader
# ``reader -> build(vec)``, returning the Transformer's extra
# arguments, the pooling modules and a description for the model card: how
# the vectorizer's pooling is written with sentence-transformers' own
# modules, so that the saved model loads with a plain
# ``SentenceTransformer(path)``. A module of our own would not: since
# sentence-transformers 6, loading a module class from outside its namespace
# needs ``trust_remote_code=True``, even from a local directory.
_POOLING_EXPORTS = {}


def _pooling_export(reader):
    def register(build):
        _POOLING_EXPORTS[reader] = build
        return build

    return register


@_pooling_export("mean")
def _mean(vec):
    import torch
    from sentence_transformers.sentence_transformer import modules

    layers, n_layers, width = vec.layers_, vec.n_layers_, vec.hidden_size_
    pooling = modules.Pooling(width, pooling_mode="mean")
    if layers == (n_layers,):  # the last block: sentence-transformers' mean
        return {}, [pooling], "token mean of the last block"
    # Average of several hidden states: WeightedLayerPooling with weight 1
    # on the chosen layers and 0 elsewhere is their exact mean; it reads the
    # hidden states the Transformer returns with output_hidden_states=True.
    start = min(layers)
    weights = torch.zeros(n_layers + 1 - start, dtype=torch.float32)
    weights[[i - start for i in layers]] = 1.0
    layer_mean = modules.WeightedLayerPooling(
        width,
        num_hidden_layers=n_layers,
        layer_start=start,
        layer_weights=torch.nn.Parameter(weights, requires_grad=False),
    )
    return (
        {"config_kwargs": {"output_hidden_states": True}},
        [layer_mean, pooling],
        f"token mean of the average of hidden_states{list(layers)}",
    )


@_pooling_export("cls")
def _cls(vec):
    from sentence_transformers.sentence_transformer import modules

    pooling = modules.Pooling(vec.hidden_size_, pooling_mode="cls")
    return {}, [pooling], "first token of the last block"


@_pooling_export("pooler")
def _pooler(vec):
    # the Transformer itself returns the model's pooler_output as the
    # sentence embedding
    kwargs = {
        "modality_config": {
            "text": {"method": "forward", "method_output_name": "pooler_output"}
        },
        "module_output_name": "sentence_embedding",
    }
    return kwargs, [], "the model's pooler_output"


def _dense(weight, bias):
    """Return a ``Dense`` computing ``x @ weight + bias`` (identity activation)."""
    import torch
    from sentence_transformers.sentence_transformer.modules import Dense

    return Dense(
        weight.shape[0],
        weight.shape[1],
        bias=True,
        activation_function=torch.nn.Identity(),
        init_weight=torch.nn.Parameter(
            torch.from_numpy(np.ascontiguousarray(weight.T, dtype=np.float32))
        ),
        init_bias=torch.nn.Parameter(torch.from_numpy(bias.astype(np.float32))),
    )


def _dense_modules(affine):
    """``(x - center) @ weight + bias`` as one or two ``Dense`` modules.

    The centring is a ``Dense`` of its own (identity weight, bias
    ``-center``, exact in float32), as in the estimators: folded into the
    bias of one map, float32 round-off would scale with the embeddings'
    common offset instead of their spread.
    """
    out = []
    if np.any(affine.center):
        d = affine.n_features_in
        out.append(_dense(np.eye(d), -affine.center))
    out.append(_dense(affine.weight, affine.bias))
    return out


def _model_card(vec, pooling_text, affine, normalize):
    lines = [
        "",
        "## Exported from a scikit-learn pipeline (sklearn-isotropy)",
        "",
        "This directory was written by `sklearn_isotropy.export."
        "to_sentence_transformers` from a fitted pipeline. "
        '`SentenceTransformer(path, device="cpu").encode(texts)` returns what '
        "the pipeline's `transform(texts)` returned (float32, to about 1e-5).",
        "",
        "It uses only sentence-transformers' own modules (Transformer, "
        "WeightedLayerPooling, Pooling, Normalize, Dense), so loading it needs "
        "neither sklearn-isotropy nor `trust_remote_code`.",
        "",
        f"- encoder: `{vec.model_name_}`, at most {vec.max_length_} tokens "
        "per text (special tokens included)",
        f"- pooling: `{vec.pooling}` ({pooling_text}; Hugging Face "
        f"`hidden_states` indices {list(vec.layers_)})",
        f"- unit-norm rows before post-processing: {normalize}",
    ]
    if affine is None:
        lines.append("- post-processing: none")
    else:
        lines.append(
            f"- post-processing: {', '.join(affine.steps)}, folded into one "
            f"affine map ({affine.n_features_in} -> {affine.n_features_out}): "
            "a `Dense` module with the identity activation and bias "
            "`-mean @ W`"
        )
    if vec.layers_ != (vec.n_layers_,) and POOLING_PRESETS[vec.pooling].reader == (
        "mean"
    ):
        lines += [
            "",
            "The pooling reads intermediate hidden states (`output_hidden_states` "
            "is set in `config.json`). sentence-transformers' ONNX and OpenVINO "
            "backends export only the last hidden state, so run this model "
            'with the default `backend="torch"`.',
        ]
    return "\n".join(lines) + "\n"


def to_sentence_transformers(
    pipeline: Pipeline | BertPoolingVectorizer,
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
) -> sentence_transformers.SentenceTransformer:
    """Write a fitted text pipeline as a sentence-transformers model directory.

    ``SentenceTransformer(path).encode(texts)`` then returns what
    ``pipeline.transform(texts)`` returns (float32, to about 1e-5): the
    encoder, its tokenizer and maximum length, every pooling preset and
    ``layers=``, ``normalize=`` and the linear post-processors, folded into
    one affine ``Dense`` layer.

    Parameters
    ----------
    pipeline : Pipeline or BertPoolingVectorizer
        A fitted vectorizer, or a :class:`~sklearn.pipeline.Pipeline` of one
        followed by any number of linear post-processors.
    path : str or os.PathLike
        Directory to write. It must not exist or be empty unless
        ``overwrite=True``; an empty directory is written into in place. The
        model is moved into place only when complete, so a failure leaves
        ``path`` as it was (see :ref:`failure_behaviour`).
    overwrite : bool, default=False
        Replace an existing ``path`` and everything in it. A link, the
        working directory (or one of its parents) and a mount point cannot
        be replaced that way and are refused before any work.

    Returns
    -------
    model : sentence_transformers.SentenceTransformer
        The exported model, on the CPU (the one that was saved).

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If a step is not fitted.
    TypeError
        If the first step is not a vectorizer, or a later step cannot be
        folded into an affine map (e.g. a
        :class:`~sklearn_isotropy.GlowFlowTransformer`), naming the step.
    FileExistsError
        If ``path`` holds files and ``overwrite`` is False, or is a link to
        nothing, or another export to ``path`` started at the same time
        published there first (with ``overwrite=True`` too: an export that
        finds the folder it replaces already moved away by the other
        publishes in its place).
    ValueError
        If ``overwrite=True`` would have to replace a link, the working
        directory (or one of its parents) or a mount point.
    RuntimeError
        If the model's ``encode`` of a few check texts differs from the
        pipeline's output, row by row in direction and relative error
        (in direction only for a static pipeline, whose lengths differ by a
        factor per text): a bug to report, or a pipeline that amplifies
        round-off. Nothing is written.

    See Also
    --------
    to_onnx : The post-processors (or the flow) as an ONNX graph.
    to_faiss : The post-processors as a faiss pre-transform.

    Notes
    -----
    The saved model uses only sentence-transformers' own modules
    (``Transformer``, ``WeightedLayerPooling`` for an average of several
    hidden states, ``Pooling``, ``Normalize``, ``Dense`` with the identity
    activation), so it loads without sklearn-isotropy and without
    ``trust_remote_code``; its model card says how it was made. Poolings
    that read intermediate hidden states need sentence-transformers' default
    ``backend="torch"``. See :ref:`deploying`.

    Before anything is written, the model encodes a few check texts and is
    compared with the vectorizer's own encoding (a copy on the torch
    backend, without ``memory=``, so that the user's embedding cache is
    not written) followed by the post-processors. The model runs the
    float32 torch encoder: a vectorizer with ``backend="onnx-int8"``
    exports its float model, not its quantised graph. A static pipeline's
    folder records the export in ``config_sentence_transformers.json``
    (under ``"sklearn_isotropy"``), so that
    :class:`~sklearn_isotropy.StaticEmbeddingVectorizer` reads its rows,
    which carry their token weights, uniformly.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from sentence_transformers import SentenceTransformer
    >>> from sklearn_isotropy import BertPoolingVectorizer, WhiteningTransformer
    >>> from sklearn_isotropy.export import to_sentence_transformers
    >>> pipe = make_pipeline(BertPoolingVectorizer(pooling="first_last_avg"),
    ...                      WhiteningTransformer(n_components=128))
    >>> pipe.fit(sentences)  # doctest: +SKIP
    >>> to_sentence_transformers(pipe, "whitened-minilm")  # doctest: +SKIP
    >>> model = SentenceTransformer("whitened-minilm", device="cpu")  # doctest: +SKIP
    >>> model.encode(["A man is playing a guitar."]).shape  # doctest: +SKIP
    (1, 128)
    """
    export = exporter(pipeline, "to_sentence_transformers")
    return export(pipeline, path, overwrite=overwrite)


@exports("to_sentence_transformers", BertPoolingVectorizer, None)
def text_to_sentence_transformers(pipeline, path, *, overwrite=False):
    """:func:`to_sentence_transformers` of a text pipeline (a vectorizer first)."""
    st, modules = _import_st()
    vec, post = split_text_pipeline(pipeline, what=_WHAT)
    affine = fold_affine(post, what=_WHAT) if post else None
    if affine is not None and affine.n_features_in != vec.hidden_size_:
        raise ValueError(
            f"{_WHAT}: the post-processors expect {affine.n_features_in} features "
            f"but the vectorizer outputs {vec.hidden_size_}; refit the pipeline."
        )
    check_target(path, overwrite=overwrite, what=_WHAT)

    reader = POOLING_PRESETS[vec.pooling].reader
    transformer_kwargs, pooling, pooling_text = _POOLING_EXPORTS[reader](vec)
    with tempfile.TemporaryDirectory(prefix="sklearn_isotropy_export_") as tmp:
        vec.model_.save_pretrained(tmp)
        vec.tokenizer_.save_pretrained(tmp)
        transformer = modules.Transformer(
            tmp, max_seq_length=vec.max_length_, **transformer_kwargs
        )
    chain = [transformer, *pooling]
    if vec.normalize:
        chain.append(modules.Normalize())
    if affine is not None:
        chain += _dense_modules(affine)
    model = st.SentenceTransformer(modules=chain, device="cpu")
    model.eval()
    _check_parity(model, vec, post, _CHECK_TEXTS)

    def write(directory):
        model.save(str(directory))
        with open(directory / "README.md", "a", encoding="utf-8") as fh:
            fh.write(_model_card(vec, pooling_text, affine, vec.normalize))

    publish_directory(path, write, overwrite=overwrite, what=_WHAT)
    return model
