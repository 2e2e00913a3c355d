"""Retrieval evaluation: search quality, index memory and latency per method and k.

:func:`score_retrieval` fits one transformer on the fitting sentences,
embeds the queries and the corpus of a
:class:`~sklearn_isotropy.evaluation.RetrievalTask`, ranks the corpus by
exact cosine (inner product) search and scores the ranking with
:func:`~sklearn_isotropy.metrics.retrieval_scores`, for each output
precision (float32, int8, binary). :func:`run_compression_study` does that
for every method of :data:`~sklearn_isotropy.evaluation.RETRIEVAL_METHODS`
and every dimension ``k``; :func:`evaluate_retrieval` loads, encodes and
runs it all. Nothing here prints or writes files: the writers of
``_retrieval_report.py`` do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .._utils import normalize_rows
from ..exceptions import EvaluationError
from ..metrics import retrieval_scores
from ._retrieval_methods import (
    DEFAULT_QUANTIZATIONS,
    DEFAULT_RETRIEVAL_METHODS,
    QUANTIZATIONS,
    RETRIEVAL_METHODS,
    RETRIEVAL_PROTOCOLS,
    RetrievalSettings,
)
from ._retrieval_task import load_retrieval_task
from ._search import make_index, resolve_backend, search_candidates
from ._sts import DEFAULT_MODEL_NAME, record_warnings

__all__ = [
    "RetrievalEvaluation",
    "encode_texts",
    "evaluate_retrieval",
    "run_compression_study",
    "score_retrieval",
]


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
    """Median ms of one-query searches (one thread); best of 3 batched, per query."""
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
    batch = np.inf
    for _ in range(3):  # the best of three: one slow moment is not the search
        start = time.perf_counter()
        index.search(queries, k)
        batch = min(batch, time.perf_counter() - start)
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
        (median of one-query searches on one thread), ``batch_ms_per_query``
        (the best of three searches of every query, divided by their number),
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
        per_query = retrieval_scores(
            y_true, y_score, metrics=settings.metrics, average=False
        )
        values = {m: float(v.mean()) for m, v in per_query.items()}
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
        if settings.per_query:
            records[-1]["per_query"] = {m: v.tolist() for m, v in per_query.items()}
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
            runs.append((name, method.label, k, method.build(k, d, settings)))
    for label, estimator in (transformers or {}).items():
        template = str(label).replace("{", "{{").replace("}", "}}")
        runs.append(("custom", template, None, estimator))
    records = []
    for name, template, k, transformer in runs:
        label = template.format(k=k if k is not None else d, settings=settings)
        with record_warnings() as caught:
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
        if k is None:  # the full width may be capped (e.g. at the covariance rank)
            label = template.format(k=found[0]["dimensions"], settings=settings)
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
    missing = {
        q: QUANTIZATIONS[q].missing()
        for q in quantizations
        if QUANTIZATIONS[q].missing()
    }
    if missing:
        needs = sorted({m for ms in missing.values() for m in ms})
        raise EvaluationError(
            f"the precision(s) {', '.join(missing)} need {', '.join(needs)}, "
            'which is not installed: pip install "sklearn-isotropy[retrieval]", '
            "or keep to float32 (--quantize float32)"
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
