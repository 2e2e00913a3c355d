"""A fitted text pipeline as one ONNX graph: token ids in, the embedding out.

The vectorizer's encoder and pooling come from
:meth:`~sklearn_isotropy.BertPoolingVectorizer.get_onnx_encoder` (the graph
its ``backend="onnx"`` runs), ``normalize=True`` adds a few nodes, and the
post-processors are :func:`~sklearn_isotropy.export.to_onnx`'s graph of
them, joined with ``onnx.compose``.
"""

from __future__ import annotations

import copy
import json
import os
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from sklearn.pipeline import Pipeline

from .._utils import check_target, import_optional, publish_directory
from ..exceptions import TruncationWarning
from ..text import ONNX_OUTPUT_NAME, ONNX_SESSION_OPTIONS, BertPoolingVectorizer

# the exporters this entry point dispatches to (they register themselves)
from . import _static  # noqa: F401
from ._affine import split_text_pipeline
from ._common import SETTINGS_FILE, check_parity, exporter, exports, write_settings
from ._onnx_chain import chain_to_onnx as to_onnx  # the post-processors' graph

if TYPE_CHECKING:
    import onnx

__all__ = ["save_onnx_pipeline"]

_WHAT = "save_onnx_pipeline"
OUTPUT = ONNX_OUTPUT_NAME
_POOLED = "pooled_embedding"
_PREFIX = "post_"

# Texts of the parity check when none are given: several lengths, an empty
# one, words and punctuation any vocabulary splits somehow.
_CHECK_TEXTS = [
    "A man is playing a guitar.",
    "",
    "Two dogs run along the beach, chasing a red ball into the waves.",
    "ok",
    "The quick brown fox jumps over the lazy dog again and again, "
    "while three people watch from a small boat on the river.",
]


def _rename_output(graph, old, new):
    for node in graph.node:
        node.output[:] = [new if n == old else n for n in node.output]
        node.input[:] = [new if n == old else n for n in node.input]
    for value in graph.output:
        if value.name == old:
            value.name = new


def _add_normalize(graph, source, target):
    """Unit-norm rows, zero rows kept zero, as ``normalize_rows`` computes them.

    Each row is divided by its largest absolute entry first (so the squares
    cannot overflow), then by its norm, which is then at least 1: ``Max(norm,
    1)`` is the norm itself, except for rows of zeros, which stay zero. The
    reductions take their axes as an input (opset 18 and later).
    """
    from onnx import helper, numpy_helper

    name = "normalize_"
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(0.0, np.float32), name + "zero"),
            numpy_helper.from_array(np.array(1.0, np.float32), name + "one"),
            numpy_helper.from_array(np.array([1], np.int64), name + "axes"),
        ]
    )
    graph.node.extend(
        [
            helper.make_node("Abs", [source], [name + "abs"]),
            helper.make_node(
                "ReduceMax", [name + "abs", name + "axes"], [name + "peak"], keepdims=1
            ),
            helper.make_node(
                "Equal", [name + "peak", name + "zero"], [name + "is_zero"]
            ),
            helper.make_node(
                "Where",
                [name + "is_zero", name + "one", name + "peak"],
                [name + "scale"],
            ),
            helper.make_node("Div", [source, name + "scale"], [name + "scaled"]),
            helper.make_node(
                "ReduceL2",
                [name + "scaled", name + "axes"],
                [name + "norm"],
                keepdims=1,
            ),
            helper.make_node("Max", [name + "norm", name + "one"], [name + "divisor"]),
            helper.make_node("Div", [name + "scaled", name + "divisor"], [target]),
        ]
    )


