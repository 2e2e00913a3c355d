"""The task protocol and the one loop that runs any task.

A :class:`Task` is labelled data and a way to score a transformer on it:
:class:`~sklearn_isotropy.evaluation.STSTask` scores Spearman's rho of pair
cosines, :class:`~sklearn_isotropy.evaluation.RetrievalTask` scores exact
search. A task describes itself in class attributes (its settings class,
its report class, its command's name, help and default data), as a
sentence-transformers module names its ``config_keys``; the command line
reads them. :func:`evaluate` encodes a task's texts once per pooling
(:func:`encode_texts`), runs every method of
:data:`~sklearn_isotropy.evaluation.METHODS` at the ``n_components`` the task
asks for, records what each raised, and returns an :class:`Evaluation`:
records, as ``cross_validate`` returns ``cv_results_``. The task's report
(beside the task, on the base of ``_report.py``) renders them. Nothing here
prints or writes files.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .._defaults import DEFAULT_MODEL, DEFAULT_MODEL_DESCRIPTION, DEFAULT_MODEL_NAME
from .._utils import record_warnings, reraise_once, warn
from ..exceptions import (
    EvaluationError,
    EvaluationWarning,
    IsotropyDeprecationWarning,
)
from ._methods import METHODS, Method
from ._settings import EncodingSettings, EvaluationSettings

__all__ = ["Evaluation", "Record", "Task", "encode_texts", "evaluate"]


class Task(ABC):
    """Labelled data and how a transformer is scored on it.

    Adding a task is one module holding the task, which implements these
    methods and sets the class attributes, its settings class (a subclass
    of :class:`~sklearn_isotropy.evaluation.EvaluationSettings` with the
    task's own fields) and its report (a subclass of the report base of
    ``_report.py``), and adding the task to
    :data:`~sklearn_isotropy.evaluation.TASKS`: the command line then has a
    subcommand for it.
    """

    #: The task's name, as reports and ``TASKS`` name it ("sts", "retrieval").
    name: ClassVar[str]
    #: The options the task reads: ``EvaluationSettings`` and the task's own.
    settings_class: ClassVar[type[EvaluationSettings]]
    #: The class that renders the task's evaluations (tables, Markdown, JSON,
    #: figures); the command line reads the names of the files it writes
    #: (``stem``, ``figure_names``) before any work.
    report_class: ClassVar[type]
    #: The task's subcommand of ``sklearn-isotropy`` ("evaluate").
    command: ClassVar[str]
    #: What the subcommand does, a sentence: the words before its first colon
    #: are the one line of ``sklearn-isotropy --help``.
    command_help: ClassVar[str]
    #: What ``--data`` reads, for its help line.
    data_help: ClassVar[str]
    #: The default of ``--data``; None makes ``--data`` required.
    default_data: ClassVar[str | None] = None
    #: What each fitting protocol (``fit_on``) means, as written in reports.
    protocols: ClassVar[dict]
    #: The methods run when none are named.
    default_methods: ClassVar[tuple]
    #: Whether the task holds labelled dev pairs (:meth:`dev_pairs`), which
    #: the methods that select on them (``needs_dev``) read.
    has_dev: ClassVar[bool] = False
    #: Whether the task selects with its own labels, inside its folds: a
    #: selecting method (``needs_dev``) then builds a
    #: ``SearchSpace`` of candidates that
    #: :meth:`score` searches.
    selects_on_labels: ClassVar[bool] = False

    #: The fitting protocol of this instance (a key of :attr:`protocols`).
    fit_on: str
    #: How reports name the data.
    data_name: str

    @classmethod
    @abstractmethod
    def load(
        cls,
        data: str | os.PathLike,
        settings: EvaluationSettings | None = None,
        *,
        fit_on: str | None = None,
        methods: Sequence[str] = (),
    ) -> Task:
        """Read the task from ``data``.

        Parameters
        ----------
        data : str or path-like
            A path, or a name the task knows (``"stsb"``).
        settings : EvaluationSettings, default=None
            The options, of which loading reads some (``max_pairs``...): the
            task's :attr:`settings_class`, or the shared options
            (converted by its ``coerce``); the defaults when None.
        fit_on : str, default=None
            The fitting protocol, a key of :attr:`protocols`; the first when None.
        methods : sequence of str, default=()
            The methods to run, if only some of the data is needed for them.

        Returns
        -------
        task : Task
            The task, ready to :meth:`embed` and :meth:`score`.

        Raises
        ------
        EvaluationError
            If the data cannot be read, or the protocol needs data it lacks.
        """

    @abstractmethod
    def embed(self, encode: Callable[[list[str]], np.ndarray]) -> dict:
        """Encode the task's texts into what :meth:`score` reads.

        Parameters
        ----------
        encode : callable
            ``encode(texts) -> embeddings``, called once, with every
            distinct text the task needs.

        Returns
        -------
        embeddings : dict of str to ndarray
            The embeddings by role (``"test"``, ``"queries"``...).
        """

    @abstractmethod
    def n_components_for(
        self, method: Method, n_features: int, settings: EvaluationSettings
    ) -> list[int | None]:
        """Return the output dimensions (``n_components``) to run ``method`` at.

        Parameters
        ----------
        method : Method
            The method to run.
        n_features : int
            The width of the embeddings.
        settings : EvaluationSettings
            The options.

        Returns
        -------
        n_components : list of int or None
            One run per entry; None is the full width.
        """

    def encoder_texts(self) -> list[str] | None:
        """Return the texts an encoder that learns from texts is fitted on.

        The static vectorizer (``encoder="static"``) learns token
        frequencies and refines its table on texts; fitted on the sentences
        it is scored on, its raw score would flatter it. A task names texts
        apart from those scored (STS: the train split's sentences, whatever
        the protocol of the transforms). None fits it on every text the
        task encodes.

        Returns
        -------
        texts : list of str or None
            The texts, or None.
        """
        return None

    @abstractmethod
    def score(
        self, transformer: object, embeddings: dict, settings: EvaluationSettings
    ) -> tuple[list[dict], object]:
        """Fit a clone of ``transformer`` and score it.

        Parameters
        ----------
        transformer : estimator or "passthrough"
            The unfitted transformer of a method.
        embeddings : dict
            What :meth:`embed` returned.
        settings : EvaluationSettings
            The options, as the task's :attr:`settings_class`.

        Returns
        -------
        records : list of dict
            Each with the output ``dimensions``, ``fit_seconds`` and the
            task's scores.
        artifact : object
            What the task's figures need, or None.
        """

    def dev_pairs(self, embeddings: dict) -> tuple[np.ndarray, np.ndarray]:
        """Return the labelled dev pairs, for the methods that select on them.

        Parameters
        ----------
        embeddings : dict
            What :meth:`embed` returned.

        Returns
        -------
        pairs : ndarray of shape (n_pairs, 2, n_features)
            The embeddings of the dev pairs.
        scores : ndarray of shape (n_pairs,)
            Their gold scores.

        Raises
        ------
        EvaluationError
            If the task has no dev pairs (:attr:`has_dev` is False).
        """
        raise EvaluationError(f"the {self.name} task has no labelled dev pairs")

    @staticmethod
    def progress(records: list[Record]) -> str:
        """Describe one run's records in a line of progress text.

        :func:`evaluate` logs it after each run, behind the run's label; the
        task says which of its scores matter at a glance, the reports
        render the rest.

        Parameters
        ----------
        records : list of Record
            The records of one run.

        Returns
        -------
        str
            The line; empty by default.
        """
        return ""


def check_fit_on(task, fit_on):
    """Raise an ``EvaluationError`` unless ``fit_on`` is a protocol of ``task``."""
    if fit_on not in task.protocols:
        raise EvaluationError(
            f"fit_on must be one of {tuple(task.protocols)} for the {task.name} "
            f"task; got {fit_on!r}"
        )


def encode_once(encode, *groups):
    """Return the embeddings of each group of texts, each distinct text once."""
    texts = list(dict.fromkeys(t for group in groups for t in group))
    E, row = encode(texts), {t: i for i, t in enumerate(texts)}
    return [E[[row[t] for t in group]] for group in groups]


@dataclass
class Record:
    """One run's result: a method at one dimension, for one pooling.

    What :func:`evaluate` returns in an evaluation's ``records``, as
    ``cross_validate`` returns ``cv_results_``. The fields every task has
    are attributes; what the task measured is in ``values``, by the
    task's own names (``spearman_x100``; ``ndcg@10`` and ``quantization``;
    ``task``, ``estimator`` and ``score``). The JSON report holds each
    record as :meth:`to_dict` flattens it.

    Parameters
    ----------
    method : str
        The method's name in :data:`METHODS` (``"custom"`` for a transformer
        passed in by label).
    label : str
        The method's table label at this run (``"whitening-256"``).
    k : int or None
        The output dimension asked for (the ``n_components`` of the run);
        None is the full width.
    params : dict
        What the method reports about itself (its ``n_components``, what a
        grid chose...).
    pooling : str, default=""
        The pooling the embeddings came from.
    values : dict, default={}
        The task's measurements (scores, times, sizes).
    warnings : list of str, default=[]
        What the run warned, one line each.
    error : str or None, default=None
        Why the run failed; None when it ran (then ``values`` holds its
        scores).
    """

    method: str
    label: str
    k: int | None
    params: dict
    pooling: str = ""
    values: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict:
        """Return the record as one flat dict, as the JSON report holds it.

        Returns
        -------
        dict
            ``method``, ``label``, ``k``, ``params``, the task's values (or
            ``error``), ``pooling`` and ``warnings``.
        """
        head = {"method": self.method, "label": self.label, "k": self.k}
        head["params"] = self.params
        body = self.values if self.error is None else {"error": self.error}
        return {**head, **body, "pooling": self.pooling, "warnings": self.warnings}


@dataclass
class Evaluation:
    """Everything one :func:`evaluate` run measured.

    Parameters
    ----------
    task : Task
        The task that was run.
    settings : EvaluationSettings
        The options.
    methods, poolings : list of str
        Methods and poolings run, in order.
    records : list of Record
        One per (pooling, method, dimension) and whatever the task scores
        per run (a precision of the retrieval index), in run order; a failed
        run has an ``error`` instead of values.
    encodings, artifacts : dict
        Per pooling, distinct texts encoded and seconds; per ``(pooling,
        label)``, what the task keeps for its figures.
    """

    task: Task
    settings: EvaluationSettings
    methods: list
    poolings: list
    records: list = field(default_factory=list)
    encodings: dict = field(default_factory=dict)
    artifacts: dict = field(default_factory=dict)

    @property
    def data(self) -> str:
        return self.task.data_name

    @property
    def fit_on(self) -> str:
        return self.task.fit_on

    @property
    def protocol(self) -> str:
        return self.task.protocols[self.task.fit_on]

    @property
    def model_description(self) -> str:
        """The encoder in words, for reports: the name, or the default's description."""
        return self.settings.encoding.model or DEFAULT_MODEL_DESCRIPTION

    @property
    def model_name(self) -> str:
        """The encoder in words (deprecated: use :attr:`model_description`).

        .. deprecated:: 0.2.0
            The name said a name and returned a description; it is removed in
            0.3.0. ``model_description`` is the description, ``model_id``
            the name.
        """
        warn(
            "Evaluation.model_name is deprecated since 0.2.0 and will be removed "
            "in 0.3.0; use model_description for the encoder in words, or "
            "model_id for its name",
            IsotropyDeprecationWarning,
        )
        return self.model_description

    @property
    def model_id(self) -> str:
        """The encoder by name: what was asked for, or the default's hub name."""
        return self.settings.encoding.model or DEFAULT_MODEL

    @property
    def failures(self) -> list:
        """``(label, pooling, error)`` of every run that failed."""
        return [(r.label, r.pooling, r.error) for r in self.records if r.error]

    def results(self, pooling: str | None = None, method: str | None = None) -> list:
        """Return the records of one pooling and/or one method, in run order.

        Parameters
        ----------
        pooling, method : str, default=None
            The pooling and the method name to keep; None keeps all.

        Returns
        -------
        records : list of Record
            The records that match.
        """
        return [
            r
            for r in self.records
            if (pooling is None or r.pooling == pooling)
            and (method is None or r.method == method)
        ]

    def record(self, method: str, pooling: str) -> Record:
        """Return the first record of ``method`` for ``pooling``.

        Parameters
        ----------
        method, pooling : str
            The method name and the pooling.

        Returns
        -------
        record : Record
            The record; a ``KeyError`` if there is none.
        """
        found = self.results(pooling, method)
        if not found:
            raise KeyError((method, pooling))
        return found[0]


