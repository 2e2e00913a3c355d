"""How an :class:`~sklearn_isotropy.evaluation.Evaluation` is shown.

A :class:`Report` renders the records of a run: the columns of its table,
the Markdown and JSON reports' task-specific parts, the console lines and
the figures. Each task's report subclasses it beside the task, in the
task's module, and the task names it (``Task.report_class``); this module
never imports a task. The writers here take the evaluation and return text
or write files, the same for every task (as ``cross_validate`` returns the
same dict for every scorer); none runs anything.
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

if TYPE_CHECKING:
    from ._task import Evaluation, Task

__all__ = [
    "Column",
    "Report",
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
        """Return the report class of a task: its ``report_class``.

        Parameters
        ----------
        task : Task or Task subclass
            The task.

        Returns
        -------
        type
            The task's report class.
        """
        return task.report_class

    @classmethod
    def is_figure_name(cls, name: str) -> bool:
        """Return whether ``name`` is one of this report's figure names.

        Parameters
        ----------
        name : str
            A file name without its directory (``"mean_spectrum.png"``).

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
        f"# sklearn-isotropy {ev.task.command}",
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
        f"- Seed: {ev.settings.seed}; device: {ev.settings.encoding.device}",
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
        "device": ev.settings.encoding.device,
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
