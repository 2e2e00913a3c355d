"""Tests of StaticEmbeddingVectorizer and its exports.

The tiny BERT of ``conftest.tiny_bert`` is distilled (well under a second).
References are independent: the encoder run on each token by transformers,
weighted means computed text by text in Python from transformers'
tokenizer, sentence-transformers' own ``encode`` for the exported models
and the model2vec / StaticEmbedding folders, and onnxruntime for the graphs.
"""

from __future__ import annotations

import json
import pickle
import re
import sys
import zlib

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import sparse
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import (  # noqa: E402
    StandardNormalizer,
    StaticEmbeddingVectorizer,
    WhiteningTransformer,
)
from sklearn_isotropy.text import _static_refine  # noqa: E402
from sklearn_isotropy.text._static_weighting import token_probabilities  # noqa: E402

TEXTS = [
    "the cat sat on the mat",
    "a dog ran fast",
    "the big red dog was playing !",
    "xyzzy",
    "the woman is reading , the man is walking .",
    "a small blue cat sat",
    "the dog and the cat",
    "walking reads played",
]

FIT_TEXTS = [
    f"{a} {b} {c} {d}"
    for a, b, c, d in zip(
        "the a the a the the a the".split() * 4,
        "cat dog man woman mat cat dog man".split() * 4,
        "sat ran is was sat walked read played".split() * 4,
        "fast slow big small red blue on the".split() * 4,
        strict=True,
    )
] + ["x y z"]  # tokens seen once


@pytest.fixture(autouse=True)
def static_cache(tmp_path, monkeypatch):
    """Distilled tables go to a fresh directory per test, never ~/.cache."""
    directory = tmp_path / "static_cache"
    monkeypatch.setenv("SKLEARN_ISOTROPY_STATIC_CACHE", str(directory))
    return directory


@pytest.fixture(scope="module")
def hf(tiny_bert):
    from transformers import AutoModel, AutoTokenizer

    return AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(
        tiny_bert
    )


