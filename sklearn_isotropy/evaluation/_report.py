"""Writers of an :class:`~sklearn_isotropy.evaluation.STSEvaluation`: table,
Markdown, JSON and figures. Each takes the evaluation and returns text or
writes files; none runs anything."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np

__all__ = [
    "TITLE",
    "format_table",
    "save_figures",
    "to_json",
    "to_markdown",
    "write_reports",
]

TITLE = "Spearman ρ×100 on the test split (cosine of pair embeddings)"


def _table(header, rows, *, markdown):
    if markdown:
        lines = ["| " + " | ".join(header) + " |"]
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]

    def fmt(r):
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths))
        )

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), sep, *[fmt(r) for r in rows]])


def format_table(evaluation, *, markdown=False):
    """The results: one block per pooling, one row per method.

    Each pooling gets its own block (a heading line, then the table), so the
    plain-text output stays within 100 columns however many poolings were
    run, and a label can say what a method chose for that pooling (the
    ``grid`` method's whitening dimension and power).

    Parameters
    ----------
    evaluation : STSEvaluation
        A finished run.
    markdown : bool, default=False
        Markdown (a ``###`` heading and a table per pooling) instead of
        aligned plain text.

    Returns
    -------
    table : str
    """
    ev = evaluation
    header = ["method", "ρ×100", "fit s", "transform s"]
    blocks = []
    for p in ev.poolings:
        rows = []
        for m in ev.methods:
            r = ev.results.get((m, p))
            if r is None or r["spearman_x100"] is None:
                rows.append([m, "failed" if r else "-", "-", "-"])
                continue
            rows.append(
                [
                    r.get("label") or ev.label(m, p),
                    f"{r['spearman_x100']:.2f}",
                    f"{r['fit_seconds']:.2f}",
                    f"{r['transform_seconds']:.2f}",
                ]
            )
        title = f"{p} pooling"
        heading = f"### {title}" if markdown else f"{title}:"
        blocks.append(f"{heading}\n\n{_table(header, rows, markdown=markdown)}")
    return "\n\n".join(blocks)


def _sizes(ev):
    return ", ".join(f"{s} {n} pairs" for s, n in ev.splits.items())


def to_markdown(evaluation, figures=()):
    """The Markdown report (``results.md``) of an evaluation.

    Parameters
    ----------
    evaluation : STSEvaluation
        A finished run.
    figures : sequence of path-like, default=()
        Figure files to link (by file name, relative to the report).

    Returns
    -------
    text : str
    """
    ev = evaluation
    md = [
        "# sklearn-isotropy evaluate",
        "",
        f"- Data: `{ev.data}` ({_sizes(ev)})",
        f"- Model: {ev.model_name}",
        f"- Fitting protocol: {ev.protocol}.",
        f"- Seed: {ev.settings.seed}; device: {ev.settings.device}",
        "",
        f"## {TITLE}",
        "",
        format_table(ev, markdown=True),
        "",
        "## Anisotropy of the test-sentence embeddings",
        "",
        "| pooling | method | mean pair cosine | isotropy I(W) | effective rank "
        "| top-PC variance share |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for pooling in ev.poolings:
        for method in ev.methods:
            r = ev.diagnostics.get(pooling, {}).get(method)
            if r is None:
                continue
            md.append(
                f"| {pooling} | {method} | {r['mean_pair_cosine']:.3f} | "
                f"{r['isotropy_score']:.3g} | {r['effective_rank']:.1f} | "
                f"{r['top_component_variance_ratio']:.3f} |"
            )
    if figures:
        md += ["", "## Figures", ""]
        md += [f"![{Path(f).stem}]({Path(f).name})" for f in figures]
    return "\n".join(md) + "\n"


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    return str(obj)


def to_json(evaluation, figures=()):
    """The JSON report (``results.json``) of an evaluation, as a string.

    Parameters
    ----------
    evaluation : STSEvaluation
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
        "data": ev.data,
        "splits": ev.splits,
        "model": ev.model_id,
        "model_description": ev.model_name,
        "poolings": ev.poolings,
        "methods": ev.methods,
        "fit_on": ev.fit_on,
        "protocol": ev.protocol,
        "seed": ev.settings.seed,
        "device": ev.settings.device,
        "encoding": ev.encodings,
        "results": [ev.results[(m, p)] for p in ev.poolings for m in ev.methods],
        "diagnostics": ev.diagnostics,
        "figures": [str(f) for f in figures],
        "versions": {
            "sklearn_isotropy": __version__,
            "python": platform.python_version(),
        },
    }
    return json.dumps(payload, indent=2, default=_json_default)


def _spectrum_figure(Figure, transformed, pooling):
    from ..diagnostics import plot_eigenvalue_spectrum

    fig = Figure(figsize=(9, 4.8), layout="constrained")
    ax = fig.add_subplot()
    plot_eigenvalue_spectrum(transformed, ax=ax)
    ax.set_title(f"Covariance spectrum ({pooling} pooling, test sentences)")
    return fig


def _cosines_figure(Figure, transformed, pooling, reference=None):
    """Small multiples: one panel per method, the raw histogram behind each."""
    from ..diagnostics import pair_cosines

    labels = list(transformed)
    ncols = min(3, len(labels))
    nrows = -(-len(labels) // ncols)
    fig = Figure(figsize=(3.4 * ncols, 2.6 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    edges = np.linspace(-1.0, 1.0, 51)
    ref = None
    if reference is not None:
        ref = pair_cosines(transformed[reference], random_state=0)
    for ax, label in zip(axes.flat, labels):
        cos = pair_cosines(transformed[label], random_state=0)
        if ref is not None and label != reference:
            ax.hist(ref, bins=edges, density=True, color="0.8", label=reference)
        ax.hist(cos, bins=edges, density=True, histtype="step", linewidth=1.5)
        mean = float(cos.mean())
        mean = 0.0 if abs(mean) < 0.005 else mean  # "0.00", not "-0.00"
        ax.set_title(f"{label}\nmean cosine {mean:.2f}", fontsize="small")
        ax.set_xlim(-1.0, 1.0)
    for ax in axes.flat[len(labels) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("cosine of random pairs")
    for ax in axes[:, 0]:
        ax.set_ylabel("density")
    note = f" (grey: {reference})" if ref is not None else ""
    fig.suptitle(f"Pair cosine similarity, {pooling} pooling, test sentences{note}")
    return fig


def save_figures(evaluation, out_dir):
    """Write the spectrum and cosine-histogram figures of every pooling.

    ``<pooling>_spectrum.png`` draws the covariance spectrum of every
    method's output on one log axis (down to each matrix's numerical rank,
    with markers so that coinciding lines stay visible, the legend beside
    the axes); ``<pooling>_cosines.png`` has one panel per method, with the
    raw embeddings' histogram behind each for reference.

    Parameters
    ----------
    evaluation : STSEvaluation
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
        from matplotlib.figure import Figure
    except ImportError:
        return [], "figures skipped: matplotlib is not installed (extra [plot])"

    out_dir = Path(out_dir)
    files = []
    for pooling in evaluation.poolings:
        transformed = evaluation.transformed.get(pooling)
        if not transformed:
            continue
        raw = evaluation.results.get(("raw", pooling), {}).get("label")
        for kind, fig in (
            ("spectrum", _spectrum_figure(Figure, transformed, pooling)),
            ("cosines", _cosines_figure(Figure, transformed, pooling, raw)),
        ):
            path = out_dir / f"{pooling}_{kind}.png"
            fig.savefig(path, dpi=110)
            files.append(str(path))
    return files, None


def write_reports(evaluation, out_dir, *, figures=True):
    """Write ``results.md``, ``results.json`` and (optionally) the figures.

    Parameters
    ----------
    evaluation : STSEvaluation
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
    md, js = out_dir / "results.md", out_dir / "results.json"
    md.write_text(to_markdown(evaluation, pngs), encoding="utf-8")
    js.write_text(to_json(evaluation, pngs), encoding="utf-8")
    return [str(md), str(js), *pngs], note