def encode_texts(
    texts: Sequence[str],
    encoding: EncodingSettings | None = None,
    pooling: str = "mean",
    *,
    fit_texts: Sequence[str] | None = None,
) -> tuple[np.ndarray, float]:
    """Encode texts with the vectorizer ``encoding.encoder`` names.

    Parameters
    ----------
    texts : sequence of str
        The texts.
    encoding : EncodingSettings, default=None
        The encoder's options (a task's ``settings.encoding``); its
        ``poolings`` are not read, ``pooling`` is; the defaults when None.
    pooling : str, default="mean"
        The pooling preset of a ``transformer`` encoder.
    fit_texts : sequence of str, default=None
        The texts a ``static`` encoder is fitted on (its token frequencies
        and its refinement; see
        the task's ``encoder_texts``); ``texts``
        when None. A ``transformer`` encoder learns nothing and ignores them.

    Returns
    -------
    embeddings : ndarray of shape (n_texts, n_features)
        The embeddings.
    seconds : float
        The time spent encoding (loading the model first is not counted).

    Raises
    ------
    EvaluationError
        If the model cannot be loaded.
    """
    from ..text import BertPoolingVectorizer, StaticEmbeddingVectorizer

    encoding = encoding or EncodingSettings()
    if encoding.encoder == "static":  # it learns from texts: token frequencies
        # --cache keeps the refinement's encodings, as it keeps the encoder's
        vec = StaticEmbeddingVectorizer(
            encoding.model, device=encoding.device, memory=encoding.cache
        )
        fit_texts = texts if fit_texts is None else list(fit_texts)
    else:
        vec = BertPoolingVectorizer(
            encoding.model,
            pooling=pooling,
            batch_size=encoding.batch_size,
            device=encoding.device,
            memory=encoding.cache,
            show_progress_bar=encoding.progress,
        )
    try:
        vec.fit(fit_texts if encoding.encoder == "static" else texts[:1])
    except (OSError, ValueError, ImportError, RuntimeError) as exc:
        name = encoding.model or f"the default {DEFAULT_MODEL_NAME}"
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        raise EvaluationError(
            f"cannot load model {name}: {'; '.join(lines) or repr(exc)}"
        ) from exc
    start = time.perf_counter()
    E = vec.transform(texts)
    return E, time.perf_counter() - start


