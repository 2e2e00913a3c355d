"""Tests of PairedCosineSimilarity and the cosine-Spearman scorer.

Scores through any transformer, in a grid search among others, checked
against scipy's ``spearmanr`` of scikit-learn's paired cosines.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.decomposition import PCA, TruncatedSVD
from sklearn.exceptions import NotFittedError
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics.pairwise import paired_cosine_distances
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import get_tags

import sklearn_isotropy
from sklearn_isotropy.metrics import (
    PairedCosineSimilarity,
    cosine_spearman_score,
    cosine_spearman_scorer,
)
from tests._references import spearman_of_cosines

TEXT_PAIRS = np.array(
    [
        ["a cat sits on the mat", "a cat is on the mat"],
        ["a dog runs in the park", "the stock market fell"],
        ["a man plays guitar", "a man is playing a guitar"],
        ["the sun is bright", "rain falls on the town"],
        ["a woman cooks dinner", "a woman is cooking"],
        ["a cat sits on the mat", "a dog sleeps on the mat"],
        ["children play football", "kids are playing soccer"],
        ["a man plays guitar", "the market rose today"],
    ],
    dtype=object,
)
TEXT_Y = np.array([4.5, 0.1, 4.8, 0.5, 4.0, 2.5, 4.2, 0.0])


def test_fit_on_both_columns_and_predict(emb_pairs):
    a, b, y = emb_pairs
    X = np.stack([a, b], axis=1)
    model = PairedCosineSimilarity(StandardScaler()).fit(X, y)
    ref = StandardScaler().fit(np.vstack([a, b]))
    np.testing.assert_allclose(model.transformer_.mean_, ref.mean_)
    expected = 1.0 - paired_cosine_distances(ref.transform(a), ref.transform(b))
    np.testing.assert_allclose(model.predict(X), expected, atol=1e-12)
    np.testing.assert_allclose(
        model.score(X, y), spearmanr(y, expected).statistic, rtol=1e-12
    )
    assert model.n_features_in_ == 8 and model.input_kind_ == "embeddings"
    # the estimator given is not fitted; y is not used
    assert not hasattr(model.transformer, "mean_")
    other = PairedCosineSimilarity(StandardScaler()).fit(X, rng_y := y[::-1])
    np.testing.assert_allclose(other.predict(X), model.predict(X))
    assert len(rng_y) == len(y)


def test_passthrough_is_raw_cosine(emb_pairs):
    a, b, y = emb_pairs
    X = np.stack([a, b], axis=1)
    for t in (None, "passthrough"):
        m = PairedCosineSimilarity(t).fit(X)
        assert m.transformer_ is None
        np.testing.assert_allclose(
            m.score(X, y), spearman_of_cosines(a, b, y), rtol=1e-12
        )
    with pytest.raises(ValueError, match="text pairs"):
        PairedCosineSimilarity().fit(TEXT_PAIRS)


class _CountingTfidf(TfidfVectorizer):
    """TfidfVectorizer that records how many texts each transform received."""

    calls: list = []

    def transform(self, raw_documents):
        type(self).calls.append(len(raw_documents))
        return super().transform(raw_documents)


def test_text_pairs_dedup_at_predict_does_not_change_result():
    _CountingTfidf.calls = []
    model = PairedCosineSimilarity(_CountingTfidf()).fit(TEXT_PAIRS)
    ref = TfidfVectorizer().fit(list(TEXT_PAIRS[:, 0]) + list(TEXT_PAIRS[:, 1]))
    assert model.transformer_.vocabulary_ == ref.vocabulary_
    pred = model.predict(TEXT_PAIRS)
    n_unique = len(set(TEXT_PAIRS.ravel()))
    assert n_unique < TEXT_PAIRS.size  # the fixture repeats sentences
    assert _CountingTfidf.calls == [n_unique]
    a = ref.transform(TEXT_PAIRS[:, 0]).toarray()
    b = ref.transform(TEXT_PAIRS[:, 1]).toarray()
    np.testing.assert_allclose(pred, 1.0 - paired_cosine_distances(a, b), atol=1e-12)
    assert model.input_kind_ == "text"
    # a list of lists and a DataFrame-like input give the same answer
    np.testing.assert_allclose(model.predict(TEXT_PAIRS.tolist()), pred)


def test_nested_params_and_clone():
    pipe = make_pipeline(StandardScaler(), PCA())
    model = PairedCosineSimilarity(pipe)
    params = model.get_params(deep=True)
    assert "transformer__pca__n_components" in params
    model.set_params(transformer__pca__n_components=3)
    assert pipe.named_steps["pca"].n_components == 3
    cloned = clone(model)
    assert cloned.transformer is not pipe
    assert cloned.get_params()["transformer__pca__n_components"] == 3


def test_grid_search_picks_k_like_a_manual_cv(emb_pairs):
    a, b, y = emb_pairs
    X = np.stack([a, b], axis=1)
    grid = {"transformer__pca__n_components": [1, 3, 8]}
    model = PairedCosineSimilarity(make_pipeline(StandardScaler(), PCA()))
    search = GridSearchCV(model, grid, cv=KFold(4)).fit(X, y)
    manual = []
    for k in grid["transformer__pca__n_components"]:
        fold_scores = []
        for train, test in KFold(4).split(X):
            ref = make_pipeline(StandardScaler(), PCA(n_components=k))
            ref.fit(np.vstack([a[train], b[train]]))
            cos = 1 - paired_cosine_distances(
                ref.transform(a[test]), ref.transform(b[test])
            )
            fold_scores.append(spearmanr(y[test], cos).statistic)
        manual.append(np.mean(fold_scores))
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], manual, rtol=1e-9)
    best_k = grid["transformer__pca__n_components"][int(np.argmax(manual))]
    assert search.best_params_ == {"transformer__pca__n_components": best_k}
    # scoring= with the scorer gives the same numbers
    search2 = GridSearchCV(model, grid, cv=KFold(4), scoring=cosine_spearman_scorer)
    search2.fit(X, y)
    np.testing.assert_allclose(
        search2.cv_results_["mean_test_score"], manual, rtol=1e-9
    )


@pytest.mark.filterwarnings(
    "ignore::sklearn_isotropy.exceptions.UndefinedCorrelationWarning"
)
def test_grid_search_over_text_pipeline_and_passthrough_choice():
    # (tiny folds: some test sentences share no word with the training folds)
    pipe = make_pipeline(TfidfVectorizer(), TruncatedSVD(random_state=0))
    grid = {"transformer__truncatedsvd__n_components": [2, 4]}
    search = GridSearchCV(PairedCosineSimilarity(pipe), grid, cv=2)
    search.fit(TEXT_PAIRS, TEXT_Y)
    assert search.best_params_["transformer__truncatedsvd__n_components"] in (2, 4)
    assert -1 <= search.score(TEXT_PAIRS, TEXT_Y) <= 1
    # "no transform" can compete in the same search on embeddings
    rng = np.random.RandomState(1)
    X = rng.normal(size=(30, 2, 5))
    y = rng.uniform(size=30)
    s = GridSearchCV(
        PairedCosineSimilarity(PCA()),
        [{"transformer": ["passthrough"]}, {"transformer__n_components": [2]}],
        cv=3,
    ).fit(X, y)
    assert len(s.cv_results_["params"]) == 2


@pytest.mark.filterwarnings("ignore::sklearn_isotropy.exceptions.RankDeficiencyWarning")
def test_grid_search_over_text_pipeline_encodes_each_sentence_once(tiny_bert, tmp_path):
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline

    from sklearn_isotropy import (
        BertPoolingVectorizer,
        PairedCosineSimilarity,
        WhiteningTransformer,
    )

    words = "the a cat dog sat on mat ran fast slow man woman big small red blue"
    rng = np.random.RandomState(0)
    vocab = words.split()
    pool = [" ".join(rng.choice(vocab, size=rng.randint(3, 8))) for _ in range(30)]
    idx = rng.randint(len(pool), size=(60, 2))
    pairs = np.array([[pool[i], pool[j]] for i, j in idx], dtype=object)
    y = rng.uniform(0, 5, size=60)

    vec = BertPoolingVectorizer(str(tiny_bert), memory=str(tmp_path / "cache"))
    model = vec.fit(pool[:1]).model_
    seen = []
    handle = model.register_forward_hook(
        lambda mod, args, kwargs, out: seen.append(
            int(
                (kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).shape[0]
            )
        ),
        with_kwargs=True,
    )
    try:
        search = GridSearchCV(
            PairedCosineSimilarity(make_pipeline(vec, WhiteningTransformer())),
            {"transformer__whiteningtransformer__n_components": [4, 8, None]},
            cv=3,
        ).fit(pairs, y)
    finally:
        handle.remove()
    n_unique = len(set(pairs.ravel()))
    assert sum(seen) == n_unique  # 3 candidates x 3 folds + refit, one encoding
    assert search.best_params_["transformer__whiteningtransformer__n_components"] in (
        4,
        8,
        None,
    )


def test_scorer_on_bare_fitted_transformer(emb_pairs):
    a, b, y = emb_pairs
    X = np.stack([a, b], axis=1)
    pipe = make_pipeline(StandardScaler(), PCA(n_components=4)).fit(np.vstack([a, b]))
    expected = spearman_of_cosines(pipe.transform(a), pipe.transform(b), y)
    np.testing.assert_allclose(cosine_spearman_scorer(pipe, X, y), expected, rtol=1e-12)
    fitted = PairedCosineSimilarity(clone(pipe)).fit(X)
    np.testing.assert_allclose(
        cosine_spearman_scorer(fitted, X, y), fitted.score(X, y), rtol=1e-12
    )
    np.testing.assert_allclose(fitted.score(X, y), expected, rtol=1e-9)
    # a pipeline ending in the meta-estimator is scored through its predict
    outer = make_pipeline(PairedCosineSimilarity(clone(pipe))).fit(X)
    np.testing.assert_allclose(cosine_spearman_scorer(outer, X, y), expected, rtol=1e-9)
    text = make_pipeline(TfidfVectorizer()).fit(TEXT_PAIRS.ravel())
    a_t = text.transform(TEXT_PAIRS[:, 0]).toarray()
    b_t = text.transform(TEXT_PAIRS[:, 1]).toarray()
    np.testing.assert_allclose(
        cosine_spearman_scorer(text, TEXT_PAIRS, TEXT_Y),
        spearman_of_cosines(a_t, b_t, TEXT_Y),
        rtol=1e-12,
    )
    with pytest.raises(NotFittedError):
        cosine_spearman_scorer(StandardScaler(), X, y)
    with pytest.raises(TypeError, match="transform method"):
        cosine_spearman_scorer(object(), X, y)


class _Bad(TransformerMixin, BaseEstimator):
    def fit(self, X, y=None):
        return self

    def transform(self, X):
        return np.full((len(X), 2), np.nan)


@pytest.mark.parametrize(
    "X, exc, match",
    [
        ("a sentence", TypeError, "single string"),
        (np.zeros((4, 2)), ValueError, r"\(n_pairs, 2, n_features\)"),
        (np.zeros((4, 3, 2)), ValueError, "must have shape"),
        (np.zeros((0, 2), dtype=object), ValueError, "empty"),
        (np.array([["a", 1], ["b", "c"]], dtype=object), TypeError, r"X_pairs\[0, 1\]"),
        (np.full((3, 2, 2), np.nan), ValueError, "NaN"),
    ],
)
def test_pairs_validation(X, exc, match):
    with pytest.raises(exc, match=match):
        PairedCosineSimilarity(StandardScaler()).fit(X)


def test_predict_errors(emb_pairs):
    a, b, y = emb_pairs
    X = np.stack([a, b], axis=1)
    with pytest.raises(NotFittedError):
        PairedCosineSimilarity(StandardScaler()).predict(X)
    model = PairedCosineSimilarity(StandardScaler()).fit(X)
    with pytest.raises(ValueError, match="fitted with 8"):
        model.predict(X[:, :, :3])
    with pytest.raises(ValueError, match="holds text"):
        model.predict(TEXT_PAIRS)
    with pytest.raises(ValueError, match="y has 3 scores"):
        model.score(X, y[:3])
    with pytest.raises(ValueError, match="sample_weight"):
        model.score(X, y, sample_weight=np.ones(len(y)))
    with pytest.raises(ValueError, match="non-finite"):
        PairedCosineSimilarity(_Bad()).fit(X).predict(X)
    with pytest.raises(Exception, match="transformer"):
        PairedCosineSimilarity(transformer="whiten").fit(X)


def test_tags_and_top_level_exports():
    tags = get_tags(PairedCosineSimilarity(StandardScaler()))
    assert tags.input_tags.string and tags.input_tags.three_d_array
    assert not tags.target_tags.required
    for name in (
        "PairedCosineSimilarity",
        "cosine_spearman_score",
        "cosine_spearman_scorer",
    ):
        assert name in sklearn_isotropy.__all__
        assert getattr(sklearn_isotropy, name) is not None
    assert sklearn_isotropy.__all__ == sorted(sklearn_isotropy.__all__)


def test_grid_search_over_whitening_k_as_in_the_docs():
    from sklearn_isotropy import WhiteningTransformer

    rng = np.random.RandomState(0)
    # anisotropic embeddings: a large common offset and a dominant direction;
    # the gold similarity lives in the low-variance directions
    n, d = 150, 12
    scale = np.r_[20.0, np.ones(d - 1)]
    latent = rng.normal(size=(n, d))
    a = latent * scale + 5.0
    b = (latent + rng.normal(scale=0.8, size=(n, d))) * scale + 5.0
    b[:, 0] = rng.normal(size=n) * 20.0 + 5.0  # the top direction is noise
    y = -np.linalg.norm((a - b)[:, 1:], axis=1)
    X = np.stack([a, b], axis=1)
    ks = [2, 6, None]
    pipe = make_pipeline(WhiteningTransformer())
    search = GridSearchCV(
        PairedCosineSimilarity(pipe),
        {"transformer__whiteningtransformer__n_components": ks},
        cv=5,
    ).fit(X, y)
    scores = search.cv_results_["mean_test_score"]
    assert search.best_index_ == int(np.argmax(scores))
    best_k = ks[search.best_index_]
    fitted = search.best_estimator_.transformer_.named_steps["whiteningtransformer"]
    assert fitted.n_components == best_k
    # whitening beats the raw cosine, which the offset and top direction ruin
    raw = cosine_spearman_score(a, b, y)
    assert search.best_estimator_.score(X, y) > raw + 0.2


@pytest.mark.parametrize("namespace", ["torch", "array_api_strict"])
def test_scorers_take_the_arrays_the_estimators_take(emb_pairs, namespace):
    # under array_api_dispatch: torch y raised in check_array, array_api_strict
    # pairs failed on len(), and a bare whitening fitted on torch was handed
    # numpy pairs, which it refuses; each must give the numpy score
    import sklearn

    from sklearn_isotropy import WhiteningTransformer
    from sklearn_isotropy.metrics import make_retrieval_scorer

    xp = pytest.importorskip(namespace)
    a, b, y = emb_pairs
    X = np.stack([a, b], axis=1)
    y = np.where(np.arange(len(y)) % 3 == 0, 5.0, y)  # pairs for the retrieval score
    pairs = PairedCosineSimilarity(WhiteningTransformer(n_components=4)).fit(X)
    bare = WhiteningTransformer(n_components=4).fit(np.vstack([a, b]))
    retrieval = make_retrieval_scorer("mrr@10", min_score=4.0)
    grid = {"transformer__n_components": [2, 4]}
    search = GridSearchCV(PairedCosineSimilarity(WhiteningTransformer()), grid, cv=3)
    expected = [pairs.score(X, y), cosine_spearman_scorer(bare, X, y)]
    expected.append(retrieval(bare, X, y))
    expected += list(search.fit(X, y).cv_results_["mean_test_score"])
    with sklearn.config_context(array_api_dispatch=True):
        X_d, y_d = xp.asarray(X), xp.asarray(y)
        pairs_d = PairedCosineSimilarity(WhiteningTransformer(n_components=4)).fit(X_d)
        bare_d = WhiteningTransformer(n_components=4).fit(xp.asarray(np.vstack([a, b])))
        got = [pairs_d.score(X_d, y_d), cosine_spearman_scorer(bare_d, X_d, y_d)]
        got.append(retrieval(bare_d, X_d, y_d))
        if namespace == "torch":  # every fold's score was NaN
            got += list(search.fit(X_d, y_d).cv_results_["mean_test_score"])
    np.testing.assert_allclose(got, expected[: len(got)], atol=1e-6)
