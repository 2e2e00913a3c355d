"""Retrieval evaluation: search quality, index memory and latency per method and k.

A :class:`RetrievalTask` holds queries, a corpus and relevance judgements,
made from rated STS pairs (:meth:`RetrievalTask.from_pairs`) or read from a
BEIR folder (:meth:`RetrievalTask.from_beir`). :func:`score_retrieval` fits
one transformer on the fitting sentences, embeds queries and corpus, ranks
the corpus by exact cosine (inner product) search and scores the ranking
with :func:`~sklearn_isotropy.metrics.retrieval_scores`, for each output
precision (float32, int8, binary). :func:`run_compression_study` does that
for every method of :data:`RETRIEVAL_METHODS` and every dimension ``k``;
:func:`evaluate_retrieval` loads, encodes and runs it all. Nothing here
prints or writes files: the writers of ``_retrieval_report.py`` do.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import sparse

from .._utils import import_optional, normalize_rows
from ..exceptions import EvaluationError
from ..metrics import DEFAULT_RETRIEVAL_METRICS, pairs_to_qrels, retrieval_scores
from ._search import make_index, resolve_backend, search_candidates
from ._sts import DEFAULT_MODEL_NAME, load_sts_splits

__all__ = [
    "DEFAULT_DIMENSIONS",
    "DEFAULT_QUANTIZATIONS",
    "DEFAULT_RETRIEVAL_METHODS",
    "QUANTIZATIONS",
    "RETRIEVAL_METHODS",
    "RETRIEVAL_PROTOCOLS",
    "Quantization",
    "RetrievalEvaluation",
    "RetrievalMethod",
    "RetrievalSettings",
    "RetrievalTask",
    "TASKS",
    "encode_texts",
    "evaluate_retrieval",
    "load_retrieval_task",
    "register_quantization",
    "register_retrieval_method",
    "run_compression_study",
    "score_retrieval",
]

logger = logging.getLogger(__name__)

#: Dimensions ``k`` of the compression study (those below the embedding width).
DEFAULT_DIMENSIONS = (32, 64, 128, 256)
DEFAULT_RETRIEVAL_METHODS = ("raw", "pca", "whitening", "natsv", "truncate")
DEFAULT_QUANTIZATIONS = ("float32", "int8", "binary")

#: The evaluations ``sklearn-isotropy evaluate --task`` runs, with one line each.
TASKS = {
    "sts": "Spearman x100 of pair cosines against gold scores (the STS test split)",
    "retrieval": (
        "search quality (MRR@10, recall@1/@10, nDCG@10), index memory and latency "
        "per method, dimension k and precision"
    ),
}

#: What each fitting protocol of the retrieval evaluation means, for reports.
RETRIEVAL_PROTOCOLS = {
    "train": (
        "post-processors fitted on the sentences of the train split only; the "
        "queries and their relevant sentences come from held-out splits"
    ),
    "corpus": (
        "post-processors fitted on every corpus document (the collection being "
        "indexed, queries' own sentences included when they are in it)"
    ),
}


# --------------------------------------------------------------- settings
@dataclass
class RetrievalSettings:
    """Options of the retrieval evaluation (the command line's flags).

    Parameters
    ----------
    dimensions : tuple of int, default=(32, 64, 128, 256)
        Output dimensions ``k`` of the methods that take one; those not
        below the embedding width are skipped.
    power : float, default=1.0
        Power of ``whitening`` (1 whitens fully, 0 is PCA).
    natsv_components : int, default=5
        Top directions removed by ``natsv`` (at most ``d - 1``).
    metrics : tuple of str, default=("mrr@10", "recall@1", "recall@10", \
"ndcg@10")
        Scores to report (see :func:`~sklearn_isotropy.metrics.retrieval_scores`).
    backend : {"auto", "numpy", "faiss"}, default="auto"
        Exact search engine; ``"auto"`` is faiss when installed.
    latency_queries : int, default=100
        Queries timed one at a time for the latency figure (0: no timing).
    seed : int, default=0
        Seeds the choice of timed queries.
    """

    dimensions: tuple = DEFAULT_DIMENSIONS
    power: float = 1.0
    natsv_components: int = 5
    metrics: tuple = DEFAULT_RETRIEVAL_METRICS
    backend: str = "auto"
    latency_queries: int = 100
    seed: int = 0


# ---------------------------------------------------------------- methods
@dataclass(frozen=True)
class RetrievalMethod:
    """One method of the compression study.

    Parameters
    ----------
    name : str
        The ``--retrieval-methods`` name.
    label : str
        Table label; ``{k}`` is replaced by the output dimension and
        ``{settings.<field>}`` by a field of :class:`RetrievalSettings`.
    help : str
        One line for ``--help``.
    build : callable
        ``build(k, n_features, settings)`` returns the unfitted transformer
        (or ``"passthrough"``) for output dimension ``k`` (None: the full
        width, or the method's own width if it does not take ``k``).
    uses_k : bool
        Whether the method is run at each dimension of the study.
    full_width : bool
        Whether a method that uses ``k`` also runs at the full width.
    """

    name: str
    label: str
    help: str
    build: Callable
    uses_k: bool = False
    full_width: bool = True

    def dimensions(self, n_features, settings):
        """The ``k`` values to run: None is the full width."""
        if not self.uses_k:
            return [None]
        ks = sorted({int(k) for k in settings.dimensions if 0 < k < n_features})
        return ks + ([None] if self.full_width else [])


#: The methods of the compression study, by name, in report order.
RETRIEVAL_METHODS: dict[str, RetrievalMethod] = {}


def register_retrieval_method(
    name, *, label=None, help="", uses_k=False, full_width=True
):
    """Decorator that adds ``build`` to :data:`RETRIEVAL_METHODS` under ``name``.

    Parameters
    ----------
    name : str
        The method's name; must not be taken.
    label : str, default=None
        Table label (``{k}`` is the output dimension); the name when None.
    help : str, default=""
        One line for ``--help``.
    uses_k : bool, default=False
        Run the method at every dimension ``k`` of the study.
    full_width : bool, default=True
        With `uses_k`, also run it at the full width.

    Returns
    -------
    decorator : callable
        Registers and returns ``build(k, n_features, settings)``.

    Examples
    --------
    >>> from sklearn.random_projection import GaussianRandomProjection
    >>> from sklearn_isotropy.evaluation import (
    ...     RETRIEVAL_METHODS, register_retrieval_method)
    >>> @register_retrieval_method("projection", label="random-{k}", uses_k=True,
    ...                            full_width=False, help="random projection")
    ... def build(k, n_features, settings):
    ...     return GaussianRandomProjection(k, random_state=settings.seed)
    >>> "projection" in RETRIEVAL_METHODS
    True
    >>> del RETRIEVAL_METHODS["projection"]  # keep the registry as it was
    """
    if not isinstance(name, str) or not name or "," in name:
        raise ValueError(
            f"A method name must be a non-empty str without commas; got {name!r}."
        )
    if name in RETRIEVAL_METHODS:
        raise ValueError(f"The retrieval method {name!r} is already registered.")

    def decorator(build):
        RETRIEVAL_METHODS[name] = RetrievalMethod(
            name, label or name, help, build, uses_k, full_width
        )
        return build

    return decorator


@register_retrieval_method("raw", label="raw", help="the embeddings as they are")
def _build_raw(k, n_features, settings):
    return "passthrough"


@register_retrieval_method(
    "pca",
    label="PCA-{k}",
    uses_k=True,
    help="centre and keep the top k principal directions (whitening, power 0)",
)
def _build_pca(k, n_features, settings):
    from ..linear import WhiteningTransformer

    return WhiteningTransformer(n_components=k, power=0.0)


@register_retrieval_method(
    "whitening",
    label="whitening-{k}",
    uses_k=True,
    help="BERT-whitening keeping k dimensions, at --power",
)
def _build_whitening(k, n_features, settings):
    from ..linear import WhiteningTransformer

    return WhiteningTransformer(n_components=k, power=settings.power)


@register_retrieval_method(
    "natsv",
    label="NATSV-{settings.natsv_components}",
    help="null the top --natsv-components principal directions (no compression)",
)
def _build_natsv(k, n_features, settings):
    from ..linear import NATSVTransformer

    return NATSVTransformer(n_components=min(settings.natsv_components, n_features - 1))


def _first_columns(X, k):
    return np.asarray(X)[:, :k]


@register_retrieval_method(
    "truncate",
    label="truncate-{k}",
    uses_k=True,
    full_width=False,
    help="keep the first k coordinates of the raw embeddings",
)
def _build_truncate(k, n_features, settings):
    from sklearn.preprocessing import FunctionTransformer

    return FunctionTransformer(_first_columns, kw_args={"k": k})


# ---------------------------------------------------------- quantizations
@dataclass(frozen=True)
class Quantization:
    """One output precision of the index.

    Parameters
    ----------
    name : str
        The ``--quantize`` name.
    help : str
        One line for ``--help`` and the reports.
    encode : callable
        ``encode(queries, corpus, calibration)`` returns the query and corpus
        codes from unit-norm float rows; `calibration` is the unit-norm
        output of the method on the fitting sentences.
    metric : {"ip", "hamming"}
        How codes are compared.
    bytes_per_vector : callable
        ``bytes_per_vector(d)``: the index size of one vector of width ``d``.
    """

    name: str
    help: str
    encode: Callable
    metric: str
    bytes_per_vector: Callable


#: Output precisions of the index, by name.
QUANTIZATIONS: dict[str, Quantization] = {}


def register_quantization(name, *, help, metric, bytes_per_vector):
    """Decorator that adds ``encode`` to :data:`QUANTIZATIONS` under ``name``.

    Parameters
    ----------
    name : str
        The precision's name; must not be taken.
    help : str
        One line describing it.
    metric : {"ip", "hamming"}
        Inner product of the codes, or Hamming distance of packed bits.
    bytes_per_vector : callable
        ``bytes_per_vector(d) -> int``.

    Returns
    -------
    decorator : callable
        Registers and returns ``encode(queries, corpus, calibration)``.
    """
    if name in QUANTIZATIONS:
        raise ValueError(f"The quantization {name!r} is already registered.")
    if metric not in ("ip", "hamming"):
        raise ValueError(f"metric must be 'ip' or 'hamming'; got {metric!r}")

    def decorator(encode):
        QUANTIZATIONS[name] = Quantization(name, help, encode, metric, bytes_per_vector)
        return encode

    return decorator


def _quantize(embeddings, precision, **kwargs):
    st = import_optional(
        "sentence_transformers",
        purpose="int8 and binary quantisation (quantize_embeddings)",
        extra="retrieval",
    )
    return st.quantize_embeddings(embeddings, precision=precision, **kwargs)


@register_quantization(
    "float32",
    help="float32 unit vectors, inner product (= cosine)",
    metric="ip",
    bytes_per_vector=lambda d: 4 * d,
)
def _encode_float32(queries, corpus, calibration):
    return queries.astype(np.float32), corpus.astype(np.float32)


@register_quantization(
    "int8",
    help="int8 codes of the unit vectors (sentence-transformers' quantize_embeddings, "
    "ranges calibrated on the fitting sentences), integer inner product",
    metric="ip",
    bytes_per_vector=lambda d: d,
)
def _encode_int8(queries, corpus, calibration):
    cal = calibration.astype(np.float32)
    return (
        _quantize(queries.astype(np.float32), "int8", calibration_embeddings=cal),
        _quantize(corpus.astype(np.float32), "int8", calibration_embeddings=cal),
    )


@register_quantization(
    "binary",
    help="sign bits of the unit vectors centred on the fitting sentences' mean "
    "(quantize_embeddings 'ubinary'), Hamming distance",
    metric="hamming",
    bytes_per_vector=lambda d: -(-d // 8),
)
def _encode_binary(queries, corpus, calibration):
    centre = calibration.mean(axis=0)
    return (
        _quantize((queries - centre).astype(np.float32), "ubinary"),
        _quantize((corpus - centre).astype(np.float32), "ubinary"),
    )


@register_quantization(
    "binary-uncentred",
    help="sign bits of the unit vectors without centring, Hamming distance",
    metric="hamming",
    bytes_per_vector=lambda d: -(-d // 8),
)
def _encode_binary_uncentred(queries, corpus, calibration):
    return (
        _quantize(queries.astype(np.float32), "ubinary"),
        _quantize(corpus.astype(np.float32), "ubinary"),
    )


# ------------------------------------------------------------------- task
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


# --------------------------------------------------------------- encoding
def encode_texts(
    texts,
    *,
    model=None,
    pooling="mean",
    batch_size=64,
    device="cpu",
    cache=None,
    progress=False,
):
    """Encode texts with :class:`~sklearn_isotropy.BertPoolingVectorizer`.

    Parameters
    ----------
    texts : list of str
        Texts to encode (encode each distinct text once).
    model : None, str or path-like, default=None
        The encoder; None is the embedded all-MiniLM-L6-v2.
    pooling : str, default="mean"
        A pooling preset.
    batch_size : int, default=64
        Encoding batch size.
    device : str, default="cpu"
        Torch device.
    cache : None, str or path-like, default=None
        The vectorizer's ``memory=``: encodings cached across runs.
    progress : bool, default=False
        Show the encoder's progress bar.

    Returns
    -------
    embeddings : ndarray of shape (n_texts, d)
    seconds : float
        Encoding time.

    Raises
    ------
    EvaluationError
        If the model cannot be loaded.
    """
    from ..text import BertPoolingVectorizer

    vec = BertPoolingVectorizer(
        model,
        pooling=pooling,
        batch_size=batch_size,
        device=device,
        memory=cache,
        show_progress_bar=progress,
    )
    try:
        vec.fit(texts[:1])
    except (OSError, ValueError, ImportError, RuntimeError) as exc:
        name = model or "the default all-MiniLM-L6-v2"
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        raise EvaluationError(
            f"cannot load model {name}: {'; '.join(lines) or repr(exc)}"
        ) from exc
    start = time.perf_counter()
    E = vec.transform(texts)
    return E, time.perf_counter() - start


# ---------------------------------------------------------------- scoring
def _candidate_judgements(task, documents, scores):
    """Relevance and scores restricted to each query's candidates (see below).

    Column ``j`` of row ``q`` is the ``j``-th candidate of query ``q``; the
    relevant documents that are not candidates follow with score ``-inf``
    and the row is padded with irrelevant ``-inf`` columns. Every candidate
    list holds at least ``k`` documents and every document tied with the
    ``k``-th, so ranks up to ``k`` — all that the metrics read — are those
    of the full ranking.
    """
    rel = task.relevance
    rows_rel, rows_score = [], []
    for q in range(task.n_queries):
        lo, hi = rel.indptr[q], rel.indptr[q + 1]
        grade_of = dict(zip(rel.indices[lo:hi].tolist(), rel.data[lo:hi].tolist()))
        docs = documents[q].tolist()
        grades = [grade_of.pop(d, 0.0) for d in docs]
        rows_rel.append(grades + list(grade_of.values()))
        rows_score.append(list(scores[q]) + [-np.inf] * len(grade_of))
    width = max(len(r) for r in rows_rel)
    y_true = np.zeros((task.n_queries, width))
    y_score = np.full((task.n_queries, width), -np.inf)
    for q, (g, s) in enumerate(zip(rows_rel, rows_score)):
        y_true[q, : len(g)] = g
        y_score[q, : len(s)] = s
    return y_true, y_score


def _max_cutoff(metrics):
    from ..metrics import make_retrieval_scorer

    for name in metrics:
        make_retrieval_scorer(name)  # validates the name
    return max(int(name.partition("@")[2]) for name in metrics)


def _latency(index, queries, n_timed, seed, k):
    """Median ms of one-query searches (one thread), and a batched search per query."""
    if n_timed <= 0:
        return None, None
    rng = np.random.RandomState(seed)
    picked = rng.permutation(queries.shape[0])[: min(n_timed, queries.shape[0])]
    times = []
    with index.one_thread():  # one query, one thread: a serving process's view
        index.search(queries[picked[:1]], k)  # warm-up
        for i in picked:
            start = time.perf_counter()
            index.search(queries[i : i + 1], k)
            times.append(time.perf_counter() - start)
    start = time.perf_counter()
    index.search(queries, k)
    batch = time.perf_counter() - start
    return 1e3 * float(np.median(times)), 1e3 * batch / queries.shape[0]


def score_retrieval(
    query_emb,
    corpus_emb,
    task,
    *,
    transformer="passthrough",
    fit_emb=None,
    quantizations=("float32",),
    settings=None,
):
    """Fit one transformer, search the corpus and score the ranking.

    The transformer (a clone) is fitted on `fit_emb` only, applied to the
    queries and the corpus, and the rows are scaled to unit norm so that
    the inner product is the cosine. For each precision of
    `quantizations` the corpus is indexed, every query searches it exactly
    and the ranking is scored (ties averaged, see
    :func:`~sklearn_isotropy.metrics.retrieval_scores`); the index memory is
    ``n_documents * bytes_per_vector`` and the latency is timed on the same
    index.

    Parameters
    ----------
    query_emb : ndarray of shape (n_queries, d)
        Query embeddings, in the order of ``task.queries``.
    corpus_emb : ndarray of shape (n_documents, d)
        Document embeddings, in the order of ``task.corpus``.
    task : RetrievalTask
        The judgements.
    transformer : estimator or "passthrough", default="passthrough"
        Any transformer or pipeline on embeddings.
    fit_emb : ndarray of shape (n_fit, d), default=None
        The fitting sentences' embeddings (also the int8 calibration and
        the binary centre); the corpus when None.
    quantizations : sequence of str, default=("float32",)
        Names in :data:`QUANTIZATIONS`.
    settings : RetrievalSettings, default=None
        Metrics, backend and latency options.

    Returns
    -------
    records : list of dict
        One per precision: ``quantization``, ``dimensions`` (output width),
        ``bytes_per_vector``, ``index_bytes``, each metric, ``latency_ms``
        (median of one-query searches on one thread), ``batch_ms_per_query``,
        ``fit_seconds``, ``transform_seconds`` and ``backend``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_isotropy.evaluation import RetrievalTask, score_retrieval
    >>> rng = np.random.default_rng(0)
    >>> docs = rng.normal(size=(40, 6))
    >>> task = RetrievalTask([f"q{i}" for i in range(10)],
    ...                      [f"d{i}" for i in range(40)], np.eye(10, 40))
    >>> queries = docs[:10] + 0.01 * rng.normal(size=(10, 6))
    >>> [record] = score_retrieval(queries, docs, task)
    >>> record["mrr@10"], record["bytes_per_vector"]
    (1.0, 24)
    """
    from sklearn.base import clone

    settings = settings or RetrievalSettings()
    query_emb, corpus_emb = np.asarray(query_emb), np.asarray(corpus_emb)
    if query_emb.shape[0] != task.n_queries or corpus_emb.shape[0] != task.n_documents:
        raise ValueError(
            f"embeddings of {query_emb.shape[0]} queries and {corpus_emb.shape[0]} "
            f"documents do not match the task's {task.n_queries} and "
            f"{task.n_documents}"
        )
    unknown = [q for q in quantizations if q not in QUANTIZATIONS]
    if unknown:
        raise ValueError(
            f"unknown quantization(s) {unknown}; choose from {', '.join(QUANTIZATIONS)}"
        )
    k = _max_cutoff(settings.metrics)
    backend = resolve_backend(settings.backend)
    fit_emb = corpus_emb if fit_emb is None else np.asarray(fit_emb)
    start = time.perf_counter()
    if isinstance(transformer, str) and transformer == "passthrough":
        fitted = None
    else:
        fitted = clone(transformer).fit(fit_emb)
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
    Q, C = apply(query_emb), apply(corpus_emb)
    transform_seconds = time.perf_counter() - start
    calibration = apply(fit_emb)
    records = []
    for name in quantizations:
        quant = QUANTIZATIONS[name]
        q_codes, c_codes = quant.encode(Q, C, calibration)
        start = time.perf_counter()
        documents, scores = search_candidates(
            q_codes,
            c_codes,
            k=k,
            metric=quant.metric,
            backend=backend,
            exclude=task.exclude,
        )
        search_seconds = time.perf_counter() - start
        y_true, y_score = _candidate_judgements(task, documents, scores)
        values = retrieval_scores(y_true, y_score, metrics=settings.metrics)
        index = make_index(c_codes, quant.metric, backend)
        latency, batch = _latency(
            index, q_codes, settings.latency_queries, settings.seed, k
        )
        per_vector = int(quant.bytes_per_vector(Q.shape[1]))
        records.append(
            {
                "quantization": name,
                "dimensions": int(Q.shape[1]),
                "bytes_per_vector": per_vector,
                "index_bytes": per_vector * task.n_documents,
                **values,
                "latency_ms": latency,
                "batch_ms_per_query": batch,
                "search_seconds": search_seconds,
                "fit_seconds": fit_seconds,
                "transform_seconds": transform_seconds,
                "backend": backend,
            }
        )
    return records


def run_compression_study(
    query_emb,
    corpus_emb,
    task,
    *,
    fit_emb=None,
    methods=DEFAULT_RETRIEVAL_METHODS,
    quantizations=DEFAULT_QUANTIZATIONS,
    transformers=None,
    settings=None,
    log=None,
):
    """Score every method at every dimension and precision.

    Parameters
    ----------
    query_emb, corpus_emb : ndarray
        Embeddings of ``task.queries`` and ``task.corpus``.
    task : RetrievalTask
        The judgements.
    fit_emb : ndarray of shape (n_fit, d), default=None
        The fitting sentences' embeddings; the corpus when None.
    methods : sequence of str, default=DEFAULT_RETRIEVAL_METHODS
        Names in :data:`RETRIEVAL_METHODS`.
    quantizations : sequence of str, default=("float32", "int8", "binary")
        Names in :data:`QUANTIZATIONS`.
    transformers : dict of str to estimator, default=None
        More transformers to score, by label (each at its own width).
    settings : RetrievalSettings, default=None
        Dimensions, power, metrics, backend, latency options.
    log : callable, default=None
        Called with one line after each method and dimension.

    Returns
    -------
    records : list of dict
        One per (method, k, precision): ``method``, ``label``, ``k`` (None:
        full width) and the fields of :func:`score_retrieval`; a failed
        method has an ``error`` instead of scores. The warnings each fit
        raised are in ``warnings``.
    """
    settings = settings or RetrievalSettings()
    log = log or (lambda line: None)
    unknown = [m for m in methods if m not in RETRIEVAL_METHODS]
    if unknown:
        raise ValueError(
            f"unknown retrieval method(s) {unknown}; choose from "
            f"{', '.join(RETRIEVAL_METHODS)}"
        )
    d = np.asarray(corpus_emb).shape[1]
    runs = []
    for name in dict.fromkeys(methods):
        method = RETRIEVAL_METHODS[name]
        for k in method.dimensions(d, settings):
            label = method.label.format(k=k if k is not None else d, settings=settings)
            runs.append((name, label, k, method.build(k, d, settings)))
    for label, estimator in (transformers or {}).items():
        runs.append(("custom", str(label), None, estimator))
    records = []
    for name, label, k, transformer in runs:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                found = score_retrieval(
                    query_emb,
                    corpus_emb,
                    task,
                    transformer=transformer,
                    fit_emb=fit_emb,
                    quantizations=quantizations,
                    settings=settings,
                )
            except (ValueError, RuntimeError, np.linalg.LinAlgError) as exc:
                msg = " ".join(str(exc).split())
                log(f"{label} failed: {msg}")
                records.append({"method": name, "label": label, "k": k, "error": msg})
                continue
        messages = sorted({str(w.message) for w in caught})
        for record in found:
            records.append(
                {"method": name, "label": label, "k": k, **record, "warnings": messages}
            )
        head = settings.metrics[0]
        log(
            f"{label}: "
            + ", ".join(f"{r['quantization']} {head} {r[head]:.4f}" for r in found)
        )
    return records


# ---------------------------------------------------------------- running
@dataclass
class RetrievalEvaluation:
    """Everything one :func:`evaluate_retrieval` run measured.

    Attributes
    ----------
    data : str
        The data source.
    model : str or None
        The encoder asked for (None: the embedded default).
    model_name : str
        The encoder, for reports.
    poolings : list of str
        Poolings run, in order.
    fit_on : str
        The fitting protocol; ``protocol`` says what it means.
    task : dict
        :meth:`RetrievalTask.summary` of the task.
    settings : RetrievalSettings
        The options.
    methods, quantizations : list of str
        What was run.
    encodings : dict
        Per pooling: texts encoded and seconds.
    records : dict of str to list of dict
        Per pooling, the records of :func:`run_compression_study`.
    """

    data: str
    model: str | None
    poolings: list
    fit_on: str
    task: dict
    settings: RetrievalSettings
    methods: list
    quantizations: list
    encodings: dict = field(default_factory=dict)
    records: dict = field(default_factory=dict)

    @property
    def model_name(self) -> str:
        return self.model or DEFAULT_MODEL_NAME

    @property
    def protocol(self) -> str:
        return RETRIEVAL_PROTOCOLS[self.fit_on]


def evaluate_retrieval(
    data="stsb",
    *,
    model=None,
    poolings=("mean",),
    methods=DEFAULT_RETRIEVAL_METHODS,
    quantizations=DEFAULT_QUANTIZATIONS,
    settings=None,
    fit_on=None,
    min_score=4.0,
    symmetric=False,
    query_splits=("test",),
    max_pairs=None,
    transformers=None,
    batch_size=64,
    device="cpu",
    cache=None,
    progress=False,
    log=None,
    data_name=None,
):
    """Load a retrieval task, encode it and run the compression study.

    Parameters
    ----------
    data : str, path-like or tuple, default="stsb"
        What :func:`load_retrieval_task` reads, or ``(task, fit_texts,
        fit_on)`` already loaded.
    model : None, str or path-like, default=None
        The encoder; None is the embedded all-MiniLM-L6-v2.
    poolings : sequence of str, default=("mean",)
        Pooling presets to evaluate.
    methods : sequence of str, default=DEFAULT_RETRIEVAL_METHODS
        Names in :data:`RETRIEVAL_METHODS`.
    quantizations : sequence of str, default=("float32", "int8", "binary")
        Names in :data:`QUANTIZATIONS`.
    settings : RetrievalSettings, default=None
        Dimensions, power, metrics, backend, latency options.
    fit_on : {"train", "corpus"}, default=None
        The fitting protocol (see :func:`load_retrieval_task`).
    min_score : float, default=4.0
        Relevance threshold of STS pairs.
    symmetric : bool, default=False
        Query with both sentences of a relevant pair.
    query_splits : sequence of str, default=("test",)
        STS splits whose pairs give the queries.
    max_pairs : int, default=None
        Random subset of at most this many pairs per STS split.
    transformers : dict of str to estimator, default=None
        More transformers to score, by label.
    batch_size : int, default=64
        Encoding batch size.
    device : str, default="cpu"
        Torch device of the encoder.
    cache : None, str or path-like, default=None
        Directory caching encodings across runs.
    progress : bool, default=False
        The encoder's progress bar.
    log : callable, default=None
        Called with one line of progress text after each step.
    data_name : str, default=None
        How the reports name the data; ``str(data)`` when None.

    Returns
    -------
    evaluation : RetrievalEvaluation
    """
    settings = settings or RetrievalSettings()
    log = log or (lambda line: None)
    unknown = [m for m in methods if m not in RETRIEVAL_METHODS]
    unknown += [q for q in quantizations if q not in QUANTIZATIONS]
    if unknown:
        raise ValueError(
            f"unknown method or quantization {unknown}; methods: "
            f"{', '.join(RETRIEVAL_METHODS)}; quantizations: {', '.join(QUANTIZATIONS)}"
        )
    if isinstance(data, tuple):
        task, fit_texts, fit_on = data
        data_name = data_name or task.name
    else:
        task, fit_texts, fit_on = load_retrieval_task(
            data,
            fit_on=fit_on,
            min_score=min_score,
            symmetric=symmetric,
            query_splits=query_splits,
            max_pairs=max_pairs,
            random_state=settings.seed,
        )
    ev = RetrievalEvaluation(
        data=data_name or str(data),
        model=None if model is None else str(model),
        poolings=list(dict.fromkeys(poolings)),
        fit_on=fit_on,
        task=task.summary(),
        settings=settings,
        methods=list(dict.fromkeys(methods)),
        quantizations=list(dict.fromkeys(quantizations)),
    )
    log(
        f"retrieval task: {task.n_queries} queries, {task.n_documents} documents; "
        f"fitting on {len(fit_texts)} sentences ({fit_on})"
    )
    texts = list(dict.fromkeys([*task.queries, *task.corpus, *fit_texts]))
    where = {t: i for i, t in enumerate(texts)}
    for pooling in ev.poolings:
        E, seconds = encode_texts(
            texts,
            model=model,
            pooling=pooling,
            batch_size=batch_size,
            device=device,
            cache=cache,
            progress=progress,
        )
        ev.encodings[pooling] = {"texts": len(texts), "seconds": seconds}
        log(f"[{pooling}] encoded {len(texts)} distinct texts in {seconds:.1f} s")

        def rows(items, E=E):
            return E[[where[t] for t in items]]

        ev.records[pooling] = run_compression_study(
            rows(task.queries),
            rows(task.corpus),
            task,
            fit_emb=rows(fit_texts),
            methods=ev.methods,
            quantizations=ev.quantizations,
            transformers=transformers,
            settings=settings,
            log=lambda line, p=pooling: log(f"[{p}] {line}"),
        )
    return ev
