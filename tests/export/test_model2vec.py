"""Tests of export.to_model2vec, against model2vec's own StaticModel.

The pipelines are a tiny distilled BERT (``conftest.tiny_bert``, refined on a
few texts) followed by ``WhiteningTransformer(noise_variance="auto")``.
References are independent of the exporter's folding: the pipeline's own
``transform``, the whitening's ``transform`` of the vectorizer's table rows,
and model2vec's ``StaticModel.from_pretrained(...).encode``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline

from tests._data import FOUR_WORD_TEXTS, TEXTS

pytest.importorskip("torch")
pytest.importorskip("transformers")
model2vec = pytest.importorskip("model2vec")

from sklearn_isotropy import (  # noqa: E402
    BertPoolingVectorizer,
    GlowFlowTransformer,
    StaticEmbeddingVectorizer,
    WhiteningTransformer,
)
from sklearn_isotropy.export import to_model2vec  # noqa: E402

# the vectorizers of the pipelines are fitted on more texts than those of the
# static tests (``FIT_TEXTS``): their whitening sees 58 rows of 32 features
PIPELINE_TEXTS = FOUR_WORD_TEXTS * 6 + [
    "x y z",
    "the woman is reading , the man is walking .",
]


def cosines(X):
    """All pairwise cosines of the rows of ``X``, in float64."""
    X = np.asarray(X, dtype=np.float64)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    return X @ X.T


def unit(X):
    X = np.asarray(X, dtype=np.float64)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def pipelines(tiny_bert, tmp_path_factory):
    """``{weighting: fitted static pipeline with an "auto" whitening}``."""
    out = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "SKLEARN_ISOTROPY_STATIC_CACHE", str(tmp_path_factory.mktemp("cache"))
        )
        for weighting in ("sif", "zipf"):
            vec = StaticEmbeddingVectorizer(tiny_bert, weighting=weighting)
            X = vec.fit(PIPELINE_TEXTS).transform(PIPELINE_TEXTS + TEXTS)
            post = WhiteningTransformer(noise_variance="auto").fit(X)
            out[weighting] = make_pipeline(vec, post)
    return out


@pytest.fixture(scope="module")
def exported(pipelines, tmp_path_factory):
    """``{dtype: folder}`` of the SIF pipeline exported at each dtype."""
    root = tmp_path_factory.mktemp("m2v")
    folders = {}
    for dtype in ("float32", "float16", "int8"):
        folders[dtype] = root / dtype
        to_model2vec(pipelines["sif"], folders[dtype], dtype=dtype)
    return folders


def folded_rows(pipe):
    """Each token's weight times its row's image under the post-processor.

    From the estimators' own ``transform``, not the exporter's folding.
    """
    vec, post = pipe[0], pipe[1]
    return (
        post.transform(vec.embeddings_).astype(np.float64)
        * (vec.token_weights_[:, None])
    )


@pytest.mark.parametrize("weighting", ["sif", "zipf"])
def test_model2vec_gives_the_pipelines_cosines(pipelines, weighting, tmp_path):
    pipe = pipelines[weighting]
    returned = to_model2vec(pipe, tmp_path / "m2v")
    model = model2vec.StaticModel.from_pretrained(tmp_path / "m2v")
    got, expected = model.encode(TEXTS), pipe.transform(TEXTS)
    width = pipe[1].n_components_
    assert got.shape == expected.shape == (len(TEXTS), width)
    assert width < pipe[0].hidden_size_  # folded at the kept width
    assert_allclose(cosines(got), cosines(expected), atol=1e-5)
    # normalize is on: encode is the pipeline's output at unit length
    assert_allclose(got, unit(expected), atol=1e-5)
    assert_allclose(returned.encode(TEXTS), got, atol=1e-7)
    # the folder holds model2vec's own keys, with the weights in the rows
    from safetensors.numpy import load_file

    tensors = load_file(str(tmp_path / "m2v" / "model.safetensors"))
    # the tiny vocabulary has gaps in its ids (a token listed twice), so
    # model2vec needs the identity "mapping" from ids to rows
    n_rows = len(pipe[0].embeddings_)
    assert len(pipe[0].tokenizer_.get_vocab()) < n_rows
    assert set(tensors) == {"embeddings", "mapping"}
    assert_array_equal(tensors["mapping"], np.arange(n_rows))
    assert tensors["embeddings"].dtype == np.float32
    assert_allclose(tensors["embeddings"], folded_rows(pipe), rtol=1e-5, atol=1e-6)
    config = json.loads((tmp_path / "m2v" / "config.json").read_text())
    assert config["normalize"] is True and config["max_length"] is None
    assert config["sklearn_isotropy"]["weighting"] == weighting
    assert "pipeline's" in (tmp_path / "m2v" / "README.md").read_text()


def test_long_texts_are_not_truncated(pipelines, tmp_path):
    # model2vec truncates at 512 tokens unless config.json says otherwise;
    # the pipeline never truncates
    pipe = pipelines["sif"]
    to_model2vec(pipe, tmp_path / "m2v")
    model = model2vec.StaticModel.from_pretrained(tmp_path / "m2v")
    long = " ".join(["the cat sat"] * 300 + ["a dog ran fast"] * 300)
    assert len(pipe[0].tokenizer_.encode(long, add_special_tokens=False).ids) > 512
    # float32 sums over 2,100 rows; a truncation would differ by far more
    assert_allclose(model.encode([long]), unit(pipe.transform([long])), atol=1e-4)


def test_the_vectorizer_alone(pipelines, tmp_path):
    vec = pipelines["sif"][0]
    to_model2vec(vec, tmp_path / "m2v")
    got = model2vec.StaticModel.from_pretrained(tmp_path / "m2v").encode(TEXTS)
    assert got.shape == (len(TEXTS), vec.hidden_size_)
    assert_allclose(got, unit(vec.transform(TEXTS)), atol=1e-5)


def quantized_cosines(pipe, texts):
    """The cosines of plain means of the int8 rows, text by text.

    The rows of :func:`folded_rows` rounded to the table's one scale: the
    int8 folder's cosines, whatever 8 bits cost the tiny model's rows.
    """
    rows = folded_rows(pipe)
    scale = np.abs(rows).max() / 127
    quantized = np.rint(rows / scale) * scale
    tokenizer = pipe[0].tokenizer_
    return cosines(
        [
            quantized[tokenizer.encode(t, add_special_tokens=False).ids].mean(0)
            for t in texts
        ]
    )


def test_float16_and_int8_tables(pipelines, exported):
    from safetensors.numpy import load_file

    pipe = pipelines["sif"]
    rows = folded_rows(pipe)
    expected = cosines(pipe.transform(TEXTS))
    tensors = {d: load_file(str(f / "model.safetensors")) for d, f in exported.items()}
    # float16: the rows rounded to float16; cosines within 1e-3
    assert tensors["float16"]["embeddings"].dtype == np.float16
    assert_allclose(
        tensors["float16"]["embeddings"].astype(np.float64),
        rows.astype(np.float16).astype(np.float64),
        rtol=1e-3,
        atol=1e-7,
    )
    # int8: one scale for the table, max |row entry| / 127, as model2vec's own
    table = tensors["int8"]["embeddings"]
    assert table.dtype == np.int8
    scale = np.abs(rows).max() / 127
    assert_array_equal(table, np.rint(rows / scale).astype(np.int8))
    tolerances = {"float32": 1e-5, "float16": 1e-3}
    for dtype, folder in exported.items():
        model = model2vec.StaticModel.from_pretrained(folder)
        assert model.embedding.dtype == np.dtype(dtype)
        got = model.encode(TEXTS)
        assert np.all(np.isfinite(got))
        if dtype == "int8":
            assert_allclose(cosines(got), quantized_cosines(pipe, TEXTS), atol=1e-5)
            assert_allclose(cosines(got), expected, atol=0.1)
        else:
            assert_allclose(cosines(got), expected, atol=tolerances[dtype])
    # the sizes the dtypes promise (the tokenizer and config are alike)
    sizes = {d: (f / "model.safetensors").stat().st_size for d, f in exported.items()}
    n_values = rows.size
    assert sizes["float32"] - 4 * n_values == sizes["int8"] - n_values
    assert sizes["float16"] - 2 * n_values == sizes["int8"] - n_values


def test_the_static_vectorizer_reads_the_folder_back(pipelines, exported):
    pipe = pipelines["sif"]
    expected = pipe.transform(TEXTS)
    expected = {
        "float32": (cosines(expected), 1e-5),
        "float16": (cosines(expected), 1e-3),
        "int8": (quantized_cosines(pipe, TEXTS), 1e-5),
    }
    for dtype, folder in exported.items():
        # the weights are in the rows: the plain mean gives the cosines
        vec = StaticEmbeddingVectorizer(folder, weighting="uniform").fit(["a"])
        assert vec.table_kind_ == "model2vec" and not vec.refined_
        stored = model2vec.StaticModel.from_pretrained(folder).embedding
        assert_allclose(vec.embeddings_, stored.astype(np.float32))
        got = vec.transform(TEXTS)
        assert got.dtype == np.float32
        cosines_expected, tolerance = expected[dtype]
        assert_allclose(cosines(got), cosines_expected, atol=tolerance)
        # model2vec and the vectorizer read the same rows the same way
        encoded = model2vec.StaticModel.from_pretrained(folder).encode(TEXTS)
        assert_allclose(cosines(encoded), cosines(got), atol=1e-3)


def test_texts_without_tokens_and_unknown_tokens(pipelines, exported):
    pipe = pipelines["sif"]
    model = model2vec.StaticModel.from_pretrained(exported["float32"])
    # no token: a row of zeros for model2vec, the whitening's image of the
    # zero row for the pipeline (what the docstring says)
    empty = model.encode(["", "   "])
    assert not empty.any()
    zero_row = pipe[1].transform(np.zeros((1, 32)))[0]
    assert_allclose(pipe.transform([""])[0], zero_row, rtol=1e-6)
    assert np.linalg.norm(pipe.transform([""])) > 0
    # model2vec drops the unknown token; the pipeline (and the vectorizer
    # reading the folder back) average its row
    unk = pipe[0].tokenizer_.token_to_id("[UNK]")
    assert unk in pipe[0].tokenizer_.encode("ω the cat").ids
    assert_allclose(model.encode(["ω the cat"]), model.encode(["the cat"]))
    back = StaticEmbeddingVectorizer(exported["float32"], weighting="uniform")
    back.fit(["a"])
    texts = ["ω the cat", "the cat"]
    assert_allclose(cosines(back.transform(texts)), cosines(pipe.transform(texts)))
    assert cosines(pipe.transform(texts))[0, 1] < 1 - 1e-6


def test_bad_dtype_and_pipelines_are_refused(pipelines, tiny_bert, tmp_path):
    pipe = pipelines["sif"]
    for dtype in ("float64", "bfloat16", np.float16, None):
        with pytest.raises(ValueError, match="dtype must be one of 'float32'"):
            to_model2vec(pipe, tmp_path / "x", dtype=dtype)
    contextual = make_pipeline(BertPoolingVectorizer(tiny_bert), WhiteningTransformer())
    with pytest.raises(TypeError, match="starts with BertPoolingVectorizer"):
        to_model2vec(contextual, tmp_path / "x")
    with pytest.raises(TypeError, match="starts with WhiteningTransformer"):
        to_model2vec(pipe[1], tmp_path / "x")
    with pytest.raises(NotFittedError, match="not fitted"):
        to_model2vec(StaticEmbeddingVectorizer(tiny_bert), tmp_path / "x")
    with pytest.raises(TypeError, match="GlowFlowTransformer"):
        to_model2vec(make_pipeline(pipe[0], GlowFlowTransformer()), tmp_path / "x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    with pytest.raises(FileExistsError):
        to_model2vec(pipe, tmp_path / "full")
    assert not (tmp_path / "x").exists()
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["f"]


def test_a_wrong_table_fails_the_parity_check(pipelines, tmp_path, monkeypatch):
    from sklearn_isotropy.export import _model2vec

    real = _model2vec._quantize

    def reversed_rows(rows, dtype):
        return real(rows[::-1], dtype)

    monkeypatch.setattr(_model2vec, "_quantize", reversed_rows)
    message = "model2vec's encode of the exported table .* differs from transform"
    with pytest.raises(RuntimeError, match=message):
        to_model2vec(pipelines["sif"], tmp_path / "m2v")
    assert not (tmp_path / "m2v").exists()


@pytest.mark.parametrize("fitted_on", ["float32", "float64 copies"])
def test_a_whitening_of_round_off_fails_the_parity_check(
    tiny_bert, tmp_path, monkeypatch, fitted_on
):
    """A table whose texts point elsewhere than transform's is refused.

    Texts of 21 one-token words lie in the 20-dim affine span of their rows;
    the vectorizer's float32 means carry round-off in the other directions.
    A whitening fitted on float64 copies of them cannot tell that round-off
    from signal: it whitens it, and the exported table, rounded otherwise,
    gave cosines down to 0.67 with transform while the check passed (its
    texts, spelt letter by letter here, lie off the fitted support). Fitted
    on the float32 rows, the whitening keeps the 20 directions, and exports.
    """
    monkeypatch.setenv("SKLEARN_ISOTROPY_STATIC_CACHE", str(tmp_path / "cache"))
    words = (
        "the a cat dog sat on mat ran fast slow man woman is was big small red "
        "blue play read walk"
    ).split()
    rng = np.random.RandomState(0)
    texts = [" ".join(rng.choice(words, size=rng.randint(3, 9))) for _ in range(120)]
    vec = StaticEmbeddingVectorizer(tiny_bert, refine=False).fit(texts)
    rows = vec.embeddings_[[vec.tokenizer_.token_to_id(w) for w in words]]
    rank = np.linalg.matrix_rank(rows[1:].astype(np.float64) - rows[0])
    X = vec.transform(texts)
    if fitted_on == "float32":
        pipe = make_pipeline(vec, WhiteningTransformer().fit(X))
        assert pipe[-1].rank_ == rank == 20
        model = to_model2vec(pipe, tmp_path / "m2v")
        got, expected = model.encode(texts), pipe.transform(texts)
        assert_allclose(unit(got), unit(expected), atol=1e-5)
        return
    pipe = make_pipeline(vec, WhiteningTransformer().fit(X.astype(np.float64)))
    assert pipe[-1].rank_ > rank  # round-off whitened
    message = r"differs from transform .* lowest cosine between a row and trans"
    with pytest.raises(RuntimeError, match=message):
        to_model2vec(pipe, tmp_path / "m2v")
    assert not (tmp_path / "m2v").exists()


def test_quantizing_extreme_tables_stays_finite():
    from sklearn_isotropy.export._model2vec import _quantize

    rng = np.random.default_rng(0)
    rows = rng.normal(size=(20, 6)) * 1e6  # beyond float16's 65504
    half = _quantize(rows, "float16")
    assert half.dtype == np.float16 and np.all(np.isfinite(half))
    # scaled by one power of two: every cosine kept
    ratio = half.astype(np.float64) / rows
    assert_allclose(ratio, np.median(ratio), rtol=2e-3)
    power = int(np.round(np.log2(np.median(ratio))))
    assert power < 0
    assert_array_equal(half, np.ldexp(rows, power).astype(np.float16))
    zeros = _quantize(np.zeros((3, 4)), "int8")
    assert zeros.dtype == np.int8 and not zeros.any()
    small = _quantize(rows * 1e-300, "int8")
    assert_array_equal(small, np.rint(rows / (np.abs(rows).max() / 127)))
