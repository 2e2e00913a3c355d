"""Tests of the refinement of a static table on the encoder's own embeddings.

The table is refined by the two ridge problems (an affine map, then each
row), on the fit texts and copies of them without a word; the references
solve the same problems densely with numpy, on the encoder's embeddings
computed text by text by transformers.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import sparse

from tests._data import FIT_TEXTS, TEXTS

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import StaticEmbeddingVectorizer  # noqa: E402
from sklearn_isotropy.text.static import _refine  # noqa: E402

# distilled tables go to a fresh directory per test, never ~/.cache
pytestmark = pytest.mark.usefixtures("static_cache")


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
    monkeypatch.setattr(_refine, "CG_TOL", 1e-12)  # solve to round-off
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


def test_refine_table_is_the_vectorizers_refinement(tiny_bert, fitted):
    # the public function on the fit texts and the encoder's embeddings of
    # them refines as fit does with no copies less a word
    from sklearn_isotropy import BertPoolingVectorizer
    from sklearn_isotropy.text import refine_table

    vec = StaticEmbeddingVectorizer(
        tiny_bert, weighting="sif", refine_deletions=0, refine_backend="torch"
    ).fit(FIT_TEXTS)
    encoder = BertPoolingVectorizer(tiny_bert, pooling="mean").fit(FIT_TEXTS)
    refined = refine_table(
        fitted["unrefined"].embeddings_,
        vec.tokenizer_,
        ["", *FIT_TEXTS],  # a text without tokens is left out
        encoder.transform(["", *FIT_TEXTS]),
        weights=vec.token_weights_,
        alpha=vec.refine_alpha,
        pseudo_tokens=vec.refine_pseudo_tokens,
    )
    assert refined.dtype == np.float32
    assert_allclose(refined, vec.embeddings_, rtol=1e-5, atol=1e-6)


def test_refine_table_runs_the_stages_asked_for(fitted):
    from sklearn_isotropy.text import refine_table

    vec = fitted["unrefined"]
    table, tokenizer = vec.embeddings_, vec.tokenizer_
    targets = np.random.default_rng(0).normal(size=(len(FIT_TEXTS), table.shape[1]))
    kept = refine_table(
        table, tokenizer, FIT_TEXTS, targets, affine=False, tokens=False
    )
    np.testing.assert_array_equal(kept, table)
    # None weighs every token alike
    ones = np.ones(len(table))
    assert_allclose(
        refine_table(table, tokenizer, FIT_TEXTS, targets),
        refine_table(table, tokenizer, FIT_TEXTS, targets, weights=ones),
    )
    # the token stage moves only the rows of tokens the texts use
    used = np.zeros(len(table), dtype=bool)
    for encoding in tokenizer.encode_batch(FIT_TEXTS, add_special_tokens=False):
        used[encoding.ids] = True
    rows = refine_table(table, tokenizer, FIT_TEXTS, targets, affine=False)
    np.testing.assert_array_equal(rows[~used], table[~used])
    assert not np.allclose(rows[used], table[used])


@pytest.mark.parametrize(
    "change, match",
    [
        ({"targets": np.zeros((2, 4))}, "one row per text"),
        ({"weights": np.ones(3)}, "one weight per token"),
        ({"alpha": 0.0}, "alpha=0.0 must be in"),
        ({"pseudo_tokens": -1.0}, "pseudo_tokens=-1.0"),
        ({"table": np.zeros((3, 4))}, "token id"),
        ({"texts": ["", " "], "targets": np.zeros((2, 4))}, "has a token"),
        ({"targets": np.full((3, 4), np.nan)}, "targets holds NaN"),
        ({"texts": "the cat"}, "string object received"),
    ],
)
def test_refine_table_refuses_bad_input(fitted, change, match):
    from sklearn_isotropy.text import refine_table

    vec = fitted["unrefined"]
    args = {
        "table": np.zeros((len(vec.embeddings_), 4)),
        "tokenizer": vec.tokenizer_,
        "texts": ["the cat", "a dog", "the dog sat"],
        "targets": np.zeros((3, 4)),
        **change,
    }
    with pytest.raises(ValueError, match=match):
        refine_table(**args)


def test_one_word_deleted_copies():
    from sklearn_isotropy.text.static._refine import one_word_deleted

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
    monkeypatch.setattr(_refine, "CG_MAX_ITER", 1)
    with pytest.warns(_refine.RefinementWarning, match="did not reach"):
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

    from sklearn_isotropy.text.static._refine import AUTO_ONNX_BACKEND, refine_backend

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
    from sklearn_isotropy.text.static._refine import AUTO_ONNX_BACKEND, fit_table

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
        expected = fit_table(
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


def test_the_largest_refine_pseudo_tokens_gives_a_finite_table(tiny_bert):
    vec = StaticEmbeddingVectorizer(
        tiny_bert, weighting="uniform", refine_pseudo_tokens=1e4, refine_backend="torch"
    ).fit(FIT_TEXTS)
    assert np.all(np.isfinite(vec.embeddings_))
    X = vec.transform(TEXTS)
    assert np.all(np.isfinite(X)) and np.linalg.norm(X, axis=1).min() > 0


def test_refine_alpha_is_bounded_where_the_table_stops_changing(tiny_bert, hf, fitted):
    """``refine_alpha`` above 1e8 is refused; at 1e8 the table is the limit's.

    1e308 used to give a table of NaN, silently. As alpha grows the affine
    map tends to the identity (its offset still moves the rows to the
    embeddings' mean) and the row corrections to zero: at the bound the
    table is the distilled one plus that offset, to float32 round-off.
    """
    for alpha in (1e308, 1.0000001e8, float("inf"), float("nan"), 0.0):
        with pytest.raises(ValueError, match=r"'refine_alpha' parameter .* range"):
            StaticEmbeddingVectorizer(tiny_bert, refine_alpha=alpha).fit(FIT_TEXTS)
    k = 16.0  # the default refine_pseudo_tokens
    vec = StaticEmbeddingVectorizer(
        tiny_bert, weighting="uniform", refine_alpha=1e8, refine_backend="torch"
    ).fit(FIT_TEXTS)
    T0 = fitted["unrefined"].embeddings_.astype(np.float64)
    texts = refined_on(FIT_TEXTS)
    A = np.zeros((len(texts), len(T0)))  # uniform weights: token counts / n
    for row, text in enumerate(texts):
        for i in hf[1](text, add_special_tokens=False)["input_ids"]:
            A[row, i] += 1.0
    n = A.sum(axis=1)
    A /= n[:, None]
    Y = encoder_means(hf, texts) * ((n + k) / n)[:, None]
    limit = T0 + (Y.mean(axis=0) - (A @ T0).mean(axis=0))
    assert np.abs(limit - T0).max() > 0.1  # the offset is not round-off
    scale = np.abs(limit).max()
    assert_allclose(vec.embeddings_, limit, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("overflow", ["an infinite embedding", "finite, too large"])
def test_a_refined_table_that_is_not_finite_is_an_error(
    tiny_bert, monkeypatch, overflow
):
    """A table that overflows is refused with its cause, never returned.

    An encoder whose embedding of a fit text overflows (run in float16, say)
    made every row it reaches NaN; finite embeddings near float32's largest
    value overflow once scaled by ``(n + k) / n``.
    """
    from sklearn_isotropy import BertPoolingVectorizer

    real = BertPoolingVectorizer.transform

    def overflowing(self, X):
        out = real(self, X)
        if overflow == "an infinite embedding":
            out[3] = np.inf
        else:
            out *= 3e38 / np.abs(out).max()  # float32's largest: 3.4e38
        return out

    monkeypatch.setattr(BertPoolingVectorizer, "transform", overflowing)
    vec = StaticEmbeddingVectorizer(tiny_bert, refine_backend="torch")
    if overflow == "an infinite embedding":
        match = (
            r"non-finite values in \d+ of its \d+ token rows: the encoder's "
            r"embeddings of 1 of the \d+ texts it encoded are not finite \(the "
            r"first: 'a woman was small'\).*refine=False keeps the distilled table"
        )
    else:
        match = (
            r"embeddings are finite, but fitting the table to them with "
            r"refine_alpha=0.1 and refine_pseudo_tokens=16.0 overflowed float32"
        )
    with pytest.raises(ValueError, match=match):
        vec.fit(FIT_TEXTS)
    assert not hasattr(vec, "embeddings_")
