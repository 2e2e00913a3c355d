"""The STS task on its own: splits, texts, embedding, scoring."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.stats import spearmanr
from sklearn.preprocessing import StandardScaler
from sklearn.utils import Bunch

from sklearn_isotropy import WhiteningTransformer
from sklearn_isotropy.evaluation import STSSettings, STSTask
from sklearn_isotropy.evaluation._sts import required_splits
from sklearn_isotropy.exceptions import EvaluationError
from tests._data import sts_pairs


def _cosines(A, B):
    return np.sum(A * B, 1) / np.linalg.norm(A, axis=1) / np.linalg.norm(B, axis=1)


@pytest.mark.parametrize(
    ("methods", "fit_on", "encoder", "expected"),
    [
        (["raw"], "target", "transformer", ["test"]),
        (["raw", "whitening"], "train", "transformer", ["test", "train"]),
        (["raw"], "target", "static", ["test", "train"]),
        (["grid"], "target", "transformer", ["test", "dev"]),
        (["grid", "raw"], "train", "static", ["test", "train", "dev"]),
        (["not-a-method"], "target", "transformer", ["test"]),
    ],
)
def test_required_splits(methods, fit_on, encoder, expected):
    assert required_splits(methods, fit_on, encoder=encoder) == expected


def _text_splits():
    return {
        "test": Bunch(
            pairs=np.array([["a b", "c d"], ["e f", "a b"]]), scores=np.array([1.0, 2])
        ),
        "train": Bunch(
            pairs=np.array([["x", "y"], ["y", "z"], ["x", "w"]]),
            scores=np.array([0.0, 1, 2]),
        ),
    }


def test_a_missing_split_is_an_error_that_names_it():
    splits = _text_splits()
    with pytest.raises(EvaluationError, match=r"\['train'\].*\['test'\]"):
        STSTask({"test": splits["test"]}, fit_on="train")
    with pytest.raises(EvaluationError, match=r"\['test'\]"):
        STSTask({"train": splits["train"]})
    with pytest.raises(ValueError, match="fit_on"):
        STSTask(splits, fit_on="dev")


def test_encoder_texts_are_the_train_sentences_once_in_order():
    task = STSTask(_text_splits())
    assert task.encoder_texts() == ["x", "y", "z", "w"]
    with pytest.raises(EvaluationError, match="no train split"):
        STSTask({"test": _text_splits()["test"]}).encoder_texts()


def test_embed_encodes_each_text_once_and_keeps_the_pairs():
    calls = []

    def encode(texts):  # a text's vector: its length and its first letter
        calls.append(list(texts))
        return np.array([[len(t), ord(t[0])] for t in texts], dtype=float)

    task = STSTask(_text_splits())
    embeddings = task.embed(encode)
    assert len(calls) == 1 and sorted(calls[0]) == sorted(set(calls[0]))
    assert set(calls[0]) == {"a b", "c d", "e f", "x", "y", "z", "w"}
    for split, bunch in task.splits.items():
        E = embeddings[split]
        assert E.shape == (len(bunch.pairs), 2, 2)
        for (s, t), (u, v) in zip(bunch.pairs, E):
            assert_allclose(u, [len(s), ord(s[0])])
            assert_allclose(v, [len(t), ord(t[0])])


@pytest.mark.parametrize("fit_on", ["target", "train"])
def test_score_is_spearman_of_cosines_after_the_transform(fit_on):
    """Spearman x100 of the cosines, against scipy.

    The transform is fitted independently on the rows of the protocol's
    split (both columns of its pairs).
    """
    rng = np.random.default_rng(0)
    test, test_bunch = sts_pairs(rng, 60, 5)
    train, train_bunch = sts_pairs(rng, 80, 5)
    test_bunch.pairs = np.zeros((60, 2))  # the task reads only the scores
    train_bunch.pairs = np.zeros((80, 2))
    task = STSTask({"test": test_bunch, "train": train_bunch}, fit_on=fit_on)
    embeddings = {"test": test, "train": train}
    settings = STSSettings(seed=0)
    [record], Z = task.score(StandardScaler(), embeddings, settings)

    fit_rows = test if fit_on == "target" else train
    scaler = StandardScaler().fit(np.concatenate([fit_rows[:, 0], fit_rows[:, 1]]))
    A, B = scaler.transform(test[:, 0]), scaler.transform(test[:, 1])
    expected = spearmanr(_cosines(A, B), test_bunch.scores).statistic
    assert record["spearman_x100"] == pytest.approx(100 * expected, abs=1e-9)
    assert record["dimensions"] == 5
    assert record["fit_seconds"] >= 0 and record["transform_seconds"] >= 0
    assert "diagnostics" in record
    # Z: the transformed test sentences, each once (in the order of distinct
    # rows)
    expected_rows = np.concatenate([A, B])
    assert Z.shape == expected_rows.shape
    by_first = np.argsort(Z[:, 0])
    assert_allclose(Z[by_first], expected_rows[np.argsort(expected_rows[:, 0])])


def test_n_components_only_for_methods_that_keep_a_dimension():
    task = STSTask(_text_splits())
    settings = STSSettings(n_components=3)

    class Method:
        uses_k = True

    assert task.n_components_for(Method, 5, settings) == [3]
    assert task.n_components_for(Method, 3, settings) == [None]  # not smaller
    Method.uses_k = False
    assert task.n_components_for(Method, 5, settings) == [None]


def test_dev_pairs_need_a_dev_split():
    splits = _text_splits()
    splits["dev"] = Bunch(pairs=np.array([["p", "q"]]), scores=np.array([4.0]))
    task = STSTask(splits)
    emb = np.ones((1, 2, 3))
    X, y = task.dev_pairs({"dev": emb})
    assert X is emb and list(y) == [4.0]
    with pytest.raises(EvaluationError, match="no.*dev|dev split"):
        task.dev_pairs({"test": emb})


def test_load_reads_the_splits_the_methods_need(tmp_path):
    """From a folder of STS-B-format files, only the splits needed.

    Test only under "target" for methods without a dev selection; train and
    dev when asked.
    """
    header = "genre\tfile\tyear\tid\tscore\tsentence1\tsentence2\n"
    for split in ("train", "dev", "test"):
        rows = [
            f"g\tf\t2012\t{i}\t{i % 5}.0\t{split} a {i}\t{split} b {i}\n"
            for i in range(6)
        ]
        (tmp_path / f"sts-{split}.tsv").write_text(header + "".join(rows))
    task = STSTask.load(tmp_path, methods=["raw"])
    assert list(task.splits) == ["test"]
    assert task.splits["test"].pairs[0].tolist() == ["test a 0", "test b 0"]
    task = STSTask.load(tmp_path, fit_on="train", methods=["grid"])
    assert list(task.splits) == ["test", "train", "dev"]
    assert_allclose(task.splits["dev"].scores, [0, 1, 2, 3, 4, 0])
    assert task.data_name == str(tmp_path)


def test_whitening_scores_above_raw_on_anisotropic_pairs():
    """The task's number moves with the transform (a check of the wiring).

    The pairs' scores follow the cosine of the centred, whitened rows.
    """
    rng = np.random.default_rng(3)
    d, n = 6, 200
    base = rng.standard_normal((n, d))
    other = base + 0.8 * rng.standard_normal((n, d))
    offset = np.full(d, 10.0)
    scores = _cosines(base, other)
    emb = np.stack([base + offset, other + offset], axis=1)
    task = STSTask({"test": Bunch(pairs=np.zeros((n, 2)), scores=scores)})
    settings = STSSettings(seed=0)
    raw = task.score(
        StandardScaler(with_std=False, with_mean=False), {"test": emb}, settings
    )[0][0]["spearman_x100"]
    white = task.score(WhiteningTransformer(), {"test": emb}, settings)[0][0][
        "spearman_x100"
    ]
    assert white > raw + 20
