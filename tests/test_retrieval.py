"""Retrieval: metrics, tasks, exact search, compression study, CLI, scorer.

The metrics, the tasks (STS pairs, BEIR folders), exact search, the compression
study, the command line and the GridSearchCV scorer.

The metrics are checked against hand-computed values and against a brute
force that averages over every order of tied documents; the search against
full score matrices computed here with numpy; the command line against a
recomputation from the encoder's own output.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from dataclasses import replace

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import sparse
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.decomposition import PCA
from sklearn.metrics import ndcg_score
from sklearn.model_selection import GridSearchCV, KFold

from sklearn_isotropy import WhiteningTransformer
from sklearn_isotropy.cli import main
from sklearn_isotropy.evaluation import (
    METHODS,
    EvaluationSettings,
    RetrievalTask,
    evaluate,
)
from sklearn_isotropy.evaluation._quantization import (
    QUANTIZATIONS,
    register_quantization,
)
from sklearn_isotropy.exceptions import (
    EvaluationError,
    EvaluationWarning,
    NoRelevantDocumentWarning,
)
from sklearn_isotropy.metrics import (
    PairedCosineSimilarity,
    make_retrieval_scorer,
    mrr_score,
    ndcg_at_k_score,
    pairs_to_qrels,
    recall_at_k_score,
    retrieval_scores,
)

ALL = ("mrr@10", "recall@1", "recall@10", "ndcg@10")


def score_retrieval(
    queries, docs, task, *, fit_emb=None, quantizations=("float32",), settings=None
):
    """The records of ``task.score`` for the raw embeddings."""
    settings = replace(settings or EvaluationSettings(), quantizations=quantizations)
    embeddings = {"queries": queries, "corpus": docs}
    if fit_emb is not None:
        embeddings["fit"] = fit_emb
    return task.score("passthrough", embeddings, settings)[0]


def run_study(queries, docs, task, *, fit_emb, settings, **kwargs):
    """The records of a retrieval evaluation, as dicts (their JSON form)."""
    embeddings = {"queries": queries, "corpus": docs, "fit": fit_emb}
    ev = evaluate(task, settings=settings, embeddings={"mean": embeddings}, **kwargs)
    return [r.to_dict() for r in ev.records]


def _has_faiss():
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


BACKENDS = [
    "numpy",
    pytest.param(
        "faiss",
        marks=pytest.mark.skipif(not _has_faiss(), reason="faiss is not installed"),
    ),
]


# ------------------------------------------------------------ the metrics
def test_metrics_without_ties_by_hand():
    y_true = [[0, 1, 0, 0], [1, 0, 1, 0]]
    y_score = [[0.9, 0.8, 0.7, 0.1], [0.2, 0.9, 0.3, 0.5]]
    # query 0: relevant at rank 2; query 1: relevant at ranks 4 and 3
    got = retrieval_scores(y_true, y_score, metrics=[*ALL, "recall@3", "ndcg@3"])
    assert got["mrr@10"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert got["recall@1"] == 0.0
    assert got["recall@10"] == 1.0
    assert got["recall@3"] == pytest.approx((1 + 0.5) / 2)
    each = retrieval_scores(y_true, y_score, average=False)
    assert_allclose(each["mrr@10"], [1 / 2, 1 / 3])
    ndcg0 = (1 / math.log2(3)) / 1.0
    ndcg1 = (1 / math.log2(4) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert got["ndcg@10"] == pytest.approx((ndcg0 + ndcg1) / 2)
    assert got["ndcg@3"] == pytest.approx(
        (ndcg0 + (1 / math.log2(4)) / (1 + 1 / math.log2(3))) / 2
    )


def test_ties_are_averaged_by_hand():
    # the relevant document ties with two others at the top
    y_true, y_score = [[1, 0, 0, 0]], [[0.5, 0.5, 0.5, 0.1]]
    assert mrr_score(y_true, y_score) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert recall_at_k_score(y_true, y_score, k=1) == pytest.approx(1 / 3)
    assert recall_at_k_score(y_true, y_score, k=2) == pytest.approx(2 / 3)
    assert ndcg_at_k_score(y_true, y_score) == pytest.approx(
        (1 + 1 / math.log2(3) + 1 / math.log2(4)) / 3
    )
    # a tie across the cut-off: ranks 2 or 3 with k = 2
    y_true, y_score = [[0, 1, 0]], [[0.9, 0.4, 0.4]]
    assert recall_at_k_score(y_true, y_score, k=2) == pytest.approx(0.5)
    assert mrr_score(y_true, y_score, k=2) == pytest.approx(0.5 * 1 / 2)
    # two relevant documents among three tied: the first is at place 1 with
    # probability 2/3, at place 2 with 1/3
    y_true, y_score = [[1, 1, 0]], [[0.3, 0.3, 0.3]]
    assert mrr_score(y_true, y_score) == pytest.approx(2 / 3 + 1 / 3 * 1 / 2)


def test_duplicates_in_the_corpus_tie():
    # document 1 is a copy of the relevant document 0: equal scores
    y_true, y_score = [[1, 0, 0]], [[0.8, 0.8, 0.2]]
    assert mrr_score(y_true, y_score) == pytest.approx(0.75)
    assert recall_at_k_score(y_true, y_score, k=1) == pytest.approx(0.5)
    # the order of the corpus does not matter
    assert mrr_score([[0, 1, 0]], [[0.8, 0.8, 0.2]]) == pytest.approx(0.75)


def test_minus_inf_ranks_last():
    got = retrieval_scores([[0, 1, 0]], [[-np.inf, 0.1, 0.5]])
    assert got["mrr@10"] == pytest.approx(0.5)


def test_query_without_relevant_document():
    y_true = [[0, 1, 0], [0, 0, 0]]
    y_score = [[0.1, 0.9, 0.5], [0.3, 0.2, 0.1]]
    with pytest.warns(NoRelevantDocumentWarning, match="1 of 2 queries"):
        skipped = retrieval_scores(y_true, y_score)
    assert skipped["mrr@10"] == 1.0 and skipped["ndcg@10"] == 1.0
    with pytest.warns(NoRelevantDocumentWarning):
        each = retrieval_scores(y_true, y_score, average=False)
    assert each["mrr@10"].tolist() == [1.0]  # the skipped query is left out
    zero = retrieval_scores(y_true, y_score, no_relevant="zero")
    each = retrieval_scores(y_true, y_score, no_relevant="zero", average=False)
    assert each["recall@10"].tolist() == [1.0, 0.0]
    assert zero["mrr@10"] == 0.5 and zero["recall@10"] == 0.5
    # "zero" is what sklearn's ndcg_score does with such a row
    assert zero["ndcg@10"] == pytest.approx(ndcg_score(y_true, y_score, k=10))
    with pytest.raises(ValueError, match="no relevant document"):
        retrieval_scores(y_true, y_score, no_relevant="raise")
    with pytest.raises(ValueError, match="none of the 1 queries"):
        retrieval_scores([[0, 0]], [[0.1, 0.2]])


def _brute_force(y_true, y_score, k):
    """Mean of each metric over every order of the tied documents."""
    out = {"mrr": [], "recall": [], "ndcg": []}
    for grades, scores in zip(y_true, y_score):
        n = len(scores)
        orders = [
            p
            for p in itertools.permutations(range(n))
            if all(scores[p[i]] >= scores[p[i + 1]] for i in range(n - 1))
        ]
        ideal = sum(
            g / math.log2(i + 2) for i, g in enumerate(sorted(grades, reverse=True)[:k])
        )
        n_rel = sum(g > 0 for g in grades)
        mrr, recall, ndcg = [], [], []
        for p in orders:
            ranks = [i for i, d in enumerate(p) if grades[d] > 0]
            mrr.append(1 / (ranks[0] + 1) if ranks[0] < k else 0.0)
            recall.append(sum(r < k for r in ranks) / n_rel)
            ndcg.append(sum(grades[d] / math.log2(i + 2) for i, d in enumerate(p[:k])))
            ndcg[-1] /= ideal
        out["mrr"].append(np.mean(mrr))
        out["recall"].append(np.mean(recall))
        out["ndcg"].append(np.mean(ndcg))
    return {key: float(np.mean(v)) for key, v in out.items()}


@pytest.mark.parametrize("seed", range(6))
def test_metrics_equal_a_brute_force_over_tie_orders(seed):
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, 3, size=(4, 7)) * (rng.random((4, 7)) < 0.4)
    y_true[:, 0] += y_true.sum(axis=1) == 0  # every query has a relevant one
    y_score = rng.integers(0, 3, size=(4, 7)).astype(float)  # many ties
    for k in (1, 2, 3, 5):
        got = retrieval_scores(
            y_true, y_score, metrics=[f"mrr@{k}", f"recall@{k}", f"ndcg@{k}"]
        )
        expected = _brute_force(y_true, y_score, k)
        assert got[f"mrr@{k}"] == pytest.approx(expected["mrr"], abs=1e-12)
        assert got[f"recall@{k}"] == pytest.approx(expected["recall"], abs=1e-12)
        assert got[f"ndcg@{k}"] == pytest.approx(expected["ndcg"], abs=1e-12)
        assert got[f"ndcg@{k}"] == pytest.approx(
            ndcg_score(y_true, y_score, k=k), abs=1e-12
        )


def test_sparse_judgements_equal_dense():
    rng = np.random.default_rng(3)
    y_true = (rng.random((20, 50)) < 0.05) * rng.integers(1, 3, size=(20, 50))
    y_true[:, 7] = 1
    y_score = rng.normal(size=(20, 50))
    dense = retrieval_scores(y_true, y_score)
    assert retrieval_scores(sparse.csr_matrix(y_true), y_score) == dense


@pytest.mark.parametrize(
    ("y_true", "y_score", "match"),
    [
        ([[1, 0]], [[np.nan, 0.1]], "NaN"),
        ([[1, 0]], [[np.inf, 0.1]], r"\+inf"),
        ([[-1, 1]], [[0.2, 0.1]], "negative"),
        ([[1, 0]], [[0.2, 0.1, 0.0]], "shape"),
    ],
)
def test_bad_metric_input(y_true, y_score, match):
    with pytest.raises(ValueError, match=match):
        retrieval_scores(y_true, y_score)


def test_unknown_metric_name():
    with pytest.raises(ValueError, match="unknown retrieval metric 'map@10'"):
        retrieval_scores([[1]], [[0.1]], metrics=["map@10"])
    with pytest.raises(ValueError, match="mrr@K"):
        make_retrieval_scorer("mrr@0")


# ---------------------------------------------------------------- tasks
def test_pairs_to_qrels():
    pairs = [
        ["a", "b"],  # relevant
        ["c", "d"],  # not relevant
        ["a", "e"],  # relevant: a second answer for "a"
        ["f", "f"],  # the same sentence twice: no question
        ["b", "a"],  # exactly at the threshold
    ]
    q = pairs_to_qrels(pairs, [4.5, 3.9, 5.0, 5.0, 4.0], min_score=4.0)
    assert q.corpus == ["a", "b", "c", "d", "e", "f"]
    assert q.queries.tolist() == [0, 1]
    assert q.relevance.toarray().tolist() == [
        [0, 1, 0, 0, 1, 0],
        [1, 0, 0, 0, 0, 0],
    ]
    assert q.n_pairs_relevant == 4 and q.n_pairs_identical == 1
    both = pairs_to_qrels(pairs[:1], [4.5], symmetric=True)
    assert both.queries.tolist() == [0, 1]
    assert both.relevance.toarray().tolist() == [[0, 1], [1, 0]]


def test_task_from_sts_pairs_excludes_the_query_itself():
    pairs = [["s1", "s2"], ["s3", "s4"], ["s1", "s5"]]
    task = RetrievalTask.from_pairs(
        pairs, [4.2, 1.0, 0.5], extra_corpus=["s6", "s2", "s6"]
    )
    assert task.queries == ["s1"]
    assert task.corpus == ["s1", "s2", "s3", "s4", "s5", "s6"]
    assert task.relevance.toarray().tolist() == [[0, 1, 0, 0, 0, 0]]
    assert task.exclude.toarray().tolist() == [[True] + [False] * 5]
    assert task.notes["distractors"] == 1 and task.notes["pairs_relevant"] == 1
    # the query's own sentence would be its perfect answer; it is never returned
    emb = np.eye(6)
    emb[1] = [0.5, 0.5, 0, 0, 0, 0]  # s2 is close to s1
    [record] = score_retrieval(emb[[0]], emb, task)
    assert record["mrr@10"] == 1.0
    with pytest.raises(ValueError, match="no sentence pair is rated >= min_score"):
        RetrievalTask.from_pairs(pairs, [1.0, 2.0, 3.0])


def test_task_validation():
    with pytest.raises(ValueError, match="no relevant document"):
        RetrievalTask(["q"], ["d1", "d2"], np.zeros((1, 2)))
    with pytest.raises(ValueError, match="shape"):
        RetrievalTask(["q"], ["d1", "d2"], np.ones((1, 3)))
    with pytest.raises(ValueError, match="both"):
        RetrievalTask(["q"], ["d1"], np.ones((1, 1)), exclude=np.ones((1, 1)))


def _write_beir(folder, *, qrels=None, corpus=None, queries=None):
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    corpus = corpus or [
        {"_id": "d1", "title": "Cats", "text": "a cat sat on the mat"},
        {"_id": "d2", "title": "", "text": "a dog ran fast"},
        {"_id": "q2", "text": "a man is walking"},  # shares q2's id
        {"_id": 4, "text": "the red car"},
    ]
    queries = queries or [
        {"_id": "q1", "text": "where did the cat sit"},
        {"_id": "q2", "text": "a man walks"},
        {"_id": "q3", "text": "fast animals"},
        {"_id": "q4", "text": "unused query"},
    ]
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(d) + "\n" for d in corpus)
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(q) + "\n" for q in queries)
    qrels = qrels or [
        ("q1", "d1", 2),
        ("q1", "4", 0),
        ("q2", "q2", 1),  # judged relevant: not excluded
        ("q2", "d2", 1),
        ("q3", "d2", 0),  # q3 has no relevant document
    ]
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in qrels]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return folder


def test_beir_folder(tmp_path):
    task = RetrievalTask.from_beir(_write_beir(tmp_path / "beir"))
    assert task.corpus == [
        "Cats a cat sat on the mat",
        "a dog ran fast",
        "a man is walking",
        "the red car",
    ]
    assert task.corpus_ids == ["d1", "d2", "q2", "4"]
    assert task.query_ids == ["q1", "q2"] and task.queries[1] == "a man walks"
    assert task.relevance.toarray().tolist() == [[2, 0, 0, 0], [0, 1, 1, 0]]
    assert task.exclude.nnz == 0
    assert task.notes["queries_without_relevant_left_out"] == 1
    # a document with the query's id that is not judged relevant is excluded
    other = _write_beir(tmp_path / "beir2", qrels=[("q1", "d1", 1), ("q2", "d2", 1)])
    task = RetrievalTask.from_beir(other)
    assert task.exclude.toarray().tolist() == [
        [False] * 4,
        [False, False, True, False],
    ]
    loaded = RetrievalTask.load(other)
    assert loaded.fit_on == "corpus" and loaded.fit_texts == loaded.corpus
    with pytest.raises(EvaluationError, match="no train sentences"):
        RetrievalTask.load(other, fit_on="train")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"qrels": [("q1", "nope", 1)]}, r"test.tsv:2: corpus-id 'nope'"),
        ({"qrels": [("q9", "d1", 1)]}, r"test.tsv:2: query-id 'q9'"),
        ({"qrels": [("q1", "d1", -1)]}, r"test.tsv:2: score '-1'"),
        ({"qrels": [("q1", "d1", 1), ("q1", "d1", 2)]}, "judged 1.0 before"),
        ({"qrels": [("q1", "d1", 0)]}, "no judgement with a score > 0"),
        (
            {"corpus": [{"_id": "d1", "text": "x"}, {"_id": "d1", "text": "y"}]},
            r"corpus.jsonl:2: duplicate _id 'd1'",
        ),
        ({"queries": [{"id": "q1", "text": "x"}]}, r"queries.jsonl:1: expected"),
        # text that is not a string is not made into one
        (
            {"corpus": [{"_id": "d1", "text": None}]},
            r"corpus.jsonl:1: 'text' must be a string; got null \(NoneType\)",
        ),
        (
            {"queries": [{"_id": "q1", "text": "x"}, {"_id": "q2", "text": 0}]},
            r"queries.jsonl:2: 'text' must be a string; got 0 \(int\)",
        ),
        (
            {"corpus": [{"_id": "d1", "text": ["a", "b"]}]},
            r"corpus.jsonl:1: 'text' must be a string; got \[\"a\", \"b\"\]",
        ),
        (
            {"corpus": [{"_id": "d1", "title": 3, "text": "x"}]},
            r"corpus.jsonl:1: 'title' must be a string; got 3 .* or leave the field",
        ),
    ],
)
def test_bad_beir_folder(tmp_path, kwargs, match):
    folder = _write_beir(tmp_path / "beir", **kwargs)
    with pytest.raises(EvaluationError, match=match):
        RetrievalTask.from_beir(folder)


def test_beir_folder_in_another_encoding_says_where_and_what_to_do(tmp_path):
    folder = _write_beir(tmp_path / "beir")
    lines = (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    lines[1] = json.dumps({"_id": "d2", "text": "un café crème"}, ensure_ascii=False)
    (folder / "corpus.jsonl").write_bytes("\n".join(lines).encode("cp1252"))
    with pytest.raises(EvaluationError) as exc:
        RetrievalTask.from_beir(folder)
    message = str(exc.value)
    assert "corpus.jsonl:2: byte 0xe9 at column" in message
    assert "load_beir reads UTF-8 text" in message
    assert "iconv -f cp1252 -t utf-8 corpus.jsonl" in message
    assert not isinstance(exc.value.__cause__, UnicodeDecodeError)


def test_beir_files_with_a_byte_order_mark_are_read(tmp_path):
    plain = RetrievalTask.from_beir(_write_beir(tmp_path / "plain"))
    folder = _write_beir(tmp_path / "bom")
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        path = folder / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    task = RetrievalTask.from_beir(folder)
    assert task.corpus == plain.corpus and task.queries == plain.queries
    assert task.corpus_ids == plain.corpus_ids
    assert (task.relevance != plain.relevance).nnz == 0


def test_beir_folder_missing_file(tmp_path):
    folder = _write_beir(tmp_path / "beir")
    (folder / "qrels" / "test.tsv").unlink()
    with pytest.raises(EvaluationError, match=r"qrels/test.tsv not found"):
        RetrievalTask.from_beir(folder)


def test_sts_task_and_fitting_sentences(tiny_sts_dir):
    task = RetrievalTask.load(tiny_sts_dir, EvaluationSettings(min_score=3.0))
    fit_texts, fit_on = task.fit_texts, task.fit_on
    assert fit_on == "train"
    import csv

    rows = {
        s: list(csv.reader(open(tiny_sts_dir / f"{s}.csv", encoding="utf-8")))
        for s in ("train", "dev", "test")
    }
    train = {t for r in rows["train"] for t in r[:2]}
    every = {t for rs in rows.values() for r in rs for t in r[:2]}
    assert set(fit_texts) == train and len(fit_texts) == len(train)
    assert set(task.corpus) == every and len(task.corpus) == len(every)
    expected_queries = {
        r[0] for r in rows["test"] if float(r[2]) >= 3.0 and r[0] != r[1]
    }
    assert set(task.queries) == expected_queries
    task = RetrievalTask.load(tiny_sts_dir, fit_on="corpus")
    assert task.fit_on == "corpus" and len(task.fit_texts) == len(every)


def test_sts_task_refuses_a_split_it_cannot_read(tiny_sts_dir, tmp_path):
    # a missing split is left out; a damaged one is an error naming the file,
    # never a smaller corpus without a word
    import shutil

    data = tmp_path / "sts"
    shutil.copytree(tiny_sts_dir, data)
    with open(data / "dev.csv", "ab") as fh:
        fh.write("un caf\xe9,cr\xe8me,3.0\n".encode("cp1252"))
    with pytest.raises(EvaluationError, match=r"dev.csv:\d+: byte 0xe9"):
        RetrievalTask.load(data, EvaluationSettings(min_score=3.0))
    (data / "dev.csv").unlink()
    task = RetrievalTask.load(data, EvaluationSettings(min_score=3.0))
    assert task.notes["corpus_splits"] == ["test", "train"]


# -------------------------------------------------------- exact search
def _dense_reference(q_codes, c_codes, metric):
    if metric == "hamming":
        bits_q = np.unpackbits(q_codes, axis=1).astype(np.int64)
        bits_c = np.unpackbits(c_codes, axis=1).astype(np.int64)
        return (2 * bits_q - 1) @ (2 * bits_c - 1).T  # = n_bits - 2 hamming
    return q_codes.astype(np.int64 if q_codes.dtype.kind == "i" else np.float64) @ (
        c_codes.astype(np.int64 if c_codes.dtype.kind == "i" else np.float64).T
    )


@pytest.fixture(scope="module")
def cone_task():
    """Anisotropic embeddings, duplicated documents, a query's own sentence."""
    rng = np.random.default_rng(0)
    d, n, n_q = 24, 400, 60
    scale = np.geomspace(4, 0.2, d)
    docs = rng.normal(size=(n, d)) * scale + 2.0
    docs[n - 20 :] = docs[:20]  # 20 exact duplicates
    own = rng.choice(n - 20, n_q, replace=False)
    target = (own + 1) % (n - 20)
    queries = docs[own]
    docs[target] = docs[own] + 0.7 * rng.normal(size=(n_q, d)) * scale
    relevance = sparse.csr_matrix(
        (np.ones(n_q), (np.arange(n_q), target)), shape=(n_q, n)
    )
    exclude = sparse.csr_matrix(
        (np.ones(n_q, bool), (np.arange(n_q), own)), shape=(n_q, n)
    )
    task = RetrievalTask(
        [f"q{i}" for i in range(n_q)],
        [f"d{i}" for i in range(n)],
        relevance,
        exclude=exclude,
    )
    fit = rng.normal(size=(300, d)) * scale + 2.0
    return task, queries, docs, fit


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("quantization", ["float32", "int8", "binary"])
def test_search_equals_a_full_score_matrix(cone_task, backend, quantization):
    from sklearn_isotropy._utils import normalize_rows

    task, queries, docs, fit = cone_task
    settings = EvaluationSettings(backend=backend, latency_queries=3)
    [record] = score_retrieval(
        queries,
        docs,
        task,
        fit_emb=fit,
        quantizations=[quantization],
        settings=settings,
    )
    # independent: quantise here, score every document, -inf for excluded
    q, c, cal = (normalize_rows(x)[0] for x in (queries, docs, fit))
    from sentence_transformers import quantize_embeddings

    if quantization == "int8":
        q_codes = quantize_embeddings(
            q.astype(np.float32), "int8", calibration_embeddings=cal.astype(np.float32)
        )
        c_codes = quantize_embeddings(
            c.astype(np.float32), "int8", calibration_embeddings=cal.astype(np.float32)
        )
        metric = "ip"
    elif quantization == "binary":
        centre = cal.mean(axis=0)
        q_codes = quantize_embeddings((q - centre).astype(np.float32), "ubinary")
        c_codes = quantize_embeddings((c - centre).astype(np.float32), "ubinary")
        metric = "hamming"
    else:
        q_codes, c_codes, metric = q.astype(np.float32), c.astype(np.float32), "ip"
    S = _dense_reference(q_codes, c_codes, metric).astype(np.float64)
    if quantization == "float32":  # float32 round-off: compare away from ties
        S = q_codes.astype(np.float64) @ c_codes.astype(np.float64).T
    S[task.exclude.toarray()] = -np.inf
    expected = retrieval_scores(task.relevance, S)
    for m in ALL:
        assert record[m] == pytest.approx(expected[m], abs=1e-12), m
    width = queries.shape[1]
    per_vector = {"float32": 4 * width, "int8": width, "binary": width // 8}
    assert record["bytes_per_vector"] == per_vector[quantization]
    assert record["index_bytes"] == per_vector[quantization] * task.n_documents
    assert record["latency_ms"] > 0 and record["batch_ms_per_query"] > 0


def test_binary_ties_are_complete():
    # 4-bit codes over many documents: hundreds of exact ties at every score
    rng = np.random.default_rng(1)
    docs = rng.normal(size=(500, 8))
    queries = rng.normal(size=(30, 8))
    relevance = sparse.csr_matrix(
        (np.ones(30), (np.arange(30), rng.choice(500, 30, replace=False))),
        shape=(30, 500),
    )
    task = RetrievalTask(list("q" * 30), list("d" * 500), relevance)
    from sentence_transformers import quantize_embeddings

    from sklearn_isotropy._utils import normalize_rows

    results = []
    for backend in ["numpy"] + (["faiss"] if _has_faiss() else []):
        settings = EvaluationSettings(backend=backend, latency_queries=0)
        [record] = score_retrieval(
            queries,
            docs,
            task,
            fit_emb=docs,
            quantizations=["binary"],
            settings=settings,
        )
        results.append(record)
    q, c = normalize_rows(queries)[0], normalize_rows(docs)[0]
    centre = c.mean(axis=0)
    S = _dense_reference(
        quantize_embeddings((q - centre).astype(np.float32), "ubinary"),
        quantize_embeddings((c - centre).astype(np.float32), "ubinary"),
        "hamming",
    ).astype(float)
    expected = retrieval_scores(task.relevance, S)
    for record in results:
        for m in ALL:
            assert record[m] == pytest.approx(expected[m], abs=1e-12)
    assert results[0]["latency_ms"] is None


@pytest.mark.skipif(not _has_faiss(), reason="faiss is not installed")
def test_numpy_and_faiss_give_the_same_study(cone_task):
    task, queries, docs, fit = cone_task
    runs = []
    for backend in ("numpy", "faiss"):
        settings = EvaluationSettings(
            dimensions=(4, 8), backend=backend, latency_queries=2
        )
        runs.append(run_study(queries, docs, task, fit_emb=fit, settings=settings))
    assert len(runs[0]) == len(runs[1])
    for a, b in zip(*runs):
        assert (a["label"], a["quantization"]) == (b["label"], b["quantization"])
        assert (a["backend"], b["backend"]) == ("numpy", "faiss")
        for m in ALL:
            assert a[m] == pytest.approx(b[m], abs=1e-9)


# -------------------------------------------------- the compression study
class _Spy(BaseEstimator, TransformerMixin):
    """Records the rows it was fitted on; centres."""

    def fit(self, X, y=None):
        self.fitted_rows_ = np.asarray(X).copy()
        self.mean_ = self.fitted_rows_.mean(axis=0)
        return self

    def transform(self, X):
        return np.asarray(X) - self.mean_


def test_study_methods_and_fit_on_fitting_rows_only(cone_task):
    from sklearn_isotropy._utils import normalize_rows

    task, queries, docs, fit = cone_task
    settings = EvaluationSettings(
        dimensions=(4, 8, 24, 99), latency_queries=0, quantizations=("float32",)
    )
    spy = _Spy()
    records = run_study(
        queries, docs, task, fit_emb=fit, transformers={"spy": spy}, settings=settings
    )
    labels = [r["label"] for r in records]
    # at full width, the label says how many components stay above the noise
    denoised = WhiteningTransformer(noise_variance="auto").fit(fit).n_components_
    assert labels == [
        "raw",
        "PCA-4",
        "PCA-8",
        "PCA-24",
        "whitening-4",
        "whitening-8",
        "whitening-24",
        "PPCA whitening-4",
        "PPCA whitening-8",
        f"PPCA whitening-{denoised}",
        "NATSV-5",
        "truncate-4",
        "truncate-8",
        "spy",
    ]
    by_label = {r["label"]: r for r in records}
    assert [by_label[f"truncate-{k}"]["dimensions"] for k in (4, 8)] == [4, 8]
    assert by_label["PCA-24"]["k"] is None and by_label["PCA-4"]["k"] == 4
    assert "per_query" not in by_label["raw"]

    def reference(Zq, Zc):
        S = normalize_rows(Zq)[0] @ normalize_rows(Zc)[0].T
        S[task.exclude.toarray()] = -np.inf
        return retrieval_scores(task.relevance, S)

    # truncation is the first k raw coordinates; the custom transformer was
    # fitted on the fitting rows only (its centre is theirs)
    expected = reference(queries[:, :4], docs[:, :4])
    assert by_label["truncate-4"]["mrr@10"] == pytest.approx(expected["mrr@10"])
    mean = fit.mean(axis=0)
    expected = reference(queries - mean, docs - mean)
    assert by_label["spy"]["mrr@10"] == pytest.approx(expected["mrr@10"])
    # PCA at full width is centring then a rotation: cosine of centred rows
    assert by_label["PCA-24"]["ndcg@10"] == pytest.approx(expected["ndcg@10"])


def test_per_query_scores_average_to_the_record(cone_task):
    task, queries, docs, fit = cone_task
    settings = EvaluationSettings(latency_queries=0, per_query=True)
    [record] = score_retrieval(queries, docs, task, fit_emb=fit, settings=settings)
    for m in ALL:
        assert len(record["per_query"][m]) == task.n_queries
        assert np.mean(record["per_query"][m]) == pytest.approx(record[m])


def test_study_records_failures_and_registered_precisions(cone_task):
    task, queries, docs, fit = cone_task

    @register_quantization(
        "half", help="float16 (a test)", metric="ip", bytes_per_vector=lambda d: 2 * d
    )
    def _half(q, c, cal):
        return q.astype(np.float16).astype(np.float32), c.astype(np.float16).astype(
            np.float32
        )

    try:
        # too few rows: NATSV warns, and the warning names the run
        with pytest.warns(EvaluationWarning, match=r"^\[mean\] natsv: RankDef"):
            records = run_study(
                queries,
                docs,
                task,
                fit_emb=fit[:5],
                methods=["raw", "natsv"],
                settings=EvaluationSettings(latency_queries=0, quantizations=("half",)),
            )
    finally:
        del QUANTIZATIONS["half"]
    assert [r["quantization"] for r in records] == ["half", "half"]
    assert records[0]["bytes_per_vector"] == 2 * queries.shape[1]
    assert any("rank" in w.lower() for w in records[1]["warnings"])
    with pytest.raises(ValueError, match="unknown method"):
        run_study(queries, docs, task, fit_emb=fit, settings=None, methods=["bogus"])
    with pytest.raises(ValueError, match="unknown quantization"):
        score_retrieval(queries, docs, task, quantizations=["int4"])


def test_warnings_name_the_run_as_its_row_does(cone_task):
    # the full-width PCA of 5 rows keeps 4 directions: its row is PCA-4, and
    # so is the prefix of its warning (not the width it asked for)
    task, queries, docs, fit = cone_task
    settings = EvaluationSettings(
        dimensions=(2,), latency_queries=0, quantizations=("float32",)
    )
    with pytest.warns(EvaluationWarning) as caught:
        records = run_study(
            queries, docs, task, fit_emb=fit[:5], methods=["pca"], settings=settings
        )
    labels = {r["label"] for r in records}
    assert labels == {"PCA-2", "PCA-4"}
    prefixes = {str(w.message).split(":")[0] for w in caught}
    assert prefixes and prefixes <= {f"[mean] {label}" for label in labels}


def test_empty_precisions_or_metrics_are_refused(cone_task):
    task, queries, docs, fit = cone_task
    embeddings = {"queries": queries, "corpus": docs, "fit": fit}
    for field in ("quantizations", "metrics"):
        settings = EvaluationSettings(**{field: ()})
        with pytest.raises(ValueError, match=f"settings.{field} is empty"):
            task.score("passthrough", embeddings, settings)


def test_registries_list_the_documented_methods():
    assert {"raw", "pca", "whitening", "natsv", "truncate"} <= set(METHODS)
    assert {"float32", "int8", "binary"} <= set(QUANTIZATIONS)


# ------------------------------------------------------ the command line
def _retrieval_argv(data, model, out, *extra):
    return [
        "retrieval",
        "--data",
        str(data),
        "--model",
        str(model),
        "--pooling",
        "mean",
        "--dims",
        "8,16",
        "--min-score",
        "3.0",
        "--latency-queries",
        "2",
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def test_cli_retrieval_end_to_end(tiny_sts_dir, tiny_bert, tmp_path, capsys):
    from sklearn_isotropy import BertPoolingVectorizer
    from sklearn_isotropy._utils import normalize_rows

    out = tmp_path / "out"
    status = main(_retrieval_argv(tiny_sts_dir, tiny_bert, out))
    stdout = capsys.readouterr().out
    assert status == 0
    assert "whitening-16" in stdout and "truncate-8" in stdout and "binary" in stdout
    assert (out / "retrieval.md").is_file() and (out / "retrieval_mean.png").is_file()
    payload = json.loads((out / "retrieval.json").read_text())
    assert payload["task"] == "retrieval" and payload["fit_on"] == "train"
    records = [r for r in payload["results"] if r["pooling"] == "mean"]
    labels = {r["label"] for r in records}
    assert {"raw", "PCA-8", "whitening-16", "NATSV-5", "truncate-16"} <= labels
    # the full-width whitening is labelled with the width it kept (<= 32)
    [full] = {
        (r["label"], r["dimensions"])
        for r in records
        if r["method"] == "whitening" and r["k"] is None
    }
    assert full[0] == f"whitening-{full[1]}" and full[1] <= 32
    # recompute raw float32 from the encoder's own output
    task = RetrievalTask.load(tiny_sts_dir, EvaluationSettings(min_score=3.0))
    vec = BertPoolingVectorizer(str(tiny_bert), pooling="mean").fit(["a"])
    S = (
        normalize_rows(vec.transform(task.queries))[0]
        @ normalize_rows(vec.transform(task.corpus))[0].T
    )
    S[task.exclude.toarray()] = -np.inf
    expected = retrieval_scores(task.relevance, S)
    [raw] = [
        r for r in records if r["label"] == "raw" and r["quantization"] == "float32"
    ]
    for m in ALL:
        assert raw[m] == pytest.approx(expected[m], abs=1e-6)
    assert raw["index_bytes"] == 4 * 32 * len(task.corpus)
    assert payload["retrieval_task"]["queries"] == task.n_queries
    md = (out / "retrieval.md").read_text()
    assert "train split only" in md and "| PCA-8 | 8 | int8 | 8 |" in md


def test_cli_retrieval_on_a_beir_folder(tmp_path, tiny_bert, capsys):
    folder = _write_beir(tmp_path / "beir")
    out = tmp_path / "out"
    status = main(
        _retrieval_argv(
            folder,
            tiny_bert,
            out,
            "--methods",
            "raw,truncate",
            "--quantize",
            "float32",
            "--no-figures",
        )
    )
    assert status == 0, capsys.readouterr().err
    payload = json.loads((out / "retrieval.json").read_text())
    assert payload["fit_on"] == "corpus"
    assert [r["label"] for r in payload["results"] if r["pooling"] == "mean"] == [
        "raw",
        "truncate-8",
        "truncate-16",
    ]
    assert not list(out.glob("*.png"))


@pytest.mark.parametrize(
    "extra",
    [
        ["retrieval", "--fit-on", "target"],
        ["evaluate", "--fit-on", "corpus"],
        ["evaluate", "--task", "search"],
        ["retrieval", "--dims", "0"],
        ["retrieval", "--dims", "a,b"],
        ["retrieval", "--methods", "raw,bogus"],
        ["retrieval", "--methods", "grid"],  # needs dev pairs: not offered
        ["retrieval", "--quantize", "int4"],
        ["retrieval", "--power", "-1"],
        ["retrieval", "--power", "nan"],
        ["evaluate", "--power", "-0.5"],
        ["retrieval", "--min-score", "inf"],
        ["retrieval", "--latency-queries", "-1"],
        ["evaluate", "--dims", "8"],  # a retrieval flag: not the STS command's
        ["retrieval", "--cv", "3"],  # an STS flag: not the retrieval command's
    ],
)
def test_cli_retrieval_bad_arguments_exit_2(extra, capsys):
    with pytest.raises(SystemExit) as exc:
        main(extra)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_cli_retrieval_exits_1_when_a_method_fails(
    tiny_sts_dir, tiny_bert, tmp_path, capsys, monkeypatch
):
    # a registered method that cannot be fitted: the others still run
    from sklearn_isotropy.evaluation import register_method

    @register_method("broken", help="a method that fails (a test)")
    def _broken(k, n_features, settings, dev=None):
        from sklearn.preprocessing import FunctionTransformer

        def fail(X):
            raise ValueError("cannot transform these rows")

        return FunctionTransformer(fail), {}

    try:
        status = main(
            _retrieval_argv(
                tiny_sts_dir,
                tiny_bert,
                tmp_path,
                "--methods",
                "raw,broken",
                "--quantize",
                "float32",
                "--no-figures",
            )
        )
    finally:
        del METHODS["broken"]
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
    assert status == 1
    assert errors == [
        "sklearn-isotropy: error: method 'broken' failed for mean pooling: cannot "
        "transform these rows"
    ]
    records = json.loads((tmp_path / "retrieval.json").read_text())["results"]
    assert [r["label"] for r in records] == ["raw", "broken"]
    assert records[0]["mrr@10"] > 0 and records[1]["error"]


def test_cli_retrieval_missing_train_split_exit_1(tmp_path, capsys):
    (tmp_path / "test.csv").write_text("a b,c d,4.5\ne f,g h,1.0\n")
    status = main(
        [
            "retrieval",
            "--data",
            str(tmp_path),
            "--fit-on",
            "train",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1 and "train" in err


def test_cli_without_sentence_transformers_exit_1(
    tiny_sts_dir, tiny_bert, tmp_path, capsys, monkeypatch
):
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "sentence_transformers" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    status = main(_retrieval_argv(tiny_sts_dir, tiny_bert, tmp_path / "out"))
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "int8, binary need sentence_transformers" in err
    assert "--quantize float32" in err
    # float32 alone needs nothing more
    status = main(
        _retrieval_argv(
            tiny_sts_dir,
            tiny_bert,
            tmp_path / "out",
            "--quantize",
            "float32",
            "--methods",
            "raw",
            "--no-figures",
        )
    )
    assert status == 0


def test_cli_help_lists_the_registries(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["retrieval", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "--quantize" in text and "--dims" in text and "--task" not in text
    assert "--n-components" not in text and "--cv" not in text  # STS only
    for name in QUANTIZATIONS:
        assert name in text
    methods = text[text.index("\nmethods:") : text.index("\npoolings:")]
    for name, method in METHODS.items():  # grid selects on dev pairs: not offered
        assert (f"\n  {name} " in methods) == (not method.needs_dev), name


# ------------------------------------------------------------- the scorer
def _scorer_reference(Z_first, Z_second, y, min_score):
    """MRR@10 computed from scratch on the distinct rows of the pairs."""
    from sklearn_isotropy._utils import normalize_rows

    items = np.concatenate([Z_first, Z_second])
    keys = [row.tobytes() for row in items]
    distinct = list(dict.fromkeys(keys))
    where = {key: i for i, key in enumerate(distinct)}
    vectors = normalize_rows(items[[keys.index(key) for key in distinct]])[0]
    n = len(y)
    queries = list(
        dict.fromkeys(
            where[keys[i]]
            for i in range(n)
            if y[i] >= min_score and keys[i] != keys[n + i]
        )
    )
    rel = np.zeros((len(queries), len(distinct)))
    for i in range(n):
        if y[i] >= min_score and keys[i] != keys[n + i]:
            rel[queries.index(where[keys[i]]), where[keys[n + i]]] = 1
    S = vectors[queries] @ vectors.T
    S[np.arange(len(queries)), queries] = -np.inf
    return mrr_score(rel, S)


def test_scorer_equals_a_computation_from_scratch():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(80, 6))
    b = a + rng.normal(scale=0.8, size=a.shape)
    b[::7] = a[::7]  # a few pairs of identical items: not questions
    X_pairs = np.stack([a, b], axis=1)
    y = rng.uniform(0, 5, size=80)
    scorer = make_retrieval_scorer("mrr@10", min_score=3.0)
    model = PairedCosineSimilarity().fit(X_pairs)
    assert scorer(model, X_pairs, y) == pytest.approx(
        _scorer_reference(a, b, y, 3.0), abs=1e-12
    )
    pca = PCA(n_components=3).fit(np.concatenate([a, b]))
    assert scorer(pca, X_pairs, y) == pytest.approx(
        _scorer_reference(pca.transform(a), pca.transform(b), y, 3.0), abs=1e-12
    )
    assert "mrr@10" in repr(scorer)
    with pytest.raises(ValueError, match="no pair"):
        scorer(model, X_pairs, np.zeros(80))
    with pytest.raises(TypeError, match="transform"):
        scorer(object(), X_pairs, y)


def test_scorer_chooses_k_in_grid_search():
    # the pairs differ only in the low-variance directions: keeping the top
    # principal directions alone cannot tell the partners apart
    rng = np.random.default_rng(0)
    n, d = 120, 10
    scale = np.array([10, 9, 8, 1, 1, 1, 1, 1, 1, 1.0])
    a = rng.normal(size=(n, d)) * scale
    b = a.copy()
    b[:, :3] = rng.normal(size=(n, 3)) * scale[:3]  # top directions: noise
    b[:, 3:] += rng.normal(scale=0.05, size=(n, 7))
    X_pairs = np.stack([a, b], axis=1)
    y = np.full(n, 5.0)
    from sklearn_isotropy import WhiteningTransformer

    search = GridSearchCV(
        PairedCosineSimilarity(WhiteningTransformer()),
        {"transformer__n_components": [2, 3, None]},
        scoring=make_retrieval_scorer("mrr@10"),
        cv=KFold(3, shuffle=True, random_state=0),
    ).fit(X_pairs, y)
    assert search.best_params_ == {"transformer__n_components": None}
    scores = search.cv_results_["mean_test_score"]
    assert scores[2] > 0.5 > 0.2 > scores[1] > 0.0
    # each fold's score is the scorer's on the held-out pairs
    train, test = next(KFold(3, shuffle=True, random_state=0).split(X_pairs))
    fitted = PairedCosineSimilarity(WhiteningTransformer()).fit(X_pairs[train])
    assert search.cv_results_["split0_test_score"][2] == pytest.approx(
        make_retrieval_scorer()(fitted, X_pairs[test], y[test])
    )


def test_scorer_on_text_pairs_with_a_text_pipeline():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    pairs = np.array(
        [
            ["the cat sat on the mat", "a cat sat on a mat"],
            ["dogs run fast", "the dog ran fast"],
            ["a red car", "the blue sky"],
            ["the man reads", "a man is reading"],
        ]
    )
    y = np.array([4.8, 4.2, 0.2, 4.5])
    dense = FunctionTransformer(lambda X: X.toarray(), accept_sparse=True)
    model = PairedCosineSimilarity(make_pipeline(TfidfVectorizer(), dense))
    model.fit(pairs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = make_retrieval_scorer("recall@1")(model, pairs, y)
    vec = model.transformer_
    corpus = list(dict.fromkeys(pairs.ravel()))
    Z = vec.transform(corpus)
    from sklearn_isotropy._utils import normalize_rows

    U = normalize_rows(Z)[0]
    q_idx = [corpus.index(p) for p in pairs[[0, 1, 3], 0]]
    S = U[q_idx] @ U.T
    S[np.arange(3), q_idx] = -np.inf
    rel = np.zeros((3, len(corpus)))
    for row, target in enumerate(pairs[[0, 1, 3], 1]):
        rel[row, corpus.index(target)] = 1
    assert value == pytest.approx(recall_at_k_score(rel, S, k=1))
