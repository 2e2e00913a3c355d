"""Tests of the exports of a static pipeline: sentence-transformers and ONNX.

The pipelines are the static vectorizers of ``conftest.fitted`` followed by
linear post-processors; each export is run by its own runtime
(sentence-transformers' ``encode``, onnxruntime) and compared with the
pipeline's ``transform``.
"""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline

from tests._data import FIT_TEXTS, TEXTS, TINY_WORDS
from tests._references import cosine, loop_reference

pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import (  # noqa: E402
    StandardNormalizer,
    StaticEmbeddingVectorizer,
    WhiteningTransformer,
)

# distilled tables go to a fresh directory per test, never ~/.cache
pytestmark = pytest.mark.usefixtures("static_cache")


@pytest.fixture(scope="module")
def pipelines(fitted):
    """Fitted static pipelines, one per weighting, with a whitening folded."""
    out = {}
    for weighting, vec in fitted.items():
        X = vec.transform(FIT_TEXTS + TEXTS)
        post = [StandardNormalizer().fit(X)]
        post.append(WhiteningTransformer(n_components=8).fit(post[0].transform(X)))
        out[weighting] = make_pipeline(vec, *post)
    return out


def model_tokenizer(model):
    """A copy of the tokenizer of a static model that pads a batch with [PAD]."""
    from tokenizers import Tokenizer

    vec = model if isinstance(model, StaticEmbeddingVectorizer) else model[0]
    tokenizer = Tokenizer.from_str(vec.tokenizer_.to_str())
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    return tokenizer


def onnx_feed(encodings):
    """The inputs of a static graph for ``encodings``: token ids and their mask."""
    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
    }


@pytest.mark.parametrize("weighting", ["uniform", "sif", "zipf"])
def test_sentence_transformers_export_keeps_the_pipelines_cosines(
    pipelines, weighting, tmp_path
):
    from sentence_transformers import SentenceTransformer

    from sklearn_isotropy.export import to_sentence_transformers

    pipe = pipelines[weighting]
    to_sentence_transformers(pipe, tmp_path / "st")
    loaded = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    got, expected = loaded.encode(TEXTS), pipe.transform(TEXTS)
    assert got.shape == expected.shape == (len(TEXTS), 8)
    for i, j in [(0, 1), (0, 2), (1, 5), (2, 6), (3, 7), (4, 0)]:
        assert_allclose(
            cosine(got[[i]], got[[j]]), cosine(expected[[i]], expected[[j]]), atol=1e-5
        )
    # each row is the pipeline's times the mean weight of the text's tokens
    vec = pipe[0]
    ids = [vec.tokenizer_.encode(t, add_special_tokens=False).ids for t in TEXTS]
    scale = np.array([vec.token_weights_[i].mean() for i in ids])
    assert_allclose(got, expected * scale[:, None], rtol=1e-4, atol=1e-5)
    card = (tmp_path / "st" / "README.md").read_text()
    assert "Cosine similarities are the pipeline's" in card