def _opset(model):
    """Return the default-domain opset a graph was written at."""
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def _text_graph(vec, post):
    """Return the merged ModelProto of the vectorizer and the post-processors."""
    import onnx

    model = vec.get_onnx_encoder()
    graph = model.graph
    (encoder_output,) = [o.name for o in graph.output]
    width = vec.hidden_size_
    tail = encoder_output
    if vec.normalize or post:
        _rename_output(graph, encoder_output, _POOLED)
        tail = _POOLED
    if vec.normalize:
        target = OUTPUT if not post else "normalized_embedding"
        _add_normalize(graph, tail, target)
        del graph.output[:]
        graph.output.append(
            onnx.helper.make_tensor_value_info(
                target, onnx.TensorProto.FLOAT, ["batch", width]
            )
        )
        tail = target
    if not post:
        return model
    post_model = to_onnx(
        Pipeline(list(post)), n_features=width, target_opset=_opset(model)
    )
    post_model.ir_version = model.ir_version
    post_model = onnx.compose.add_prefix(post_model, _PREFIX)
    (post_input,) = [i.name for i in post_model.graph.input]
    (post_output,) = [o.name for o in post_model.graph.output]
    merged = onnx.compose.merge_models(
        model, post_model, io_map=[(tail, post_input)], doc_string=model.doc_string
    )
    _rename_output(merged.graph, post_output, OUTPUT)
    return merged


@exports("to_onnx", BertPoolingVectorizer)
def text_pipeline_to_onnx(
    pipeline, *, n_features=None, dtype=np.float32, target_opset=None, X_check=None
):
    """Export a pipeline starting with a vectorizer (see :func:`save_onnx_pipeline`)."""
    onnx = import_optional("onnx", purpose="to_onnx", extra="onnx")
    vec, post = split_text_pipeline(pipeline, what=_WHAT)
    if n_features is not None:
        raise ValueError(
            f"n_features={n_features!r} is the width of embeddings, but this "
            "pipeline starts from text (token ids); pass n_features=None."
        )
    if np.dtype(dtype) != np.float32:
        raise ValueError(
            f"A text pipeline's graph computes in float32, as the vectorizer "
            f"does; got dtype={np.dtype(dtype)}. Pass dtype=numpy.float32."
        )
    model = _text_graph(vec, post)
    opset = _opset(model)
    if target_opset is not None and target_opset != opset:
        raise ValueError(
            f"The encoder of a text pipeline is exported at opset {opset}; got "
            f"target_opset={target_opset!r}. Pass target_opset=None or {opset}."
        )
    _set_metadata(model, vec, post)
    onnx.checker.check_model(model, full_check=False)
    texts = _CHECK_TEXTS if X_check is None else list(X_check)
    _check_parity(model, vec, post, texts)
    return model


def _settings(vec, post):
    return {
        "input_names": [],  # filled from the graph
        "output_name": OUTPUT,
        "max_length": int(vec.max_length_),
        "model": str(vec.model_name_),
        "pooling": vec.pooling,
        "layers": [int(i) for i in vec.layers_],
        "normalize": bool(vec.normalize),
        "backend": vec.backend,
        "steps": [name for name, _ in post],
        "hidden_size": int(vec.hidden_size_),
    }


def _set_metadata(model, vec, post):
    from onnx.helper import set_model_props

    settings = _settings(vec, post)
    settings["input_names"] = [i.name for i in model.graph.input]
    set_model_props(model, {"sklearn_isotropy": json.dumps(settings, sort_keys=True)})
    model.producer_name = "sklearn-isotropy"


def _feed(vec, input_names, texts):
    """Return the graph's inputs for ``texts``, tokenized as the vectorizer does."""
    enc = vec.tokenizer_(
        texts,
        padding=True,
        truncation=True,
        max_length=vec.max_length_,
        return_tensors="np",
    )
    return {name: np.asarray(enc[name], dtype=np.int64) for name in input_names}


def _check_parity(model, vec, post, texts):
    """Raise unless the graph computes the pipeline's transform on ``texts``.

    Text by text: int8 activations are quantised per batch, so an int8
    embedding moves a little with the other texts (and padding) of its
    batch; one text alone is the same computation on both sides. The
    reference encodes (a copy of the vectorizer without ``memory=``), rather
    than read rows cached from other batches.
    """
    ort = import_optional("onnxruntime", purpose="to_onnx", extra="onnx")
    session = ort.InferenceSession(model.SerializeToString(), **ONNX_SESSION_OPTIONS)
    names = [i.name for i in session.get_inputs()]
    encoder = copy.copy(vec)
    encoder.memory = None
    reference = Pipeline([("vectorizer", encoder), *post])
    got, expected = [], []
    with warnings.catch_warnings():
        # the check texts are truncated alike on both sides
        warnings.simplefilter("ignore", TruncationWarning)
        for text in texts:
            got.append(session.run([OUTPUT], _feed(vec, names, [text]))[0])
            expected.append(reference.transform([text]))
    check_parity(
        np.concatenate(got),
        np.concatenate(expected),
        what="to_onnx",
        graph="the exported text pipeline",
        n_checked=f"{len(texts)} texts",
        owner="pipeline",
    )


