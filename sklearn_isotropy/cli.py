"""The ``sklearn-isotropy`` command: argparse in front of the evaluation tasks.

``sklearn-isotropy evaluate`` compares post-processing methods on STS
(Spearman's rho x100 of pair cosines on the test split, with times and
anisotropy diagnostics); ``sklearn-isotropy retrieval`` on exact cosine
search (quality, index memory and latency per dimension and precision);
``sklearn-isotropy classify`` on SentEval's classification tasks (the
accuracy of a logistic regression and a 10-NN classifier, the V-measure
of KMeans).
Each subcommand is built from its task
(:data:`~sklearn_isotropy.evaluation.TASKS`): its flags are the fields of
:class:`~sklearn_isotropy.evaluation.EvaluationSettings` the task reads,
with their defaults, and its choices come from the registries.

Exit status: 0 when every requested method ran; 1 when the run cannot start
(missing data or model, an output directory that cannot be written) or when
a method failed (the results of the others are still written, and each
failure is one line on stderr); 2 for bad arguments (a report's name in
``--out`` taken by a directory, or by another command's report, included);
130 when interrupted (Ctrl-C), with the previous reports unchanged.

Each command writes its own reports (``evaluate``: ``results.md`` and
``results.json``; ``retrieval``: ``retrieval.*``; ``classify``:
``classify.*``), so several can share one ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path

__all__ = ["build_parser", "main"]

PROG = "sklearn-isotropy"

#: Each task's subcommand and what it does (its help), by the task's name.
_COMMANDS = {
    "sts": (
        "evaluate",
        "compare post-processing methods on an STS data set: encode it, "
        "post-process the embeddings with each method and report Spearman x100 "
        "of pair cosines on the test split.",
    ),
    "retrieval": (
        "retrieval",
        "compare post-processing methods for search: encode queries and a "
        "corpus (from STS pairs or a BEIR folder), post-process with each "
        "method at each dimension k and precision, and report exact-search "
        "quality, index memory and latency.",
    ),
    "classification": (
        "classify",
        "compare post-processing methods for classification and clustering: "
        "encode SentEval's sentence classification tasks, post-process the "
        "embeddings with each method (fitted without labels on each training "
        "fold) and report the accuracy of a logistic regression and a 10-NN "
        "classifier and the V-measure of KMeans.",
    ),
}

#: Each task's ``--data`` default; None makes ``--data`` required.
_DEFAULT_DATA = {"sts": "stsb", "retrieval": "stsb", "classification": None}


def _number(text, *, integer=False, low=None, high=None):
    """Parse a finite int or float from ``low`` to ``high`` (an argparse type)."""
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
    too_low = low is not None and value < low
    too_high = high is not None and value > high
    # an int is finite (and math.isfinite overflows on one past float's range)
    if (not integer and not math.isfinite(value)) or too_low or too_high:
        kind = "an integer" if integer else "a finite value"
        if high is not None:
            bound = f" from {low} to {high}"
        else:
            bound = "" if low is None else f" >= {low}"
        raise argparse.ArgumentTypeError(f"expected {kind}{bound}, got {text!r}")
    return value


def _ints(text):
    values = [_number(v, integer=True, low=1) for v in text.split(",") if v.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return tuple(values)


def _names(registry, what, normalize=None):
    """Return an argparse type reading comma-separated names of ``registry``."""

    def parse(text):
        names = [m.strip() for m in text.split(",") if m.strip()]
        names = [normalize(m) for m in names] if normalize else names
        unknown = [m for m in names if m not in registry]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {unknown or [text]}; choose from {', '.join(registry)}"
            )
        return tuple(dict.fromkeys(names))

    return parse


def _argument_types(task):
    """Return what each ``parser`` name of the settings' metadata means for ``task``."""
    from .datasets import SENTEVAL_TASKS, STS_FORMATS
    from .text import POOLING_PRESETS

    quantizations = getattr(task, "quantizations", {})
    return {
        "positive_int": {"type": lambda t: _number(t, integer=True, low=1)},
        "int>=0": {"type": lambda t: _number(t, integer=True, low=0)},
        "int>=2": {"type": lambda t: _number(t, integer=True, low=2)},
        "seed": {"type": lambda t: _number(t, integer=True, low=0, high=2**32 - 1)},
        "number": {"type": _number},
        "number>=0": {"type": lambda t: _number(t, low=0)},
        "ints": {"type": _ints},
        "pooling": {"action": "append", "choices": list(POOLING_PRESETS)},
        "quantizations": {"type": _names(quantizations, "precision(s)")},
        "sts_format": {"choices": list(STS_FORMATS)},
        "senteval_tasks": {
            "type": _names(SENTEVAL_TASKS, "task(s)", normalize=str.upper)
        },
    }


