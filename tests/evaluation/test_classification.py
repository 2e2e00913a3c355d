"""Tests of the classification task: classifiers and a clustering, fold by fold."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import v_measure_score
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import Bunch

from sklearn_isotropy import WhiteningTransformer
from sklearn_isotropy.datasets import make_cone
from sklearn_isotropy.evaluation import (
    ClassificationSettings,
    ClassificationTask,
    EvaluationSettings,
    MethodSettings,
    evaluate,
)
from sklearn_isotropy.exceptions import EvaluationError


def _sets(n=120, d=10, seed=0):
    """Two sets of anisotropic embeddings: binary, and 3 classes with a split."""
    rng = np.random.default_rng(seed)
    out, embeddings = {}, {}
    offset = np.full(d, 3.0)
    for name, classes in (("bin", 2), ("three", 3)):
        y = np.arange(n) % classes
        rng.shuffle(y)
        centres = rng.normal(size=(classes, d)) * 1.5
        X = centres[y] + make_cone(
            n, d, spread=(4, 0.2), offset=offset, rotate=False, random_state=rng
        )
        bunch = Bunch(data=[f"{name} {i}" for i in range(n)], target=y)
        if name == "three":
            bunch.test_size = 30
        out[name], embeddings[name] = bunch, X
    return ClassificationTask(out), embeddings


def _independent(transformer, X, y, folds):
    """The protocol computed with plain scikit-learn, fold by fold."""
    cv = list(folds)
    scores = {}
    for name, est in (
        ("logistic", LogisticRegression(C=1.0, max_iter=2000)),
        ("knn", KNeighborsClassifier(10, metric="cosine")),
    ):
        steps = [] if transformer == "passthrough" else [clone(transformer)]
        pipe = make_pipeline(*steps, est)
        scores[name] = 100 * cross_val_score(pipe, X, y, cv=cv).mean()
    v = []
    for train, test in cv:
        Z = X[test]
        if transformer != "passthrough":
            Z = clone(transformer).fit(X[train]).transform(X[test])
        Z = Z / np.linalg.norm(Z, axis=1, keepdims=True)
        km = KMeans(n_clusters=len(np.unique(y)), n_init=3, random_state=0)
        v.append(v_measure_score(y[test], km.fit_predict(Z)))
    scores["kmeans"] = 100 * np.mean(v)
    return scores


@pytest.mark.parametrize(
    "method, transformer",
    [
        ("raw", "passthrough"),
        ("center", StandardScaler(with_std=False)),
        ("whitening", WhiteningTransformer(n_components=6)),
    ],
)
def test_scores_match_an_independent_computation(method, transformer):
    task, embeddings = _sets()
    settings = ClassificationSettings(n_components=6)
    ev = evaluate(
        task, methods=[method], settings=settings, embeddings={"mean": embeddings}
    )
    for name, bunch in task.datasets.items():
        X, y = embeddings[name], bunch.target
        if name == "three":  # its own split: the last 30 rows are the test rows
            folds = [(np.arange(90), np.arange(90, 120))]
        else:
            folds = StratifiedKFold(5, shuffle=True, random_state=0).split(X, y)
        expected = _independent(transformer, X, y, folds)
        got = {
            r.values["estimator"]: {
                **r.values,
                "method": r.method,
                "pooling": r.pooling,
            }
            for r in ev.records
            if r.values["task"] == name
        }
        assert list(got) == ["logistic", "knn", "kmeans"]
        for kind, value in expected.items():
            np.testing.assert_allclose(got[kind]["score"], value, atol=1e-9)
        assert len(got["knn"]["fold_scores"]) == (1 if name == "three" else 5)
        assert got["logistic"]["method"] == method
        assert got["logistic"]["pooling"] == "mean"


def test_grid_searches_inside_each_training_fold():
    task, embeddings = _sets()
    settings = ClassificationSettings(cv=3)
    ev = evaluate(
        task, methods=["grid"], settings=settings, embeddings={"m": embeddings}
    )
    assert [(r.values["task"], r.values["estimator"]) for r in ev.records] == [
        ("bin", "logistic"),
        ("bin", "knn"),
        ("three", "logistic"),
        ("three", "knn"),
    ]
    rec = ev.records[0].values
    assert len(rec["chosen"]) == 5 and all("transformer" in c for c in rec["chosen"])
    # the first fold's choice, recomputed: the same search on the same rows
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline

    from sklearn_isotropy.evaluation._classification import prefer_passthrough
    from sklearn_isotropy.evaluation._methods import _classification_candidates

    X, y = embeddings["bin"], task.datasets["bin"].target
    train, test = next(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    pipe = Pipeline(
        [("transformer", "passthrough"), ("clf", LogisticRegression(max_iter=2000))]
    )
    search = GridSearchCV(
        pipe,
        _classification_candidates(X.shape[1], settings),
        cv=StratifiedKFold(3, shuffle=True, random_state=0),
        refit=prefer_passthrough,
    ).fit(X[train], y[train])
    assert rec["fold_scores"][0] == pytest.approx(100 * search.score(X[test], y[test]))
    candidates = _classification_candidates(X.shape[1], settings)[0]["transformer"]
    assert candidates[0] == "passthrough" and len(candidates) == 7


def test_grid_leaves_raw_only_beyond_one_standard_error():
    from sklearn_isotropy.evaluation._classification import prefer_passthrough

    def results(*rows):  # one row of fold scores per candidate, raw second
        folds = np.array(rows, dtype=float)
        out = {f"split{k}_test_score": folds[:, k] for k in range(folds.shape[1])}
        out["mean_test_score"] = folds.mean(axis=1)
        out["std_test_score"] = folds.std(axis=1)
        out["params"] = [{"transformer": "x"}, {"transformer": "passthrough"}]
        return out

    # best by 0.02; its fold scores' standard error is 0.0082 / sqrt(3)
    assert prefer_passthrough(results([0.83, 0.81, 0.82], [0.80, 0.80, 0.80])) == 0
    # best by 0.01, within one standard error (0.0245 / sqrt(3) = 0.0141)
    assert prefer_passthrough(results([0.84, 0.78, 0.81], [0.80, 0.80, 0.80])) == 1
    # raw best: raw
    assert prefer_passthrough(results([0.70, 0.71, 0.72], [0.80, 0.80, 0.80])) == 1


def test_senteval_protocol_has_ten_folds_and_chooses_c(monkeypatch):
    from sklearn_isotropy.evaluation import _classification

    assert _classification.SENTEVAL_C == (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    monkeypatch.setattr(_classification, "SENTEVAL_C", (0.25, 4.0))  # fast
    sets, embeddings = _sets(n=60)
    task = ClassificationTask({"bin": sets.datasets["bin"]})
    settings = ClassificationSettings(protocol="senteval")
    ev = evaluate(
        task, methods=["raw"], settings=settings, embeddings={"m": embeddings}
    )
    logistic = ev.records[0].values
    assert logistic["estimator"] == "logistic" and len(logistic["fold_scores"]) == 10
    from sklearn.model_selection import GridSearchCV

    X, y = embeddings["bin"], task.datasets["bin"].target
    folds = list(StratifiedKFold(10, shuffle=True, random_state=0).split(X, y))
    search = GridSearchCV(
        LogisticRegression(max_iter=2000),
        {"C": [0.25, 4.0]},
        cv=StratifiedKFold(10, shuffle=True, random_state=0),
    )
    expected = [  # the first two folds, recomputed
        100 * clone(search).fit(X[tr], y[tr]).score(X[te], y[te])
        for tr, te in folds[:2]
    ]
    np.testing.assert_allclose(logistic["fold_scores"][:2], expected)


def test_an_unknown_protocol_is_a_clear_error():
    sets, _ = _sets(n=20)
    task = ClassificationTask({"bin": sets.datasets["bin"]})
    with pytest.raises(ValueError, match=r"protocol='foo'.*'default', 'senteval'"):
        task.splits("bin", ClassificationSettings(protocol="foo"))
    assert len(task.splits("bin", ClassificationSettings())) == 5


def test_task_checks_its_data(tmp_path):
    with pytest.raises(ValueError, match="two classes or more"):
        ClassificationTask({"x": Bunch(data=["a", "b"], target=np.zeros(2))})
    with pytest.raises(ValueError, match="one label per text"):
        ClassificationTask({"x": Bunch(data=["a", "b"], target=np.arange(3))})
    with pytest.raises(EvaluationError, match="is not a directory"):
        ClassificationTask.load(tmp_path / "nope")
    (tmp_path / "MR").mkdir()
    (tmp_path / "MR" / "rt-polarity.pos").write_text("fine\n")
    settings = ClassificationSettings(tasks=("MR",))
    with pytest.raises(EvaluationError, match=r"cannot read MR: .*rt-polarity\.neg"):
        ClassificationTask.load(tmp_path, settings)


def test_a_one_class_set_is_an_evaluation_error_that_names_it():
    # issue 50, item 7: a plain ValueError escaped the command line's handler
    bunch = Bunch(data=["a", "b", "c"], target=np.zeros(3, int), target_names=["HUM"])
    with pytest.raises(EvaluationError) as caught:
        ClassificationTask({"TREC": bunch}, data_name="senteval/")
    message = str(caught.value)
    assert "'TREC' (data: senteval/) has one class, 'HUM', in all 3 texts" in message
    assert "two classes or more" in message and "leave TREC out" in message
    with pytest.raises(EvaluationError, match="'x' .* has no texts"):
        ClassificationTask({"x": Bunch(data=[], target=np.zeros(0))})


def test_score_checks_the_input_embeddings_before_the_transformer():
    task, embeddings = _sets(n=40)
    embeddings["three"][7, 0] = np.inf
    with pytest.raises(ValueError) as caught:
        # the shared options are converted into the task's own
        task.score("passthrough", embeddings, EvaluationSettings())
    assert "of 'three' hold NaN or inf in row(s) 7 (of 40" in str(caught.value)
    assert "NoneType" not in str(caught.value)


def test_the_grids_natsv_candidate_is_capped_as_the_natsv_method_is():
    # issue 50, item 13: natsv_components=40 on 32-d embeddings failed the grid
    rng = np.random.default_rng(5)
    # 100 training rows: each inner fold fits on 50, more than the 32 features
    y = np.arange(120) % 2
    X = rng.normal(size=(120, 32)) + 2.0 * y[:, None]
    data = Bunch(data=[f"t{i}" for i in range(120)], target=y, test_size=20)
    task = ClassificationTask({"one split": data})  # one fold: fast
    settings = ClassificationSettings(
        postprocessing=MethodSettings(natsv_components=40), cv=2
    )
    ev = evaluate(
        task,
        methods=["natsv", "grid"],
        settings=settings,
        embeddings={"m": {"one split": X}},
    )
    assert ev.failures == []
    assert ev.record("natsv", "m").params == {"n_components": 31}
    from sklearn_isotropy.evaluation._methods import _classification_candidates
    from sklearn_isotropy.linear import NATSVTransformer

    candidates = _classification_candidates(32, settings)[0]["transformer"]
    natsv = [c for c in candidates if isinstance(c, NATSVTransformer)]
    assert [c.n_components for c in natsv] == [31]
