"""The evaluation loop on precomputed embeddings: runs, records, warnings."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from sklearn_isotropy.evaluation import STSTask, evaluate
from sklearn_isotropy.evaluation._report import to_json
from sklearn_isotropy.exceptions import EvaluationError, EvaluationWarning
from tests._data import sts_pairs


def test_model_name_is_deprecated_for_model_description():
    emb, bunch = sts_pairs(np.random.default_rng(0), 10, 4)
    task, embeddings = STSTask({"test": bunch}), {"mean": {"test": emb}}
    ev = evaluate(task, methods=[], embeddings=embeddings)
    payload = json.loads(to_json(ev))
    assert ev.model_description == payload["model_description"]
    assert ev.model_id == payload["model"]
    with pytest.warns(FutureWarning, match="use model_description"):
        assert ev.model_name == ev.model_description


def test_each_run_logs_the_score_the_task_names():
    rng = np.random.default_rng(1)
    emb, bunch = sts_pairs(rng, 40, 6)
    lines = []
    ev = evaluate(
        STSTask({"test": bunch}),
        methods=["raw", "whitening"],
        embeddings={"mean": {"test": emb}},
        log=lines.append,
    )
    rho = [r.values["spearman_x100"] for r in ev.records]
    assert lines == [
        f"[mean] raw: {rho[0]:.2f}",
        f"[mean] whitening-6: {rho[1]:.2f}",
    ]


def test_run_warnings_are_raised_once_with_their_origin():
    rng = np.random.default_rng(0)
    # 6 test pairs of 20 dimensions: 12 rows, whitening is rank deficient
    emb, bunch = sts_pairs(rng, 6, 20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ev = evaluate(
            STSTask({"test": bunch}),
            methods=["raw", "whitening"],
            embeddings={"mean": {"test": emb}, "cls": {"test": emb}},
        )
    ours = [w for w in caught if issubclass(w.category, EvaluationWarning)]
    # once per pooling, and each names where it came from
    assert len(ours) == 2
    assert str(ours[0].message).startswith(
        "[mean] whitening: RankDeficiencyWarning: The covariance has numerical rank"
    )
    assert str(ours[1].message).startswith("[cls] whitening: RankDeficiencyWarning")
    assert ours[0].filename == __file__  # the caller's line
    record = ev.record("whitening", "mean")
    assert len(record.warnings) == 1 and "numerical rank" in record.warnings[0]
    assert ev.record("raw", "mean").warnings == []


def test_custom_transformers_keep_their_own_diagnostics():
    from sklearn.preprocessing import Normalizer, StandardScaler

    rng = np.random.default_rng(3)
    emb, bunch = sts_pairs(rng, 40, 6)
    ev = evaluate(
        STSTask({"test": bunch}),
        methods=["raw"],
        embeddings={"mean": {"test": emb}},
        transformers={"scaler": StandardScaler(), "l2": Normalizer()},
    )
    payload = json.loads(to_json(ev))
    assert set(payload["diagnostics"]["mean"]) == {"raw", "scaler", "l2"}
    # each run's report is its own: the scaler's output is not the l2's
    scaler, l2 = (payload["diagnostics"]["mean"][k] for k in ("scaler", "l2"))
    assert scaler["mean_pair_cosine"] != l2["mean_pair_cosine"]


def test_a_warning_several_methods_raise_is_shown_once_per_pooling():
    # the same property of the data (here too few rows) met by every method
    # is one console line, not one per method; each record still keeps it
    emb, bunch = sts_pairs(np.random.default_rng(0), 6, 20)
    task, embeddings = STSTask({"test": bunch}), {"mean": {"test": emb}}
    with pytest.warns(EvaluationWarning) as caught:
        ev = evaluate(task, methods=["pca", "whitening"], embeddings=embeddings)
    shown = [str(w.message) for w in caught if w.category is EvaluationWarning]
    assert len(shown) == 1, shown
    assert shown[0].startswith("[mean] pca: RankDeficiencyWarning: The covariance")
    kept = [ev.record(m, "mean").warnings for m in ("pca", "whitening")]
    assert kept[0] == kept[1] and "numerical rank" in kept[0][0]


def test_retrieval_still_refuses_grid():
    from sklearn_isotropy.evaluation import RetrievalTask

    task = RetrievalTask(["q"], ["d", "e"], np.array([[1.0, 0.0]]))
    with pytest.raises(EvaluationError, match="no labels to select on"):
        evaluate(task, methods=["grid"], embeddings={"m": {}})


@pytest.mark.parametrize("kind", ["sts", "classification"])
def test_nan_embeddings_are_named_by_set_and_row_not_blamed_on_a_method(kind):
    # issue 50, item 9: "NoneType.transform returned NaN or inf" blamed raw
    from sklearn.utils import Bunch

    from sklearn_isotropy.evaluation import ClassificationTask

    rng = np.random.default_rng(2)
    if kind == "sts":
        emb, bunch = sts_pairs(rng, 30, 6)
        clean = emb.copy()
        emb[4, 1, 0] = np.inf
        task, role, bundle = STSTask({"test": bunch}), "test", {"test": emb}
    else:
        y = np.repeat([0, 1], 20)
        emb = rng.normal(size=(40, 6)) + 3.0 * y[:, None]
        clean = emb.copy()
        emb[4, 2] = np.nan
        data = Bunch(data=[f"s{i}" for i in range(40)], target=y, test_size=10)
        task, role, bundle = ClassificationTask({"toy": data}), "toy", {"toy": emb}
    lines = []
    ev = evaluate(
        task,
        methods=["raw", "center", "whitening"],
        embeddings={"mean": bundle, "cls": {role: clean}},
        log=lines.append,
    )
    failed = ev.results("mean")
    assert [r.method for r in failed] == ["raw", "center", "whitening"]
    for record in failed:
        assert record.error.startswith(
            f"the input embeddings of {role!r} hold NaN or inf in row(s) 4 (of "
        ), record.error
        assert "NoneType" not in record.error
    # said once, before any method ran; the other pooling still runs
    assert sum("input embeddings" in line for line in lines) == 1
    assert all(r.error is None for r in ev.results("cls"))


def test_check_finite_names_the_first_rows_and_counts_the_rest():
    from sklearn_isotropy.evaluation._task import check_finite

    E = np.ones((20, 3))
    assert check_finite({"a": E}) is None
    E[[1, 3, 5, 7, 9, 11, 13], 0] = np.nan
    reason = check_finite({"a": np.ones((4, 3)), "b": E})
    assert "of 'b' hold NaN or inf in row(s) 1, 3, 5, 7, 9 and 2 more (of 20" in reason
