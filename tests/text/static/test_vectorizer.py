"""Tests of StaticEmbeddingVectorizer: transform, estimator contract, bad input.

The tiny BERT of ``conftest.tiny_bert`` is distilled (well under a second).
References are weighted means computed text by text in Python from
transformers' tokenizer. The table has its tests in ``test_table.py``, the
weighting in ``test_weighting.py``, the refinement in ``test_refine.py``, the
cache in ``test_table_cache.py`` (all beside this file) and the exports in
``tests/export/test_static.py``.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from tests._data import FIT_TEXTS, TEXTS
from tests._references import loop_reference

pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import StaticEmbeddingVectorizer  # noqa: E402

# distilled tables go to a fresh directory per test, never ~/.cache
pytestmark = pytest.mark.usefixtures("static_cache")


# ---------------------------------------------------------------- transform
@pytest.mark.parametrize("weighting", ["uniform", "sif", "zipf", "unrefined"])
def test_transform_is_the_weighted_mean_of_each_texts_rows(fitted, hf, weighting):
    vec = fitted[weighting]
    got = vec.transform(TEXTS)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), vec.hidden_size_)
    expected = loop_reference(hf, TEXTS, vec.embeddings_, vec.token_weights_)
    assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


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

    from sklearn_isotropy.text.static import _table

    def distill(*args, **kwargs):
        raise AssertionError("distilled before the parameters were checked")

    monkeypatch.setattr(_table, "distill", distill)
    match = r"'refine_pseudo_tokens'.* in the range \[0(\.0)?, 10000(\.0)?\]"
    with pytest.raises(InvalidParameterError, match=match):
        StaticEmbeddingVectorizer(tiny_bert, refine_pseudo_tokens=k).fit(FIT_TEXTS)