def _check_methods(task, methods):
    methods = list(dict.fromkeys(methods))
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(
            f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}"
        )
    selects = task.has_dev or task.selects_on_labels
    refused = [m for m in methods if METHODS[m].needs_dev and not selects]
    if refused:
        raise EvaluationError(
            f"the {task.name} task cannot run {', '.join(refused)}: it has no "
            "labels to select on"
        )
    return methods


def _runs(task, methods, transformers, n_features, settings):
    """Return ``(name, method, k, n_ks)`` of every run, custom transformers last."""
    chosen = [(name, METHODS[name]) for name in methods]
    for label, estimator in (transformers or {}).items():
        chosen.append((str(label), _custom(str(label), estimator)))
    runs = []
    for name, method in chosen:
        ks = task.n_components_for(method, n_features, settings)
        runs += [(name, method, k, len(ks)) for k in ks]
    return runs


def _custom(label, estimator):
    """Return a transformer passed in by label as a method of its own."""
    return Method(
        name="custom",
        label=lambda params: label,
        help="",
        build=lambda *args: (estimator, {}),
    )


def _run(task, method, k, bundle, n_features, settings):
    """Build, fit and score one method at one ``k``: ``(records, artifact)``."""
    start = time.perf_counter()
    dev = task.dev_pairs(bundle) if method.needs_dev and task.has_dev else None
    transformer, params = method.build(k, n_features, settings, dev)
    build_seconds = time.perf_counter() - start
    found, artifact = task.score(transformer, bundle, settings)
    if method.uses_k and k is None:  # the full width may be capped (rank)
        params["n_components"] = found[0]["dimensions"]
    label = method.format_label(params)
    records = []
    for values in found:
        values["fit_seconds"] += build_seconds
        records.append(Record(method.name, label, k, params, values=values))
    return records, artifact


