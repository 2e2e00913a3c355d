"""How an :class:`~sklearn_isotropy.evaluation.Evaluation` is shown.

A :class:`Report` renders the records of a run: the columns of its table,
the Markdown and JSON reports' task-specific parts, the console lines and
the figures (a task's ``report``). The writers take the evaluation
and return text or write files; none runs anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._utils import write_files
from ._quantization import QUANTIZATIONS

if TYPE_CHECKING:
    from ._task import Evaluation, Task

__all__ = [
    "ClassificationReport",
    "Column",
    "Report",
    "RetrievalReport",
    "STSReport",
    "format_table",
    "to_json",
    "to_markdown",
    "write_reports",
]


@dataclass(frozen=True)
class Column:
    """One column of a task's result table.

    Parameters
    ----------
    header : str
        The column's heading.
    value : callable
        ``value(values) -> str``, the cell of a record that ran, from the
        task's values of the record.
    score : bool, default=False
        Whether it is a score: a failed run shows "failed" there, "-" elsewhere.
    left : bool, default=False
        Whether the cells are left-aligned (text).
    """

    header: str
    value: object
    score: bool = False
    left: bool = False


class Report:
    """The presentation of one evaluation; a task's report adds its own parts.

    Parameters
    ----------
    evaluation : Evaluation
        A finished run.
    """

    #: The heading of the results.
    title = "Results"
    #: The stem of the report files (``<stem>.md``, ``<stem>.json``). Each
    #: task's report names its own, which no other task's report shares,
    #: so that reports of several tasks can sit in one directory.
    stem: str
    #: The command named in the Markdown report's heading.
    command: str
    #: The names of a pooling's figures, ``str.format`` ed with the pooling.
    figure_names = ()
    #: Keyword arguments of ``Figure.savefig`` for the task's figures.
    savefig = {"dpi": 110}
    #: The JSON report's key for the records.
    records_key = "results"

    def __init__(self, evaluation):
        self.evaluation = evaluation

    def columns(self) -> list[Column]:
        """Return the columns of the result table, after the method's label.

        Returns
        -------
        list of Column
            The task's columns.
        """
        return []

    def table(self, pooling: str) -> tuple[list, list, list]:
        """Return one pooling's table: a row per record, the columns after the label.

        Parameters
        ----------
        pooling : str
            The pooling.

        Returns
        -------
        header : list of str
            The headings.
        rows : list of list of str
            The cells.
        left : list of bool
            Whether each column is left-aligned.
        """
        columns = self.columns()
        header = ["method", *[c.header for c in columns]]
        rows = []
        for r in self.evaluation.results(pooling):
            if r.error:
                cells = ["failed" if c.score else "-" for c in columns]
            else:
                cells = [c.value(r.values) for c in columns]
            rows.append([r.label, *cells])
        return header, rows, [True, *[c.left for c in columns]]

    def describe(self) -> str:
        """Describe the data's sizes in a few words.

        Returns
        -------
        str
            The description.
        """
        return ""

    def header_lines(self) -> list[str]:
        """Return the task's lines of the Markdown report's header.

        Returns
        -------
        list of str
            Markdown lines.
        """
        return []

    def sections(self) -> list[str]:
        """Return the task's Markdown sections after the result tables.

        Returns
        -------
        list of str
            Markdown lines.
        """
        return []

    def console_lines(self) -> list[str]:
        """Return the task's lines printed under the console tables.

        Returns
        -------
        list of str
            Plain-text lines.
        """
        return []

    def json_fields(self) -> dict:
        """Return the task's entries of the JSON report.

        Returns
        -------
        dict
            Entries that JSON can encode.
        """
        return {}

    def figures(self) -> list[tuple[str, object]]:
        """Draw the task's figures (matplotlib is installed).

        Returns
        -------
        list of tuple
            ``(file name, matplotlib Figure)`` of each figure.
        """
        return []

    @classmethod
    def for_task(cls, task: Task | type[Task]) -> type[Report]:
        """Return the report class of a task: its ``report_class()``.

        Parameters
        ----------
        task : Task or Task subclass
            The task (its ``name`` is looked up).

        Returns
        -------
        type
            The task's report class.
        """
        return task.report_class()

    @classmethod
    def is_figure_name(cls, name: str) -> bool:
        """Return whether ``name`` is one of this report's figure names.

        Parameters
        ----------
        name : str
            A file name.

        Returns
        -------
        bool
            Whether a pattern of :attr:`figure_names` gives ``name`` for
            some pooling.
        """
        for pattern in cls.figure_names:
            head, _, tail = pattern.partition("{}")
            if (
                len(name) > len(head) + len(tail)
                and name.startswith(head)
                and name.endswith(tail)
            ):
                return True
        return False

    @classmethod
    def previous_task(cls, out_dir: str | os.PathLike) -> str | None:
        """Return the task whose JSON report holds this report's name in ``out_dir``.

        Parameters
        ----------
        out_dir : path-like
            The directory the reports are to be written to.

        Returns
        -------
        str or None
            The ``task`` of ``<stem>.json`` in ``out_dir``; None if there is
            no such file, or it is not a report of this package.
        """
        owner = _previous_report(Path(out_dir) / f"{cls.stem}.json").get("task")
        return owner if isinstance(owner, str) else None

    @classmethod
    def check_destination(cls, out_dir: str | os.PathLike, task: str) -> None:
        """Raise if ``out_dir`` holds another task's report under this report's name.

        Each task's report has its own :attr:`stem`, so this only finds a
        report written by another task under the same name (by a version
        whose ``classify`` wrote ``results.json``, as ``evaluate`` does):
        replacing it would lose that run.

        Parameters
        ----------
        out_dir : path-like
            The directory the reports are to be written to.
        task : str
            The name of the task to be written (``"sts"``...).

        Raises
        ------
        FileExistsError
            If ``<stem>.json`` in ``out_dir`` is the JSON report of another
            task.
        """
        owner = cls.previous_task(out_dir)
        if owner is not None and owner != task:
            path = Path(out_dir) / f"{cls.stem}.json"
            raise FileExistsError(
                f"{path} is the report of the {owner!r} task, which the report "
                f"of the {task!r} task would replace; write to another "
                "directory, or move that report and its figures away first"
            )

    @classmethod
    def of(cls, evaluation: Evaluation) -> Report:
        """Return the report of a finished evaluation, by its task.

        Parameters
        ----------
        evaluation : Evaluation
            A finished run.

        Returns
        -------
        Report
            An instance of the task's report class.
        """
        return cls.for_task(evaluation.task)(evaluation)


class STSReport(Report):
    """Spearman's rho per method, anisotropy diagnostics, spectrum and cosines."""

    title = "Spearman ρ×100 on the test split (cosine of pair embeddings)"
    stem = "results"  # the name the README and the user guide document
    command = "evaluate"
    figure_names = ("{}_spectrum.png", "{}_cosines.png")

    def columns(self):
        return [
            Column("ρ×100", lambda r: f"{r['spearman_x100']:.2f}", score=True),
            Column("fit s", lambda r: f"{r['fit_seconds']:.2f}"),
            Column("transform s", lambda r: f"{r['transform_seconds']:.2f}"),
        ]

    def describe(self):
        splits = self.evaluation.task.splits.items()
        return ", ".join(f"{s} {len(b.scores)} pairs" for s, b in splits)

    def json_fields(self):
        diagnostics = {}
        for r in self.evaluation.records:
            if "diagnostics" in r.values:
                diagnostics.setdefault(r.pooling, {})[_name(r)] = r.values[
                    "diagnostics"
                ]
        splits = {s: len(b.scores) for s, b in self.evaluation.task.splits.items()}
        return {"splits": splits, "diagnostics": diagnostics}

    def sections(self):
        md = [
            "## Anisotropy of the test-sentence embeddings",
            "",
            "| pooling | method | mean pair cosine | isotropy I(W) | effective rank "
            "| top-PC variance share |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in self.evaluation.records:
            if "diagnostics" in r.values:
                d = r.values["diagnostics"]
                md.append(
                    f"| {r.pooling} | {_name(r)} | {d['mean_pair_cosine']:.3f} "
                    f"| {d['isotropy_score']:.3g} | {d['effective_rank']:.1f} | "
                    f"{d['top_component_variance_ratio']:.3f} |"
                )
        return md

    def console_lines(self):
        ev = self.evaluation
        sizes = ", ".join(f"{s} {len(b.scores)}" for s, b in ev.task.splits.items())
        lines = [f"Pairs: {sizes}"]
        for r in ev.results(method="grid"):
            if r.params.get("chosen"):
                lines.append(f"grid choice for {r.pooling}: {r.params['chosen']}")
        return lines

    def figures(self):
        """``<pooling>_spectrum.png`` and ``<pooling>_cosines.png`` per pooling.

        The spectrum draws the covariance spectrum of every method's output
        on one log axis (down to each matrix's numerical rank); the cosines
        figure has one panel per method, with the raw embeddings' histogram
        behind each for reference.
        """
        from matplotlib.figure import Figure

        from ..diagnostics import plot_cosine_panels, plot_eigenvalue_spectrum

        ev, out = self.evaluation, []
        for pooling in ev.poolings:
            transformed = {
                label: Z for (p, label), Z in ev.artifacts.items() if p == pooling
            }
            if not transformed:
                continue
            raw = [r.label for r in ev.results(pooling, "raw")][:1]
            where = f"{pooling} pooling, test sentences"
            spectrum = Figure(figsize=(9, 4.8), layout="constrained")
            ax = plot_eigenvalue_spectrum(transformed, ax=spectrum.add_subplot())
            ax.set_title(f"Covariance spectrum ({where})")
            cosines = Figure(layout="constrained")
            plot_cosine_panels(
                transformed, reference=(raw or [None])[0], figure=cosines
            )
            grey = f" (grey: {raw[0]})" if raw else ""
            cosines.suptitle(f"Pair cosine similarity, {where}{grey}")
            names = [name.format(pooling) for name in self.figure_names]
            out += zip(names, (spectrum, cosines))
        return out


class RetrievalReport(Report):
    """Quality, index memory and latency per method, dimension and precision."""

    title = (
        "Exact cosine search: quality x100, index memory and query latency per "
        "method, dimension and precision"
    )
    stem = command = "retrieval"
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
            f"- Whitening power: {s.power:g}; NATSV removes {s.natsv_components} "
            "directions; PCA is whitening with power 0.",
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


class ClassificationReport(Report):
    """Accuracy and V-measure per method, set and downstream estimator."""

    title = (
        "Downstream scores x100: accuracy (logistic, kNN) and V-measure (KMeans) "
        "per set, mean over folds"
    )
    stem = command = "classify"
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
        folds = 10 if s.protocol == "senteval" else 5
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


def _name(record):  # a run's name in the reports (a custom run's is its label)
    return record.label if record.method == "custom" else record.method


_NAMES = {"mrr": "MRR", "recall": "R", "ndcg": "nDCG"}


def _metric_header(name):
    kind, _, k = name.partition("@")
    return f"{_NAMES.get(kind, kind)}@{k}"


def _size(n_bytes):
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} B"