def _default_text(value):
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def _add_task_parser(sub, task):
    """Add the subcommand of ``task``: its data, methods, protocol and settings."""
    from .evaluation import METHODS, EvaluationSettings
    from .text import POOLING_PRESETS

    command, description = _COMMANDS.get(task.name, (task.name, task.name))
    selects = task.has_dev or task.selects_on_labels
    offered = {n: m for n, m in METHODS.items() if selects or not m.needs_dev}
    epilog = "methods:\n" + "\n".join(
        f"  {m.name:<10} {m.help}" for m in offered.values()
    )
    options = EvaluationSettings.options(task.name)
    if any(f.metadata["cli"]["parser"] == "quantizations" for f in options):
        epilog += "\n\nprecisions:\n" + "\n".join(
            f"  {q.name:<17} {textwrap.shorten(q.help, 60)}"
            for q in task.quantizations.values()
        )
    epilog += "\n\npoolings:\n" + "\n".join(
        f"  {p.name:<15} {p.description}" for p in POOLING_PRESETS.values()
    )
    parser = sub.add_parser(
        command,
        help=description.partition(":")[0],
        description=textwrap.fill(
            f"{description[0].upper()}{description[1:]} Exit status: 0 when every "
            "method ran, 1 when the run cannot start (data, model or output "
            "directory) or a method failed, 2 for bad arguments, 130 when "
            "interrupted.",
            width=78,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=epilog,
        argument_default=argparse.SUPPRESS,
    )
    parser.set_defaults(task=task, subparser=parser)
    default_data = _DEFAULT_DATA.get(task.name)
    if default_data is None:
        parser.add_argument(
            "--data",
            required=True,
            help="the folder holding SentEval's task folders (MR/, CR/, SUBJ/, "
            "MPQA/, TREC/), as SentEval's data/downstream holds them",
        )
    else:
        parser.add_argument(
            "--data",
            default=default_data,
            help="STS directory with train/dev/test files, a single file (used as "
            "test), 'stsb' to download the STS Benchmark, or other data the task "
            f"reads (see above; default: {default_data})",
        )
    parser.add_argument(
        "--methods",
        type=_names(offered, "method(s)"),
        default=task.default_methods,
        help=f"comma-separated, from {','.join(offered)} (default: "
        f"{','.join(task.default_methods)})",
    )
    parser.add_argument(
        "--fit-on",
        choices=list(task.protocols),
        default=None,
        help="what the transforms are fitted on: "
        + "; ".join(f"{name}: {text}" for name, text in task.protocols.items()),
    )
    types = _argument_types(task)
    for f in options:
        cli = f.metadata["cli"]
        flag = "--" + f.name.replace("_", "-") if cli["flag"] is True else cli["flag"]
        help_text = cli["help"].replace("%", "%%")
        shown = cli["shown"] or _default_text(f.default)
        parser_kwargs = (
            {"choices": cli["parser"]}
            if isinstance(cli["parser"], tuple)
            else types.get(cli["parser"], {})
        )
        parser.add_argument(
            flag, dest=f.name, help=f"{help_text} (default: {shown})", **parser_kwargs
        )
    stem = task.report_class().stem
    parser.add_argument(
        "--out",
        default="results",
        help=f"directory for {stem}.md, {stem}.json and PNG figures (default: "
        "./results)",
    )
    parser.add_argument(
        "--no-figures", action="store_true", default=False, help="no PNG figures"
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=False,
        help="no progress bars or log lines",
    )


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of ``sklearn-isotropy``.

    Returns
    -------
    parser : argparse.ArgumentParser
        One subcommand per task, its choices read from the registries.
    """
    from . import __version__
    from .evaluation import TASKS

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Isotropy post-processing for sentence embeddings.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for task in TASKS.values():
        _add_task_parser(sub, task)
    return parser


def _check_combinations(args):
    """Refuse flags that do not apply together, as argparse refuses a bad one."""
    if getattr(args, "encoder", None) == "static" and hasattr(args, "poolings"):
        args.subparser.error(
            "--pooling does not apply to --encoder static: the static "
            "vectorizer has its own pooling (a weighted mean of token rows, "
            "reported as 'static'). Drop --pooling, or compare poolings with "
            "--encoder transformer."
        )


def _check_out(out, names, task):
    """Create ``out`` and check that the files ``names`` can be written there.

    A probe file is written before any work is done; a name taken by a
    directory (or anything but a file), or by another task's report, is a
    usage error.
    """
    report = task.report_class()
    out_dir = Path(out).expanduser()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir, prefix=".write-probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise _CLIError(
            f"cannot write to --out directory {str(out)!r} ({reason}); pass "
            "--out with a directory you can write to"
        ) from exc
    taken = [n for n in names if (out_dir / n).exists() and not (out_dir / n).is_file()]
    if taken:
        error = _CLIError(
            f"--out {str(out)!r} holds {', '.join(taken)}, which is not a file, "
            "where a report is to be written; remove it or pass another --out"
        )
        error.status = 2
        raise error
    # another command's report under this one's name (an earlier version's
    # classify wrote results.json): replacing it would lose that run
    owner = report.previous_task(out_dir)
    if owner is not None and owner != task.name:
        mine, theirs = (_COMMANDS.get(t, (t,))[0] for t in (task.name, owner))
        error = _CLIError(
            f"--out {str(out)!r} holds {report.stem}.json, the report of "
            f"`{PROG} {theirs}`, which `{PROG} {mine}` would replace; pass "
            "another --out, or move that report and its figures away first"
        )
        error.status = 2
        raise error
    return out_dir


def _run(args):
    """Load the task, run its methods, print the tables, write the reports."""
    from ._defaults import DEFAULT_MODEL_DESCRIPTION
    from .evaluation import EvaluationSettings, evaluate, format_table, write_reports

    task_class = args.task
    values = {
        f.name: getattr(args, f.name)
        for f in EvaluationSettings.options(task_class.name)
        if hasattr(args, f.name)
    }
    if "poolings" in values:
        values["poolings"] = tuple(dict.fromkeys(values["poolings"]))
    # bars only where someone watches (a terminal); step lines always
    settings = EvaluationSettings(**values, progress=False if args.quiet else None)
    report = task_class.report_class()
    names = [f"{report.stem}.md", f"{report.stem}.json"]
    figures = [n.format(p) for p in settings.poolings for n in report.figure_names]
    figures = [] if args.no_figures else figures
    out_dir = _check_out(args.out, names + figures, task_class)
    task = task_class.load(
        args.data, settings, fit_on=args.fit_on, methods=args.methods
    )

    def log(line):
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    print(f"Data: {task.data_name}")
    print(f"Model: {settings.model or DEFAULT_MODEL_DESCRIPTION}", flush=True)
    ev = evaluate(task, methods=args.methods, settings=settings, log=log)
    print(f"\n{report.title}\n\n{format_table(ev)}\n")
    for line in report(ev).console_lines():
        print(line)
    print(f"Fitting protocol: {ev.protocol}.")
    try:
        files, note = write_reports(ev, out_dir, figures=not args.no_figures)
    except OSError as exc:
        raise _CLIError(
            f"cannot write the results to {args.out} (the previous reports are "
            f"unchanged): {exc}"
        ) from exc
    if note:
        print(note, file=sys.stderr)
    pngs = len(files) - 2
    print(f"Wrote {files[0]}, {files[1]}", end="")
    print(f" and {pngs} figures." if pngs else ".", flush=True)
    for label, pooling, error in ev.failures:
        print(
            f"{PROG}: error: method {label!r} failed for {pooling} pooling: {error}",
            file=sys.stderr,
        )
    return 1 if ev.failures else 0


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Print a warning as one line, ``sklearn-isotropy: warning: ...``."""
    text = " ".join(str(message).split())
    print(f"{PROG}: warning: {text}", file=file or sys.stderr, flush=True)


@contextlib.contextmanager
def _one_line_warnings():
    """Show each warning of the run once, on one line of stderr."""
    # the filters stay as they are (Python's default shows a warning once per
    # place and message); only how a shown warning is printed changes
    with warnings.catch_warnings():
        original, warnings.showwarning = warnings.showwarning, _show_warning
        try:
            yield
        finally:
            warnings.showwarning = original


class _CLIError(Exception):
    """An error reported as one line with exit status ``status``."""

    status = 1


@contextlib.contextmanager
def _package_log_on_stderr(level: int):
    """Show the package's log lines at ``level`` on stderr for the block.

    Only the package's logger: other libraries' INFO lines stay hidden, and
    a root handler the caller set up does not show them twice.
    """
    package = logging.getLogger("sklearn_isotropy")
    saved = package.level, package.propagate
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    package.addHandler(handler)
    package.setLevel(level)
    package.propagate = False
    try:
        yield
    finally:
        package.removeHandler(handler)
        package.setLevel(saved[0])
        package.propagate = saved[1]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sklearn-isotropy`` command; return its exit status.

    Parameters
    ----------
    argv : list of str, default=None
        Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns
    -------
    status : int
        0 when every requested method ran; 1 when the run cannot start
        (missing data or model, an output directory that cannot be written)
        or when a method failed; 2 when a report's name in ``--out`` is
        taken by a directory or by another command's report; 130 when
        interrupted. Bad arguments exit with
        status 2 through :class:`SystemExit`, as argparse does.

    Examples
    --------
    >>> from sklearn_isotropy.cli import main
    >>> main(["evaluate", "--data", "/nonexistent/sts", "--quiet"])
    1
    """
    # Ctrl-C while scikit-learn, the package and its registries are imported
    # is an interruption too: ``import sklearn_isotropy`` itself loads none
    # of them, so this handler runs before any heavy import
    try:
        from .exceptions import EvaluationError

        try:
            args = build_parser().parse_args(argv)
            _check_combinations(args)
            level = logging.WARNING if args.quiet else logging.INFO
            with _package_log_on_stderr(level), _one_line_warnings():
                return _run(args)
        except (EvaluationError, _CLIError) as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return getattr(exc, "status", 1)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the previous report is unchanged", file=sys.stderr)
        return 130
