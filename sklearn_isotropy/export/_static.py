"""A fitted static pipeline as one token table, with the whitening folded in.

A :class:`~sklearn_isotropy.StaticEmbeddingVectorizer` computes the weighted
mean ``m = sum_t w_t e_t / sum_t w_t`` of its table rows ``e_t``, and the
linear post-processors after it an affine map ``A(m) = (m - c) @ W + b``.
Since the weights sum to one, ``A(m) = sum_t w_t A(e_t) / sum_t w_t``: the
pipeline is the same weighted mean over the table of the rows' affine
images. :func:`fold_static` computes that table (in float64), and the
exporters write it:

- to sentence-transformers, as a ``StaticEmbedding`` module, which can only
  take a plain mean: each row is multiplied by its token's weight, so the
  exported model returns ``sum_t w_t A(e_t) / n``, the pipeline's output
  times ``sum_t w_t / n``, a positive number per text. Cosines (and any
  other scale-free comparison) are the pipeline's; lengths are not;
- to ONNX, as a ``Gather`` of rows and weights and their weighted mean:
  the pipeline's output itself.

A text without tokens (``""``, spaces, control characters) is a row of
zeros out of the vectorizer, and the post-processors map it as any row:
``empty = A(0)``, ``(0 - mean_) @ whitening_`` after a whitening. Both
exports give it exactly that (a ``Dense`` bias after sentence-transformers'
mean, which gives such a text zeros), so every path agrees with the
pipeline.

``to_sentence_transformers``, ``to_onnx`` and ``save_onnx_pipeline``
dispatch here when a pipeline starts with the static vectorizer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .._utils import (
    EXPORT_RECORD_KEY,
    check_target,
    import_optional,
    publish_directory,
)
from ..text import ONNX_OUTPUT_NAME, StaticEmbeddingVectorizer
from ._affine import (
    _exportable_names,
    check_fitted,
    fold_affine,
    is_affine,
    split_steps,
)
from ._common import check_parity, exports, starts_with, write_settings
from ._onnx_chain import _check_opset, _finish

__all__ = [
    "FoldedTable",
    "export_record",
    "fold_static",
    "starts_with",
    "static_to_onnx",
    "static_to_sentence_transformers",
    "save_static_onnx",
    "vocabulary_texts",
]

# the output the encoder graphs have too (and sentence-transformers' name)
OUTPUT = ONNX_OUTPUT_NAME
INPUTS = ("input_ids", "attention_mask")
# ReduceSum, Squeeze and Unsqueeze take their axes as an input from opset 13
_MIN_OPSET = 13
# sentence-transformers' configuration file of a saved model
_ST_CONFIG = "config_sentence_transformers.json"
# the parity check's texts when none are given: an empty one, words, signs
# (and the vocabulary's own words, vocabulary_texts)
_CHECK_TEXTS = ["", "A man is playing a guitar.", "ok", "Two dogs, one ball!"]


def vocabulary_texts(tokenizer, n_texts=4, n_words=6):
    """Texts of the vocabulary's first whole words, for the parity checks.

    A static pipeline's text is the weighted mean of its tokens' rows, so
    texts of the vocabulary's own words lie where the pipeline was fitted,
    which fixed English check texts need not (a small vocabulary spells them
    letter by letter). There, a post-processor that amplifies round-off
    shows it: a whitening of directions that only round-off spans. The words
    are the first alphabetic tokens by id (WordPiece and BPE vocabularies
    list frequent tokens first), ``n_texts`` texts of up to ``n_words``.
    """
    vocabulary = tokenizer.get_vocab(with_added_tokens=False)
    words = [
        token
        for token, _ in sorted(vocabulary.items(), key=lambda item: item[1])
        if token.isalpha() and len(token) > 1
    ][: n_texts * n_words]
    return [" ".join(words[i::n_texts]) for i in range(min(n_texts, len(words)))]


@dataclass(frozen=True)
class FoldedTable:
    """A fitted static pipeline as one table.

    ``out = sum_t w_t table[t] / sum_t w_t`` over a text's tokens ``t``, and
    ``empty`` for a text without any.

    Attributes
    ----------
    table : ndarray of shape (n_tokens, n_features_out), float64
    weights : ndarray of shape (n_tokens,), float64
    empty : ndarray of shape (n_features_out,), float64
    vectorizer : StaticEmbeddingVectorizer
    steps : tuple of str
        The names of the folded post-processors.
    weighting : str
        The vectorizer's weighting, ``"auto"`` resolved (``weighting_``).
    """

    table: np.ndarray
    weights: np.ndarray
    empty: np.ndarray
    vectorizer: StaticEmbeddingVectorizer
    steps: tuple[str, ...]
    weighting: str


def _check_linear(steps, *, what):
    """Refuse a step that cannot be folded into the table.

    The message says what can be exported instead: the static part with
    ``what``, and the steps from the refused one on, which take its
    embeddings, with ``to_onnx``.
    """
    for index, (name, est) in enumerate(steps[1:], start=1):
        if is_affine(est):
            continue
        static_part = (
            f"pipe[:{index}]" if what == "to_onnx" else f"pipe[:{index}], path"
        )
        raise TypeError(
            f"{what} cannot export step {name!r} ({type(est).__name__}) of a "
            "static pipeline: a StaticEmbeddingVectorizer pipeline is exported "
            "as one token table with its post-processors folded into the rows, "
            f"which only the linear ones allow ({_exportable_names()}). Export "
            "it in two parts and run one after the other: the static part with "
            f"{what}({static_part}), and the steps from {name!r} on, which take "
            "its embeddings, with sklearn_isotropy.export.to_onnx"
            f"(pipe[{index}:]) (indices of a flat Pipeline). Or put a "
            "WhiteningTransformer in its place to export one static model."
        )


def fold_static(pipeline, *, what):
    """Fold a fitted static vectorizer and its linear steps into one table.

    Returns the :class:`FoldedTable` of the vectorizer and the linear
    post-processors after it.
    """
    if isinstance(pipeline, StaticEmbeddingVectorizer):
        steps = [("vectorizer", pipeline)]
    else:
        steps = split_steps(pipeline, what=what)
    name, vec = steps[0]
    check_fitted(name, vec, what=what)
    table = vec.embeddings_.astype(np.float64)
    empty = np.zeros(vec.hidden_size_)
    post = steps[1:]
    _check_linear(steps, what=what)
    if post:
        affine = fold_affine(post, what=what)
        if affine.n_features_in != vec.hidden_size_:
            raise ValueError(
                f"{what}: the post-processors expect {affine.n_features_in} "
                f"features but the vectorizer outputs {vec.hidden_size_}; refit "
                "the pipeline."
            )
        table, empty = affine.apply(table), affine.apply(empty[None])[0]
    weights = vec.token_weights_.astype(np.float64)
    # a vectorizer pickled before weighting_ existed had no "auto" to resolve
    weighting = getattr(vec, "weighting_", vec.weighting)
    steps = tuple(n for n, _ in post)
    return FoldedTable(table, weights, empty, vec, steps, weighting)


def export_record(folded, exporter):
    """What an exporter writes about itself into the configuration of a folder.

    Under ``EXPORT_RECORD_KEY`` (``"sklearn_isotropy"``): its rows carry their
    token weights, and :class:`~sklearn_isotropy.StaticEmbeddingVectorizer`,
    which reads the folder back, averages them uniformly by default.
    """
    vec = folded.vectorizer
    return {
        "exporter": exporter,
        "table": vec.table_kind_,
        "weighting": folded.weighting,
        "steps": list(folded.steps),
        "rows": "token weight times the post-processed row",
    }


# ---------------------------------------------------- sentence-transformers
def _model_card(folded):
    vec = folded.vectorizer
    steps = ", ".join(folded.steps) or "none"
    return (
        "\n## Exported from a scikit-learn pipeline (sklearn-isotropy)\n\n"
        "A `StaticEmbedding` table written by `sklearn_isotropy.export."
        "to_sentence_transformers` from a fitted pipeline: "
        f"`StaticEmbeddingVectorizer(weighting={folded.weighting!r})` over a "
        f"{vec.table_kind_} table of `{vec.model_name_}`, then the "
        f"post-processors: {steps}, folded into the table's rows.\n\n"
        "`StaticEmbedding` returns the plain mean of a text's rows, so each "
        "row is multiplied by its token's weight: `encode(texts)` is the "
        "pipeline's `transform(texts)` times a positive number per text (the "
        "mean weight of its tokens). Cosine similarities are the pipeline's "
        "(to about 1e-6); vector lengths are not. A text without tokens (the "
        "empty string, spaces) gets the pipeline's output for it: the "
        "vectorizer's row of zeros through the post-processors, which a "
        "`Dense` module adds after the mean when it is not zero. "
        "`StaticEmbeddingVectorizer(this_folder)` reads the folder back as the "
        "pipeline (its rows averaged uniformly: `config_sentence_transformers."
        "json` records the export).\n"
    )


def _bias_module(bias):
    """A sentence-transformers ``Dense`` module that adds ``bias``."""
    torch = import_optional("torch", purpose="to_sentence_transformers", extra="export")
    modules = import_optional(
        "sentence_transformers.sentence_transformer.modules",
        purpose="to_sentence_transformers",
        extra="export",
    )
    width = len(bias)
    return modules.Dense(
        width,
        width,
        bias=True,
        activation_function=torch.nn.Identity(),
        init_weight=torch.eye(width, dtype=torch.float32),
        init_bias=torch.as_tensor(bias, dtype=torch.float32),
    )


@exports("to_sentence_transformers", StaticEmbeddingVectorizer)
def static_to_sentence_transformers(pipeline, path, *, overwrite=False):
    """:func:`~sklearn_isotropy.export.to_sentence_transformers` of a static pipeline.

    One ``StaticEmbedding`` module (see the module's notes).
    """
    what = "to_sentence_transformers"
    st = import_optional("sentence_transformers", purpose=what, extra="export")
    modules = import_optional(
        "sentence_transformers.sentence_transformer.modules",
        purpose=what,
        extra="export",
    )
    tokenizers = import_optional("tokenizers", purpose=what, extra="export")
    folded = fold_static(pipeline, what=what)
    check_target(path, overwrite=overwrite, what=what)
    rows = folded.table * folded.weights[:, None]
    tokenizer = tokenizers.Tokenizer.from_str(folded.vectorizer.tokenizer_.to_str())
    dense = []
    if np.any(folded.empty):
        # StaticEmbedding gives a text without tokens a row of zeros, but the
        # pipeline gives it the post-processors' image of zeros, ``empty``:
        # rows minus ``empty`` and a bias of ``empty`` after the mean give
        # ``empty`` there and change no other output, since a text's
        # ``sum_t (row_t - empty) / n + empty`` is ``sum_t row_t / n``
        rows = rows - folded.empty
        dense = [_bias_module(folded.empty)]
    module = modules.StaticEmbedding(
        tokenizer, embedding_weights=np.ascontiguousarray(rows, dtype=np.float32)
    )
    model = st.SentenceTransformer(modules=[module, *dense], device="cpu")
    model.eval()
    _check_sentence_transformers_parity(model, pipeline, _CHECK_TEXTS)
    # apart: off the fitted support the fixed texts' rows can be far longer,
    # and the median row sets the scale below which a row's direction counts
    # less (as for the ONNX graph)
    _check_sentence_transformers_parity(model, pipeline, vocabulary_texts(tokenizer))

    def write(directory):
        model.save(str(directory))
        with open(directory / "README.md", "a", encoding="utf-8") as fh:
            fh.write(_model_card(folded))
        # the record by which StaticEmbeddingVectorizer reads the rows back
        # uniformly; sentence-transformers loads the file and ignores the key
        config_file = directory / _ST_CONFIG
        config = json.loads(config_file.read_text(encoding="utf-8"))
        config[EXPORT_RECORD_KEY] = export_record(folded, what)
        config_file.write_text(
            json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )

    publish_directory(path, write, overwrite=overwrite, what=what)
    return model


def _check_sentence_transformers_parity(model, pipeline, texts):
    """Raise unless the model's ``encode`` points where ``transform`` does.

    ``StaticEmbedding`` returns the plain mean of a text's rows, the
    pipeline's output times a positive number per text (see the model
    card), so the rows are compared at unit length.
    """
    texts = list(texts)
    if not texts:  # a vocabulary without whole words gives no texts
        return
    got = model.encode(texts, convert_to_numpy=True, show_progress_bar=False)
    expected = texts
    for _, step in split_steps(pipeline, what="to_sentence_transformers"):
        expected = step.transform(expected)
    check_parity(
        got,
        expected,
        what="to_sentence_transformers",
        graph="sentence-transformers' encode of the exported StaticEmbedding "
        "(in direction: its lengths are the pipeline's times a factor per text)",
        n_checked=f"{len(texts)} texts",
        owner="pipeline",
        lengths=False,
    )


# -------------------------------------------------------------------- ONNX
def _graph(onnx, folded, opset):
    """Gather rows and weights; return their masked weighted mean.

    A text without any token gets ``empty``.
    """
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    f32 = onnx.TensorProto.FLOAT

    def const(name, value):
        return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)

    initializers = [
        const("table", folded.table),
        const("weights", folded.weights),
        const("empty", folded.empty),
        const("zero", 0.0),
        const("one", 1.0),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis_1"),
    ]
    node = helper.make_node
    nodes = [
        node("Gather", ["table", "input_ids"], ["rows"], axis=0),
        node("Gather", ["weights", "input_ids"], ["token_weights"], axis=0),
        node("Cast", ["attention_mask"], ["mask"], to=f32),
        node("Mul", ["token_weights", "mask"], ["w"]),
        node("Unsqueeze", ["w", "axis_1"], ["w_row"]),
        node("MatMul", ["w_row", "rows"], ["sum_row"]),
        node("Squeeze", ["sum_row", "axis_1"], ["weighted_sum"]),
        node("ReduceSum", ["w", "axis_1"], ["total"], keepdims=1),
        node("Greater", ["total", "zero"], ["has_tokens"]),
        node("Where", ["has_tokens", "total", "one"], ["divisor"]),
        node("Div", ["weighted_sum", "divisor"], ["mean"]),
        node("Where", ["has_tokens", "mean", "empty"], [OUTPUT]),
    ]
    width = folded.table.shape[1]
    graph = helper.make_graph(
        nodes,
        "sklearn_isotropy_static",
        [
            helper.make_tensor_value_info(
                n, onnx.TensorProto.INT64, ["batch", "tokens"]
            )
            for n in INPUTS
        ],
        [helper.make_tensor_value_info(OUTPUT, f32, ["batch", width])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return _finish(
        onnx,
        model,
        f"{OUTPUT} = the weighted mean of table rows over a text's tokens "
        "(attention_mask 1), with the post-processors folded into the rows; "
        "the row `empty` for a text without tokens",
    )


def _settings(folded):
    vec = folded.vectorizer
    return {
        "input_names": list(INPUTS),
        "output_name": OUTPUT,
        "model": str(vec.model_name_),
        "table": vec.table_kind_,
        "weighting": folded.weighting,
        "steps": list(folded.steps),
        "add_special_tokens": False,
    }


def _feed(tokenizer, texts):
    """The graph's inputs: token ids without special tokens, padded."""
    tokenizers = import_optional("tokenizers", purpose="to_onnx", extra="onnx")
    serving = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    serving.enable_padding(pad_id=0, pad_token=str(serving.id_to_token(0)))
    encodings = serving.encode_batch(list(texts), add_special_tokens=False)
    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
    }


