"""Writers of a :class:`~sklearn_isotropy.evaluation.RetrievalEvaluation`.

A table (plain text or Markdown), the Markdown and JSON reports and the
figure of quality against bytes per vector. Each takes the evaluation (or
its records) and returns text or writes files; none runs anything.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np

from ._retrieval_methods import QUANTIZATIONS, RETRIEVAL_METHODS

__all__ = [
    "RETRIEVAL_TITLE",
    "format_retrieval_table",
    "plot_quality_vs_bytes",
    "retrieval_to_json",
    "retrieval_to_markdown",
    "save_retrieval_figures",
    "write_retrieval_reports",
]

RETRIEVAL_TITLE = (
    "Exact cosine search: quality x100, index memory and query latency per "
    "method, dimension and precision"
)

_NAMES = {"mrr": "MRR", "recall": "R", "ndcg": "nDCG"}


def _metric_header(name):
    kind, _, k = name.partition("@")
    return f"{_NAMES.get(kind, kind)}@{k}"


def _size(n_bytes):
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} B"


def _ms(value):
    return "-" if value is None else f"{value:.3f}"


def format_retrieval_table(evaluation, pooling, *, markdown=False):
    """The results of one pooling: a row per method, dimension and precision.

    Parameters
    ----------
    evaluation : RetrievalEvaluation
        A finished run.
    pooling : str
        One of ``evaluation.poolings``.
    markdown : bool, default=False
        A Markdown table instead of aligned plain text.

    Returns
    -------
    table : str
    """
    metrics = list(evaluation.settings.metrics)
    header = [
        "method",
        "dims",
        "precision",
        "bytes/vector",
        "index",
        *[_metric_header(m) for m in metrics],
        "latency ms",
        "batch ms/query",
    ]
    rows = []
    for r in evaluation.records.get(pooling, []):
        if "error" in r:
            rows.append([r["label"], "-", "-", "-", "-", *["failed"] * len(metrics)])
            rows[-1] += ["-", "-"]
            continue
        rows.append(
            [
                r["label"],
                str(r["dimensions"]),
                r["quantization"],
                str(r["bytes_per_vector"]),
                _size(r["index_bytes"]),
                *[f"{100 * r[m]:.2f}" for m in metrics],
                _ms(r["latency_ms"]),
                _ms(r["batch_ms_per_query"]),
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(header) + " |"]
        lines.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|")
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]

    def fmt(r):
        return "  ".join(
            c.ljust(w) if i < 3 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths))
        )

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), sep, *[fmt(r) for r in rows]])


def _describe_task(task):
    parts = [f"{task['queries']} queries", f"{task['documents']} documents"]
    parts.append(f"{task['relevant_judgements']} relevant judgements")
    if "min_score" in task:
        parts.append(
            f"relevant = pairs rated >= {task['min_score']:g}"
            + (" (both directions)" if task.get("symmetric") else "")
        )
    return ", ".join(parts)


def retrieval_to_markdown(evaluation, figures=()):
    """The Markdown report (``retrieval.md``) of an evaluation.

    Parameters
    ----------
    evaluation : RetrievalEvaluation
        A finished run.
    figures : sequence of path-like, default=()
        Figure files to link (by file name, relative to the report).

    Returns
    -------
    text : str
    """
    ev = evaluation
    s = ev.settings
    md = [
        "# sklearn-isotropy evaluate --task retrieval",
        "",
        f"- Data: `{ev.data}` ({_describe_task(ev.task)})",
        f"- Model: {ev.model_name}",
        f"- Fitting protocol: {ev.protocol}.",
        f"- Whitening power: {s.power:g}; NATSV removes {s.natsv_components} "
        "directions; PCA is whitening with power 0.",
        f"- Search: exact, backend `{_backend(ev)}`; a query's own sentence is "
        "never returned to it; ties are averaged (the expected score over random "
        "orders of tied documents).",
        "- Precisions: "
        + "; ".join(f"`{q}`: {QUANTIZATIONS[q].help}" for q in ev.quantizations),
        "- Index = documents x bytes per vector. Latency: median of one-query "
        "top-k searches on one thread; batch: the best of three searches of "
        "every query, per query. int8 codes are searched as float32 numbers "
        "(exact), so their latency is float32's at the same width: the int8 "
        "index saves memory here, not time.",
        "",
        f"## {RETRIEVAL_TITLE}",
    ]
    for pooling in ev.poolings:
        md += [
            "",
            f"### {pooling} pooling",
            "",
            format_retrieval_table(ev, pooling, markdown=True),
        ]
        warned = sorted(
            {w for r in ev.records.get(pooling, []) for w in r.get("warnings", [])}
        )
        if warned:
            md += ["", "Warnings raised while fitting:", ""]
            md += [f"- {w}" for w in warned]
    if figures:
        md += ["", "## Figures", ""]
        md += [f"![{Path(f).stem}]({Path(f).name})" for f in figures]
    return "\n".join(md) + "\n"


def _backend(ev):
    found = {r.get("backend") for recs in ev.records.values() for r in recs}
    found.discard(None)
    return ", ".join(sorted(found)) or ev.settings.backend


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    return str(obj)


def retrieval_to_json(evaluation, figures=()):
    """The JSON report (``retrieval.json``) of an evaluation, as a string.

    Parameters
    ----------
    evaluation : RetrievalEvaluation
        A finished run.
    figures : sequence of path-like, default=()
        Figure files written for it.

    Returns
    -------
    text : str
    """
    from dataclasses import asdict

    from .. import __version__

    ev = evaluation
    payload = {
        "task": "retrieval",
        "data": ev.data,
        "retrieval_task": ev.task,
        "model": ev.model,
        "poolings": ev.poolings,
        "fit_on": ev.fit_on,
        "protocol": ev.protocol,
        "settings": asdict(ev.settings),
        "methods": ev.methods,
        "quantizations": {q: QUANTIZATIONS[q].help for q in ev.quantizations},
        "encoding": ev.encodings,
        "results": {p: ev.records.get(p, []) for p in ev.poolings},
        "figures": [str(f) for f in figures],
        "versions": {
            "sklearn_isotropy": __version__,
            "python": platform.python_version(),
        },
    }
    return json.dumps(payload, indent=2, default=_json_default)


_MARKERS = {"float32": "o", "int8": "s", "binary": "^", "binary-uncentred": "v"}
_LINES = {"float32": "-", "int8": "--", "binary": ":", "binary-uncentred": "-."}


def plot_quality_vs_bytes(
    records, *, metric="mrr@10", ax=None, title=None, legend=True, zoom=None
):
    """Plot a quality score against bytes per vector (log scale).

    One colour per method; within it one line per precision through the
    method's dimensions (solid float32, dashed int8, dotted binary), so a
    method's compression curve reads left to right. Methods without a
    dimension (raw, NATSV) are single hollow markers per precision. The
    legends sit outside the axes, on the right; save with
    ``bbox_inches="tight"`` to keep them.

    Parameters
    ----------
    records : list of dict
        Records of :func:`~sklearn_isotropy.evaluation.run_compression_study`
        (failed ones are skipped).
    metric : str, default="mrr@10"
        Which score to plot (x100).
    ax : matplotlib.axes.Axes, default=None
        Where to draw; a new figure's axes when None.
    title : str, default=None
        Axes title.
    legend : bool, default=True
        Draw the method and precision legends (right of the axes).
    zoom : float, default=None
        Show only the top `zoom` points (x100) below the best score, with
        the points under it left out of the view.

    Returns
    -------
    ax : matplotlib.axes.Axes
    """
    if ax is None:
        from matplotlib.figure import Figure

        ax = Figure(figsize=(9, 5), layout="constrained").add_subplot()
    ok = [r for r in records if "error" not in r]
    methods = list(dict.fromkeys(_key(r) for r in ok))
    colours = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    groups = {}
    for r in ok:
        groups.setdefault((_key(r), r["quantization"]), []).append(r)
    for (method, quant), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["bytes_per_vector"])
        x = [r["bytes_per_vector"] for r in rs]
        y = [100 * r[metric] for r in rs]
        single = len(rs) == 1  # raw, NATSV: hollow and larger, so overlaps show
        ax.plot(
            x,
            y,
            linestyle="none" if single else _LINES.get(quant, "-"),
            marker=_MARKERS.get(quant, "D"),
            color=colours[method],
            markerfacecolor="none" if single else colours[method],
            markeredgewidth=1.8 if single else 1.0,
            markersize=10 if single else 6,
            linewidth=1.4,
            alpha=0.9,
        )
    ax.set_xscale("log")
    if zoom is not None and ok:
        best = max(100 * r[metric] for r in ok)
        ax.set_ylim(best - zoom, best + 0.1 * zoom)
    ax.set_xlabel("bytes per vector (log scale)")
    ax.set_ylabel(f"{_metric_header(metric)} x100")
    ax.grid(True, which="both", alpha=0.3)
    if title:
        ax.set_title(title)
    if not legend:
        return ax
    from matplotlib.lines import Line2D

    method_handles = [
        Line2D([], [], color=colours[m], linewidth=3, label=_method_label(m, ok))
        for m in methods
    ]
    quants = list(dict.fromkeys(r["quantization"] for r in ok))
    quant_handles = [
        Line2D(
            [],
            [],
            color="0.3",
            linestyle=_LINES.get(q, "-"),
            marker=_MARKERS.get(q, "D"),
            label=q,
        )
        for q in quants
    ]
    # one legend (an extra legend added with add_artist is left out of
    # bbox_inches="tight"), with a heading row before each group
    heading = {"color": "none", "marker": None, "linestyle": "none"}
    ax.legend(
        handles=[
            Line2D([], [], label="method", **heading),
            *method_handles,
            Line2D([], [], label=" ", **heading),
            Line2D([], [], label="precision", **heading),
            *quant_handles,
        ],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    return ax


def _key(record):
    """A curve per registered method; a custom transformer is its own."""
    return record["label"] if record["method"] == "custom" else record["method"]


def _method_label(method, records):
    registered = RETRIEVAL_METHODS.get(method)
    if registered is not None and registered.uses_k:
        return registered.label.format(k="k", settings=None)
    for r in records:
        if r["method"] == method or r["label"] == method:
            return r["label"]
    return method


def save_retrieval_figures(evaluation, out_dir, *, metric=None):
    """Write ``retrieval_<pooling>.png``: quality against bytes per vector.

    Two panels: every point, and the 10 points (x100) below the best score,
    where the methods differ.

    Parameters
    ----------
    evaluation : RetrievalEvaluation
        A finished run.
    out_dir : path-like
        Existing directory for the PNG files.
    metric : str, default=None
        The score on the y axis; the first of the settings' metrics when
        None.

    Returns
    -------
    files : list of str
        The files written.
    note : str or None
        Why no figure was written (matplotlib missing), else None.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return [], "figures skipped: matplotlib is not installed (extra [plot])"
    metric = metric or evaluation.settings.metrics[0]
    out_dir = Path(out_dir)
    files = []
    for pooling in evaluation.poolings:
        records = evaluation.records.get(pooling)
        if not records or all("error" in r for r in records):
            continue
        fig = Figure(figsize=(13, 5.2), layout="constrained")
        whole, top = fig.subplots(1, 2)
        task = evaluation.task
        fig.suptitle(
            f"{evaluation.model_name}, {pooling} pooling: {task['queries']} "
            f"queries, {task['documents']} documents"
        )
        plot_quality_vs_bytes(
            records, metric=metric, ax=whole, title="every point", legend=False
        )
        plot_quality_vs_bytes(
            records, metric=metric, ax=top, title="the top 10 points", zoom=10
        )
        path = out_dir / f"retrieval_{pooling}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")  # the legends are outside
        files.append(str(path))
    return files, None


def write_retrieval_reports(evaluation, out_dir, *, figures=True):
    """Write ``retrieval.md``, ``retrieval.json`` and (optionally) the figures.

    Parameters
    ----------
    evaluation : RetrievalEvaluation
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
    pngs, note = save_retrieval_figures(evaluation, out_dir) if figures else ([], None)
    md, js = out_dir / "retrieval.md", out_dir / "retrieval.json"
    md.write_text(retrieval_to_markdown(evaluation, pngs), encoding="utf-8")
    js.write_text(retrieval_to_json(evaluation, pngs), encoding="utf-8")
    return [str(md), str(js), *pngs], note
