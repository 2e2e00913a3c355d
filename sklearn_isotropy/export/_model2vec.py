"""A fitted static pipeline as a model2vec model folder.

model2vec's ``StaticModel.encode`` takes, for each text, the plain mean of
the rows of its tokens (tokenized without special tokens, the tokenizer's
unknown token removed), then scales it to unit length when the model's
``normalize`` setting is on. :func:`~._static.fold_static` gives the table
``A(e_t)`` of the rows' affine images and the weights ``w_t``, with the
pipeline's output ``sum_t w_t A(e_t) / sum_t w_t``. Writing the rows
``w_t A(e_t)``, the plain mean over a text's ``n`` tokens is ``sum_t w_t
A(e_t) / n``: the pipeline's output times ``sum_t w_t / n``, a positive
number per text. The mean offset of the whitening is inside every ``A(e_t)``
(``A(e) = (e - c) @ W + b``), and it averages out to the offset of the mean
because the normalised weights ``w_t / sum_t w_t`` sum to one; the exported
rows carry it the same way. With ``normalize`` on (as written here), the
positive factor goes too: ``encode`` returns the pipeline's output scaled
to unit length.

Where model2vec cannot follow: a text without tokens is a row of zeros for
model2vec, the affine image of a row of zeros for the pipeline; and model2vec
drops the unknown token from a text, which the pipeline averages like any
other.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from .._utils import (
    EXPORT_RECORD_KEY,
    check_target,
    import_optional,
    publish_directory,
)
from ._affine import split_steps
from ._common import check_parity, starts_with
from ._static import export_record, fold_static, vocabulary_texts

if TYPE_CHECKING:
    import model2vec
    from sklearn.pipeline import Pipeline

    from ..text import StaticEmbeddingVectorizer

__all__ = ["to_model2vec"]

_WHAT = "to_model2vec"
DTYPES = ("float32", "float16", "int8")
# the parity check's texts: several lengths, words and signs
_CHECK_TEXTS = [
    "A man is playing a guitar.",
    "ok",
    "Two dogs, one ball!",
    "The quick brown fox jumps over the lazy dog again and again, while three "
    "people watch from a small boat on the river.",
]
# float16's largest finite value is 65504; rows are scaled down by a power of
# two below this bound, which changes no cosine and, with `normalize`, no output
_FLOAT16_BOUND = 2.0**15


def _quantize(rows, dtype):
    """``rows`` (float64) stored as ``dtype``.

    float32 and float16 as they are (float16 scaled by a power of two if its
    range needs it), int8 with one scale for the whole table, ``max |rows| /
    127``, as model2vec's own ``quantize_to="int8"`` does (a per-row scale
    would need model2vec's ``weights`` tensor, which sends ``encode`` down
    its slower path; the two are compared in :ref:`static_model2vec`).
    """
    if dtype == "float32":
        return np.ascontiguousarray(rows, dtype=np.float32)
    peak = float(np.max(np.abs(rows))) if rows.size else 0.0
    if dtype == "float16":
        if peak >= _FLOAT16_BOUND:
            rows = np.ldexp(rows, -int(np.ceil(np.log2(peak / _FLOAT16_BOUND))))
        return np.ascontiguousarray(rows, dtype=np.float16)
    scale = peak / 127.0 if peak > 0 else 1.0
    return np.clip(np.rint(rows / scale), -127, 127).astype(np.int8)


def _vocabulary_rows(tokenizer, n_rows):
    """The identity ``mapping`` from ids to rows, or None when not needed.

    model2vec needs one when its tokenizer's vocabulary does not have exactly
    one id per row (gaps in the ids).
    """
    if len(tokenizer.get_vocab()) == n_rows:
        return None
    return np.arange(n_rows, dtype=np.int64)


def _config(folded, dtype):
    vec = folded.vectorizer
    return {
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "tokenizer_name": _base_name(vec.model_name_),
        "hidden_dim": int(folded.table.shape[1]),
        "seq_length": 1000000,  # as model2vec writes it: no sequence limit
        # StaticEmbeddingVectorizer reads a folder with this record uniformly
        EXPORT_RECORD_KEY: {**export_record(folded, _WHAT), "dtype": dtype},
    }


def _base_name(source):
    """A local model folder by its name, as model2vec's ``distill`` does."""
    source = str(source)
    if os.path.isdir(source):
        return os.path.basename(os.path.normpath(source))
    return source


def _check_texts(tokenizer, unk_id, texts):
    """The texts model2vec tokenizes as the pipeline does.

    Those with at least one token and no unknown token (which model2vec
    removes).
    """
    kept = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if ids and unk_id not in ids:
            kept.append(text)
    return kept