# the attribute of a ``tokenizers.Encoding`` that holds each graph input
_ENCODING_FIELDS = {
    "input_ids": "ids",
    "attention_mask": "attention_mask",
    "token_type_ids": "type_ids",
}


def _readme(settings, has_tokenizer_json):
    names = settings["input_names"]
    steps = ", ".join(settings["steps"]) or "none"
    about = (
        "`model.onnx` computes what the fitted scikit-learn pipeline's "
        f"`transform(texts)` returned, from token ids: the encoder "
        f"`{settings['model']}`, pooling `{settings['pooling']}` (Hugging Face "
        f"`hidden_states` {settings['layers']}), unit-norm rows: "
        f"{settings['normalize']}, then the post-processors: {steps}. Inputs: "
        f"{', '.join(f'`{n}`' for n in names)} (int64, shape `(batch, tokens)`); "
        f"output `{OUTPUT}` (float32, shape `(batch, width)`). Texts longer than "
        f"{settings['max_length']} tokens are truncated, as in the pipeline. The "
        "tokenizer files beside it are the encoder's, and "
        f"`{SETTINGS_FILE}` repeats these settings for programs."
    )
    transformers = (
        "With transformers installed, the tokenizer can also be "
        "`AutoTokenizer.from_pretrained(folder)`, and the inputs "
        "`tokenizer(texts, padding=True, truncation=True, "
        f'max_length={settings["max_length"]}, return_tensors="np")`.'
    )
    disabled = ONNX_SESSION_OPTIONS["disabled_optimizers"]
    parts = ["# Text pipeline as one ONNX graph (sklearn-isotropy)", _fill(about)]
    if has_tokenizer_json:
        feed = "\n".join(
            f'    "{n}": np.array([e.{_ENCODING_FIELDS[n]} for e in encodings], '
            "dtype=np.int64),"
            for n in names
        )
        parts += [
            _fill(
                "Serving it needs onnxruntime, numpy and the `tokenizers` "
                "package, not torch:"
            ),
            f"""```python
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

folder = "path/to/this/folder"
tokenizer = Tokenizer.from_file(f"{{folder}}/tokenizer.json")  # pads, truncates
# the vectorizer's settings: faster for int8, and the same numbers
session = ort.InferenceSession(f"{{folder}}/model.onnx",
                               providers={ONNX_SESSION_OPTIONS["providers"]!r},
                               disabled_optimizers={disabled!r})

texts = ["A man is playing a guitar.", "A woman slices an onion."]
encodings = tokenizer.encode_batch(texts)
feed = {{
{feed}
}}
embeddings = session.run(["{OUTPUT}"], feed)[0]
```""",
        ]
    parts.append(_fill(transformers))
    return "\n\n".join(parts) + "\n"


def _fill(text):
    return textwrap.fill(text, width=79, break_on_hyphens=False)


def _save_tokenizer(vec, directory):
    """Save the tokenizer files, with ``tokenizer.json`` set to pad and truncate."""
    tokenizer = vec.tokenizer_
    tokenizer.save_pretrained(str(directory))
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return
    tokenizers = import_optional("tokenizers", purpose=_WHAT, extra="text")
    serving = tokenizers.Tokenizer.from_str(backend.to_str())  # a copy
    serving.enable_truncation(max_length=int(vec.max_length_))
    pad_id = getattr(tokenizer, "pad_token_id", None)
    pad_token = getattr(tokenizer, "pad_token", None)
    if pad_id is not None and pad_token is not None:
        serving.enable_padding(
            pad_id=int(pad_id),
            pad_token=str(pad_token),
            pad_type_id=int(getattr(tokenizer, "pad_token_type_id", 0) or 0),
        )
    serving.save(str(Path(directory) / "tokenizer.json"))


