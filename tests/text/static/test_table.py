"""Tests of the static vectorizer's token table: distilled, or read from a folder.

Distilled rows are checked against the encoder run on each token alone by
transformers; tables read from model2vec and sentence-transformers folders
(written here) against means computed text by text and sentence-transformers'
own ``encode``; damaged and incomplete folders against the errors that name
them.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose

from tests._data import FIT_TEXTS, TEXTS, write_model2vec_folder
from tests._references import cosine, loop_reference

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import StaticEmbeddingVectorizer  # noqa: E402

# distilled tables go to a fresh directory per test, never ~/.cache
pytestmark = pytest.mark.usefixtures("static_cache")


def token_rows(hf, ids, pooling="mean"):
    """Each token run alone, ``[CLS] t [SEP]``, by transformers itself."""
    model, tokenizer = hf
    rows = []
    for i in ids:
        input_ids = torch.tensor([[tokenizer.cls_token_id, i, tokenizer.sep_token_id]])
        with torch.no_grad():
            hidden = model(input_ids=input_ids).last_hidden_state[0].double().numpy()
        rows.append(hidden.mean(axis=0) if pooling == "mean" else hidden[1])
    return np.array(rows)


# ------------------------------------------------------------- distillation
@pytest.mark.parametrize("pooling", ["mean", "token"])
def test_distilled_rows_are_each_token_alone_through_the_model(tiny_bert, hf, pooling):
    vec = StaticEmbeddingVectorizer(
        tiny_bert,
        weighting="uniform",
        distill_pooling=pooling,
        refine=False,
        batch_size=7,
    ).fit(["a"])
    n_tokens = max(hf[1].get_vocab().values()) + 1  # the tiny vocabulary has gaps
    assert vec.embeddings_.shape == (n_tokens, 32)
    assert vec.table_kind_ == "distilled" and vec.hidden_size_ == 32
    assert_allclose(
        vec.embeddings_, token_rows(hf, range(n_tokens), pooling), atol=2e-6
    )


def test_a_model_object_and_its_path_give_the_same_table(tiny_bert, hf):
    by_path = StaticEmbeddingVectorizer(tiny_bert).fit(FIT_TEXTS)
    by_object = StaticEmbeddingVectorizer(hf).fit(FIT_TEXTS)
    assert by_path.refined_ and by_object.refined_
    assert_allclose(by_object.embeddings_, by_path.embeddings_, rtol=1e-5, atol=1e-6)


def test_a_tokenizer_that_is_not_fast_is_refused(hf):
    def tokenizer(texts, **kwargs):  # callable, but not a fast tokenizer
        return {}

    with pytest.raises(TypeError, match="fast"):
        StaticEmbeddingVectorizer((hf[0], tokenizer)).fit(["a"])


# ---------------------------------------------------------- static models
def _tokenizer_json(hf, folder):
    hf[1].backend_tokenizer.save(str(folder / "tokenizer.json"))


def test_reads_a_model2vec_folder(hf, tmp_path):
    from safetensors.numpy import save_file

    n_tokens = max(hf[1].get_vocab().values()) + 1
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(40, 6)).astype(np.float32)
    mapping = rng.integers(0, 40, size=n_tokens)
    weights = rng.uniform(0.5, 2.0, size=n_tokens).astype(np.float32)
    save_file(
        {"embeddings": embeddings, "mapping": mapping, "weights": weights},
        str(tmp_path / "model.safetensors"),
    )
    _tokenizer_json(hf, tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "model2vec"}))
    vec = StaticEmbeddingVectorizer(tmp_path, weighting="uniform").fit(["a"])
    assert vec.table_kind_ == "model2vec"
    assert not vec.refined_  # no encoder to refine on: the rows as they are
    rows = embeddings[mapping] * weights[:, None]
    assert_allclose(vec.embeddings_, rows, rtol=1e-6)
    # model2vec's encoding: the plain mean of a text's rows
    expected = loop_reference(hf, TEXTS, rows, np.ones(n_tokens))
    assert_allclose(vec.transform(TEXTS), expected, rtol=1e-5, atol=1e-6)


def test_a_model2vec_folder_fits_and_transforms_without_torch(
    hf, tmp_path, monkeypatch
):
    rows = write_model2vec_folder(hf, tmp_path / "m2v")
    n_tokens = len(rows)
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch fails
    vec = StaticEmbeddingVectorizer(tmp_path / "m2v", weighting="uniform")
    got = vec.fit_transform(TEXTS)
    assert vec.table_kind_ == "model2vec"
    expected = loop_reference(hf, TEXTS, rows, np.ones(n_tokens))
    assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_reads_a_sentence_transformers_static_model(hf, tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    n_tokens = max(hf[1].get_vocab().values()) + 1
    rows = np.random.default_rng(1).normal(size=(n_tokens, 5)).astype(np.float32)
    model = SentenceTransformer(
        modules=[StaticEmbedding(hf[1], embedding_weights=rows)], device="cpu"
    )
    model.save(str(tmp_path / "st"))
    texts = [t for t in TEXTS if t]
    expected = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts)
    for source in (tmp_path / "st", model):
        vec = StaticEmbeddingVectorizer(source, weighting="uniform").fit(["a"])
        assert vec.table_kind_ == "sentence-transformers"
        assert_allclose(vec.transform(texts), expected, rtol=1e-5, atol=1e-6)


def _dense(W, b, activation=None):
    from sentence_transformers.sentence_transformer.modules import Dense

    return Dense(
        W.shape[1],
        W.shape[0],
        activation_function=torch.nn.Identity() if activation is None else activation,
        init_weight=torch.tensor(W, dtype=torch.float32),
        init_bias=torch.tensor(b, dtype=torch.float32),
    )


def test_modules_after_a_static_embedding_are_folded_or_named(hf, tmp_path):
    """A Dense with the identity activation is folded into the table.

    A Normalize at the end is left out (a scale per text); any other module,
    or a Normalize before a Dense, is refused by name. They used to be
    ignored, every one of them.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (
        LayerNorm,
        Normalize,
        StaticEmbedding,
    )

    n_tokens = max(hf[1].get_vocab().values()) + 1
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(n_tokens, 5)).astype(np.float32)
    W, b = rng.normal(size=(3, 5)), rng.normal(size=3)  # 5 -> 3 features
    static = StaticEmbedding(hf[1], embedding_weights=rows)
    model = SentenceTransformer(
        modules=[static, _dense(W, b), Normalize()], device="cpu"
    )
    model.save(str(tmp_path / "st"))
    encoded = model.encode(TEXTS)
    # the plain mean of each text's rows, then the Dense: computed here
    expected = loop_reference(hf, TEXTS, rows, np.ones(n_tokens)) @ W.T + b
    for source in (tmp_path / "st", model):
        vec = StaticEmbeddingVectorizer(source, weighting="uniform").fit(["a"])
        got = vec.transform(TEXTS)
        assert got.shape == (len(TEXTS), 3) and vec.hidden_size_ == 3
        assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        assert_allclose(cosine(got, encoded), 1.0, atol=1e-6)  # less the Normalize

    refused = {
        "tanh": (
            [static, _dense(W, b, torch.nn.Tanh())],
            r"runs Dense \(1_Dense\) after its StaticEmbedding.*cannot compute "
            r"Dense \(1_Dense\): its activation is torch.nn.modules.activation.Tanh",
            r"cannot compute Dense \(module 1\): its activation is Tanh",
        ),
        "another module": (
            [static, LayerNorm(5)],
            r"cannot compute LayerNorm \(1_LayerNorm\): it is not a linear map",
            r"cannot compute LayerNorm \(module 1\): it is not a linear map",
        ),
        "normalize first": (
            [static, Normalize(), _dense(W, b)],
            r"applies Dense \(2_Dense\) after Normalize \(1_Normalize\)",
            r"applies Dense \(module 2\) after Normalize \(module 1\)",
        ),
    }
    for name, (modules, in_folder, in_object) in refused.items():
        model = SentenceTransformer(modules=modules, device="cpu")
        model.save(str(tmp_path / name))
        with pytest.raises(ValueError, match=in_folder):
            StaticEmbeddingVectorizer(tmp_path / name).fit(["a"])
        with pytest.raises(ValueError, match=in_object):
            StaticEmbeddingVectorizer(model).fit(["a"])