def _check_parity(model, pipeline, texts):
    """Raise unless model2vec's ``encode`` is the pipeline's output at unit length.

    On ``texts``, with the float32 rows (before any quantisation).
    """
    texts = _check_texts(model.tokenizer, model.unk_token_id, texts)
    if not texts:
        return
    got = np.asarray(model.encode(texts, use_multiprocessing=False), np.float64)
    expected = texts
    for _, step in split_steps(pipeline, what=_WHAT):  # a list of steps too
        expected = step.transform(expected)
    check_parity(
        got,
        expected,
        what=_WHAT,
        graph="model2vec's encode of the exported table (at unit length, as "
        "the pipeline's output)",
        n_checked=f"{len(texts)} texts",
        owner="pipeline",
        lengths=False,
    )


def _model_card(folded, dtype):
    vec = folded.vectorizer
    steps = ", ".join(folded.steps) or "none"
    precision = {
        "float32": "float32 rows",
        "float16": "float16 rows (about 3 significant digits)",
        "int8": (
            "int8 rows with one scale for the whole table (max |row entry| / "
            "127), as model2vec's own int8 quantisation; rows of small norm "
            "keep few levels, so cosines move by up to about 2e-2"
        ),
    }[dtype]
    return (
        "\n## Exported from a scikit-learn pipeline (sklearn-isotropy)\n\n"
        "Written by `sklearn_isotropy.export.to_model2vec` from a fitted "
        f"pipeline: `StaticEmbeddingVectorizer(weighting={folded.weighting!r})` "
        f"over a {vec.table_kind_} table of `{vec.model_name_}`, then the "
        f"post-processors: {steps}, folded into the table's rows "
        f"({folded.table.shape[1]} wide), stored as {precision}.\n\n"
        "Each row holds its token's weight times the post-processed row, so "
        "model2vec's plain mean of a text's rows is the pipeline's "
        "`transform(texts)` times a positive number per text, and `encode` "
        "(with `normalize`, on in `config.json`) returns the pipeline's output "
        "at unit length. Two exceptions: a text without tokens is a row of "
        "zeros here, and model2vec drops the unknown token (`[UNK]`) that the "
        "pipeline averages. `StaticEmbeddingVectorizer(this_folder)` reads the "
        "folder back (its rows averaged uniformly: `config.json` records the "
        "export).\n"
    )