def test_texts_without_tokens_agree_on_every_path(fitted, tmp_path):
    """Texts without a token give the same row on every path.

    "", spaces and a control character have no token: the vectorizer gives
    zeros, the pipeline the whitening's image of zeros, and both exports
    exactly that.
    """
    ort = pytest.importorskip("onnxruntime")
    from sentence_transformers import SentenceTransformer

    from sklearn_isotropy.export import to_onnx, to_sentence_transformers

    vec = fitted["sif"]
    whitening = WhiteningTransformer(noise_variance="auto")
    pipe = make_pipeline(vec, whitening.fit(vec.transform(FIT_TEXTS)))
    empty, words = ["", "   ", "\x00"], ["the", "the cat sat on the mat"]
    texts = empty + words
    assert vec.tokenizer_.encode_batch(empty, add_special_tokens=False)[2].ids == []
    assert_allclose(vec.transform(empty), 0)
    expected = pipe.transform(texts)
    image_of_zeros = (0 - whitening.mean_) @ whitening.whitening_
    assert np.linalg.norm(image_of_zeros) > 0.1  # not zeros: a point of its own
    assert_allclose(expected[:3], np.tile(image_of_zeros, (3, 1)), rtol=1e-5)

    session = ort.InferenceSession(
        to_onnx(pipe).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    encodings = model_tokenizer(vec).encode_batch(texts, add_special_tokens=False)
    got = session.run(["sentence_embedding"], onnx_feed(encodings))[0]
    assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

    to_sentence_transformers(pipe, tmp_path / "st")
    got = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts)
    assert_allclose(got[:3], expected[:3], rtol=1e-5, atol=1e-5)
    # texts with tokens: the pipeline's output times their mean token weight
    ids = [vec.tokenizer_.encode(t, add_special_tokens=False).ids for t in words]
    scale = np.array([vec.token_weights_[i].mean() for i in ids])
    assert_allclose(got[3:], expected[3:] * scale[:, None], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("source", ["folder", "object"])
def test_an_exported_pipeline_reads_back_as_the_model(pipelines, tmp_path, source):
    """The export's rows and its Dense read back give the model's output.

    After a whitening the export writes its rows less the pipeline's image
    of zeros and a Dense adding it back; the vectorizer used to read the
    rows alone (cosines of -0.43 to 0.22 with the pipeline).
    """
    from sentence_transformers import SentenceTransformer

    from sklearn_isotropy.export import to_sentence_transformers

    pipe = pipelines["sif"]
    to_sentence_transformers(pipe, tmp_path / "st")
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    assert [type(m).__name__ for m in model] == ["StaticEmbedding", "Dense"]
    assert np.linalg.norm(model[1].linear.bias.detach().numpy()) > 0.1
    read = model if source == "object" else tmp_path / "st"
    vec = StaticEmbeddingVectorizer(read, weighting="uniform").fit(["a"])
    got = vec.transform(TEXTS)
    assert_allclose(got, model.encode(TEXTS), rtol=1e-4, atol=1e-4)
    assert_allclose(cosine(got, pipe.transform(TEXTS)), 1.0, atol=1e-5)
    assert_allclose(vec.transform([""]), 0)  # the model gives the Dense's bias


def test_sentence_transformers_export_of_the_vectorizer_alone(fitted, tmp_path):
    from sentence_transformers import SentenceTransformer

    from sklearn_isotropy.export import to_sentence_transformers

    vec = fitted["sif"]
    to_sentence_transformers(vec, tmp_path / "st")
    got = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS)
    expected = vec.transform(TEXTS)
    assert_allclose(cosine(got, expected), 1.0, atol=1e-6)


