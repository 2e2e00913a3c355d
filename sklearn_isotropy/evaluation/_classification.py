"""The classification task: what post-processing does to a classifier and a clustering.

:class:`ClassificationTask` holds labelled sentence sets (SentEval's MR,
CR, SUBJ, MPQA and TREC, read by
:func:`~sklearn_isotropy.datasets.load_senteval`) and scores a method by
what three downstream estimators make of its output:

- ``logistic``: ``LogisticRegression(C=1.0, max_iter=2000)`` on the
  post-processed rows as they come, accuracy x100;
- ``knn``: ``KNeighborsClassifier(10, metric="cosine")``, accuracy x100;
- ``kmeans``: ``KMeans(n_clusters=n_classes, n_init=3)`` on the post-processed
  test rows scaled to unit norm, scored by the V-measure x100 of the clusters
  against the labels.

Each post-processor is fitted without labels on the training part of each
fold (``StratifiedKFold(5, shuffle=True)`` over the texts in the loader's
order; TREC uses its train/test split) and applied to both parts; the
scores are means over the folds. ``--protocol senteval`` is SentEval's
instead: 10 folds, and the logistic regression's ``C`` chosen by an inner
10-fold search. A method that selects (``grid``) runs a
:class:`~sklearn.model_selection.GridSearchCV` over the post-processing
step, ``"passthrough"`` among the candidates, inside each training fold,
scored by the classifier's own accuracy. Everything the task is lives
here: its options (:class:`ClassificationSettings`), its report
(:class:`ClassificationReport`: a column per set, the grid's choices, the
figure of each method against raw) and its command, ``sklearn-isotropy
classify``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from .._utils import normalize_rows
from ..exceptions import EvaluationError
from ._methods import Method, SearchSpace
from ._report import Report
from ._settings import (
    EvaluationSettings,
    Names,
    cv_field,
    grid_power_field,
    inherit_parameters,
    n_components_field,
    option,
)
from ._task import Task, check_finite, check_fit_on, encode_once

__all__ = ["ClassificationReport", "ClassificationSettings", "ClassificationTask"]

#: The downstream estimators, in the order records are written.
ESTIMATORS = ("logistic", "knn", "kmeans")
#: The estimators a selecting method (``grid``) runs: the supervised ones.
SUPERVISED = ("logistic", "knn")
#: SentEval's grid of the logistic regression's inverse penalty C.
SENTEVAL_C = tuple(2.0**t for t in range(-2, 4))
#: The outer folds of each ``protocol`` (stratified; TREC keeps its split).
PROTOCOL_FOLDS = {"default": 5, "senteval": 10}


def _senteval_tasks():
    from ..datasets import SENTEVAL_TASKS

    return SENTEVAL_TASKS


def _check_senteval_tasks(names):
    unknown = [t for t in names if t not in _senteval_tasks()]
    if unknown:
        raise ValueError(
            f"unknown SentEval task(s) {unknown}; choose from "
            f"{', '.join(_senteval_tasks())}"
        )


@inherit_parameters
@dataclass
class ClassificationSettings(EvaluationSettings):
    """Options of the classification task (``sklearn-isotropy classify``).

    The shared options of
    :class:`~sklearn_isotropy.evaluation.EvaluationSettings`, then the
    dimension of the methods that keep one, the grid search's candidates and
    folds, the SentEval sets and the protocol.

    Parameters
    ----------
    n_components : int, default=256
        Dimension ``k`` of ``whitening``, ``pca``, ``ppca`` and ``truncate``,
        fitted on each training fold; every dimension when the embeddings
        are not wider.
    cv : int, default=5
        Folds of the ``grid`` search inside each training fold, at least 2.
    grid_power : tuple of float, default=(0.0, 0.5, 1.0)
        Whitening powers the ``grid`` method searches: those above 0, at full
        width.
    tasks : tuple of str, default=("MR", "CR", "SUBJ", "MPQA", "TREC")
        SentEval tasks, names in
        :data:`~sklearn_isotropy.datasets.SENTEVAL_TASKS`.
    protocol : str, default="default"
        ``default``: stratified 5-fold CV (TREC: its split), logistic
        regression with C=1; ``senteval``: SentEval's 10 folds, and C
        chosen from 2^-2 to 2^3 by an inner 10-fold search.
    """

    n_components: int = n_components_field()
    cv: int = cv_field()
    grid_power: tuple[float, ...] = grid_power_field()
    tasks: tuple[str, ...] = option(
        ("MR", "CR", "SUBJ", "MPQA", "TREC"),
        flag=True,
        type=Names(_senteval_tasks, "task(s)", normalize=str.upper),
        help="comma-separated SentEval tasks",
        check=_check_senteval_tasks,
    )
    protocol: str = option(
        "default",
        flag=True,
        choices=tuple(PROTOCOL_FOLDS),
        help="default: 5-fold CV, logistic C=1; senteval: 10-fold CV, C chosen "
        "by inner 10-fold CV",
    )


class ClassificationReport(Report):
    """Accuracy and V-measure per method, set and downstream estimator."""

    title = (
        "Downstream scores x100: accuracy (logistic, kNN) and V-measure (KMeans) "
        "per set, mean over folds"
    )
    stem = "classify"
    figure_names = ("classify_{}.png",)
    savefig = {"dpi": 110, "bbox_inches": "tight"}
    records_key = "records"

    def table(self, pooling):
        """One row per method and estimator, one column per set, then their mean."""
        ev = self.evaluation
        sets = list(ev.task.datasets)
        header = ["method", "estimator", *sets, "mean"]
        rows = []
        for label in dict.fromkeys(r.label for r in ev.results(pooling)):
            runs = [r for r in ev.results(pooling) if r.label == label]
            if any(r.error for r in runs):
                rows.append([label, "-", *["failed"] * (len(sets) + 1)])
                continue
            for kind in dict.fromkeys(r.values["estimator"] for r in runs):
                score = {
                    r.values["task"]: r.values["score"]
                    for r in runs
                    if r.values["estimator"] == kind
                }
                cells = [f"{score[s]:.2f}" if s in score else "-" for s in sets]
                mean = np.mean(list(score.values()))
                rows.append([label, kind, *cells, f"{mean:.2f}"])
        return header, rows, [True, True, *[False] * (len(sets) + 1)]

    def describe(self):
        sizes = self.evaluation.task.sizes
        return ", ".join(f"{name} {n:,} texts" for name, n in sizes.items())

    def header_lines(self):
        s = self.evaluation.settings
        folds = PROTOCOL_FOLDS[s.protocol]
        logistic = (
            "C chosen from 2^-2 to 2^3 by an inner stratified 10-fold search"
            if s.protocol == "senteval"
            else "C=1"
        )
        return [
            f"- Protocol: {s.protocol}. Stratified {folds}-fold cross-validation "
            f"(shuffled, seed {s.seed}) in the loader's order; TREC: its train/test "
            "split. Scores are means over the folds.",
            f"- Estimators: `logistic` = LogisticRegression ({logistic}, "
            "max_iter=2000) on the post-processed rows; `knn` = "
            "KNeighborsClassifier(10, metric='cosine'); `kmeans` = KMeans("
            "n_clusters=number of classes, n_init=3) on the unit-norm "
            "post-processed test rows, scored by V-measure.",
            f"- `grid`: GridSearchCV over the post-processing step ('passthrough' "
            f"among the candidates) inside each training fold, {s.cv}-fold, scored "
            "by the estimator's accuracy (logistic and kNN only).",
        ]

    def sections(self):
        chosen = [r for r in self.evaluation.records if r.values.get("chosen")]
        if not chosen:
            return []
        md = ["## What the grid chose, fold by fold", ""]
        md += [
            f"- {r.pooling}, {r.values['task']}, {r.values['estimator']}: "
            + "; ".join(_choice_text(c) for c in r.values["chosen"])
            for r in chosen
        ]
        return md

    def json_fields(self):
        return {"sets": dict(self.evaluation.task.sizes)}

    def console_lines(self):
        return [f"Sets: {self.describe()}"]

    def figures(self):
        """``classify_<pooling>.png``: each method's mean score minus raw's.

        One panel per estimator, one bar per method, averaged over the sets.
        """
        from matplotlib.figure import Figure

        ev, out = self.evaluation, []
        for pooling in ev.poolings:
            records = [
                {**r.values, "label": r.label, "method": r.method}
                for r in ev.results(pooling)
                if not r.error
            ]
            raw = {
                (r["task"], r["estimator"]): r["score"]
                for r in records
                if r["method"] == "raw"
            }
            if not raw:
                continue
            kinds = list(dict.fromkeys(r["estimator"] for r in records))
            fig = Figure(figsize=(4.2 * len(kinds), 4.0), layout="constrained")
            for ax, kind in zip(np.atleast_1d(fig.subplots(1, len(kinds))), kinds):
                labels, deltas = [], []
                for label in dict.fromkeys(r["label"] for r in records):
                    diff = [
                        r["score"] - raw[(r["task"], kind)]
                        for r in records
                        if r["label"] == label
                        and r["estimator"] == kind
                        and (r["task"], kind) in raw
                    ]
                    if diff:
                        labels.append(label)
                        deltas.append(float(np.mean(diff)))
                ax.barh(labels[::-1], deltas[::-1], color="tab:blue")
                ax.axvline(0.0, color="black", linewidth=0.8)
                ax.set_title(kind)
                ax.set_xlabel("mean over the sets, minus raw (x100)")
            fig.suptitle(f"{ev.model_description}, {pooling} pooling")
            out.append((self.figure_names[0].format(pooling), fig))
        return out


def _choice_text(choice):
    return ", ".join(f"{k}={v}" for k, v in choice.items())


@dataclass
class ClassificationTask(Task):
    """Labelled sentence sets, and three estimators that score a method on each.

    Parameters
    ----------
    datasets : dict of str to Bunch
        ``{name: Bunch(data, target, ...)}`` as
        :func:`~sklearn_isotropy.datasets.load_senteval` returns; a bunch
        with ``test_size`` is split into train (all rows but the last
        ``test_size``) and test (those), the others are cross-validated.
    data_name : str, default="sets passed in"
        How reports name the data.
    fit_on : {"train"}, default="train"
        The post-processors are fitted on each fold's training rows.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.utils import Bunch
    >>> from sklearn_isotropy.evaluation import (
    ...     ClassificationTask, evaluate)
    >>> rng = np.random.default_rng(0)
    >>> y = np.repeat([0, 1], 40)
    >>> X = rng.normal(size=(80, 8)) + np.where(y[:, None] == 1, 4.0, -4.0)
    >>> task = ClassificationTask({"toy": Bunch(data=[f"s{i}" for i in range(80)],
    ...                                         target=y)})
    >>> ev = evaluate(task, methods=["raw"], embeddings={"mean": {"toy": X}})
    >>> [(r.values["estimator"], round(r.values["score"])) for r in ev.records]
    [('logistic', 100), ('knn', 100), ('kmeans', 100)]
    """

    datasets: dict
    data_name: str = "sets passed in"
    fit_on: str = "train"
    sizes: dict = field(init=False, default_factory=dict)

    name = "classification"
    settings_class = ClassificationSettings
    report_class = ClassificationReport
    command = "classify"
    command_help = (
        "compare post-processing methods for classification and clustering: "
        "encode SentEval's sentence classification tasks, post-process the "
        "embeddings with each method (fitted without labels on each training "
        "fold) and report the accuracy of a logistic regression and a 10-NN "
        "classifier and the V-measure of KMeans."
    )
    data_help = (
        "the folder holding SentEval's task folders (MR/, CR/, SUBJ/, MPQA/, "
        "TREC/), as SentEval's data/downstream holds them"
    )
    default_data = None
    protocols = {
        "train": (
            "post-processors fitted without labels on the training part of each "
            "fold (TREC: its train split), applied to both parts"
        )
    }
    default_methods = ("raw", "center", "sn", "natsv", "whitening", "ppca")
    selects_on_labels = True

    def __post_init__(self):
        check_fit_on(self, self.fit_on)
        if not self.datasets:
            raise ValueError("a classification task needs at least one data set")
        for name, bunch in self.datasets.items():
            y = np.asarray(bunch.target)
            if y.ndim != 1 or len(y) != len(bunch.data):
                raise ValueError(
                    f"{name}: target has shape {y.shape}; expected one label per "
                    f"text ({len(bunch.data)})"
                )
            labels = np.unique(y)
            if labels.size < 2:
                # an EvaluationError: the command line reports it in one line
                names = bunch.get("target_names")
                found = (
                    "no texts"
                    if labels.size == 0
                    else f"one class, {_label_name(labels[0], names)!r}, in all "
                    f"{len(y)} texts"
                )
                raise EvaluationError(
                    f"the set {name!r} (data: {self.data_name}) has {found}; a "
                    "classification needs two classes or more: pass texts of at "
                    f"least two classes, or leave {name} out (--tasks)"
                )
            self.sizes[name] = len(y)

    @classmethod
    def load(
        cls,
        data: str | os.PathLike,
        settings: ClassificationSettings | None = None,
        *,
        fit_on: str | None = None,
        methods: Sequence[str] = (),
    ) -> ClassificationTask:
        """Read SentEval's folders for the settings' ``tasks``.

        Parameters
        ----------
        data : str or path-like
            The folder holding the task folders (SentEval's ``data/downstream``).
        settings : ClassificationSettings, default=None
            ``tasks`` names the sets to read (the shared
            :class:`EvaluationSettings` are converted); the defaults when
            None.
        fit_on : {"train"}, default=None
            The fitting protocol.
        methods : sequence of str, default=()
            Unused: every method reads the same data.

        Returns
        -------
        task : ClassificationTask
            The task.

        Raises
        ------
        EvaluationError
            If a folder or file is missing or malformed (naming it).
        """
        from ..datasets import load_senteval

        settings = cls.settings_class.coerce(settings)
        if fit_on is not None:
            check_fit_on(cls, fit_on)
        folder = Path(data).expanduser()
        if not folder.is_dir():
            raise EvaluationError(
                f"data not found: {str(data)!r} is not a directory; pass the folder "
                "holding SentEval's task folders (MR/, CR/, SUBJ/, MPQA/, TREC/)"
            )
        datasets = {}
        for task in settings.tasks:
            try:
                if task == "TREC":  # its own split: train rows, then test rows
                    train = load_senteval(task, data_home=folder, subset="train")
                    test = load_senteval(task, data_home=folder, subset="test")
                    bunch = Bunch(
                        data=train.data + test.data,
                        target=np.concatenate([train.target, test.target]),
                        target_names=train.target_names,
                        test_size=len(test.data),
                    )
                else:
                    bunch = load_senteval(task, data_home=folder)
            except (OSError, ValueError) as exc:
                raise EvaluationError(f"cannot read {task}: {exc}") from exc
            datasets[task] = bunch
        return cls(datasets, data_name=str(data), fit_on=fit_on or "train")

    # ---------------------------------------------------- the Task protocol
    def embed(self, encode: Callable[[list[str]], np.ndarray]) -> dict:
        groups = [b.data for b in self.datasets.values()]
        return dict(zip(self.datasets, encode_once(encode, *groups)))

    def n_components_for(
        self, method: Method, n_features: int, settings: EvaluationSettings
    ) -> list[int | None]:
        k = settings.n_components
        return [k if method.uses_k and k < n_features else None]

    def splits(self, name: str, settings: ClassificationSettings) -> list:
        """Return the ``(train, test)`` row indices of each fold of one set.

        Parameters
        ----------
        name : str
            The data set.
        settings : ClassificationSettings
            ``protocol`` (5 or 10 folds) and ``seed``.

        Returns
        -------
        list of tuple of ndarray
            The folds: the set's own split if it has one.
        """
        from sklearn.model_selection import StratifiedKFold

        bunch = self.datasets[name]
        n = len(bunch.target)
        if "test_size" in bunch:
            cut = n - int(bunch.test_size)
            return [(np.arange(cut), np.arange(cut, n))]
        if settings.protocol not in PROTOCOL_FOLDS:
            raise ValueError(
                f"settings.protocol={settings.protocol!r} is not a protocol; pass "
                f"one of {sorted(PROTOCOL_FOLDS)}"
            )
        folds = PROTOCOL_FOLDS[settings.protocol]
        cv = StratifiedKFold(folds, shuffle=True, random_state=settings.seed)
        return list(cv.split(np.zeros((n, 1)), bunch.target))

    @staticmethod
    def progress(records: list) -> str:
        mean = {}
        for r in records:
            mean.setdefault(r.values["estimator"], []).append(r.values["score"])
        return ", ".join(f"{e} {np.mean(v):.2f}" for e, v in mean.items())

    def score(
        self,
        transformer: object,
        embeddings: dict,
        settings: ClassificationSettings | None = None,
    ) -> tuple[list[dict], None]:
        """Fit ``transformer`` in each fold and score the three estimators.

        Parameters
        ----------
        transformer : estimator, "passthrough" or SearchSpace
            The unfitted transformer of a method; a
            ``SearchSpace`` (a selecting method's candidates) is
            searched inside each training fold, for ``logistic`` and ``knn``.
        embeddings : dict
            ``{set name: array of shape (n_texts, d)}`` in the set's order.
        settings : ClassificationSettings, default=None
            The options (the shared :class:`EvaluationSettings` are
            converted); the defaults when None.

        Returns
        -------
        records : list of dict
            One per set and estimator: ``task``, ``estimator``, ``score``
            (the mean over folds x100: accuracy, or V-measure for
            ``kmeans``), ``fold_scores``, ``dimensions``, ``fit_seconds``,
            ``transform_seconds`` and, for a search, the candidate
            ``chosen`` in each fold.
        artifact : None
            No figure needs more.
        """
        settings = self.settings_class.coerce(settings)
        sets = {}  # every set checked before any is scored
        for name, bunch in self.datasets.items():
            X = np.asarray(embeddings[name])
            y = np.asarray(bunch.target)
            if X.shape[0] != len(y):
                raise ValueError(
                    f"{name}: {X.shape[0]} embeddings for {len(y)} texts; pass them "
                    "in the task's order"
                )
            sets[name] = X, y
        reason = check_finite({name: X for name, (X, _) in sets.items()})
        if reason is not None:  # the input's fault, not the transformer's
            raise ValueError(reason)
        records = []
        for name, (X, y) in sets.items():
            folds = self.splits(name, settings)
            if isinstance(transformer, SearchSpace):
                records += _search(name, transformer, X, y, folds, settings)
            else:
                records += _fixed(name, transformer, X, y, folds, settings)
        return records, None


def _label_name(label, names):
    """The name of an integer label in ``target_names``, or the label itself."""
    try:
        return str(names[int(label)])
    except (TypeError, ValueError, IndexError):
        return str(label)


def _estimator(kind, settings, n_classes=None):
    """Return a fresh downstream estimator of ``kind``, as the protocol sets it."""
    from sklearn.cluster import KMeans
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.neighbors import KNeighborsClassifier

    if kind == "knn":
        return KNeighborsClassifier(10, metric="cosine")
    if kind == "kmeans":
        return KMeans(n_clusters=n_classes, n_init=3, random_state=settings.seed)
    logistic = LogisticRegression(C=1.0, max_iter=2000)
    if settings.protocol != "senteval":
        return logistic
    inner = StratifiedKFold(10, shuffle=True, random_state=settings.seed)
    return GridSearchCV(logistic, {"C": list(SENTEVAL_C)}, cv=inner)


def _fit_transform(transformer, X, train, test):
    """Fit a clone on the training rows; return both parts transformed and the times."""
    from sklearn.base import clone

    start = time.perf_counter()
    if isinstance(transformer, str) and transformer == "passthrough":
        fitted = None
    else:
        fitted = clone(transformer).fit(X[train])
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    parts = [
        X[rows] if fitted is None else fitted.transform(X[rows])
        for rows in (train, test)
    ]
    parts = [np.asarray(Z) for Z in parts]
    if fitted is not None and not all(np.isfinite(Z).all() for Z in parts):
        # the input rows are finite: evaluate checks them before any method
        raise ValueError(
            f"{type(fitted).__name__}.transform returned NaN or inf from finite "
            "embeddings; regularise it (e.g. shrinkage) or keep fewer components"
        )
    return parts, fit_seconds, time.perf_counter() - start


def _fixed(name, transformer, X, y, folds, settings):
    """The three estimators on one method's output, fold by fold."""
    from sklearn.metrics import v_measure_score

    n_classes = np.unique(y).size
    scores = {kind: [] for kind in ESTIMATORS}
    fit_seconds = transform_seconds = 0.0
    for train, test in folds:
        (Z_train, Z_test), fit_s, transform_s = _fit_transform(
            transformer, X, train, test
        )
        fit_seconds += fit_s
        transform_seconds += transform_s
        for kind in SUPERVISED:
            model = _estimator(kind, settings).fit(Z_train, y[train])
            scores[kind].append(100.0 * model.score(Z_test, y[test]))
        unit = normalize_rows(Z_test)[0]
        clusters = _estimator("kmeans", settings, n_classes).fit_predict(unit)
        scores["kmeans"].append(100.0 * v_measure_score(y[test], clusters))
    common = {
        "dimensions": int(Z_test.shape[1]),
        "fit_seconds": fit_seconds,
        "transform_seconds": transform_seconds,
    }
    return [
        {
            "task": name,
            "estimator": kind,
            "score": float(np.mean(v)),
            "fold_scores": [float(s) for s in v],
            **common,
        }
        for kind, v in scores.items()
    ]


def prefer_passthrough(cv_results: dict) -> int:
    """The grid's choice: no post-processing, unless a candidate is clearly better.

    The one-standard-error rule (Hastie, Tibshirani and Friedman, *The
    Elements of Statistical Learning*, 2nd ed., section 7.10), with "no
    post-processing" as the simplest model: ``"passthrough"`` is kept when
    its mean inner-fold score is within one standard error (the spread of
    the best candidate's fold scores over the square root of their number)
    of the best candidate's; otherwise the best candidate is chosen. A
    post-processor is then chosen where the inner folds say it helps by
    more than their own noise, so the search rarely ends below raw.

    Parameters
    ----------
    cv_results : dict
        ``GridSearchCV.cv_results_``, ``"passthrough"`` among its candidates.

    Returns
    -------
    int
        The index of the chosen candidate.
    """
    params, mean = cv_results["params"], cv_results["mean_test_score"]
    best = int(np.argmax(mean))
    raw = next(i for i, p in enumerate(params) if p.get("transformer") == "passthrough")
    n_splits = sum(
        1 for k in cv_results if k.startswith("split") and k.endswith("_test_score")
    )
    error = cv_results["std_test_score"][best] / np.sqrt(max(n_splits, 1))
    return raw if mean[raw] >= mean[best] - error else best


def _search(name, space, X, y, folds, settings):
    """A grid search over the post-processing inside each training fold."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.pipeline import Pipeline

    from ._methods import describe_choice

    records = []
    for kind in SUPERVISED:
        scores, chosen, seconds = [], [], 0.0
        for train, test in folds:
            start = time.perf_counter()
            pipe = Pipeline(
                [("transformer", "passthrough"), ("clf", _estimator(kind, settings))]
            )
            inner = StratifiedKFold(
                settings.cv, shuffle=True, random_state=settings.seed
            )
            search = GridSearchCV(
                pipe,
                space.param_grid,
                cv=inner,
                refit=prefer_passthrough,
                error_score="raise",
            )
            search.fit(X[train], y[train])
            seconds += time.perf_counter() - start
            scores.append(100.0 * search.score(X[test], y[test]))
            chosen.append(describe_choice(search.best_params_))
        records.append(
            {
                "task": name,
                "estimator": kind,
                "score": float(np.mean(scores)),
                "fold_scores": [float(s) for s in scores],
                "chosen": chosen,
                "dimensions": int(X.shape[1]),
                "fit_seconds": seconds,
                "transform_seconds": 0.0,
            }
        )
    return records