def _rows(evaluation, pooling):
    """Return the header, the cells and the alignment of one pooling's table."""
    return Report.of(evaluation).table(pooling)


def format_table(
    evaluation: Evaluation, *, markdown: bool = False, pooling: str | None = None
) -> str:
    """Format the results as tables: one block per pooling, one row per run.

    Each pooling gets its own block (a heading line, then the table), so
    the plain-text output stays narrow however many poolings were run, and
    a label can say what a method chose for that pooling.

    Parameters
    ----------
    evaluation : Evaluation
        A finished run.
    markdown : bool, default=False
        Markdown (a ``###`` heading and a table per pooling) instead of
        aligned plain text.
    pooling : str, default=None
        Only this pooling's table, without its heading.

    Returns
    -------
    table : str
        The tables.
    """
    blocks = []
    for p in [pooling] if pooling else evaluation.poolings:
        header, rows, left = _rows(evaluation, p)
        if markdown:
            lines = ["| " + " | ".join(header) + " |"]
            lines.append("|" + "|".join("---" if a else "---:" for a in left) + "|")
            lines += ["| " + " | ".join(r) + " |" for r in rows]
        else:
            widths = [
                max(len(x[i]) for x in [header, *rows]) for i in range(len(header))
            ]

            def fmt(cells, widths=widths, left=left):
                return "  ".join(
                    c.ljust(w) if a else c.rjust(w)
                    for c, w, a in zip(cells, widths, left)
                ).rstrip()

            sep = "  ".join("-" * w for w in widths)
            lines = [fmt(header), sep, *[fmt(r) for r in rows]]
        heading = f"### {p} pooling" if markdown else f"{p} pooling:"
        blocks.append(("" if pooling else heading + "\n\n") + "\n".join(lines))
    return "\n\n".join(blocks)