def test_a_damaged_static_folder_is_named(hf, tmp_path):
    from safetensors.numpy import save_file

    save_file(
        {"embeddings": np.ones((3, 4), np.float32)}, str(tmp_path / "model.safetensors")
    )
    _tokenizer_json(hf, tmp_path)
    with pytest.raises(ValueError, match="one row per id"):
        StaticEmbeddingVectorizer(tmp_path).fit(["a"])


@pytest.mark.parametrize(
    "damage, match",
    [
        ({"mapping": np.full(84, 500)}, r"'mapping'.*500 to 500.*indices 0 to 85"),
        ({"mapping": -np.ones(86, np.int64)}, r"'mapping'.*from -1 to -1"),
        ({"mapping": np.zeros(86, np.float32)}, r"'mapping'.*integer row indices"),
        ({"weights": np.ones(3, np.float32)}, r"'weights'.*\(3,\).*86 token rows"),
    ],
)
def test_damaged_model2vec_tensors_are_named(hf, tmp_path, damage, match):
    rows = write_model2vec_folder(hf, tmp_path / "m2v", **damage)
    assert len(rows) == 86  # the vocabulary the messages above quote
    with pytest.raises(ValueError, match=match) as refused:
        StaticEmbeddingVectorizer(tmp_path / "m2v").fit(["a"])
    assert "model.safetensors" in str(refused.value)


