"""Retrieval tasks: queries, a corpus and relevance judgements.

:class:`RetrievalTask` is made from rated STS pairs
(:meth:`RetrievalTask.from_pairs`) or read from a BEIR folder
(:meth:`RetrievalTask.from_beir`); :func:`load_retrieval_task` picks the
right one for a path and names the sentences to fit the post-processors on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import sparse

from ..exceptions import EvaluationError
from ..metrics import pairs_to_qrels
from ._retrieval_methods import RETRIEVAL_PROTOCOLS
from ._sts import load_sts_splits

__all__ = ["RetrievalTask", "load_retrieval_task"]


@dataclass
class RetrievalTask:
    """Queries, a corpus and relevance judgements.

    Parameters
    ----------
    queries : list of str
        Query texts.
    corpus : list of str
        Document texts; equal texts are separate documents (they tie).
    relevance : sparse matrix of shape (n_queries, n_documents)
        Relevance grades, > 0 relevant; every query needs at least one
        relevant document.
    exclude : sparse matrix of shape (n_queries, n_documents), default=None
        Nonzero where a document is never returned to a query (the query's
        own sentence).
    query_ids, corpus_ids : list of str, default=None
        Identifiers (BEIR ids; indices when None).
    name : str, default="retrieval task"
        How reports name the task.
    notes : dict, default={}
        How it was made (counts of pairs, queries dropped, ...).

    Raises
    ------
    ValueError
        If the shapes disagree, a grade is negative or not finite, a query
        has no relevant document, or a relevant document is excluded.

    Examples
    --------
    >>> from sklearn_isotropy.evaluation import RetrievalTask
    >>> pairs = [["a cat sat", "a cat was sitting"], ["a dog ran", "a car"]]
    >>> task = RetrievalTask.from_pairs(pairs, [4.6, 0.4], extra_corpus=["a cat"])
    >>> task.queries, task.corpus
    (['a cat sat'], ['a cat sat', 'a cat was sitting', 'a dog ran', 'a car', 'a cat'])
    """

    queries: list
    corpus: list
    relevance: sparse.csr_matrix
    exclude: sparse.csr_matrix | None = None
    query_ids: list | None = None
    corpus_ids: list | None = None
    name: str = "retrieval task"
    notes: dict = field(default_factory=dict)

    def __post_init__(self):
        self.queries = [str(q) for q in self.queries]
        self.corpus = [str(d) for d in self.corpus]
        shape = (len(self.queries), len(self.corpus))
        if not shape[0] or not shape[1]:
            raise ValueError(
                f"a retrieval task needs at least one query and one document; got "
                f"{shape[0]} queries and {shape[1]} documents"
            )
        rel = sparse.csr_matrix(self.relevance, dtype=np.float64)
        if rel.shape != shape:
            raise ValueError(
                f"relevance has shape {rel.shape}; expected (n_queries, "
                f"n_documents) = {shape}"
            )
        if not np.isfinite(rel.data).all() or (rel.data < 0).any():
            raise ValueError("relevance grades must be finite and >= 0")
        rel.eliminate_zeros()
        missing = np.flatnonzero(np.diff(rel.indptr) == 0)
        if missing.size:
            raise ValueError(
                f"{missing.size} queries have no relevant document (first: query "
                f"{int(missing[0])}); drop them before building the task"
            )
        self.relevance = rel
        if self.exclude is not None:
            exc = sparse.csr_matrix(self.exclude, dtype=bool)
            if exc.shape != shape:
                raise ValueError(f"exclude has shape {exc.shape}; expected {shape}")
            if rel.multiply(exc).nnz:
                raise ValueError(
                    "a relevant document is also excluded from its query's "
                    "results; a document cannot be both"
                )
            self.exclude = exc
        for attr, n in (("query_ids", shape[0]), ("corpus_ids", shape[1])):
            ids = getattr(self, attr)
            if ids is not None and len(ids) != n:
                raise ValueError(f"{attr} has {len(ids)} entries; expected {n}")

    @property
    def n_queries(self) -> int:
        return len(self.queries)

    @property
    def n_documents(self) -> int:
        return len(self.corpus)

    def summary(self) -> dict:
        """Sizes and how the task was made, for reports."""
        return {
            "name": self.name,
            "queries": self.n_queries,
            "documents": self.n_documents,
            "relevant_judgements": int(self.relevance.nnz),
            **self.notes,
        }

    @classmethod
    def from_pairs(
        cls,
        pairs,
        scores,
        *,
        min_score=4.0,
        symmetric=False,
        extra_corpus=(),
        name="STS pairs",
    ):
        """A task from rated sentence pairs.

        Each pair rated at least `min_score` makes its first sentence a
        query and its second sentence relevant to it (both ways with
        `symmetric`). The corpus is every distinct sentence of the pairs,
        then every new sentence of `extra_corpus` (distractors); a query's
        own sentence is excluded from its results. Pairs of one sentence
        twice are left out (counted in ``notes``). The judgements are those
        of :func:`~sklearn_isotropy.metrics.pairs_to_qrels`.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2)
            Sentence pairs.
        scores : array-like of shape (n_pairs,)
            Gold similarity scores.
        min_score : float, default=4.0
            Relevance threshold (4.0 is 80% of STS-B's 0-5 scale).
        symmetric : bool, default=False
            Also query with the second sentence.
        extra_corpus : iterable of str, default=()
            More documents, none relevant.
        name : str, default="STS pairs"
            How reports name the task.

        Returns
        -------
        task : RetrievalTask

        Raises
        ------
        ValueError
            If no pair reaches `min_score`.
        """
        qrels = pairs_to_qrels(pairs, scores, min_score=min_score, symmetric=symmetric)
        n_queries = qrels.queries.size
        if n_queries == 0:
            raise ValueError(
                f"no sentence pair is rated >= min_score={min_score} (and made of "
                "two different sentences), so there is no query; lower min_score"
            )
        corpus = [str(s) for s in qrels.corpus]
        seen = set(corpus)
        for text in extra_corpus:
            text = str(text)
            if text not in seen:
                seen.add(text)
                corpus.append(text)
        relevance = sparse.csr_matrix(
            (qrels.relevance.data, qrels.relevance.indices, qrels.relevance.indptr),
            shape=(n_queries, len(corpus)),
        )
        exclude = sparse.csr_matrix(
            (np.ones(n_queries, dtype=bool), (np.arange(n_queries), qrels.queries)),
            shape=(n_queries, len(corpus)),
        )
        return cls(
            queries=[corpus[i] for i in qrels.queries],
            corpus=corpus,
            relevance=relevance,
            exclude=exclude,
            name=name,
            notes={
                "min_score": float(min_score),
                "symmetric": bool(symmetric),
                "pairs": int(len(np.asarray(scores).ravel())),
                "pairs_relevant": qrels.n_pairs_relevant,
                "pairs_identical_left_out": qrels.n_pairs_identical,
                "distractors": len(corpus) - len(qrels.corpus),
            },
        )

    @classmethod
    def from_beir(cls, folder, *, split="test", name=None):
        """Read a BEIR-format folder (corpus, queries and qrels files).

        ``corpus.jsonl`` holds one JSON object per line with ``_id``,
        ``text`` and optionally ``title`` (the document is ``title + " " +
        text``, as BEIR embeds it); ``queries.jsonl`` holds ``_id`` and
        ``text``; the qrels file has a ``query-id``, ``corpus-id``, ``score``
        header and one judgement per line. The queries are those of the
        qrels, in order of first appearance; a query whose judgements are
        all 0 is left out (counted in ``notes``). A document whose id is the
        query's id is excluded from its results, as BEIR does.

        Parameters
        ----------
        folder : str or path-like
            The BEIR folder.
        split : str, default="test"
            Which qrels file.
        name : str, default=None
            How reports name the task; the folder's name when None.

        Returns
        -------
        task : RetrievalTask

        Raises
        ------
        EvaluationError
            If a file is missing or malformed, an id is duplicated or
            unknown, or a grade is negative, with the file and line.
        """
        folder = Path(folder).expanduser()
        qrels_path = folder / "qrels" / f"{split}.tsv"
        for path in (folder / "corpus.jsonl", folder / "queries.jsonl", qrels_path):
            if not path.is_file():
                raise EvaluationError(
                    f"{path} not found; a BEIR folder holds corpus.jsonl, "
                    f"queries.jsonl and qrels/{split}.tsv"
                )
        corpus_ids, corpus = _read_jsonl(folder / "corpus.jsonl", title=True)
        query_ids_all, query_texts = _read_jsonl(folder / "queries.jsonl", title=False)
        doc_index = {d: i for i, d in enumerate(corpus_ids)}
        query_index = {q: i for i, q in enumerate(query_ids_all)}
        judgements = _read_qrels(qrels_path, query_index, doc_index)
        order = list(dict.fromkeys(q for q, _, _ in judgements))
        graded = {q for q, _, g in judgements if g > 0}
        kept = [q for q in order if q in graded]
        row_of = {q: r for r, q in enumerate(kept)}
        rows, cols, grades = [], [], []
        for q, d, g in judgements:
            if q in row_of and g > 0:
                rows.append(row_of[q])
                cols.append(doc_index[d])
                grades.append(g)
        shape = (len(kept), len(corpus))
        if not kept:
            raise EvaluationError(
                f"{qrels_path} has no judgement with a score > 0, so no query has a "
                "relevant document"
            )
        relevance = sparse.csr_matrix((grades, (rows, cols)), shape=shape)
        # a document with the query's own id is not an answer, unless judged one
        judged = set(zip(rows, cols))
        self_rows = [
            r
            for r, q in enumerate(kept)
            if q in doc_index and (r, doc_index[q]) not in judged
        ]
        exclude = sparse.csr_matrix(
            (
                np.ones(len(self_rows), dtype=bool),
                (self_rows, [doc_index[kept[r]] for r in self_rows]),
            ),
            shape=shape,
        )
        return cls(
            queries=[query_texts[query_index[q]] for q in kept],
            corpus=corpus,
            relevance=relevance,
            exclude=exclude,
            query_ids=kept,
            corpus_ids=corpus_ids,
            name=name or folder.name,
            notes={
                "split": split,
                "queries_without_relevant_left_out": len(order) - len(kept),
                "queries_in_file": len(query_ids_all),
            },
        )


def _read_jsonl(path, *, title):
    ids, texts, seen = [], [], set()
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EvaluationError(
                    f"{path}:{lineno}: not valid JSON ({exc})"
                ) from None
            if not isinstance(obj, dict) or "_id" not in obj or "text" not in obj:
                raise EvaluationError(
                    f"{path}:{lineno}: expected an object with '_id' and 'text'"
                )
            key = str(obj["_id"])
            if key in seen:
                raise EvaluationError(f"{path}:{lineno}: duplicate _id {key!r}")
            seen.add(key)
            text = str(obj["text"] or "")
            head = str(obj.get("title") or "") if title else ""
            ids.append(key)
            texts.append(f"{head} {text}".strip() if head else text)
    if not ids:
        raise EvaluationError(f"{path} holds no record")
    return ids, texts


def _read_qrels(path, query_index, doc_index):
    out, grade_of = [], {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            cells = line.rstrip("\n\r").split("\t")
            if len(cells) != 3:
                raise EvaluationError(
                    f"{path}:{lineno}: expected 3 tab-separated columns "
                    f"(query-id, corpus-id, score); got {len(cells)}"
                )
            q, d, score = (c.strip() for c in cells)
            try:
                grade = float(score)
            except ValueError:
                if lineno == 1:  # the header
                    continue
                raise EvaluationError(
                    f"{path}:{lineno}: score {score!r} is not a number"
                ) from None
            if not np.isfinite(grade) or grade < 0:
                raise EvaluationError(
                    f"{path}:{lineno}: score {score!r} must be a finite number >= 0"
                )
            if q not in query_index:
                raise EvaluationError(
                    f"{path}:{lineno}: query-id {q!r} is not in queries.jsonl"
                )
            if d not in doc_index:
                raise EvaluationError(
                    f"{path}:{lineno}: corpus-id {d!r} is not in corpus.jsonl"
                )
            if (q, d) in grade_of:
                if grade_of[(q, d)] != grade:
                    raise EvaluationError(
                        f"{path}:{lineno}: ({q!r}, {d!r}) was judged "
                        f"{grade_of[(q, d)]} before and {grade} here"
                    )
                continue
            grade_of[(q, d)] = grade
            out.append((q, d, grade))
    if not out:
        raise EvaluationError(f"{path} holds no judgement")
    return out


def load_retrieval_task(
    data,
    *,
    fit_on=None,
    min_score=4.0,
    symmetric=False,
    query_splits=("test",),
    max_pairs=None,
    random_state=0,
):
    """A retrieval task and the sentences to fit the post-processors on.

    ``data`` is a BEIR folder (it holds ``corpus.jsonl``) or STS data as
    :func:`~sklearn_isotropy.evaluation.load_sts_splits` reads it. From STS
    data, the pairs of `query_splits` rated at least `min_score` give the
    queries (:meth:`RetrievalTask.from_pairs`); the corpus is every distinct
    sentence of every split read (train, dev and test when present), and
    the post-processors are fitted on the train split's sentences.

    Parameters
    ----------
    data : str or path-like
        A BEIR folder, an STS directory, one STS file (its pairs are the
        test split) or ``"stsb"``.
    fit_on : {"train", "corpus"}, default=None
        Fit on the train split's sentences or on the corpus; None is
        ``"train"`` when the data has a train split, else ``"corpus"``.
    min_score : float, default=4.0
        Relevance threshold of STS pairs.
    symmetric : bool, default=False
        Query with both sentences of a relevant pair.
    query_splits : sequence of str, default=("test",)
        STS splits whose pairs give the queries.
    max_pairs : int, default=None
        Random subset of at most this many pairs per STS split.
    random_state : int, default=0
        Seeds the subset.

    Returns
    -------
    task : RetrievalTask
    fit_texts : list of str
        The sentences to fit on.
    fit_on : str
        The protocol used (a key of :data:`RETRIEVAL_PROTOCOLS`).

    Raises
    ------
    EvaluationError
        If the data cannot be read, or the protocol needs a split it lacks.
    """
    if fit_on is not None and fit_on not in RETRIEVAL_PROTOCOLS:
        raise EvaluationError(
            f"fit_on must be one of {tuple(RETRIEVAL_PROTOCOLS)} for retrieval; "
            f"got {fit_on!r}"
        )
    path = Path(data).expanduser()
    if path.is_dir() and (path / "corpus.jsonl").is_file():
        if fit_on == "train":
            raise EvaluationError(
                f"{data} is a BEIR folder, which has no train sentences; fit on the "
                "corpus (fit_on='corpus')"
            )
        task = RetrievalTask.from_beir(path)
        return task, task.corpus, "corpus"
    wanted = list(dict.fromkeys([*query_splits, "train", "dev", "test"]))
    splits = {}
    for split in wanted:
        required = split in query_splits or (split == "train" and fit_on == "train")
        try:
            splits.update(
                load_sts_splits(
                    data, [split], max_pairs=max_pairs, random_state=random_state
                )
            )
        except EvaluationError:
            if required:
                raise
    fit_on = fit_on or ("train" if "train" in splits else "corpus")
    queries_from = [s for s in query_splits]
    pairs = np.concatenate([splits[s].pairs for s in queries_from])
    scores = np.concatenate([splits[s].scores for s in queries_from])
    others = [s for s in splits if s not in queries_from]
    extra = [t for s in others for t in splits[s].pairs.ravel()]
    try:
        task = RetrievalTask.from_pairs(
            pairs,
            scores,
            min_score=min_score,
            symmetric=symmetric,
            extra_corpus=extra,
            name=f"{data} ({'+'.join(queries_from)} pairs >= {min_score:g})",
        )
    except ValueError as exc:
        raise EvaluationError(f"cannot make a retrieval task of {data}: {exc}") from exc
    task.notes["query_splits"] = list(queries_from)
    task.notes["corpus_splits"] = list(splits)
    if fit_on == "train":
        fit_texts = list(dict.fromkeys(splits["train"].pairs.ravel().tolist()))
    else:
        fit_texts = list(task.corpus)
    return task, fit_texts, fit_on
