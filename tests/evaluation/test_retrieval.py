"""The retrieval task: from STS pairs or BEIR folders, exact search, the study.

The tasks are built from STS pairs and BEIR folders (written here); the
search is checked against full score matrices computed here with numpy, at
every precision and with both backends; the compression study for its
methods, widths, records and warnings. The metrics themselves have their
tests in ``tests/metrics/test_retrieval.py``.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from scipy import sparse
from sklearn.base import BaseEstimator, TransformerMixin

from sklearn_isotropy import WhiteningTransformer
from sklearn_isotropy.datasets import make_cone
from sklearn_isotropy.evaluation import (
    METHODS,
    RetrievalSettings,
    RetrievalTask,
    evaluate,
)
from sklearn_isotropy.evaluation._quantization import (
    QUANTIZATIONS,
    register_quantization,
)
from sklearn_isotropy.exceptions import EvaluationError, EvaluationWarning
from sklearn_isotropy.metrics import retrieval_scores
from tests._data import RETRIEVAL_METRICS, write_beir


def score_retrieval(
    queries, docs, task, quantization="float32", *, fit_emb=None, settings=None
):
    """The records of ``task.score`` for the raw embeddings, at one precision."""
    settings = replace(settings or RetrievalSettings(), quantizations=(quantization,))
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


# ------------------------------------------------------------------ tasks
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


def test_beir_folder(tmp_path):
    task = RetrievalTask.from_beir(write_beir(tmp_path / "beir"))
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
    other = write_beir(tmp_path / "beir2", qrels=[("q1", "d1", 1), ("q2", "d2", 1)])
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
    folder = write_beir(tmp_path / "beir", **kwargs)
    with pytest.raises(EvaluationError, match=match):
        RetrievalTask.from_beir(folder)


def test_beir_folder_in_another_encoding_says_where_and_what_to_do(tmp_path):
    folder = write_beir(tmp_path / "beir")
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
    plain = RetrievalTask.from_beir(write_beir(tmp_path / "plain"))
    folder = write_beir(tmp_path / "bom")
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        path = folder / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    task = RetrievalTask.from_beir(folder)
    assert task.corpus == plain.corpus and task.queries == plain.queries
    assert task.corpus_ids == plain.corpus_ids
    assert (task.relevance != plain.relevance).nnz == 0


def test_beir_folder_missing_file(tmp_path):
    folder = write_beir(tmp_path / "beir")
    (folder / "qrels" / "test.tsv").unlink()
    with pytest.raises(EvaluationError, match=r"qrels/test.tsv not found"):
        RetrievalTask.from_beir(folder)


def test_sts_task_and_fitting_sentences(tiny_sts_dir):
    task = RetrievalTask.load(tiny_sts_dir, RetrievalSettings(min_score=3.0))
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
        RetrievalTask.load(data, RetrievalSettings(min_score=3.0))
    (data / "dev.csv").unlink()
    task = RetrievalTask.load(data, RetrievalSettings(min_score=3.0))
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
    docs = make_cone(
        n, d, spread=scale, offset=np.full(d, 2.0), rotate=False, random_state=rng
    )
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
    settings = RetrievalSettings(backend=backend, latency_queries=3)
    [record] = score_retrieval(
        queries, docs, task, quantization, fit_emb=fit, settings=settings
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
    for m in RETRIEVAL_METRICS:
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
        settings = RetrievalSettings(backend=backend, latency_queries=0)
        [record] = score_retrieval(
            queries, docs, task, "binary", fit_emb=docs, settings=settings
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
        for m in RETRIEVAL_METRICS:
            assert record[m] == pytest.approx(expected[m], abs=1e-12)
    assert results[0]["latency_ms"] is None


@pytest.mark.skipif(not _has_faiss(), reason="faiss is not installed")
def test_numpy_and_faiss_give_the_same_study(cone_task):
    task, queries, docs, fit = cone_task
    runs = []
    for backend in ("numpy", "faiss"):
        settings = RetrievalSettings(
            n_components=(4, 8), backend=backend, latency_queries=2
        )
        runs.append(run_study(queries, docs, task, fit_emb=fit, settings=settings))
    assert len(runs[0]) == len(runs[1])
    for a, b in zip(*runs):
        assert (a["label"], a["quantization"]) == (b["label"], b["quantization"])
        assert (a["backend"], b["backend"]) == ("numpy", "faiss")
        for m in RETRIEVAL_METRICS:
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
    settings = RetrievalSettings(
        n_components=(4, 8, 24, 99), latency_queries=0, quantizations=("float32",)
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
    settings = RetrievalSettings(latency_queries=0, per_query=True)
    [record] = score_retrieval(queries, docs, task, fit_emb=fit, settings=settings)
    for m in RETRIEVAL_METRICS:
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
                settings=RetrievalSettings(latency_queries=0, quantizations=("half",)),
            )
    finally:
        del QUANTIZATIONS["half"]
    assert [r["quantization"] for r in records] == ["half", "half"]
    assert records[0]["bytes_per_vector"] == 2 * queries.shape[1]
    assert any("rank" in w.lower() for w in records[1]["warnings"])
    with pytest.raises(ValueError, match="unknown method"):
        run_study(queries, docs, task, fit_emb=fit, settings=None, methods=["bogus"])
    with pytest.raises(ValueError, match="unknown quantization"):
        score_retrieval(queries, docs, task, "int4")


def test_warnings_name_the_run_as_its_row_does(cone_task):
    # the full-width PCA of 5 rows keeps 4 directions: its row is PCA-4, and
    # so is the prefix of its warning (not the width it asked for)
    task, queries, docs, fit = cone_task
    settings = RetrievalSettings(
        n_components=(2,), latency_queries=0, quantizations=("float32",)
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
        settings = RetrievalSettings(**{field: ()})
        with pytest.raises(ValueError, match=f"settings.{field} is empty"):
            task.score("passthrough", embeddings, settings)


def test_registries_list_the_documented_methods():
    assert {"raw", "pca", "whitening", "natsv", "truncate"} <= set(METHODS)
    assert {"float32", "int8", "binary"} <= set(QUANTIZATIONS)