def save_onnx_pipeline(
    pipeline: Pipeline | BertPoolingVectorizer,
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    X_check: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """Write a fitted text pipeline as one ONNX graph, with its tokenizer.

    The folder holds ``model.onnx``, one graph from token ids (int64,
    ``(batch, tokens)``) to the pipeline's float32 ``sentence_embedding``
    (what ``to_onnx(pipeline)`` returns), the tokenizer files
    (``tokenizer.json`` set to truncate and pad), the settings
    (``sklearn_isotropy_onnx.json``) and a ``README.md`` that serves it with
    onnxruntime and ``tokenizers`` alone, without torch.

    Parameters
    ----------
    pipeline : Pipeline or BertPoolingVectorizer
        A fitted vectorizer, or a :class:`~sklearn.pipeline.Pipeline` of one
        followed by post-processors :func:`to_onnx` exports.
    path : str or os.PathLike
        Directory to write. It must not exist or be empty unless
        ``overwrite=True``.
    overwrite : bool, default=False
        Replace an existing ``path`` and everything in it.
    X_check : list of str, default=None
        Texts on which the graph is run with onnxruntime and compared with
        ``pipeline.transform`` (a RuntimeError if they differ beyond float32
        round-off); a few built-in sentences when None.

    Returns
    -------
    model : onnx.ModelProto
        The graph that was saved.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If a step is not fitted.
    TypeError
        For a step that cannot be exported, naming it.
    FileExistsError
        If ``path`` holds files and ``overwrite`` is False, or another
        export to ``path`` started at the same time published there first
        (with ``overwrite=True`` too).
    ValueError
        If ``path`` would have to be replaced but cannot be (a link, the
        working directory, a mount point); see :ref:`failure_behaviour`.

    See Also
    --------
    to_onnx : The same graph, returned, without the tokenizer files.
    to_sentence_transformers : The pipeline as a sentence-transformers model.

    Notes
    -----
    The encoder and pooling are the graph ``backend="onnx"`` runs (the int8
    one for ``backend="onnx-int8"``); ``normalize=True`` becomes
    ``ReduceMax``/``ReduceL2``/``Div`` nodes; the post-processors are
    :func:`to_onnx`'s graph of them, joined with ``onnx.compose``. The check
    runs one text at a time with the vectorizer's session options, which an
    int8 graph needs to give the pipeline's numbers exactly (see
    :ref:`deploying_text_onnx`).

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn_isotropy import BertPoolingVectorizer, WhiteningTransformer
    >>> from sklearn_isotropy.export import save_onnx_pipeline
    >>> pipe = make_pipeline(BertPoolingVectorizer(pooling="first_last_avg"),
    ...                      WhiteningTransformer(n_components=128))
    >>> pipe.fit(sentences)  # doctest: +SKIP
    >>> save_onnx_pipeline(pipe, "whitened-minilm-onnx")  # doctest: +SKIP
    """
    export = exporter(pipeline, "save_onnx_pipeline")
    return export(pipeline, path, overwrite=overwrite, X_check=X_check)


@exports("save_onnx_pipeline", BertPoolingVectorizer, None)
def save_text_onnx(pipeline, path, *, overwrite=False, X_check=None):
    """:func:`save_onnx_pipeline` of a text pipeline (a vectorizer first)."""
    onnx = import_optional("onnx", purpose=_WHAT, extra="onnx")
    vec, post = split_text_pipeline(pipeline, what=_WHAT)
    check_target(path, overwrite=overwrite, what=_WHAT)  # before the work
    model = text_pipeline_to_onnx(pipeline, X_check=X_check)

    def write(directory):
        onnx.save(model, str(directory / "model.onnx"))
        _save_tokenizer(vec, directory)
        settings = _settings(vec, post)
        settings["input_names"] = [i.name for i in model.graph.input]
        readme = _readme(settings, (directory / "tokenizer.json").is_file())
        write_settings(directory, settings, readme)

    publish_directory(path, write, overwrite=overwrite, what=_WHAT)
    return model