def to_markdown(
    evaluation: Evaluation, figures: Sequence[str | os.PathLike] = ()
) -> str:
    """Render the Markdown report of an evaluation.

    Parameters
    ----------
    evaluation : Evaluation
        A finished run.
    figures : sequence of path-like, default=()
        Figure files to link (by file name, relative to the report).

    Returns
    -------
    text : str
        The report.
    """
    ev, report = evaluation, Report.of(evaluation)
    md = [
        f"# sklearn-isotropy {report.command}",
        "",
        f"- Data: `{ev.data}` ({report.describe()})",
        f"- Model: {ev.model_description}",
        f"- Fitting protocol: {ev.protocol}.",
        *(
            [
                f"- Encoder: the static vectorizer, fitted on the "
                f"{ev.encodings['static']['fit_texts']} texts the task sets "
                "apart for it (STS: the train split's sentences, under every "
                "protocol)."
            ]
            if "fit_texts" in ev.encodings.get("static", {})
            else []
        ),
        f"- Seed: {ev.settings.seed}; device: {ev.settings.device}",
        *report.header_lines(),
        "",
        f"## {report.title}",
        "",
        format_table(ev, markdown=True),
    ]
    warned = sorted({w for r in ev.records for w in r.warnings})
    if warned:
        md += ["", "Warnings raised while fitting:", ""]
        md += [f"- {w}" for w in warned]
    sections = report.sections()
    if sections:
        md += ["", *sections]
    if figures:
        md += ["", "## Figures", ""]
        md += [f"![{Path(f).stem}]({Path(f).name})" for f in figures]
    return "\n".join(md) + "\n"


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    return str(obj)