@pytest.fixture(scope="module")
def fitted(tiny_bert, tmp_path_factory):
    """One fitted vectorizer per weighting, refined, and an unrefined one.

    Refined (the default) on the encoder's embeddings in torch; the unrefined
    one is shared (do not modify).
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "SKLEARN_ISOTROPY_STATIC_CACHE", str(tmp_path_factory.mktemp("cache"))
        )
        out = {
            w: StaticEmbeddingVectorizer(
                tiny_bert, weighting=w, refine_backend="torch"
            ).fit(FIT_TEXTS)
            for w in ("uniform", "sif", "zipf")
        }
        out["unrefined"] = StaticEmbeddingVectorizer(tiny_bert, refine=False).fit(
            FIT_TEXTS
        )
        return out


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


def loop_reference(hf, texts, table, weights):
    """Weighted means computed text by text, token by token."""
    _, tokenizer = hf
    out = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        total, acc = 0.0, np.zeros(table.shape[1])
        for i in ids:
            acc += weights[i] * table[i].astype(np.float64)
            total += weights[i]
        out.append(acc / total if ids else acc)
    return np.array(out)


def counts_of(hf, texts, n_tokens):
    _, tokenizer = hf
    counts = np.zeros(n_tokens)
    for text in texts:
        for i in tokenizer(text, add_special_tokens=False)["input_ids"]:
            counts[i] += 1
    return counts


def cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


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


# ------------------------------------------------------- transform, weights
@pytest.mark.parametrize("weighting", ["uniform", "sif", "zipf", "unrefined"])
def test_transform_is_the_weighted_mean_of_each_texts_rows(fitted, hf, weighting):
    vec = fitted[weighting]
    got = vec.transform(TEXTS)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), vec.hidden_size_)
    expected = loop_reference(hf, TEXTS, vec.embeddings_, vec.token_weights_)
    assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_sif_weights_follow_the_counts_of_the_fit_texts(fitted, hf):
    vec = fitted["sif"]
    counts = counts_of(hf, FIT_TEXTS, len(vec.embeddings_))
    total, n_once = counts.sum(), np.sum(counts == 1)
    unseen = counts == 0
    assert n_once > 0 and unseen.any()
    p = counts / total * (1 - n_once / total)
    p[unseen] = n_once / total / unseen.sum()
    assert_allclose(vec.token_probabilities_, p, rtol=1e-12)
    assert_allclose(vec.token_weights_, 1e-2 / (1e-2 + p), rtol=1e-6)
    assert_allclose(fitted["unrefined"].token_weights_, vec.token_weights_)


def test_token_probabilities_smoothing():
    # N = 5, two tokens seen once: the unseen share 2/5
    p = token_probabilities([3, 1, 1, 0, 0])
    assert_allclose(p, [0.36, 0.12, 0.12, 0.2, 0.2])
    assert_allclose(token_probabilities([6, 2, 2, 0, 0]), p)  # scale-free
    assert_allclose(token_probabilities([2, 1, 1]), [0.5, 0.25, 0.25])
    # all seen once: capped at half for the unseen
    assert_allclose(token_probabilities([1, 1, 0]), [0.25, 0.25, 0.5])


def test_zipf_table_is_white_under_the_token_frequencies(fitted):
    vec = fitted["zipf"]
    p, table = vec.token_probabilities_, vec.embeddings_.astype(np.float64)
    assert_allclose(p @ table, 0, atol=1e-5)
    covariance = table.T @ (table * p[:, None])
    assert_allclose(covariance, np.eye(vec.hidden_size_), atol=1e-4)
    assert_allclose(vec.token_weights_, 1.0)


@pytest.mark.filterwarnings("ignore::sklearn_isotropy.exceptions.RankDeficiencyWarning")
def test_zipf_and_uniform_agree_after_a_full_whitening(fitted):
    # whitening is invariant to an affine map of its input, up to a rotation
    fit_texts = FIT_TEXTS + TEXTS
    cosines = []
    for weighting in ("uniform", "zipf"):
        whiten = WhiteningTransformer().fit(fitted[weighting].transform(fit_texts))
        Z = whiten.transform(fitted[weighting].transform(TEXTS))
        cosines.append(cosine(Z[:-1], Z[1:]))
    assert_allclose(cosines[0], cosines[1], atol=1e-4)


def test_user_frequencies_as_a_dict_or_an_array(fitted, tiny_bert, hf):
    counts = counts_of(hf, FIT_TEXTS, len(fitted["sif"].embeddings_))
    vocab = {i: t for t, i in hf[1].get_vocab().items()}
    as_dict = {vocab[i]: c for i, c in enumerate(counts) if c}
    for frequencies in (as_dict, counts, counts / counts.sum()):
        vec = StaticEmbeddingVectorizer(
            tiny_bert, weighting="sif", frequencies=frequencies
        ).fit(["texts are ignored"])
        assert_allclose(vec.token_weights_, fitted["sif"].token_weights_, rtol=1e-6)


def model2vec_probabilities(n):
    """Compute model2vec 0.10's ``compute_weights`` probabilities.

    The i-th row of its vocabulary (0-based) has the probability
    ``1 / (i + 2)``, normalised.
    """
    inv_rank = 1 / np.arange(2, n + 2)
    return inv_rank / inv_rank.sum()


def test_zipf_frequencies_are_model2vecs_rank_estimate(tiny_bert, hf):
    # the tiny vocabulary has no [unusedN]: its tokens are ranked in id order;
    # the ids that name no token (a repeated word) share the rarest's mass
    unweighted = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform", refine=False)
    n_tokens = len(unweighted.fit([""]).embeddings_)
    ranked = sorted(hf[1].get_vocab().values())
    holes = sorted(set(range(n_tokens)) - set(ranked))
    assert holes  # the case of the smoothing
    p = model2vec_probabilities(len(ranked))
    expected = np.zeros(n_tokens)
    expected[ranked] = p * (1 - p[-1])
    expected[holes] = p[-1] / len(holes)
    for weighting in ("sif", "zipf"):
        vec = StaticEmbeddingVectorizer(
            tiny_bert, weighting=weighting, frequencies="zipf", refine=False
        ).fit([""])  # no texts needed
        assert_allclose(vec.token_probabilities_, expected, rtol=1e-12)
    sif = StaticEmbeddingVectorizer(
        tiny_bert, frequencies="zipf", sif_coefficient=1e-4, refine=False
    ).fit(["the cat"])
    assert_allclose(sif.token_weights_, 1e-4 / (1e-4 + expected), rtol=1e-6)


def test_zipf_frequencies_leave_out_unused_placeholders():
    tokenizers = pytest.importorskip("tokenizers")
    from sklearn_isotropy.text._static_weighting import token_probabilities, zipf_counts

    words = ["[PAD]", "[unused0]", "[UNK]", "the", "[unused1]", "cat", "sat"]
    model = tokenizers.models.WordPiece(
        {w: i for i, w in enumerate(words)}, unk_token="[UNK]"
    )
    tokenizer = tokenizers.Tokenizer(model)
    counts = zipf_counts(tokenizer, len(words))
    # model2vec drops the placeholders; the others keep their order
    kept = [i for i, w in enumerate(words) if not w.startswith("[unused")]
    p = model2vec_probabilities(len(kept))
    expected = np.zeros(len(words))
    expected[kept] = p
    assert_allclose(counts / counts.sum(), expected, rtol=1e-12)
    # as fit uses them: the placeholders share the mass of the rarest token
    smoothed = token_probabilities(counts)
    rarest = p[-1]
    assert_allclose(smoothed[kept], p * (1 - rarest), rtol=1e-12)
    assert_allclose(smoothed[[1, 4]], rarest / 2, rtol=1e-12)


def test_empty_and_unknown_texts(fitted, hf):
    vec = fitted["sif"]
    got = vec.transform(["", "   ", "ω"])
    assert_allclose(got[:2], 0)  # the mean of no rows
    only_empty = vec.transform(["", " "])  # no token in the whole batch
    assert only_empty.dtype == np.float32 and not only_empty.any()
    unk = hf[1].unk_token_id
    assert_allclose(got[2], vec.embeddings_[unk], rtol=1e-6)


@pytest.mark.parametrize("once", [lambda t: (x for x in t), lambda t: map(str, t)])
def test_fit_transform_reads_a_generator_once(fitted, tiny_bert, once):
    got = StaticEmbeddingVectorizer(tiny_bert, refine=False).fit_transform(
        once(FIT_TEXTS)
    )
    assert_allclose(got, fitted["unrefined"].transform(FIT_TEXTS), rtol=1e-6)


def test_pickle_clone_and_feature_names(fitted, hf):
    vec = fitted["zipf"]
    back = pickle.loads(pickle.dumps(vec))
    assert_allclose(back.transform(TEXTS), vec.transform(TEXTS))
    names = vec.get_feature_names_out()
    assert list(names[:2]) == [
        "staticembeddingvectorizer0",
        "staticembeddingvectorizer1",
    ]
    assert len(names) == vec.hidden_size_
    shared = StaticEmbeddingVectorizer(hf)
    assert clone(shared).model is hf  # the model object is shared, not copied
    assert clone(vec).get_params() == vec.get_params()


# --------------------------------------------------------------- refinement
def encoder_means(hf, texts):
    """The encoder's mean-pooled embedding of each text, one at a time."""
    model, tokenizer = hf
    out = []
    for text in texts:
        inputs = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**inputs).last_hidden_state[0].double().numpy()
        out.append(hidden.mean(axis=0))
    return np.array(out)