def _check_parity(model, pipeline, folded, texts):
    if not texts:
        return
    ort = import_optional("onnxruntime", purpose="to_onnx", extra="onnx")
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    got = session.run([OUTPUT], _feed(folded.vectorizer.tokenizer_, texts))[0]
    check_parity(
        got,
        pipeline.transform(texts),
        what="to_onnx",
        graph="the static pipeline's graph",
        n_checked=f"{len(texts)} texts",
        owner="pipeline",
    )


@exports("to_onnx", StaticEmbeddingVectorizer)
def static_to_onnx(
    pipeline, *, n_features=None, dtype=np.float32, target_opset=None, X_check=None
):
    """:func:`~sklearn_isotropy.export.to_onnx` of a static pipeline.

    The graph's inputs are ``input_ids`` and ``attention_mask`` (int64,
    ``(batch, tokens)``, tokenized without special tokens); its output
    ``sentence_embedding`` (float32) equals the pipeline's ``transform``
    to float32 round-off: the weighted mean of the folded table's rows.
    """
    onnx = import_optional("onnx", purpose="to_onnx", extra="onnx")
    if n_features is not None or np.dtype(dtype) != np.float32:
        raise ValueError(
            "A static pipeline's graph maps token ids to float32 embeddings; got "
            f"n_features={n_features!r} and dtype={np.dtype(dtype)}. Pass "
            "n_features=None and dtype=numpy.float32 (the defaults)."
        )
    opset = _check_opset(
        onnx, target_opset, minimum=_MIN_OPSET, graph="a static token table"
    )
    folded = fold_static(pipeline, what="to_onnx")
    model = _graph(onnx, folded, opset)
    onnx.helper.set_model_props(
        model, {"sklearn_isotropy": json.dumps(_settings(folded), sort_keys=True)}
    )
    if X_check is None:
        _check_parity(model, pipeline, folded, _CHECK_TEXTS)
        # apart: off the fitted support, the fixed texts' rows can be far
        # longer, and would set the scale of the check
        _check_parity(
            model, pipeline, folded, vocabulary_texts(folded.vectorizer.tokenizer_)
        )
    else:
        _check_parity(model, pipeline, folded, list(X_check))
    return model