@pytest.mark.parametrize("config", [True, False])
@pytest.mark.parametrize(
    "damage, match",
    [
        ("no tokenizer", "it has no tokenizer.json"),
        ("wrong key", r"no 'embeddings' \(model2vec\).*only \['vectors'\]"),
        ("garbage", "is not a readable safetensors file"),
        ("no weights", "it has no model.safetensors"),
    ],
)
def test_an_incomplete_static_folder_says_what_is_missing(
    hf, tmp_path, damage, match, config
):
    from safetensors.numpy import save_file

    folder = tmp_path / "m2v"
    rows = write_model2vec_folder(hf, folder)
    if config:  # as model2vec saves it
        (folder / "config.json").write_text(json.dumps({"model_type": "model2vec"}))
    weights = folder / "model.safetensors"
    if damage == "no tokenizer":
        (folder / "tokenizer.json").unlink()
    elif damage == "wrong key":
        save_file({"vectors": rows}, str(weights))
    elif damage == "garbage":
        weights.write_bytes(b"\x00garbage" * 10)
    else:
        weights.unlink()
    with pytest.raises(ValueError, match="looks like a static \\(model2vec\\) model"):
        StaticEmbeddingVectorizer(folder).fit(["a"])
    with pytest.raises(ValueError, match=match):
        StaticEmbeddingVectorizer(folder).fit(["a"])


def test_a_corrupt_tokenizer_json_is_named(hf, tmp_path):
    write_model2vec_folder(hf, tmp_path / "m2v")
    (tmp_path / "m2v" / "tokenizer.json").write_text("{1: 2}")
    with pytest.raises(ValueError, match=r"tokenizer.*m2v/tokenizer.json.*damaged"):
        StaticEmbeddingVectorizer(tmp_path / "m2v").fit(["a"])


def test_an_encoder_folder_is_not_taken_for_a_static_one(tiny_bert):
    from sklearn_isotropy.text.static._table import static_folder

    assert static_folder(tiny_bert) is None  # config.json of a BERT