@pytest.mark.parametrize("weighting", ["uniform", "sif", "zipf"])
def test_onnx_export_equals_transform(fitted, pipelines, weighting):
    ort = pytest.importorskip("onnxruntime")
    from sklearn_isotropy.export import to_onnx

    texts = [*TEXTS, "", "a"]
    for model in (fitted[weighting], pipelines[weighting]):
        graph = to_onnx(model)
        session = ort.InferenceSession(
            graph.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        encodings = model_tokenizer(model).encode_batch(texts, add_special_tokens=False)
        got = session.run(["sentence_embedding"], onnx_feed(encodings))[0]
        # the empty text included: the affine image of a row of zeros
        assert_allclose(got, model.transform(texts), rtol=1e-5, atol=1e-5)


def test_whitening_a_static_pipeline_keeps_only_the_texts_directions(
    fitted, hf, word_texts, tmp_path
):
    """A whitening after a static vectorizer whitens the texts' directions alone.

    The vectorizer's float32 means carry round-off in the other directions,
    at 1e-14 of the variance: a whitening kept 27 components (its largest
    entry 2e7), and the sentence-transformers export gave cosines down to
    0.22 with transform (model2vec's 0.67).
    """
    from sentence_transformers import SentenceTransformer

    from sklearn_isotropy.export import to_sentence_transformers

    vec = fitted["unrefined"]
    ids = [vec.tokenizer_.token_to_id(w) for w in TINY_WORDS]
    rows = vec.embeddings_[ids].astype(np.float64)
    rank = np.linalg.matrix_rank(rows[1:] - rows[0])  # of the rows themselves
    assert rank == 20
    pipe = make_pipeline(vec, WhiteningTransformer()).fit(word_texts)
    assert pipe[-1].rank_ == pipe[-1].n_components_ == rank
    assert np.abs(pipe[-1].whitening_).max() < 1e3
    # numpy's whitening of the means in float64: the pipeline's cosines
    means = loop_reference(hf, word_texts, vec.embeddings_, vec.token_weights_)
    lam, U = np.linalg.eigh(np.cov(means, rowvar=False))
    lam, U = lam[::-1][:rank], U[:, ::-1][:, :rank]
    expected = (means - means.mean(axis=0)) @ (U / np.sqrt(lam))
    got = pipe.transform(word_texts)
    unit = [Z / np.linalg.norm(Z, axis=1, keepdims=True) for Z in (got, expected)]
    assert_allclose(unit[0] @ unit[0].T, unit[1] @ unit[1].T, atol=1e-4)
    # and the export's, text by text
    to_sentence_transformers(pipe, tmp_path / "st")
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    assert_allclose(cosine(model.encode(word_texts), got), 1.0, atol=1e-6)


def test_exports_refuse_a_pipeline_that_amplifies_round_off(
    fitted, word_texts, tmp_path
):
    """An export that differs from transform in direction is refused.

    Fitted on float64 copies of the vectorizer's float32 output, a whitening
    cannot tell their round-off from signal and whitens it to unit variance,
    so any two computations of a text, rounded differently, point elsewhere.
    The parity checks let this through: the fixed check texts, spelt letter
    by letter by the tiny vocabulary, lie off the fitted support, where the
    whitening stretches them to 1e7 and sets the tolerance of every row.
    """
    pytest.importorskip("onnxruntime")
    from sklearn_isotropy.export import to_onnx, to_sentence_transformers

    vec = fitted["unrefined"]
    whitening = WhiteningTransformer()
    whitening.fit(vec.transform(word_texts).astype(np.float64))
    assert whitening.rank_ > 20  # directions of round-off among them
    pipe = make_pipeline(vec, whitening)
    message = r"differs from transform on \d+ texts: .* lowest cosine"
    with pytest.raises(RuntimeError, match=message):
        to_onnx(pipe)
    with pytest.raises(RuntimeError, match=message):
        to_sentence_transformers(pipe, tmp_path / "st")
    assert not (tmp_path / "st").exists()


def test_save_onnx_pipeline_of_a_static_pipeline(pipelines, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from tokenizers import Tokenizer

    from sklearn_isotropy.export import save_onnx_pipeline

    pipe = pipelines["sif"]
    save_onnx_pipeline(pipe, tmp_path / "onnx")
    folder = tmp_path / "onnx"
    settings = json.loads((folder / "sklearn_isotropy_onnx.json").read_text())
    assert settings["weighting"] == "sif" and settings["add_special_tokens"] is False
    # served as the README says: the saved tokenizer pads and adds nothing
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    encodings = tokenizer.encode_batch(TEXTS)
    session = ort.InferenceSession(
        str(folder / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    got = session.run(["sentence_embedding"], onnx_feed(encodings))[0]
    assert_allclose(got, pipe.transform(TEXTS), rtol=1e-5, atol=1e-5)
    assert "encode_batch" in (folder / "README.md").read_text()


def test_a_static_pipeline_with_a_flow_is_exported_in_two_parts(fitted, tmp_path):
    """The refusal says what can be done, and what it says works.

    The static part is one model, the flow runs on its embeddings.
    """
    ort = pytest.importorskip("onnxruntime")
    from sklearn_isotropy import GlowFlowTransformer
    from sklearn_isotropy.export import (
        save_onnx_pipeline,
        to_onnx,
        to_sentence_transformers,
    )

    vec = fitted["sif"]
    flow = GlowFlowTransformer(depth=1, hidden_size=8, max_iter=0, random_state=0)
    pipe = make_pipeline(vec, flow.fit(vec.transform(FIT_TEXTS)))
    calls = [
        (to_onnx, (pipe,), r"to_onnx\(pipe\[:1\]\)"),
        (to_sentence_transformers, (pipe, tmp_path / "st"), r"\(pipe\[:1\], path\)"),
        (save_onnx_pipeline, (pipe, tmp_path / "onnx"), r"\(pipe\[:1\], path\)"),
    ]
    for export, args, static_part in calls:
        with pytest.raises(TypeError) as refused:
            export(*args)
        message = str(refused.value)
        assert "'glowflowtransformer' (GlowFlowTransformer) of a static" in message
        assert "only the linear ones allow" in message
        assert re.search(static_part, message), message
        assert "sklearn_isotropy.export.to_onnx(pipe[1:])" in message
    assert not (tmp_path / "st").exists() and not (tmp_path / "onnx").exists()

    def run(model, feed):
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        return session.run(None, feed)[0]

    encodings = model_tokenizer(vec).encode_batch(TEXTS, add_special_tokens=False)
    static = run(to_onnx(pipe[:1]), onnx_feed(encodings))
    flow_graph = to_onnx(pipe[1:])
    got = run(flow_graph, {flow_graph.graph.input[0].name: static})
    assert_allclose(got, pipe.transform(TEXTS), rtol=1e-4, atol=1e-4)


def test_export_errors(fitted, pipelines, tmp_path, tiny_bert):
    from sklearn_isotropy.export import to_onnx, to_sentence_transformers

    with pytest.raises(NotFittedError, match="not fitted"):
        to_onnx(StaticEmbeddingVectorizer(tiny_bert))
    with pytest.raises(ValueError, match="n_features"):
        to_onnx(pipelines["sif"], n_features=8)
    with pytest.raises(ValueError, match="float32"):
        to_onnx(pipelines["sif"], dtype=np.float64)
    with pytest.raises(ValueError, match="target_opset"):
        to_onnx(pipelines["sif"], target_opset=11)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    with pytest.raises(FileExistsError):
        to_sentence_transformers(pipelines["sif"], tmp_path / "full")


@pytest.mark.parametrize("exporter", ["to_model2vec", "to_sentence_transformers"])
def test_an_exported_folder_reads_back_unweighted_by_default(
    pipelines, tmp_path, exporter
):
    """A folder this package wrote reads back as its pipeline, not weighted twice.

    Its rows are each token's weight times the post-processed row, and its
    configuration records the export: the default ``weighting="auto"``
    averages them uniformly. SIF (the default before) weighed them a
    second time: cosines with the pipeline down to 0.88.
    """
    from sklearn_isotropy import export
    from sklearn_isotropy.exceptions import DoubleWeightingWarning

    pipe = pipelines["sif"]
    folder = tmp_path / "exported"
    getattr(export, exporter)(pipe, folder)
    expected = pipe.transform(TEXTS)
    if exporter == "to_model2vec":
        config = "config.json"
    else:
        config = "config_sentence_transformers.json"
    record = json.loads((folder / config).read_text())["sklearn_isotropy"]
    assert record["exporter"] == exporter and record["weighting"] == "sif"

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning by default
        back = StaticEmbeddingVectorizer(folder).fit(["a"])
    assert back.weighting == "auto" and back.weighting_ == "uniform"
    got = back.transform(TEXTS)
    # the plain mean of the exported rows, which points where the pipeline does
    rows = pipe[0].tokenizer_.encode_batch(TEXTS, add_special_tokens=False)
    plain_mean = np.array([back.embeddings_[r.ids].mean(axis=0) for r in rows])
    assert_allclose(got, plain_mean, rtol=1e-5, atol=1e-6)
    assert_allclose(cosine(got, expected), 1.0, atol=1e-5)

    # an explicit weighting is used as asked, with a warning
    with pytest.warns(DoubleWeightingWarning, match="weighs the rows a second time"):
        twice = StaticEmbeddingVectorizer(folder, weighting="sif").fit(TEXTS)
    assert twice.weighting_ == "sif"
    assert cosine(twice.transform(TEXTS), expected).min() < 0.9
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StaticEmbeddingVectorizer(folder, weighting="uniform").fit(["a"])

    # without the record (a folder of another origin) "auto" means SIF
    data = json.loads((folder / config).read_text())
    del data["sklearn_isotropy"]
    (folder / config).write_text(json.dumps(data))
    assert StaticEmbeddingVectorizer(folder).fit(TEXTS).weighting_ == "sif"


def test_an_export_whose_check_text_lands_on_the_fitted_mean_is_accepted(
    tiny_bert, tmp_path
):
    """A check text that the pipeline maps to about zero refuses no export.

    The whitening is fitted on the five words of one of the exports' own
    check texts (the vocabulary's first words), so that text's static mean
    is the fitted mean and its output a row 2e-7 long, in a direction of
    round-off. ONNX, compared in length, accepted the export; model2vec and
    StaticEmbedding, compared in direction, refused it (RuntimeError).
    """
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    from sklearn_isotropy.export import to_model2vec, to_onnx, to_sentence_transformers
    from sklearn_isotropy.export._static import vocabulary_texts

    tokenizer = StaticEmbeddingVectorizer(tiny_bert, refine=False).fit(["a"])
    check_texts = vocabulary_texts(tokenizer.tokenizer_)
    words = check_texts[0].split()
    assert len(words) == 5
    vec = StaticEmbeddingVectorizer(tiny_bert, refine=False).fit(words)
    whitening = WhiteningTransformer(n_components=4).fit(vec.transform(words))
    pipe = make_pipeline(vec, whitening)
    norms = np.linalg.norm(pipe.transform(check_texts), axis=1)
    assert norms[0] < 1e-5 * np.median(norms)  # the fitted mean, to round-off

    to_onnx(pipe)
    texts = check_texts[1:] + ["the cat sat on the mat"]
    expected = pipe.transform(texts)
    model = to_model2vec(pipe, tmp_path / "m2v")
    got = StaticModel.from_pretrained(tmp_path / "m2v").encode(texts)
    assert_allclose(cosine(got, expected), 1.0, atol=1e-5)
    assert_allclose(cosine(model.encode(texts), expected), 1.0, atol=1e-5)
    to_sentence_transformers(pipe, tmp_path / "st")
    got = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts)
    assert_allclose(cosine(got, expected), 1.0, atol=1e-5)
