"""Tests of the static vectorizer's token weighting: uniform, SIF and Zipf.

Probabilities are computed here from the counts of the fit texts, from
model2vec's rank estimate, or from frequencies the user gives, and compared
with the fitted ``token_probabilities_`` and ``token_weights_``.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from tests._data import FIT_TEXTS, TEXTS
from tests._references import cosine

pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import (  # noqa: E402
    StaticEmbeddingVectorizer,
    WhiteningTransformer,
)
from sklearn_isotropy.text.static._weighting import token_probabilities  # noqa: E402

# distilled tables go to a fresh directory per test, never ~/.cache
pytestmark = pytest.mark.usefixtures("static_cache")


def counts_of(hf, texts, n_tokens):
    _, tokenizer = hf
    counts = np.zeros(n_tokens)
    for text in texts:
        for i in tokenizer(text, add_special_tokens=False)["input_ids"]:
            counts[i] += 1
    return counts


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
    from sklearn_isotropy.text.static._weighting import token_probabilities, zipf_counts

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