def refined_on(texts):
    """The texts the default refinement fits: ``texts``, then ``refine_deletions=1``.

    Each text of four words or more once more, without the word at position
    ``crc32(text) % n_words``.
    """
    copies = []
    for text in texts:
        words = text.split()
        if len(words) >= 4:
            del words[zlib.crc32(text.encode()) % len(words)]
            copies.append(" ".join(words))
    return texts + copies


def ridge(X, Y, penalty, prior):
    """``argmin ||X B - Y||^2 + penalty ||B - prior||^2``, solved densely.

    A dense least-squares problem with the penalty as extra rows.
    """
    root = np.sqrt(penalty) * np.eye(X.shape[1])
    B, *_ = np.linalg.lstsq(np.vstack([X, root]), np.vstack([Y, root @ prior]))
    return B


@pytest.mark.parametrize("weighting", ["uniform", "sif"])
def test_refined_table_solves_the_two_ridge_problems(
    tiny_bert, hf, fitted, weighting, monkeypatch
):
    monkeypatch.setattr(_static_refine, "CG_TOL", 1e-12)  # solve to round-off
    alpha, k = 0.05, 3.0
    vec = StaticEmbeddingVectorizer(
        tiny_bert,
        weighting=weighting,
        refine_alpha=alpha,
        refine_pseudo_tokens=k,
        refine_backend="torch",
    ).fit(FIT_TEXTS)
    n_tokens, d = vec.embeddings_.shape
    # the distilled table (test_distilled_rows_... checks it against transformers)
    T0 = fitted["unrefined"].embeddings_.astype(np.float64)
    # the weights count the fit texts alone, not the copies
    w = fitted[weighting].token_weights_
    texts = refined_on(FIT_TEXTS)
    assert len(texts) == 2 * len(FIT_TEXTS) - 1  # "x y z" has three words
    A = np.zeros((len(texts), n_tokens))  # each text's normalised weights
    for row, text in enumerate(texts):
        for i in hf[1](text, add_special_tokens=False)["input_ids"]:
            A[row, i] += w[i]
        A[row] /= A[row].sum()
    # 0: each embedding scaled by (n + k) / n, n the text's number of tokens
    n = np.array([len(hf[1](t, add_special_tokens=False)["input_ids"]) for t in texts])
    Y = encoder_means(hf, texts) * ((n + k) / n)[:, None]
    # 1: the affine map, shrunk toward the identity
    X = A @ T0
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    mu = alpha * np.trace(Xc.T @ Xc) / d
    M = ridge(Xc, Yc, mu, np.eye(d))
    T1 = T0 @ M + (Y.mean(0) - X.mean(0) @ M)
    # 2: each row toward T1 (rows of unused tokens stay: their column is 0)
    expected = T1 + ridge(A, Y - A @ T1, alpha, np.zeros((n_tokens, d)))
    assert not np.allclose(expected, T0, atol=1e-2)  # the refinement moved it
    assert_allclose(vec.embeddings_, expected, rtol=1e-4, atol=2e-5)
    # and the refined means are closer to the encoder than the distilled ones
    assert np.linalg.norm(A @ vec.embeddings_ - Y) < 0.5 * np.linalg.norm(X - Y)


def test_one_word_deleted_copies():
    from sklearn_isotropy.text._static_refine import one_word_deleted

    five = "one two three four five"
    first = zlib.crc32(five.encode()) % 5
    words = five.split()
    assert one_word_deleted([five]) == [" ".join(np.delete(words, first))]
    # three words stay as they are; whitespace is any run of it
    assert one_word_deleted(["a b c", " a\tb  c "]) == []
    # a word goes with the whitespace after it (before it, if last); the rest
    # of the text stays as it was
    spaced = "  the\tcat   sat\n down "
    assert set(one_word_deleted([spaced], copies=4)) == {
        "  cat   sat\n down ",
        "  the\tsat\n down ",
        "  the\tcat   down ",
        "  the\tcat   sat ",
    }
    assert one_word_deleted(["\u4f60\u597d\u4e16\u754c"]) == []  # one word
    # copies delete different words, at most every word once
    every = one_word_deleted([five], copies=7)
    assert len(every) == 5
    assert {tuple(sorted(set(words) - set(c.split()))) for c in every} == {
        (w,) for w in words
    }
    # the choice depends on the text alone, not on its neighbours
    texts = [five, "a b c", "the big red dog was playing"]
    assert one_word_deleted(texts) == one_word_deleted([five]) + one_word_deleted(
        texts[2:]
    )
    assert one_word_deleted(texts[::-1]) == one_word_deleted(texts)[::-1]