def to_model2vec(
    pipeline: Pipeline | StaticEmbeddingVectorizer,
    path: str | os.PathLike,
    *,
    dtype: str = "float32",
    overwrite: bool = False,
) -> model2vec.StaticModel:
    """Write a fitted static pipeline as a model2vec model folder.

    ``model2vec.StaticModel.from_pretrained(path).encode(texts)`` then
    returns the pipeline's ``transform(texts)`` scaled to unit length: the
    same cosine similarities, to about 1e-6 with ``dtype="float32"``. The
    folder is model2vec's own (``model.safetensors`` with the
    ``embeddings`` tensor, ``tokenizer.json``, ``config.json``, a model
    card), so every tool that loads model2vec models loads it, and
    :class:`~sklearn_isotropy.StaticEmbeddingVectorizer` reads it back.

    Parameters
    ----------
    pipeline : Pipeline or StaticEmbeddingVectorizer
        A fitted :class:`~sklearn_isotropy.StaticEmbeddingVectorizer`, or a
        :class:`~sklearn.pipeline.Pipeline` of one followed by any number of
        linear post-processors (:class:`~sklearn_isotropy.WhiteningTransformer`,
        :class:`~sklearn_isotropy.NATSVTransformer`,
        :class:`~sklearn_isotropy.StandardNormalizer`).
    path : str or os.PathLike
        Directory to write. It must not exist or be empty unless
        ``overwrite=True``; an empty directory is written into in place. The
        model is moved into place only when complete, so a failure leaves
        ``path`` as it was (see :ref:`failure_behaviour`).
    dtype : {"float32", "float16", "int8"}, default="float32"
        How the rows are stored. ``"float16"`` halves the folder (cosines
        within about 1e-3 of the pipeline's); ``"int8"`` quarters it, with
        one scale for the whole table as model2vec quantises (cosines
        within about 2e-2). What each costs the default pipeline's scores
        is measured in :ref:`static_model2vec`, with the folders' sizes.
    overwrite : bool, default=False
        Whether an existing ``path`` may be replaced, with all it holds (as
        for :func:`to_sentence_transformers`: links, the working directory
        and its parents, and mount points are refused before any work).

    Returns
    -------
    model : model2vec.StaticModel
        The exported model (the one that was saved).

    Raises
    ------
    TypeError
        If ``pipeline`` does not start with a
        :class:`~sklearn_isotropy.StaticEmbeddingVectorizer`, or a later step
        cannot be folded into an affine map, naming the step.
    ValueError
        If ``dtype`` is not one of the three above, or ``overwrite=True``
        would have to replace a link, the working directory (or one of its
        parents) or a mount point.
    sklearn.exceptions.NotFittedError
        If a step is not fitted.
    FileExistsError
        If ``path`` holds files and ``overwrite`` is False, or another
        export to ``path`` started at the same time published there first
        (with ``overwrite=True`` too: an export that finds the folder it
        replaces already moved away by the other publishes in its place).
    RuntimeError
        If model2vec's ``encode`` of the float32 rows points elsewhere than
        the pipeline's output on a few check texts (a bug to report, or a
        pipeline that amplifies round-off).

    See Also
    --------
    to_sentence_transformers : The same table as a sentence-transformers
        ``StaticEmbedding`` model.
    save_onnx_pipeline : The pipeline as one ONNX graph, lengths included.

    Notes
    -----
    model2vec averages a text's rows without weights, so each exported row
    is its token's weight times the row's image under the folded
    post-processors, ``w_t A(e_t)``; the width is the post-processors'
    output width (``n_components_`` of a whitening). The plain mean is the
    pipeline's weighted mean times ``sum_t w_t / n``, a positive number per
    text: the affine map's offset is carried exactly, because the
    pipeline's weights are normalised to sum to one. ``config.json`` turns
    model2vec's ``normalize`` on, which removes that factor, and sets
    ``max_length`` to None: the pipeline does not truncate.

    Two kinds of text differ from the pipeline: a text without tokens (the
    empty string, whitespace) is a row of zeros for model2vec, where the
    pipeline returns the post-processors' image of a row of zeros; and
    model2vec removes the tokenizer's unknown token (``[UNK]``, from
    characters outside the vocabulary) from every text, where the pipeline
    averages its row. ``StaticEmbeddingVectorizer(path)`` keeps the unknown
    token, as the pipeline does, and reads the rows uniformly (their weights
    are in them): ``config.json`` records the export under
    ``"sklearn_isotropy"``, and its default ``weighting="auto"`` reads that.

    The export checks model2vec's ``encode`` of the float32 rows against the
    pipeline on a few texts before quantising, text by text in direction:
    fixed texts and texts of the vocabulary's first words. With model2vec installed
    (``pip install "sklearn-isotropy[export]"`` installs it; its base
    install needs no torch).

    Examples
    --------
    >>> from model2vec import StaticModel
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn_isotropy import StaticEmbeddingVectorizer, WhiteningTransformer
    >>> from sklearn_isotropy.export import to_model2vec
    >>> whitening = WhiteningTransformer(noise_variance="auto")
    >>> pipe = make_pipeline(StaticEmbeddingVectorizer(), whitening)
    >>> pipe.fit(sentences)  # doctest: +SKIP
    >>> to_model2vec(pipe, "whitened-static", dtype="float16")  # doctest: +SKIP
    >>> model = StaticModel.from_pretrained("whitened-static")  # doctest: +SKIP
    >>> model.encode(["A man is playing a guitar."]).shape  # doctest: +SKIP
    (1, 189)
    """
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(
            f"{_WHAT}: dtype must be one of {', '.join(map(repr, DTYPES))}; got "
            f"{dtype!r}. float16 halves the folder and int8 quarters it."
        )
    if not starts_with(pipeline):
        first = pipeline.steps[0][1] if hasattr(pipeline, "steps") else pipeline
        raise TypeError(
            f"{_WHAT} writes a static token table, so the pipeline must start with "
            f"a StaticEmbeddingVectorizer; it starts with {type(first).__name__}. "
            "Export a contextual encoder's pipeline with to_sentence_transformers "
            "or save_onnx_pipeline, or distill it into a table with "
            "StaticEmbeddingVectorizer(model)."
        )
    m2v = import_optional("model2vec", purpose=_WHAT, extra="export")
    tokenizers = import_optional("tokenizers", purpose=_WHAT, extra="export")
    folded = fold_static(pipeline, what=_WHAT)
    check_target(path, overwrite=overwrite, what=_WHAT)  # before the work
    rows = folded.table * folded.weights[:, None]
    tokenizer = tokenizers.Tokenizer.from_str(folded.vectorizer.tokenizer_.to_str())
    mapping = _vocabulary_rows(tokenizer, len(rows))
    vec = folded.vectorizer

    def static_model(vectors):
        return m2v.StaticModel(
            vectors=vectors,
            tokenizer=tokenizer,
            config=_config(folded, dtype),
            normalize=True,
            base_model_name=_base_name(vec.model_name_),
            token_mapping=mapping,
            max_length=None,
        )

    model = static_model(_quantize(rows, "float32"))
    _check_parity(model, pipeline, _CHECK_TEXTS)
    # apart: off the fitted support the fixed texts' rows can be far longer,
    # and the median row sets the scale below which a row's direction counts
    # less (as for the ONNX graph)
    _check_parity(model, pipeline, vocabulary_texts(tokenizer))
    if dtype != "float32":
        model = static_model(_quantize(rows, dtype))

    def write(directory):
        model.save_pretrained(str(directory))
        with open(directory / "README.md", "a", encoding="utf-8") as fh:
            fh.write(_model_card(folded, dtype))

    publish_directory(path, write, overwrite=overwrite, what=_WHAT)
    return model
