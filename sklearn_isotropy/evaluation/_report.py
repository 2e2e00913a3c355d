"""Writers of an :class:`~sklearn_isotropy.evaluation.Evaluation`, for any task.

A table per pooling (plain text or Markdown) whose columns the task names,
the Markdown and JSON reports and the task's figures. Each takes the
evaluation and returns text or writes files; none runs anything.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from pathlib import Path

import numpy as np

__all__ = ["format_table", "save_figures", "to_json", "to_markdown", "write_reports"]


def _rows(evaluation, pooling):
    """The header and the cells of one pooling's table."""
    columns = evaluation.task.columns(evaluation.settings)
    header = ["method", *[c.header for c in columns]]
    rows = []
    for r in evaluation.results(pooling):
        if "error" in r:
            cells = ["failed" if c.score else "-" for c in columns]
        else:
            cells = [c.value(r) for c in columns]
        rows.append([r["label"], *cells])
    return header, rows, [True, *[c.left for c in columns]]


def format_table(evaluation, *, markdown=False, pooling=None):
    """The results: one block per pooling, one row per run.

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


def to_markdown(evaluation, figures=()):
    """The Markdown report of an evaluation.

    Parameters
    ----------
    evaluation : Evaluation
        A finished run.
    figures : sequence of path-like, default=()
        Figure files to link (by file name, relative to the report).

    Returns
    -------
    text : str
    """
    ev, task = evaluation, evaluation.task
    md = [
        f"# sklearn-isotropy {task.command}",
        "",
        f"- Data: `{ev.data}` ({task.describe()})",
        f"- Model: {ev.model_name}",
        f"- Fitting protocol: {ev.protocol}.",
        f"- Seed: {ev.settings.seed}; device: {ev.settings.device}",
        *task.report_lines(ev),
        "",
        f"## {task.title}",
        "",
        format_table(ev, markdown=True),
    ]
    warned = sorted({w for r in ev.records for w in r.get("warnings", [])})
    if warned:
        md += ["", "Warnings raised while fitting:", ""]
        md += [f"- {w}" for w in warned]
    sections = task.report_sections(ev)
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


def to_json(evaluation, figures=()):
    """The JSON report of an evaluation, as a string.

    Parameters
    ----------
    evaluation : Evaluation
        A finished run.
    figures : sequence of path-like, default=()
        Figure files written for it.

    Returns
    -------
    text : str
    """
    from .. import __version__

    ev = evaluation
    payload = {
        "task": ev.task.name,
        "data": ev.data,
        "model": ev.model_id,
        "model_description": ev.model_name,
        "poolings": ev.poolings,
        "methods": ev.methods,
        "fit_on": ev.fit_on,
        "protocol": ev.protocol,
        "seed": ev.settings.seed,
        "device": ev.settings.device,
        "settings": asdict(ev.settings),
        **ev.task.json_fields(ev),
        "encoding": ev.encodings,
        "results": ev.records,
        "figures": [str(f) for f in figures],
        "versions": {
            "sklearn_isotropy": __version__,
            "python": platform.python_version(),
        },
    }
    return json.dumps(payload, indent=2, default=_json_default)


def save_figures(evaluation, out_dir):
    """Write the task's PNG figures into ``out_dir``.

    Parameters
    ----------
    evaluation : Evaluation
        A finished run.
    out_dir : path-like
        Existing directory for the PNG files.

    Returns
    -------
    files : list of str
        The files written.
    note : str or None
        Why no figure was written (matplotlib missing), else None.
    """
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        return [], "figures skipped: matplotlib is not installed (extra [plot])"
    return evaluation.task.figures(evaluation, Path(out_dir)), None


def write_reports(evaluation, out_dir, *, figures=True):
    """Write ``<name>.md``, ``<name>.json`` and (optionally) the figures.

    ``<name>`` is the task's ``report_name`` (``results`` for STS,
    ``retrieval`` for retrieval).

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
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs, note = save_figures(evaluation, out_dir) if figures else ([], None)
    name = evaluation.task.report_name
    md, js = out_dir / f"{name}.md", out_dir / f"{name}.json"
    md.write_text(to_markdown(evaluation, pngs), encoding="utf-8")
    js.write_text(to_json(evaluation, pngs), encoding="utf-8")
    return [str(md), str(js), *pngs], note