@pytest.fixture
def encoded(monkeypatch):
    """The lists of texts ``BertPoolingVectorizer.transform`` is given, in order."""
    from sklearn_isotropy import BertPoolingVectorizer

    calls = []
    transform = BertPoolingVectorizer.transform

    def spy(self, texts):
        calls.append(list(texts))
        return transform(self, texts)

    monkeypatch.setattr(BertPoolingVectorizer, "transform", spy)
    return calls


def test_refine_encodes_the_copies_without_a_word(tiny_bert, encoded):
    # a copy of only characters the tokenizer drops has no mean: left out
    texts = [*FIT_TEXTS, "cat \x00 \x01 \x02"]
    vec = StaticEmbeddingVectorizer(
        tiny_bert, refine_deletions=4, refine_backend="torch"
    ).fit(texts)
    (fitted,) = encoded
    assert fitted[: len(texts)] == texts
    copies = fitted[len(texts) :]
    # every word of each four-word text deleted once; "x y z" has three words
    assert len(copies) == 4 * 32 + 3
    for text in FIT_TEXTS:
        words = text.split()
        for gone in range(len(words) if len(words) >= 4 else 0):
            assert " ".join(words[:gone] + words[gone + 1 :]) in copies
    assert "\x00 \x01 \x02" not in copies and "cat \x01 \x02" in copies
    assert np.all(np.isfinite(vec.embeddings_))


def test_texts_the_encoder_truncates_get_no_copy(tiny_bert, encoded):
    # the tiny tokenizer keeps 64 tokens, [CLS] and [SEP] included: a copy of
    # a longer text could lose a word the encoder never sees
    fits = " ".join(["the", "cat"] * 31)  # 62 tokens: encoded whole
    truncated = " ".join(["the", "dog"] * 32)  # 64 tokens: truncated
    StaticEmbeddingVectorizer(tiny_bert, refine_backend="torch").fit(
        [*FIT_TEXTS, fits, truncated]
    )
    (texts,) = encoded
    copies = texts[len(FIT_TEXTS) + 2 :]
    assert len(copies) == 32 + 1
    words = fits.split()
    assert any(
        copies[-1].split() == words[:gone] + words[gone + 1 :] for gone in range(62)
    )
    assert not any(len(copy.split()) == 63 for copy in copies)  # the 64 words


@pytest.mark.parametrize("k", [0.0, 16.0])
def test_one_fit_text_is_encoded_as_the_encoder_does(tiny_bert, hf, k):
    # one text: the affine map is the identity plus the offset to its
    # embedding, scaled by (n + k) / n
    text = "the big red dog was playing"
    n = len(hf[1](text, add_special_tokens=False)["input_ids"])  # 7: play ##ing
    vec = StaticEmbeddingVectorizer(
        tiny_bert,
        weighting="uniform",
        refine_pseudo_tokens=k,
        refine_deletions=0,  # no copy without a word: one text to fit
        refine_backend="torch",
    ).fit([text])
    expected = encoder_means(hf, [text])[0] * (n + k) / n
    assert_allclose(vec.transform([text])[0], expected, atol=1e-5)


def test_a_refinement_that_does_not_converge_warns(tiny_bert, fitted, monkeypatch):
    monkeypatch.setattr(_static_refine, "CG_MAX_ITER", 1)
    with pytest.warns(_static_refine.RefinementWarning, match="did not reach"):
        vec = StaticEmbeddingVectorizer(tiny_bert, refine_backend="torch").fit(
            FIT_TEXTS
        )
    # one step of conjugate gradients: between the affine stage and the solution
    assert np.all(np.isfinite(vec.embeddings_))
    assert not np.allclose(vec.embeddings_, fitted["sif"].embeddings_, atol=1e-4)


def test_memory_keeps_the_encoders_embeddings(tiny_bert, fitted, tmp_path, monkeypatch):
    from sklearn_isotropy import BertPoolingVectorizer

    first = StaticEmbeddingVectorizer(
        tiny_bert, memory=tmp_path, refine_backend="torch"
    ).fit(FIT_TEXTS)
    assert_allclose(first.embeddings_, fitted["sif"].embeddings_, rtol=1e-5, atol=1e-6)

    def fail(self, texts, on_batch=None):
        raise AssertionError(f"encoded {len(texts)} texts found in memory")

    monkeypatch.setattr(BertPoolingVectorizer, "_encode", fail)
    second = StaticEmbeddingVectorizer(
        tiny_bert, memory=tmp_path, refine_backend="torch"
    ).fit(FIT_TEXTS)
    np.testing.assert_array_equal(second.embeddings_, first.embeddings_)


