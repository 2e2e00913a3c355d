"""The ``sklearn-isotropy`` command: argparse in front of the evaluation tasks.

``sklearn-isotropy evaluate`` compares post-processing methods on STS
(Spearman's rho x100 of pair cosines on the test split, with times and
anisotropy diagnostics); ``sklearn-isotropy retrieval`` on exact cosine
search (quality, index memory and latency per dimension and precision);
``sklearn-isotropy classify`` on SentEval's classification tasks (the
accuracy of a logistic regression and a 10-NN classifier, the V-measure
of KMeans).
Each subcommand is built from its task
(:data:`~sklearn_isotropy.evaluation.TASKS`), as the task class describes
itself: its name, help and ``--data`` are the task's class attributes
(``command``, ``command_help``, ``data_help``, ``default_data``), and its
flags are the fields of the task's settings class (``settings_class``),
those of its groups (the encoder's, the methods') included, each with its
default, its help line, and the type and bounds that parse it, declared with
the field; the choices come from the registries. This module keeps no table
of its own.

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
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path

__all__ = ["build_parser", "main"]

PROG = "sklearn-isotropy"


def _argparse_type(read):
    """Return an argparse type of ``read``, whose ``ValueError`` says what is wrong."""

    def parse(text):
        try:
            return read(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


class _DeprecatedFlag(argparse.Action):
    """An older spelling of a flag: it sets the same value, and warns."""

    def __init__(self, *args, replacement, **kwargs):
        super().__init__(*args, **kwargs)
        self.replacement = replacement

    def __call__(self, parser, namespace, values, option_string=None):
        from ._utils import warn
        from .exceptions import IsotropyDeprecationWarning

        warn(
            f"{option_string} is deprecated since 0.2.0 and will be removed in "
            f"0.3.0; use {self.replacement}",
            IsotropyDeprecationWarning,
        )
        setattr(namespace, self.dest, values)


def _methods_type(offered):
    """Return the type of ``--methods``: comma-separated names of ``offered``."""

    def parse(text):
        names = [m.strip() for m in text.split(",") if m.strip()]
        unknown = [m for m in names if m not in offered]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown method(s) {unknown or [text]}; choose from "
                f"{', '.join(offered)}"
            )
        return tuple(dict.fromkeys(names))

    return parse


def _default_text(value):
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def _listing(heading, entries, width=78):
    """The epilog lines listing a registry's names and descriptions."""
    column = max(map(len, entries)) + 2
    room = max(width - column, 40)
    return f"\n\n{heading}:\n" + "\n".join(
        f"  {name:<{column}}{textwrap.shorten(text, room, placeholder=' [...]')}"
        for name, text in entries.items()
    )


def _add_option(parser, f):
    """Add the flag of the settings field ``f``, as the field declares it.

    Returns the ``(heading, {name: description})`` the help lists after the
    options, if the field lists a registry.
    """
    cli = f.metadata["cli"]
    flag = "--" + f.name.replace("_", "-") if cli["flag"] is True else cli["flag"]
    kwargs = {}
    if cli["type"] is not None:
        kwargs["type"] = _argparse_type(cli["type"])
    registry = cli["choices"] if callable(cli["choices"]) else None
    if cli["choices"] is not None:
        kwargs["choices"] = list(registry() if registry else cli["choices"])
    if cli["append"]:
        kwargs["action"] = "append"
    shown = cli["shown"] or _default_text(f.default)
    help_text = f"{cli['help']} (default: {shown}"
    if cli["deprecated"]:
        help_text += f"; {', '.join(cli['deprecated'])}, its old name, is deprecated"
    parser.add_argument(
        flag, dest=f.name, help=help_text.replace("%", "%%") + ")", **kwargs
    )
    for old in cli["deprecated"]:
        parser.add_argument(
            old,
            dest=f.name,
            help=argparse.SUPPRESS,
            action=_DeprecatedFlag,
            replacement=flag,
            **{k: v for k, v in kwargs.items() if k != "action"},
        )
    if cli["listing"] is None:
        return None
    registry = registry or cli["type"].registry
    return cli["listing"], registry()