def _encode(task, settings, pooling, encoded, log):
    """Encode the task's texts for one pooling: what ``task.embed`` returns."""
    fit_texts = task.encoder_texts() if settings.encoding.encoder == "static" else None
    if fit_texts is not None:
        encoded["fit_texts"] = len(fit_texts)

    def encode(texts):
        encoded["texts"] = len(texts)
        E, encoded["seconds"] = encode_texts(
            texts, settings.encoding, pooling, fit_texts=fit_texts
        )
        return E

    bundle = task.embed(encode)
    aside = (
        f" (the vectorizer fitted on {encoded['fit_texts']} texts set apart for it)"
        if "fit_texts" in encoded
        else ""
    )
    log(
        f"[{pooling}] encoded {encoded['texts']} distinct texts in "
        f"{encoded['seconds']:.1f} s{aside}"
    )
    return bundle


def check_finite(embeddings: dict) -> str | None:
    """Return why ``embeddings`` cannot be post-processed, or None if they can.

    Each array holds one row per text (STS: per pair) in the task's order;
    a row with NaN or inf is named by its array's key (the set, the split)
    and its index, so that the blame lands on the encoder, or on the
    embeddings passed in, and not on the methods after them.

    Parameters
    ----------
    embeddings : dict of str to ndarray
        What the task's ``embed`` returned.

    Returns
    -------
    str or None
        The reason, naming the first rows with NaN or inf; None when every
        value is finite.
    """
    for role, E in embeddings.items():
        E = np.asarray(E)
        if E.size == 0:
            continue
        finite = np.isfinite(E.reshape(len(E), -1)).all(axis=1)
        if finite.all():
            continue
        rows = np.flatnonzero(~finite)
        shown = ", ".join(map(str, rows[:5].tolist()))
        more = f" and {rows.size - 5} more" if rows.size > 5 else ""
        return (
            f"the input embeddings of {role!r} hold NaN or inf in row(s) {shown}"
            f"{more} (of {len(E)}, counted from 0 in the task's order), before "
            "any post-processing; check those texts and the encoder (a float16 "
            "model can overflow), or the embeddings passed in"
        )
    return None