def test_auto_refine_backend(monkeypatch):
    import importlib.util

    from sklearn_isotropy.text._static_refine import AUTO_ONNX_BACKEND, refine_backend

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    installed = all(importlib.util.find_spec(n) for n in ("onnx", "onnxruntime"))
    assert refine_backend("auto", cpu) == (AUTO_ONNX_BACKEND if installed else "torch")
    assert refine_backend("auto", cuda) == "torch"  # onnxruntime runs on the CPU
    assert refine_backend("onnx", cpu) == "onnx"
    find_spec = importlib.util.find_spec

    def without_onnxruntime(name, *args):
        return None if name == "onnxruntime" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_onnxruntime)
    assert refine_backend("auto", cpu) == "torch"


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_refine_encodes_with_the_onnx_backends(tiny_bert, hf, fitted, backend):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from sklearn_isotropy import BertPoolingVectorizer
    from sklearn_isotropy.text._static_refine import AUTO_ONNX_BACKEND, refine_table

    vec = StaticEmbeddingVectorizer(tiny_bert, refine_backend=backend).fit(FIT_TEXTS)
    torch_table = fitted["sif"].embeddings_
    if backend == "onnx":  # the same embeddings as torch, to round-off
        assert_allclose(vec.embeddings_, torch_table, rtol=1e-4, atol=1e-5)
    else:  # int8 embeddings: a table refined on them, not on torch's
        texts = refined_on(FIT_TEXTS)
        encoder = BertPoolingVectorizer(tiny_bert, pooling="mean", backend=backend)
        targets = encoder.fit(texts).transform(texts)
        A = np.zeros((len(texts), len(torch_table)))
        w, n = vec.token_weights_, np.zeros(len(texts))
        for row, text in enumerate(texts):
            for i in hf[1](text, add_special_tokens=False)["input_ids"]:
                A[row, i] += w[i]
                n[row] += 1
            A[row] /= A[row].sum()
        expected = refine_table(
            fitted["unrefined"].embeddings_,
            sparse.csr_matrix(A),
            targets,
            vec.refine_alpha,
            lengths=n,
            pseudo_tokens=vec.refine_pseudo_tokens,
        )
        assert_allclose(vec.embeddings_, expected, rtol=1e-4, atol=1e-5)
        assert not np.allclose(vec.embeddings_, torch_table, rtol=1e-4, atol=1e-5)
    if backend == AUTO_ONNX_BACKEND:  # the default
        default = StaticEmbeddingVectorizer(tiny_bert).fit(FIT_TEXTS)
        np.testing.assert_array_equal(default.embeddings_, vec.embeddings_)


def test_auto_refine_backend_falls_back_to_torch(tiny_bert, fitted, monkeypatch):
    from sklearn_isotropy.text import _encoders

    make_encoder = _encoders.make_encoder

    def torch_only(backend, *args):
        if backend != "torch":
            raise ValueError("the model does not export to ONNX")
        return make_encoder(backend, *args)

    monkeypatch.setattr(_encoders, "make_encoder", torch_only)
    vec = StaticEmbeddingVectorizer(tiny_bert).fit(FIT_TEXTS)
    assert_allclose(vec.embeddings_, fitted["sif"].embeddings_, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="does not export"):  # asked for: raised
        StaticEmbeddingVectorizer(tiny_bert, refine_backend="onnx").fit(FIT_TEXTS)


# ------------------------------------------------------------- bad input
def test_bad_input(fitted, tiny_bert):
    vec = fitted["sif"]
    with pytest.raises(ValueError, match="string object received"):
        vec.transform("the cat")
    with pytest.raises(ValueError, match="empty sequence"):
        vec.transform([])
    with pytest.raises(TypeError, match="index 1"):
        vec.transform(["a", None])
    with pytest.raises(NotFittedError):
        StaticEmbeddingVectorizer(tiny_bert).transform(["a"])
    with pytest.raises(ValueError, match="weighting"):
        StaticEmbeddingVectorizer(tiny_bert, weighting="tfidf").fit(["a"])
    with pytest.raises(ValueError, match="weighting='sif'.*hold no token"):
        StaticEmbeddingVectorizer(tiny_bert, weighting="sif").fit(["", " "])
    with pytest.raises(ValueError, match="refine=True.*hold no token"):
        StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["", " "])
    empty = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform", refine=False)
    assert_allclose(empty.fit([""]).transform([""]), 0)
    with pytest.raises(ValueError, match="refine_alpha"):
        StaticEmbeddingVectorizer(tiny_bert, refine_alpha=0.0).fit(["a"])
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        StaticEmbeddingVectorizer(tiny_bert, frequencies={"zebra": 3}).fit(["a"])
    with pytest.raises(ValueError, match="one count per id"):
        StaticEmbeddingVectorizer(tiny_bert, frequencies=np.ones(3)).fit(["a"])
    n_tokens = len(vec.embeddings_)
    with pytest.raises(ValueError, match="finite and non-negative"):
        StaticEmbeddingVectorizer(tiny_bert, frequencies=-np.ones(n_tokens)).fit(["a"])
    with pytest.raises(ValueError, match="all zero"):
        StaticEmbeddingVectorizer(tiny_bert, frequencies=np.zeros(n_tokens)).fit(["a"])
    with pytest.raises(ValueError, match="frequencies"):
        StaticEmbeddingVectorizer(tiny_bert, frequencies="zipfian").fit(["a"])
    with pytest.raises(ValueError, match="refine_backend"):
        StaticEmbeddingVectorizer(tiny_bert, refine_backend="tensorrt").fit(["a"])