def _add_task_parser(sub, task):
    """Add the subcommand of ``task``, as the task and its settings describe it.

    The command, its wording and ``--data`` are the task's class attributes;
    ``--methods`` and ``--fit-on`` its methods and protocols; the other flags
    the fields of its settings class, each parsed as the field declares.
    """
    from .evaluation import METHODS

    selects = task.has_dev or task.selects_on_labels
    offered = {n: m for n, m in METHODS.items() if selects or not m.needs_dev}
    description = task.command_help
    parser = sub.add_parser(
        task.command,
        help=description.partition(":")[0],
        description=textwrap.fill(
            f"{description[0].upper()}{description[1:]} Exit status: 0 when every "
            "method ran, 1 when the run cannot start (data, model or output "
            "directory) or a method failed, 2 for bad arguments, 130 when "
            "interrupted.",
            width=78,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,
    )
    parser.set_defaults(task=task, subparser=parser)
    if task.default_data is None:
        parser.add_argument("--data", required=True, help=task.data_help)
    else:
        parser.add_argument(
            "--data",
            default=task.default_data,
            help=f"{task.data_help} (default: {task.default_data})",
        )
    parser.add_argument(
        "--methods",
        type=_methods_type(offered),
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
    epilog = "methods:\n" + "\n".join(
        f"  {m.name:<10} {m.help}" for m in offered.values()
    )
    for f in task.settings_class.options():
        listed = _add_option(parser, f)
        if listed is not None:
            epilog += _listing(*listed)
    parser.epilog = epilog
    stem = task.report_class.stem
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
    from .evaluation import TASKS

    report = task.report_class
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
        theirs = TASKS[owner].command if owner in TASKS else owner
        error = _CLIError(
            f"--out {str(out)!r} holds {report.stem}.json, the report of "
            f"`{PROG} {theirs}`, which `{PROG} {task.command}` would replace; pass "
            "another --out, or move that report and its figures away first"
        )
        error.status = 2
        raise error
    return out_dir


def _run(args):
    """Load the task, run its methods, print the tables, write the reports."""
    from ._defaults import DEFAULT_MODEL_DESCRIPTION
    from .evaluation import evaluate, format_table, write_reports

    task_class = args.task
    settings_class = task_class.settings_class
    values = {
        f.name: getattr(args, f.name)
        for f in settings_class.options()
        if hasattr(args, f.name)
    }
    if "poolings" in values:
        values["poolings"] = tuple(dict.fromkeys(values["poolings"]))
    # bars only where someone watches (a terminal); step lines always
    values["progress"] = False if args.quiet else None
    # each value to its field, in whichever group of the settings holds it
    settings = settings_class.from_options(values)
    report = task_class.report_class
    names = [f"{report.stem}.md", f"{report.stem}.json"]
    poolings = settings.encoding.poolings
    figures = [n.format(p) for p in poolings for n in report.figure_names]
    figures = [] if args.no_figures else figures
    out_dir = _check_out(args.out, names + figures, task_class)
    task = task_class.load(
        args.data, settings, fit_on=args.fit_on, methods=args.methods
    )

    def log(line):
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    print(f"Data: {task.data_name}")
    print(f"Model: {settings.encoding.model or DEFAULT_MODEL_DESCRIPTION}", flush=True)
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
            with _one_line_warnings():  # a deprecated flag warns while parsed
                args = build_parser().parse_args(argv)
                _check_combinations(args)
                level = logging.WARNING if args.quiet else logging.INFO
                with _package_log_on_stderr(level):
                    return _run(args)
        except (EvaluationError, _CLIError) as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return getattr(exc, "status", 1)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the previous report is unchanged", file=sys.stderr)
        return 130