def _skip_all(runs, d, pooling, reason, log):
    """Record every run of a pooling as failed for ``reason``, running none."""
    log(f"[{pooling}] {reason}; no method is run on them")
    records = []
    for name, method, k, n_ks in runs:
        label = method.format_label({"n_components": k or d}) if n_ks > 1 else name
        records.append(Record(name, label, k, {}, pooling=pooling, error=reason))
    return records


def _run_recorded(task, run, bundle, d, settings, pooling, shown, log):
    """One run, its failure and its warnings recorded: ``(records, artifact)``."""
    name, method, k, n_ks = run
    # what messages call the run: its name, or its label at this k
    where = method.format_label({"n_components": k or d}) if n_ks > 1 else name
    with record_warnings() as caught:
        try:
            records, artifact = _run(task, method, k, bundle, d, settings)
        except (ValueError, RuntimeError, np.linalg.LinAlgError) as exc:
            # a numerical failure of one method is a result, not a crash
            msg = " ".join(str(exc).split())
            log(f"[{pooling}] {where} failed: {msg}")
            records, artifact = [Record(name, where, k, {}, error=msg)], None
    where = records[0].label if n_ks > 1 else name  # k may be capped
    messages = reraise_once(caught, f"[{pooling}] {where}", EvaluationWarning, shown)
    for record in records:
        record.pooling, record.warnings = pooling, messages
    if records[0].error is None:
        log(f"[{pooling}] {records[0].label}: {task.progress(records)}")
    return records, artifact