@pytest.mark.parametrize("k", [1e40, float("inf"), float("nan"), 10_000.5])
def test_refine_pseudo_tokens_is_bounded(tiny_bert, k, monkeypatch):
    """``refine_pseudo_tokens`` above 10 000 is refused before any work.

    1e40 used to pass and give an infinite table with numpy's overflow
    warning alone.
    """
    from sklearn.utils._param_validation import InvalidParameterError

    from sklearn_isotropy.text import _static_table

    def distill(*args, **kwargs):
        raise AssertionError("distilled before the parameters were checked")

    monkeypatch.setattr(_static_table, "distill", distill)
    match = r"'refine_pseudo_tokens'.* in the range \[0(\.0)?, 10000(\.0)?\]"
    with pytest.raises(InvalidParameterError, match=match):
        StaticEmbeddingVectorizer(tiny_bert, refine_pseudo_tokens=k).fit(FIT_TEXTS)


def test_the_largest_refine_pseudo_tokens_gives_a_finite_table(tiny_bert):
    vec = StaticEmbeddingVectorizer(
        tiny_bert, weighting="uniform", refine_pseudo_tokens=1e4, refine_backend="torch"
    ).fit(FIT_TEXTS)
    assert np.all(np.isfinite(vec.embeddings_))
    X = vec.transform(TEXTS)
    assert np.all(np.isfinite(X)) and np.linalg.norm(X, axis=1).min() > 0


def test_hostile_frequencies(fitted, tiny_bert):
    import warnings

    n_tokens = len(fitted["sif"].embeddings_)
    counts = np.arange(1.0, n_tokens + 1)

    def fit(frequencies):
        vec = StaticEmbeddingVectorizer(
            tiny_bert, frequencies=frequencies, refine=False
        )
        return vec.fit(["a"])

    for value, what in [(np.nan, "1 NaN"), (np.inf, "1 infinite"), (-1.0, "1 neg")]:
        hostile = counts.copy()
        hostile[7] = value
        with pytest.raises(ValueError, match=rf"got {what}.*token ids \[7\]"):
            fit(hostile)
    with pytest.raises(ValueError, match="1 NaN"):
        fit({"cat": float("nan")})
    # counts near the largest float: their sum overflows, but only ratios
    # matter, so the weights are those of the same counts at a small scale
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow on the way either
        huge = fit(counts * (np.finfo(np.float64).max / n_tokens))
    assert np.all(np.isfinite(huge.token_probabilities_))
    assert huge.token_probabilities_.sum() == pytest.approx(1.0)
    small = fit(counts)
    assert_allclose(huge.token_probabilities_, small.token_probabilities_, rtol=1e-12)
    assert_allclose(huge.token_weights_, small.token_weights_, rtol=1e-6)
    assert_allclose(
        small.token_probabilities_, counts / counts.sum(), rtol=1e-12
    )  # every token seen: plain relative frequencies
    # complex counts are refused, not cast to their real part with a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match="real numbers.*complex128"):
            fit(counts + 1j)
        with pytest.raises(TypeError, match="real numbers"):
            fit({"cat": np.complex128(2 + 1j)})


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


def _model2vec_folder(hf, folder, **tensors):
    """Write a small model2vec folder: a random row per tiny-tokenizer token id.

    ``tensors`` replace or add tensors.
    """
    from safetensors.numpy import save_file

    n_tokens = max(hf[1].get_vocab().values()) + 1
    rows = np.random.default_rng(2).normal(size=(n_tokens, 6)).astype(np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"embeddings": rows, **tensors}, str(folder / "model.safetensors"))
    _tokenizer_json(hf, folder)
    return rows


def test_a_model2vec_folder_fits_and_transforms_without_torch(
    hf, tmp_path, monkeypatch
):
    rows = _model2vec_folder(hf, tmp_path / "m2v")
    n_tokens = len(rows)
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch fails
    vec = StaticEmbeddingVectorizer(tmp_path / "m2v", weighting="uniform")
    got = vec.fit_transform(TEXTS)
    assert vec.table_kind_ == "model2vec"
    expected = loop_reference(hf, TEXTS, rows, np.ones(n_tokens))
    assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_the_contextual_vectorizer_sends_a_static_folder_to_the_static_one(
    hf, tmp_path
):
    from sklearn_isotropy import BertPoolingVectorizer

    _model2vec_folder(hf, tmp_path / "m2v")
    with pytest.raises(ValueError, match=r"StaticEmbeddingVectorizer\('.*m2v'\)"):
        BertPoolingVectorizer(tmp_path / "m2v").fit(["a"])