def _readme(settings):
    steps = ", ".join(settings["steps"]) or "none"
    return f"""# Static pipeline as one ONNX graph (sklearn-isotropy)

`model.onnx` computes what the fitted scikit-learn pipeline's `transform(texts)`
returned: the `{settings["weighting"]}`-weighted mean of a token table's rows
(a {settings["table"]} table of `{settings["model"]}`), with the
post-processors ({steps}) folded into the rows. Inputs: `input_ids` and
`attention_mask` (int64, shape `(batch, tokens)`), from `tokenizer.json`
beside it, which adds no special tokens and pads; output `{OUTPUT}`
(float32, shape `(batch, width)`). Serving needs onnxruntime, numpy and the
`tokenizers` package:

```python
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

folder = "path/to/this/folder"
tokenizer = Tokenizer.from_file(f"{{folder}}/tokenizer.json")
session = ort.InferenceSession(f"{{folder}}/model.onnx",
                               providers=["CPUExecutionProvider"])
encodings = tokenizer.encode_batch(["A man is playing a guitar."])
feed = {{
    "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
    "attention_mask": np.array([e.attention_mask for e in encodings],
                               dtype=np.int64),
}}
embeddings = session.run(["{OUTPUT}"], feed)[0]
```
"""


@exports("save_onnx_pipeline", StaticEmbeddingVectorizer)
def save_static_onnx(pipeline, path, *, overwrite=False, X_check=None):
    """:func:`~sklearn_isotropy.export.save_onnx_pipeline` of a static pipeline.

    It writes ``model.onnx``, a ``tokenizer.json`` that adds no special tokens
    and pads, the settings and a README.
    """
    what = "save_onnx_pipeline"
    onnx = import_optional("onnx", purpose=what, extra="onnx")
    tokenizers = import_optional("tokenizers", purpose=what, extra="onnx")
    check_target(path, overwrite=overwrite, what=what)  # before the work
    folded = fold_static(pipeline, what=what)  # its refusals name this function
    model = static_to_onnx(pipeline, X_check=X_check)
    settings = _settings(folded)

    def write(directory):
        onnx.save(model, str(directory / "model.onnx"))
        serving = tokenizers.Tokenizer.from_str(folded.vectorizer.tokenizer_.to_str())
        serving.post_processor = None  # never adds special tokens
        serving.enable_padding(pad_id=0, pad_token=str(serving.id_to_token(0)))
        serving.save(str(directory / "tokenizer.json"))
        write_settings(directory, settings, _readme(settings))

    publish_directory(path, write, overwrite=overwrite, what=what)
    return model