def evaluate(
    task: Task,
    *,
    methods: Sequence[str] | None = None,
    settings: EvaluationSettings | None = None,
    embeddings: dict | None = None,
    transformers: dict | None = None,
    log: Callable[[str], None] | None = None,
) -> Evaluation:
    """Run methods on a task and score them, for every pooling.

    Each distinct text of the task is encoded once per pooling (unless
    ``embeddings`` are given). A method's failure (e.g. a numerical error) is
    recorded and the run goes on; its warnings are recorded with its result
    and raised again once per pooling, as an
    :class:`~sklearn_isotropy.exceptions.EvaluationWarning`. Embeddings with
    NaN or inf run no method: each run of that pooling is recorded as
    failed, with a reason that names the set (or split) and the rows.

    Parameters
    ----------
    task : Task
        An :class:`STSTask`, a :class:`RetrievalTask` or a
        :class:`ClassificationTask` (or any task).
    methods : sequence of str, default=None
        Names in :data:`METHODS`; the task's ``default_methods`` when None.
    settings : EvaluationSettings, default=None
        The options: the task's settings class (:class:`STSSettings`,
        :class:`RetrievalSettings`, :class:`ClassificationSettings`), or the
        shared :class:`EvaluationSettings`, whose fields are kept and the
        task's own take their defaults; the defaults when None.
    embeddings : dict, default=None
        Precomputed embeddings instead of encoding: ``{pooling: what
        task.embed returns}`` (for STS, a dict of split to array of shape
        (n_pairs, 2, d); for retrieval, ``{"queries", "corpus", "fit"}``
        arrays in the task's order; for classification, a dict of set name
        to array). Its keys are the poolings run.
    transformers : dict of str to estimator, default=None
        More transformers to score, by label (each at its own width).
    log : callable, default=None
        Called with one line of progress text after each step.

    Returns
    -------
    evaluation : Evaluation
        The records of every run.
    """
    settings = task.settings_class.coerce(settings)
    log = log or (lambda line: None)
    methods = _check_methods(task, task.default_methods if methods is None else methods)
    settings.check()
    poolings = list(dict.fromkeys(embeddings or settings.encoding.poolings))
    if embeddings is None and settings.encoding.encoder == "static":
        poolings = ["static"]  # one table, whatever the poolings
    ev = Evaluation(task, settings, methods, poolings)
    for pooling in poolings:
        if embeddings is None:
            ev.encodings[pooling] = {}
            bundle = _encode(task, settings, pooling, ev.encodings[pooling], log)
        else:
            bundle = embeddings[pooling]
        d = np.shape(next(iter(bundle.values())))[-1]
        runs = _runs(task, methods, transformers, d, settings)
        reason = check_finite(bundle)
        if reason is not None:  # every method would fail on them: say why once
            ev.records += _skip_all(runs, d, pooling, reason, log)
            continue
        shown = set()  # a warning several methods raise is shown once
        for run in runs:
            records, artifact = _run_recorded(
                task, run, bundle, d, settings, pooling, shown, log
            )
            ev.records += records
            if artifact is not None:
                ev.artifacts[(pooling, records[0].label)] = artifact
    return ev