def test_without_torch_the_vectorizers_name_the_text_extra(tiny_bert, monkeypatch):
    from sklearn_isotropy import BertPoolingVectorizer

    monkeypatch.setitem(sys.modules, "torch", None)
    for vec in (StaticEmbeddingVectorizer(tiny_bert), BertPoolingVectorizer(tiny_bert)):
        with pytest.raises(ImportError, match=r"sklearn-isotropy\[text\]"):
            vec.fit(["a"])


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
    rows = _model2vec_folder(hf, tmp_path / "m2v", **damage)
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
    rows = _model2vec_folder(hf, folder)
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
    _model2vec_folder(hf, tmp_path / "m2v")
    (tmp_path / "m2v" / "tokenizer.json").write_text("{1: 2}")
    with pytest.raises(ValueError, match=r"tokenizer.*m2v/tokenizer.json.*damaged"):
        StaticEmbeddingVectorizer(tmp_path / "m2v").fit(["a"])


def test_an_encoder_folder_is_not_taken_for_a_static_one(tiny_bert):
    from sklearn_isotropy.text._static_table import static_folder

    assert static_folder(tiny_bert) is None  # config.json of a BERT


# ------------------------------------------------------------------ export
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
    tokenizer = model_tokenizer(vec)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    feed = {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
    }
    got = session.run(["sentence_embedding"], feed)[0]
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
        tokenizer = model_tokenizer(model)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
        feed = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array(
                [e.attention_mask for e in encodings], dtype=np.int64
            ),
        }
        got = session.run(["sentence_embedding"], feed)[0]
        # the empty text included: the affine image of a row of zeros
        assert_allclose(got, model.transform(texts), rtol=1e-5, atol=1e-5)


# 21 words of one token each: a text of them is a weighted mean of 21 rows
# of the table, in their 20-dimensional affine span
ONE_TOKEN_WORDS = (
    "the a cat dog sat on mat ran fast slow man woman is was big small red blue "
    "play read walk"
).split()


@pytest.fixture(scope="module")
def word_texts():
    rng = np.random.RandomState(0)
    return [
        " ".join(rng.choice(ONE_TOKEN_WORDS, size=rng.randint(3, 9)))
        for _ in range(120)
    ]


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
    ids = [vec.tokenizer_.token_to_id(w) for w in ONE_TOKEN_WORDS]
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


def model_tokenizer(model):
    from tokenizers import Tokenizer

    vec = model if isinstance(model, StaticEmbeddingVectorizer) else model[0]
    return Tokenizer.from_str(vec.tokenizer_.to_str())


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
    feed = {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
    }
    got = session.run(["sentence_embedding"], feed)[0]
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

    tokenizer = model_tokenizer(vec)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(TEXTS, add_special_tokens=False)
    feed = {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
    }
    static = run(to_onnx(pipe[:1]), feed)
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


# ------------------------------------------------------------------- cache
def _no_distillation(monkeypatch):
    from sklearn_isotropy.text import _static_table

    def fail(*args, **kwargs):
        raise AssertionError("distilled although the table was cached")

    monkeypatch.setattr(_static_table, "distill", fail)


def test_a_second_fit_reads_the_verified_cache(tiny_bert, static_cache, monkeypatch):
    first = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    (entry,) = static_cache.iterdir()
    assert sorted(p.name for p in entry.iterdir()) == [
        "spec.json",
        "table.npy",
        "table.npy.sha256",
    ]
    assert json.loads((entry / "spec.json").read_text())["pooling"] == "mean"
    with monkeypatch.context() as patch:
        _no_distillation(patch)
        second = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    assert_allclose(second.embeddings_, first.embeddings_)
    # another pooling is another entry
    StaticEmbeddingVectorizer(tiny_bert, distill_pooling="token").fit(["a"])
    assert len(list(static_cache.iterdir())) == 2