def to_json(evaluation: Evaluation, figures: Sequence[str | os.PathLike] = ()) -> str:
    """Render the JSON report of an evaluation, as a string.

    Parameters
    ----------
    evaluation : Evaluation
        A finished run.
    figures : sequence of path-like, default=()
        Figure files written for it.

    Returns
    -------
    text : str
        The report.
    """
    from .. import __version__

    ev, report = evaluation, Report.of(evaluation)
    payload = {
        "task": ev.task.name,
        "data": ev.data,
        "model": ev.model_id,
        "model_description": ev.model_description,
        "poolings": ev.poolings,
        "methods": ev.methods,
        "fit_on": ev.fit_on,
        "protocol": ev.protocol,
        "seed": ev.settings.seed,
        "device": ev.settings.device,
        "settings": asdict(ev.settings),
        **report.json_fields(),
        "encoding": ev.encodings,
        report.records_key: [r.to_dict() for r in ev.records],
        "figures": [str(f) for f in figures],
        "versions": {
            "sklearn_isotropy": __version__,
            "python": platform.python_version(),
        },
    }
    return json.dumps(payload, indent=2, default=_json_default)


def _previous_report(path):
    """Return the JSON report at ``path``; an empty dict if none can be read."""
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # a UnicodeDecodeError is a ValueError
        return {}
    return payload if isinstance(payload, dict) else {}


def _figure_files(evaluation):
    """Return ``{name: write(path)}`` of the figures, and why there are none."""
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        return {}, "figures skipped: matplotlib is not installed (extra [plot])"
    report = Report.of(evaluation)
    return {
        name: lambda path, fig=fig: fig.savefig(path, format="png", **report.savefig)
        for name, fig in report.figures()
    }, None


def write_reports(
    evaluation: Evaluation, out_dir: str | os.PathLike, *, figures: bool = True
) -> tuple[list[str], str | None]:
    """Write ``<name>.md``, ``<name>.json`` and (optionally) the figures.

    ``<name>`` is the report's ``stem``: ``results`` for STS, ``retrieval``
    for retrieval, ``classify`` for classification, so the reports of
    several tasks can share ``out_dir``. Each file is written under a
    temporary name in ``out_dir``, then all are renamed into place, so a
    write that fails leaves the previous reports whole. The figures that
    the previous report of the same task names, and this one does not,
    are removed; no file of another task's report is touched.

    Parameters
    ----------
    evaluation : Evaluation
        A finished run.
    out_dir : path-like
        Directory, created if missing.
    figures : bool, default=True
        Also write the PNG figures.

    Returns
    -------
    files : list of str
        Every file written, reports first.
    note : str or None
        Why figures were skipped, if they were asked for and not written.

    Raises
    ------
    FileExistsError
        If ``out_dir`` holds another task's JSON report under this report's
        name (written by an earlier version); nothing is written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report, task = Report.for_task(evaluation.task), evaluation.task.name
    report.check_destination(out_dir, task)
    files, note = _figure_files(evaluation) if figures else ({}, None)
    stem = report.stem
    pngs = [str(out_dir / name) for name in files]
    # the figures the previous report of this task wrote: only names of this
    # report's own figures, so a list edited by hand or another task's
    # report cannot make it delete anything else
    previous = _previous_report(out_dir / f"{stem}.json")
    listed = previous.get("figures") if previous.get("task") == task else None
    earlier = {
        Path(f).name
        for f in (listed if isinstance(listed, list) else [])
        if isinstance(f, str) and report.is_figure_name(Path(f).name)
    }
    files[f"{stem}.md"] = to_markdown(evaluation, pngs)
    files[f"{stem}.json"] = to_json(evaluation, pngs)
    written = write_files(out_dir, files)
    for name in earlier - set(files):
        with contextlib.suppress(OSError):
            (out_dir / name).unlink()
    return [*written[-2:], *written[:-2]], note
