"""The retrieval task: exact cosine search, its quality, memory and latency.

:class:`RetrievalTask` holds queries, a corpus and relevance judgements,
made from rated STS pairs (:meth:`RetrievalTask.from_pairs`) or read from a
BEIR folder (:meth:`RetrievalTask.from_beir`), and the sentences the
post-processors are fitted on. A method is fitted on those sentences,
applied to the queries and the corpus, and the corpus is searched exactly
for every query at each precision of
:data:`~sklearn_isotropy.evaluation.QUANTIZATIONS` and the ranking scored
by :func:`~sklearn_isotropy.metrics.search_scores` (ties averaged), as the
pair retrieval scorer does. Everything the task is lives here: its options
(:class:`RetrievalSettings`), its report (:class:`RetrievalReport`: the
table, the figure of quality against bytes per vector) and its command,
``sklearn-isotropy retrieval``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike
from scipy import sparse

from .._utils import normalize_rows
from ..datasets import load_sts_splits
from ..exceptions import EvaluationError
from ..metrics import (
    DEFAULT_RETRIEVAL_METRICS,
    SEARCH_BACKENDS,
    exact_index,
    make_retrieval_scorer,
    pairs_to_qrels,
    search_scores,
)
from ._quantization import QUANTIZATIONS, check_quantizations, time_searches
from ._report import Column, Report
from ._settings import (
    EvaluationSettings,
    Integers,
    Names,
    Number,
    inherit_parameters,
    max_pairs_field,
    option,
    sts_format_field,
)
from ._task import Task, check_fit_on, encode_once

__all__ = ["RetrievalReport", "RetrievalSettings", "RetrievalTask"]


def _precisions():
    return {name: q.help for name, q in QUANTIZATIONS.items()}


def _check_metrics(names):
    for name in names:
        make_retrieval_scorer(name)  # raises for a name it does not know


@inherit_parameters
@dataclass
class RetrievalSettings(EvaluationSettings):
    """Options of the retrieval task (``sklearn-isotropy retrieval``).

    The shared options of
    :class:`~sklearn_isotropy.evaluation.EvaluationSettings`, then how the
    task is made from STS data, the dimensions and precisions of the study,
    and how the index is searched and timed.

    Parameters
    ----------
    format : str or None, default=None
        File format of the STS data the task is made from (see
        :func:`~sklearn_isotropy.datasets.load_sts`), detected from the files
        when None; not read for a BEIR folder.
    max_pairs : int or None, default=None
        Keep a fixed random subset of at most this many pairs per STS split,
        before the queries and the corpus are made from them; not read for a
        BEIR folder.
    n_components : tuple of int, default=(32, 64, 128, 256)
        Dimensions ``k`` of the study, for the methods that keep one; those
        not below the embedding width are skipped (``--n-components``, once
        ``--dims``).
    quantizations : tuple of str, default=("float32", "int8", "binary")
        Index precisions, names in
        :attr:`~sklearn_isotropy.evaluation.RetrievalTask.quantizations`.
    metrics : tuple of str, default=("mrr@10", "recall@1", "recall@10", "ndcg@10")
        Retrieval scores to report (``"mrr@10"``...).
    min_score : float, default=4.0
        STS pairs rated at least this are relevant.
    symmetric : bool, default=False
        Query with both sentences of a relevant STS pair.
    query_splits : tuple of str, default=("test",)
        STS splits whose pairs give the queries.
    backend : str, default="auto"
        Exact search engine (``auto``: faiss when installed).
    latency_queries : int, default=100
        Queries timed one at a time (0: no timing).
    per_query : bool, default=False
        Also keep every query's scores in each record.
    """

    format: str | None = sts_format_field()
    max_pairs: int | None = max_pairs_field()
    n_components: tuple[int, ...] = option(
        (32, 64, 128, 256),
        flag=True,
        type=Integers(low=1),
        deprecated=("--dims",),
        help="comma-separated dimensions k of pca, whitening and truncate",
    )
    quantizations: tuple[str, ...] = option(
        ("float32", "int8", "binary"),
        flag="--quantize",
        type=Names(_precisions, "precision(s)"),
        listing="precisions",
        help="comma-separated index precisions",
        check=check_quantizations,
    )
    metrics: tuple[str, ...] = option(DEFAULT_RETRIEVAL_METRICS, check=_check_metrics)
    min_score: float = option(
        4.0,
        flag=True,
        type=Number(),
        help="STS pairs rated at least this are relevant",
    )
    symmetric: bool = option(False)
    query_splits: tuple[str, ...] = option(("test",))
    backend: str = option(
        "auto",
        flag=True,
        choices=("auto", *SEARCH_BACKENDS),
        help="exact search engine (auto: faiss when installed)",
    )
    latency_queries: int = option(
        100,
        flag=True,
        type=Number(integer=True, low=0),
        help="queries timed one at a time for the latency figure (0: no timing)",
    )
    per_query: bool = option(False)


class RetrievalReport(Report):
    """Quality, index memory and latency per method, dimension and precision."""

    title = (
        "Exact cosine search: quality x100, index memory and query latency per "
        "method, dimension and precision"
    )
    stem = "retrieval"
    figure_names = ("retrieval_{}.png",)
    savefig = {"dpi": 110, "bbox_inches": "tight"}  # the legends are outside

    def columns(self):
        def percent(m):
            return lambda r: f"{100 * r[m]:.2f}"

        def ms(key):
            return lambda r: "-" if r[key] is None else f"{r[key]:.3f}"

        return [
            Column("dims", lambda r: str(r["dimensions"]), left=True),
            Column("precision", lambda r: r["quantization"], left=True),
            Column("bytes/vector", lambda r: str(r["bytes_per_vector"])),
            Column("index", lambda r: _size(r["index_bytes"])),
            *[
                Column(_metric_header(m), percent(m), score=True)
                for m in self.evaluation.settings.metrics
            ],
            Column("latency ms", ms("latency_ms")),
            Column("batch ms/query", ms("batch_ms_per_query")),
        ]

    def describe(self):
        task = self.evaluation.task
        parts = [f"{task.n_queries} queries", f"{task.n_documents} documents"]
        parts.append(f"{int(task.relevance.nnz)} relevant judgements")
        if "min_score" in task.notes:
            parts.append(
                f"relevant = pairs rated >= {task.notes['min_score']:g}"
                + (" (both directions)" if task.notes.get("symmetric") else "")
            )
        return ", ".join(parts) + f"; fitted on {len(task.fit_texts)} sentences"

    def header_lines(self):
        ev, s = self.evaluation, self.evaluation.settings
        backends = sorted({r.values["backend"] for r in ev.records if not r.error})
        return [
            f"- Whitening power: {s.postprocessing.power:g}; NATSV removes "
            f"{s.postprocessing.natsv_components} directions; PCA is whitening "
            "with power 0.",
            f"- Search: exact, backend `{', '.join(backends) or s.backend}`; a "
            "query's own sentence is never returned to it; ties are averaged (the "
            "expected score over random orders of tied documents).",
            "- Precisions: "
            + "; ".join(f"`{q}`: {QUANTIZATIONS[q].help}" for q in s.quantizations),
            "- Index = documents x bytes per vector. Latency: median of one-query "
            "top-k searches on one thread; batch: the best of three searches of "
            "every query, per query. int8 codes are searched as exact float32 "
            "numbers: they save memory here, not time.",
        ]

    def json_fields(self):
        return {
            "retrieval_task": self.evaluation.task.summary(),
            "quantizations": {
                q: QUANTIZATIONS[q].help for q in self.evaluation.settings.quantizations
            },
        }

    def console_lines(self):
        return [f"Task: {self.describe()}"]

    def figures(self):
        """``retrieval_<pooling>.png``: quality against bytes per vector.

        Two panels: every point, and the 10 points (x100) below the best
        score, where the methods differ.
        """
        from matplotlib.figure import Figure

        from ..diagnostics import plot_quality_vs_bytes

        ev, task = self.evaluation, self.evaluation.task
        metric, out = ev.settings.metrics[0], []
        for pooling in ev.poolings:
            records = [r.to_dict() for r in ev.results(pooling)]
            if all("error" in r for r in records):
                continue
            fig = Figure(figsize=(13, 5.2), layout="constrained")
            whole, top = fig.subplots(1, 2)
            fig.suptitle(
                f"{ev.model_description}, {pooling} pooling: {task.n_queries} "
                f"queries, {task.n_documents} documents"
            )
            plot_quality_vs_bytes(
                records, metric=metric, ax=whole, title="every point", legend=False
            )
            plot_quality_vs_bytes(
                records, metric=metric, ax=top, title="the top 10 points", zoom=10
            )
            out.append((self.figure_names[0].format(pooling), fig))
        return out


_NAMES = {"mrr": "MRR", "recall": "R", "ndcg": "nDCG"}


def _metric_header(name):
    kind, _, k = name.partition("@")
    return f"{_NAMES.get(kind, kind)}@{k}"


def _size(n_bytes):
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} B"


@dataclass
class RetrievalTask(Task):
    """Queries, a corpus, relevance judgements, and the sentences to fit on.

    :meth:`load` reads a BEIR folder (one that holds ``corpus.jsonl``;
    :meth:`from_beir`) or STS data
    (:func:`~sklearn_isotropy.datasets.load_sts_splits` with the
    settings' ``max_pairs``, ``seed`` and ``format``): the pairs of the
    settings' ``query_splits`` rated at least ``min_score`` give the queries
    (:meth:`from_pairs`), every distinct sentence read the corpus, and
    ``fit_on`` None is ``"train"`` when there is a train split.

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
    data_name : str, default="retrieval task"
        How reports name the task.
    notes : dict, default={}
        How it was made (counts of pairs, queries dropped, ...).
    fit_texts, fit_on : list of str and {"train", "corpus"}, default=None, "corpus"
        The sentences the post-processors are fitted on (the corpus when
        None), and what they are.

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
    data_name: str = "retrieval task"
    notes: dict = field(default_factory=dict)
    fit_texts: list | None = None
    fit_on: str = "corpus"

    name = "retrieval"
    settings_class = RetrievalSettings
    report_class = RetrievalReport
    command = "retrieval"
    command_help = (
        "compare post-processing methods for search: encode queries and a "
        "corpus (from STS pairs or a BEIR folder), post-process with each "
        "method at each dimension k and precision, and report exact-search "
        "quality, index memory and latency."
    )
    data_help = (
        "STS directory with train/dev/test files, a single file (used as "
        "test), 'stsb' to download the STS Benchmark, or a BEIR folder "
        "(corpus.jsonl, queries.jsonl, qrels/)"
    )
    default_data = "stsb"
    protocols = {
        "train": (
            "post-processors fitted on the sentences of the train split only; the "
            "queries and their relevant sentences come from held-out splits"
        ),
        "corpus": (
            "post-processors fitted on every corpus document (the collection "
            "being indexed, queries' own sentences included when they are in it)"
        ),
    }
    default_methods = ("raw", "pca", "whitening", "ppca", "natsv", "truncate")
    #: The index precisions, by name (``--quantize``), as
    #: ``register_quantization`` (in ``evaluation/_quantization.py``)
    #: fills them.
    quantizations = QUANTIZATIONS

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
            raise ValueError("relevance holds a negative or non-finite grade; use >= 0")
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
        check_fit_on(self, self.fit_on)
        self.fit_texts = list(self.corpus if self.fit_texts is None else self.fit_texts)

    @property
    def n_queries(self) -> int:
        return len(self.queries)

    @property
    def n_documents(self) -> int:
        return len(self.corpus)

    def summary(self) -> dict:
        """Return the sizes and how the task was made, for reports.

        Returns
        -------
        dict
            Counts of queries, documents and judgements, and the ``notes``.
        """
        return {
            "name": self.data_name,
            "queries": self.n_queries,
            "documents": self.n_documents,
            "relevant_judgements": int(self.relevance.nnz),
            "fit_sentences": len(self.fit_texts),
            **self.notes,
        }

    # ------------------------------------------------------------ making
    @classmethod
    def from_pairs(
        cls,
        pairs: ArrayLike,
        scores: ArrayLike,
        *,
        min_score: float = 4.0,
        symmetric: bool = False,
        extra_corpus: Iterable[str] = (),
        data_name: str = "STS pairs",
        fit_texts: list[str] | None = None,
        fit_on: str = "corpus",
    ) -> RetrievalTask:
        """Make a task from rated sentence pairs.

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
        data_name, fit_texts, fit_on : see the class
            As for the class.

        Returns
        -------
        task : RetrievalTask
            The task; its ``notes`` count the pairs used and left out.

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
        corpus += [
            t for t in dict.fromkeys(map(str, extra_corpus)) if t not in set(corpus)
        ]
        shape = (n_queries, len(corpus))
        relevance = sparse.csr_matrix(
            (qrels.relevance.data, qrels.relevance.indices, qrels.relevance.indptr),
            shape=shape,
        )
        exclude = sparse.csr_matrix(
            (np.ones(n_queries, dtype=bool), (np.arange(n_queries), qrels.queries)),
            shape=shape,
        )
        return cls(
            queries=[corpus[i] for i in qrels.queries],
            corpus=corpus,
            relevance=relevance,
            exclude=exclude,
            data_name=data_name,
            fit_texts=fit_texts,
            fit_on=fit_on,
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
    def from_beir(
        cls,
        folder: str | os.PathLike,
        *,
        split: str = "test",
        data_name: str | None = None,
    ) -> RetrievalTask:
        """Make a task from a BEIR folder.

        The queries are those of the ``split`` qrels file, in order of first
        appearance; a query whose judgements are all 0 is left out (counted
        in ``notes``). A document whose id is the query's id is excluded
        from its results, as BEIR does. The post-processors are fitted on
        the corpus.

        Parameters
        ----------
        folder : str or path-like
            The folder, as :func:`~sklearn_isotropy.datasets.load_beir` reads it.
        split : str, default="test"
            The qrels file.
        data_name : str, default=None
            How reports name the task; the folder's name when None.

        Returns
        -------
        task : RetrievalTask
            The task.

        Raises
        ------
        EvaluationError
            If a file is missing, not UTF-8 or malformed (naming file and line).
        """
        from ..datasets import load_beir

        try:
            data = load_beir(folder, split=split)
        except (OSError, ValueError) as exc:
            raise EvaluationError(str(exc)) from None
        doc_index = {d: i for i, d in enumerate(data.corpus_ids)}
        text_of = dict(zip(data.query_ids, data.queries))
        order = list(dict.fromkeys(q for q, _, _ in data.judgements))
        graded = {q for q, _, g in data.judgements if g > 0}
        kept = [q for q in order if q in graded]
        if not kept:
            raise EvaluationError(
                f"{Path(folder) / 'qrels' / f'{split}.tsv'} has no judgement with a "
                "score > 0, so no query has a relevant document"
            )
        row_of = {q: r for r, q in enumerate(kept)}
        judged = [
            (row_of[q], doc_index[d], g)
            for q, d, g in data.judgements
            if q in row_of and g > 0
        ]
        rows, cols, grades = zip(*judged)
        shape = (len(kept), len(data.corpus))
        # a document with the query's own id is not an answer, unless judged one
        own = {(r, doc_index[q]) for r, q in enumerate(kept) if q in doc_index}
        own = np.array(sorted(own - set(zip(rows, cols))), dtype=np.intp).reshape(-1, 2)
        exclude = sparse.csr_matrix(
            (np.ones(len(own), dtype=bool), (own[:, 0], own[:, 1])), shape=shape
        )
        return cls(
            queries=[text_of[q] for q in kept],
            corpus=data.corpus,
            relevance=sparse.csr_matrix((grades, (rows, cols)), shape=shape),
            exclude=exclude,
            query_ids=kept,
            corpus_ids=data.corpus_ids,
            data_name=data_name or Path(folder).expanduser().name,
            notes={
                "split": split,
                "queries_without_relevant_left_out": len(order) - len(kept),
                "queries_in_file": len(data.query_ids),
            },
        )

    @classmethod
    def load(cls, data, settings=None, *, fit_on=None, methods=()):
        s = cls.settings_class.coerce(settings)
        if fit_on is not None:
            check_fit_on(cls, fit_on)
        path = Path(data).expanduser()
        if path.is_dir() and (path / "corpus.jsonl").is_file():
            if fit_on == "train":
                raise EvaluationError(
                    f"{data} is a BEIR folder, which has no train sentences; fit on "
                    "the corpus (fit_on='corpus')"
                )
            return cls.from_beir(path, data_name=str(data))
        splits = {}
        how = {"max_pairs": s.max_pairs, "random_state": s.seed, "format": s.format}
        for split in dict.fromkeys([*s.query_splits, "train", "dev", "test"]):
            try:
                splits.update(load_sts_splits(data, [split], **how))
            except EvaluationError as exc:
                # a split the data lacks is left out; one it holds but
                # cannot read (malformed, not UTF-8) is an error
                absent = exc.__cause__ is None or isinstance(
                    exc.__cause__, FileNotFoundError
                )
                needed = split in s.query_splits or (
                    split == "train" and fit_on == "train"
                )
                if needed or not absent:
                    raise
        fit_on = fit_on or ("train" if "train" in splits else "corpus")
        queries_from = list(s.query_splits)
        extra = [
            t
            for n, b in splits.items()
            if n not in queries_from
            for t in b.pairs.ravel()
        ]
        fit_texts = None
        if fit_on == "train":
            fit_texts = list(dict.fromkeys(splits["train"].pairs.ravel().tolist()))
        try:
            task = cls.from_pairs(
                np.concatenate([splits[n].pairs for n in queries_from]),
                np.concatenate([splits[n].scores for n in queries_from]),
                min_score=s.min_score,
                symmetric=s.symmetric,
                extra_corpus=extra,
                data_name=str(data),
                fit_texts=fit_texts,
                fit_on=fit_on,
            )
        except ValueError as exc:
            raise EvaluationError(
                f"cannot make a retrieval task of {data}: {exc}"
            ) from exc
        task.notes["query_splits"] = queries_from
        task.notes["corpus_splits"] = list(splits)
        return task

    # ---------------------------------------------------- the Task protocol
    def encoder_texts(self) -> list[str]:
        """Return the texts the post-processors are fitted on (see the class).

        Returns
        -------
        texts : list of str
            The train split's sentences, or the corpus.
        """
        return list(self.fit_texts)

    def embed(self, encode):
        Q, C, F = encode_once(encode, self.queries, self.corpus, self.fit_texts)
        return {"queries": Q, "corpus": C, "fit": F}

    def n_components_for(self, method, n_features, settings):
        if not method.uses_k:
            return [None]
        ks = sorted({int(k) for k in settings.n_components if 0 < k < n_features})
        return ks + ([None] if method.full_width else [])

    @staticmethod
    def progress(records):
        head = next(m for m in records[0].values if "@" in m)
        return ", ".join(
            f"{r.values['quantization']} {head} {r.values[head]:.4f}" for r in records
        )

    def score(
        self,
        transformer: object,
        embeddings: dict,
        settings: RetrievalSettings | None = None,
    ) -> tuple[list[dict], None]:
        """Fit a clone of ``transformer``, search the corpus, score the ranking.

        The clone is fitted on the ``"fit"`` embeddings only (the corpus
        when absent), applied to the queries and the corpus, and the rows
        are scaled to unit norm so that the inner product is the cosine. For
        each of the settings' ``quantizations`` the corpus is indexed, every
        query searches it exactly and the ranking is scored.

        Parameters
        ----------
        transformer : estimator or "passthrough"
            The unfitted transformer of a method.
        embeddings : dict
            ``"queries"`` (n_queries, d) and ``"corpus"`` (n_documents, d) in
            the task's order, and optionally ``"fit"`` (n_fit, d), the fitting
            sentences (also the int8 calibration and the binary centre).
        settings : RetrievalSettings, default=None
            The options (the shared :class:`EvaluationSettings` are
            converted); the defaults when None.

        Returns
        -------
        records : list of dict
            One per precision: ``quantization``, ``dimensions`` (output
            width), ``bytes_per_vector``, ``index_bytes`` (``n_documents *
            bytes_per_vector``), each metric, ``latency_ms`` (median of
            one-query searches on one thread), ``batch_ms_per_query`` (best
            of three searches of every query), ``search_seconds``,
            ``fit_seconds``, ``transform_seconds`` and ``backend``.
        artifact : None
            No figure needs more.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_isotropy.evaluation import RetrievalSettings, RetrievalTask
        >>> rng = np.random.default_rng(0)
        >>> docs = rng.normal(size=(40, 6))
        >>> task = RetrievalTask([f"q{i}" for i in range(10)],
        ...                      [f"d{i}" for i in range(40)], np.eye(10, 40))
        >>> queries = docs[:10] + 0.01 * rng.normal(size=(10, 6))
        >>> settings = RetrievalSettings(quantizations=("float32",))
        >>> [record], _ = task.score("passthrough",
        ...                          {"queries": queries, "corpus": docs}, settings)
        >>> record["mrr@10"], record["bytes_per_vector"]
        (1.0, 24)
        """
        from sklearn.base import clone

        settings = self.settings_class.coerce(settings)
        settings.check()
        Q, C = np.asarray(embeddings["queries"]), np.asarray(embeddings["corpus"])
        if Q.shape[0] != self.n_queries or C.shape[0] != self.n_documents:
            raise ValueError(
                f"embeddings of {Q.shape[0]} queries and {C.shape[0]} documents do "
                f"not match the task's {self.n_queries} and {self.n_documents}"
            )
        F = np.asarray(embeddings.get("fit", C))
        k = max(int(name.partition("@")[2]) for name in settings.metrics)
        start = time.perf_counter()
        fitted = None
        if not (isinstance(transformer, str) and transformer == "passthrough"):
            fitted = clone(transformer).fit(F)
        fit_seconds = time.perf_counter() - start

        def apply(X):
            Z = X if fitted is None else np.asarray(fitted.transform(X))
            if not np.isfinite(Z).all():
                raise ValueError(
                    f"{type(fitted).__name__}.transform returned NaN or inf; "
                    "regularise it (e.g. shrinkage) or keep fewer components"
                )
            return normalize_rows(Z)[0]

        start = time.perf_counter()
        Q, C = apply(Q), apply(C)
        transform_seconds = time.perf_counter() - start
        calibration = apply(F)
        records = []
        for name in settings.quantizations:
            quant = QUANTIZATIONS[name]
            q_codes, c_codes = quant.encode(Q, C, calibration)
            start = time.perf_counter()
            per_query = search_scores(
                q_codes,
                c_codes,
                self.relevance,
                metrics=settings.metrics,
                exclude=self.exclude,
                metric=quant.metric,
                backend=settings.backend,
            )
            search_seconds = time.perf_counter() - start
            index = exact_index(c_codes, quant.metric, settings.backend)
            latency, batch = time_searches(
                index, q_codes, settings.latency_queries, settings.seed, k
            )
            per_vector = int(quant.bytes_per_vector(Q.shape[1]))
            records.append(
                {
                    "quantization": name,
                    "dimensions": int(Q.shape[1]),
                    "bytes_per_vector": per_vector,
                    "index_bytes": per_vector * self.n_documents,
                    **{m: float(v.mean()) for m, v in per_query.items()},
                    "latency_ms": latency,
                    "batch_ms_per_query": batch,
                    "search_seconds": search_seconds,
                    "fit_seconds": fit_seconds,
                    "transform_seconds": transform_seconds,
                    "backend": index.backend,
                }
            )
            if settings.per_query:
                records[-1]["per_query"] = {m: v.tolist() for m, v in per_query.items()}
        return records, None