@pytest.mark.parametrize(
    "damage", ["flip", "truncate", "digest", "spec only", "file", "empty"]
)
def test_a_damaged_cached_table_is_distilled_again(
    tiny_bert, static_cache, damage, monkeypatch
):
    import shutil
    import warnings

    from sklearn_isotropy.exceptions import CacheWarning

    first = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    (entry,) = static_cache.iterdir()
    table = entry / "table.npy"
    if damage == "flip":
        data = bytearray(table.read_bytes())
        data[-3] ^= 0xFF
        table.write_bytes(bytes(data))
    elif damage == "truncate":
        table.write_bytes(table.read_bytes()[:100])
    elif damage == "digest":
        (entry / "table.npy.sha256").unlink()
    elif damage == "spec only":  # the table and its digest deleted
        table.unlink()
        (entry / "table.npy.sha256").unlink()
    elif damage == "file":
        shutil.rmtree(entry)
        entry.write_text("not a folder")
    else:  # an empty folder is written into, without a warning
        shutil.rmtree(entry)
        entry.mkdir()
    if damage == "empty":
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            again = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    else:
        with pytest.warns(CacheWarning, match="damaged.*replacing it"):
            again = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    assert_allclose(again.embeddings_, first.embeddings_)
    # and replaced: the next fit reads it, without distilling or a warning
    assert sorted(p.name for p in entry.iterdir()) == [
        "spec.json",
        "table.npy",
        "table.npy.sha256",
    ]
    _no_distillation(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        served = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    assert_allclose(served.embeddings_, first.embeddings_)


def test_a_cache_directory_that_is_a_file_warns(tiny_bert, tmp_path, monkeypatch):
    from sklearn_isotropy.exceptions import CacheWarning

    cached = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    taken = tmp_path / "cache-file"
    taken.write_text("mine")
    monkeypatch.setenv("SKLEARN_ISOTROPY_STATIC_CACHE", str(taken))
    with pytest.warns(CacheWarning, match="is a file.*SKLEARN_ISOTROPY_STATIC_CACHE"):
        vec = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    assert_allclose(vec.embeddings_, cached.embeddings_)
    assert taken.read_text() == "mine"


def test_a_table_another_process_stored_is_not_a_failure(
    tiny_bert, static_cache, monkeypatch
):
    """A FileExistsError while storing is silent only over a valid table.

    Another process stored it then; otherwise it is reported.
    """
    import warnings

    from sklearn_isotropy.exceptions import CacheWarning
    from sklearn_isotropy.text import _static_cache

    write = _static_cache._write

    def racing(folder, table, spec, overwrite):
        write(folder, table, spec, overwrite)  # the other process wins
        raise FileExistsError(17, "File exists", str(folder))

    with monkeypatch.context() as patch:
        patch.setattr(_static_cache, "_write", racing)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])

    def refused(folder, table, spec, overwrite):
        raise FileExistsError(17, "File exists", str(folder))

    monkeypatch.setattr(_static_cache, "_write", refused)
    with pytest.warns(CacheWarning, match="Cannot store"):
        StaticEmbeddingVectorizer(tiny_bert, distill_pooling="token").fit(["a"])


def test_a_cache_that_cannot_be_written_is_read(tiny_bert, static_cache, monkeypatch):
    from sklearn_isotropy.exceptions import CacheWarning
    from sklearn_isotropy.text import _static_cache

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    first = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    monkeypatch.setattr(_static_cache, "publish_directory", read_only)
    with monkeypatch.context() as patch:  # a stored table is served
        _no_distillation(patch)
        served = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    assert_allclose(served.embeddings_, first.embeddings_)
    # a new one is distilled, used and reported as not stored
    with pytest.warns(CacheWarning, match="Cannot store"):
        token = StaticEmbeddingVectorizer(tiny_bert, distill_pooling="token").fit(["a"])
    assert token.embeddings_.shape == first.embeddings_.shape
    assert len(list(static_cache.iterdir())) == 1


# ---------------------------------------------------- evaluation, command line
def test_evaluate_and_retrieval_with_the_static_encoder(
    tiny_sts_dir, tiny_bert, tmp_path, capsys
):
    import csv

    from scipy.stats import spearmanr

    from sklearn_isotropy.cli import main

    common = ["--data", str(tiny_sts_dir), "--model", str(tiny_bert), "--quiet"]
    status = main(
        ["evaluate", *common, "--encoder", "static", "--methods", "raw,whitening"]
        + ["--out", str(tmp_path / "sts"), "--no-figures"]
        + ["--cache", str(tmp_path / "cache")]
    )
    assert status == 0, capsys.readouterr()
    # --cache keeps the encoder's embeddings of the texts the refinement fits
    assert any(path.is_file() for path in (tmp_path / "cache").rglob("*"))
    results = json.loads((tmp_path / "sts" / "results.json").read_text())["results"]
    assert {r["pooling"] for r in results} == {"static"}

    # raw: the default static vectorizer fitted on the train split's
    # sentences, under the 'target' protocol of the transforms too (fitted
    # on the test sentences, its raw row would score sentences it was
    # refined on)
    def read(split):
        with open(tiny_sts_dir / f"{split}.csv", encoding="utf-8") as fh:
            return list(csv.reader(fh))

    rows, train = read("test"), read("train")
    assert "'target'" in capsys.readouterr().out
    texts = list(dict.fromkeys(t for r in train for t in r[:2]))
    vec = StaticEmbeddingVectorizer(tiny_bert).fit(texts)
    a, b = vec.transform([r[0] for r in rows]), vec.transform([r[1] for r in rows])
    gold = [float(r[2]) for r in rows]
    expected = 100 * spearmanr(cosine(a, b), gold).statistic
    [raw] = [r for r in results if r["method"] == "raw"]
    assert raw["spearman_x100"] == pytest.approx(expected, abs=1e-6)
    report = (tmp_path / "sts" / "results.md").read_text()
    assert f"static vectorizer, fitted on the {len(texts)} texts" in report

    status = main(
        ["retrieval", *common, "--encoder", "static", "--methods", "raw"]
        + ["--min-score", "3.0", "--quantize", "float32", "--latency-queries", "0"]
        # numpy search: faiss would load its own OpenBLAS into the process,
        # which test_whitening's one-BLAS-thread check then counts
        + ["--backend", "numpy"]
        + ["--out", str(tmp_path / "retrieval"), "--no-figures"]
    )
    assert status == 0, capsys.readouterr()
    payload = json.loads((tmp_path / "retrieval" / "retrieval.json").read_text())
    assert {r["pooling"] for r in payload["results"]} == {"static"}
