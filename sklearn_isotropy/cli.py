"""The ``sklearn-isotropy`` command: argparse in front of the evaluation module.

``sklearn-isotropy evaluate`` encodes an STS data set with a sentence encoder
(the embedded all-MiniLM-L6-v2 by default), applies each post-processing
method, and reports Spearman's rho x100 between the gold scores and the
cosine similarities on the test split, together with fit/transform times and
anisotropy diagnostics. The choices of ``--pooling``, ``--methods`` and
``--format`` come from the registries
(:data:`~sklearn_isotropy.text.POOLING_PRESETS`,
:data:`~sklearn_isotropy.evaluation.METHODS`, the loader's formats). Exit
status: 0 on success, 2 for bad arguments, 1 when the run cannot start
(missing data or model, an output directory that cannot be written) or when
a method failed (the results of the others are still written); each error is
one line on stderr, and so is each warning.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

__all__ = ["build_parser", "main"]

PROG = "sklearn-isotropy"


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _methods(text):
    from .evaluation import METHODS

    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {unknown or [text]}; choose from {', '.join(METHODS)}"
        )
    return list(dict.fromkeys(names))


def _names(registry_name, option):
    """An argparse type: comma-separated names of an evaluation registry."""

    def parse(text):
        from . import evaluation

        registry = getattr(evaluation, registry_name)
        names = [m.strip() for m in text.split(",") if m.strip()]
        unknown = [m for m in names if m not in registry]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {option} {unknown or [text]}; choose from "
                f"{', '.join(registry)}"
            )
        return list(dict.fromkeys(names))

    return parse


def _dimensions(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return tuple(values)


def _add_retrieval_arguments(ev):
    """Options of ``evaluate --task retrieval`` (choices from the registries)."""
    from .evaluation import (
        DEFAULT_DIMENSIONS,
        DEFAULT_QUANTIZATIONS,
        DEFAULT_RETRIEVAL_METHODS,
        QUANTIZATIONS,
        RETRIEVAL_METHODS,
    )

    group = ev.add_argument_group(
        "retrieval (--task retrieval)",
        "STS data: pairs of the test split rated >= --min-score give the queries "
        "and their relevant sentences, the corpus is every distinct sentence of "
        "every split, and the post-processors are fitted on the train split. A "
        "folder with corpus.jsonl, queries.jsonl and qrels/test.tsv is read as "
        "BEIR (fitted on the corpus).",
    )
    group.add_argument(
        "--retrieval-methods",
        type=_names("RETRIEVAL_METHODS", "retrieval method(s)"),
        default=list(DEFAULT_RETRIEVAL_METHODS),
        help=f"comma-separated, from {','.join(RETRIEVAL_METHODS)} (default: "
        f"{','.join(DEFAULT_RETRIEVAL_METHODS)})",
    )
    group.add_argument(
        "--dims",
        type=_dimensions,
        default=DEFAULT_DIMENSIONS,
        help="comma-separated dimensions k of pca, whitening and truncate "
        f"(default: {','.join(map(str, DEFAULT_DIMENSIONS))})",
    )
    group.add_argument(
        "--quantize",
        type=_names("QUANTIZATIONS", "precision(s)"),
        default=list(DEFAULT_QUANTIZATIONS),
        help=f"comma-separated precisions, from {','.join(QUANTIZATIONS)} "
        f"(default: {','.join(DEFAULT_QUANTIZATIONS)})",
    )
    group.add_argument(
        "--power",
        type=float,
        default=1.0,
        help="power of 'whitening' (1 full, 0 PCA; default: 1.0)",
    )
    group.add_argument(
        "--min-score",
        type=float,
        default=4.0,
        help="STS pairs rated at least this are relevant (default: 4.0, 80%% of "
        "STS-B's 0-5 scale)",
    )
    group.add_argument(
        "--backend",
        choices=["auto", "numpy", "faiss"],
        default="auto",
        help="exact search engine (default: auto, faiss when installed)",
    )
    group.add_argument(
        "--latency-queries",
        type=int,
        default=100,
        help="queries timed one at a time (0: no latency; default: 100)",
    )


def build_parser():
    """The argument parser of ``sklearn-isotropy`` (choices from the registries).

    Returns
    -------
    parser : argparse.ArgumentParser
    """
    from . import __version__
    from .datasets import STS_FORMATS
    from .evaluation import DEFAULT_METHODS, DEFAULT_POOLINGS, METHODS, PROTOCOLS
    from .text import POOLING_PRESETS

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Isotropy post-processing for sentence embeddings.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ev = sub.add_parser(
        "evaluate",
        help=f"compare {'/'.join(METHODS)} on an STS data set",
        description=textwrap.fill(
            "Encode an STS data set, post-process the embeddings with each "
            "method and report Spearman x100 on the test split. Exit status: 0 "
            "success, 2 bad arguments, 1 when the run cannot start (data, model "
            "or output directory) or a method failed.",
            width=78,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="methods:\n"
        + "\n".join(f"  {m.name:<10} {m.help}" for m in METHODS.values())
        + "\n\npoolings:\n"
        + "\n".join(
            f"  {p.name:<15} {p.description}" for p in POOLING_PRESETS.values()
        ),
    )
    from .evaluation import RETRIEVAL_PROTOCOLS, TASKS

    ev.add_argument(
        "--task",
        choices=list(TASKS),
        default="sts",
        help="what to evaluate: "
        + "; ".join(f"{name}: {text}" for name, text in TASKS.items())
        + " (default: sts)",
    )
    ev.add_argument(
        "--model",
        default=None,
        help="Hugging Face model name or local directory (default: the embedded "
        "all-MiniLM-L6-v2)",
    )
    ev.add_argument(
        "--pooling",
        action="append",
        choices=list(POOLING_PRESETS),
        help="pooling preset; repeat for several (default: "
        f"{' and '.join(DEFAULT_POOLINGS)})",
    )
    ev.add_argument(
        "--data",
        default="stsb",
        help="STS directory with train/dev/test files, a single file (used as "
        "test), or 'stsb' to download the STS Benchmark (default: stsb)",
    )
    ev.add_argument(
        "--format",
        choices=list(STS_FORMATS),
        default=None,
        help="file format of the STS data (default: detected from the files)",
    )
    ev.add_argument(
        "--methods",
        type=_methods,
        default=list(DEFAULT_METHODS),
        help=f"comma-separated, from {','.join(METHODS)} (default: "
        f"{','.join(DEFAULT_METHODS)})",
    )
    ev.add_argument(
        "--fit-on",
        choices=list(dict.fromkeys([*PROTOCOLS, *RETRIEVAL_PROTOCOLS])),
        default=None,
        help="fit the transforms on the test sentences (target, the papers' "
        "protocol) or on the train split (default: target); for --task "
        "retrieval: train or corpus (default: train, corpus for BEIR)",
    )
    ev.add_argument(
        "--n-components",
        type=_positive_int,
        default=256,
        help="kept dimensions for 'whitening' (capped at the embedding width; "
        "default: 256)",
    )
    ev.add_argument(
        "--natsv-components",
        type=_positive_int,
        default=5,
        help="top directions removed by 'natsv' (default: 5)",
    )
    ev.add_argument(
        "--out",
        default="results",
        help="directory for results.md, results.json and PNG figures "
        "(default: ./results)",
    )
    ev.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    ev.add_argument(
        "--batch-size", type=_positive_int, default=64, help="encoding batch size"
    )
    ev.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    ev.add_argument(
        "--cv", type=_positive_int, default=5, help="folds of the 'grid' search"
    )
    ev.add_argument(
        "--max-pairs",
        type=_positive_int,
        default=None,
        help="use a random subset of at most this many pairs per split (for "
        "quick runs)",
    )
    ev.add_argument(
        "--flow-epochs",
        type=_positive_int,
        default=1,
        help="training epochs of 'flow' (default: 1, as in BERT-flow)",
    )
    ev.add_argument(
        "--cache",
        default=None,
        help="directory caching sentence encodings across runs (optional)",
    )
    ev.add_argument(
        "--no-figures", action="store_true", help="do not write PNG figures"
    )
    ev.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bars or log lines"
    )
    _add_retrieval_arguments(ev)
    return parser


def _check_writable(out):
    """Create ``out`` and write a probe file in it, before any work is done."""
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
    return out_dir


def _evaluate(args):
    from .evaluation import (
        DEFAULT_POOLINGS,
        TITLE,
        MethodSettings,
        evaluate_sts,
        format_table,
        load_sts_splits,
        required_splits,
        write_reports,
    )

    # bars only where someone watches (a terminal); step lines always
    progress = False if args.quiet else None
    args.fit_on = args.fit_on or "target"
    out_dir = _check_writable(args.out)
    splits = load_sts_splits(
        args.data,
        required_splits(args.methods, args.fit_on),
        max_pairs=args.max_pairs,
        random_state=args.seed,
        format=args.format,
    )

    def log(line):
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    print(f"Data: {args.data}")
    print(f"Model: {args.model or 'all-MiniLM-L6-v2 (embedded default)'}")
    sys.stdout.flush()
    settings = MethodSettings(
        n_components=args.n_components,
        natsv_components=args.natsv_components,
        flow_epochs=args.flow_epochs,
        cv=args.cv,
        seed=args.seed,
        device=args.device,
    )
    ev = evaluate_sts(
        splits,
        data_name=args.data,
        model=args.model,
        poolings=args.pooling or DEFAULT_POOLINGS,
        methods=args.methods,
        fit_on=args.fit_on,
        settings=settings,
        batch_size=args.batch_size,
        cache=args.cache,
        progress=progress,
        log=log,
    )
    print()
    print(TITLE)
    print()
    print(format_table(ev))
    print()
    print(f"Pairs: {', '.join(f'{s} {n}' for s, n in ev.splits.items())}")
    print(f"Fitting protocol: {ev.protocol}.")
    for pooling in ev.poolings:
        record = ev.results.get(("grid", pooling))
        if record and record["params"].get("chosen"):
            print(f"grid choice for {pooling}: {record['params']['chosen']}")
    try:
        files, note = write_reports(ev, out_dir, figures=not args.no_figures)
    except OSError as exc:
        raise _CLIError(f"cannot write the results to {args.out}: {exc}") from exc
    if note:
        print(note, file=sys.stderr)
    pngs = len(files) - 2
    print(f"Wrote {files[0]}, {files[1]}", end="")
    print(f" and {pngs} figures." if pngs else ".")
    sys.stdout.flush()
    for method, pooling, error in ev.failures:
        print(
            f"{PROG}: error: method {method!r} failed for {pooling} pooling: {error}",
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


def _evaluate_retrieval(args):
    from .evaluation import (
        DEFAULT_POOLINGS,
        RETRIEVAL_TITLE,
        RetrievalSettings,
        evaluate_retrieval,
        format_retrieval_table,
        write_retrieval_reports,
    )

    progress = False if args.quiet else None
    out_dir = _check_writable(args.out)

    def log(line):
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    settings = RetrievalSettings(
        dimensions=args.dims,
        power=args.power,
        natsv_components=args.natsv_components,
        backend=args.backend,
        latency_queries=max(0, args.latency_queries),
        seed=args.seed,
    )
    ev = evaluate_retrieval(
        args.data,
        model=args.model,
        poolings=args.pooling or DEFAULT_POOLINGS,
        methods=args.retrieval_methods,
        quantizations=args.quantize,
        settings=settings,
        fit_on=args.fit_on,
        min_score=args.min_score,
        max_pairs=args.max_pairs,
        batch_size=args.batch_size,
        device=args.device,
        cache=args.cache,
        progress=progress,
        log=log,
    )
    print(f"Data: {ev.data}")
    print(f"Model: {ev.model_name}")
    print(f"Task: {ev.task['queries']} queries, {ev.task['documents']} documents")
    print(f"Fitting protocol: {ev.protocol}.")
    print(RETRIEVAL_TITLE)
    for pooling in ev.poolings:
        print(f"\n{pooling} pooling")
        print(format_retrieval_table(ev, pooling))
    try:
        files, note = write_retrieval_reports(ev, out_dir, figures=not args.no_figures)
    except OSError as exc:
        raise _CLIError(f"cannot write the results to {args.out}: {exc}") from exc
    if note:
        print(note, file=sys.stderr)
    pngs = len(files) - 2
    print(f"Wrote {files[0]}, {files[1]}", end="")
    print(f" and {pngs} figures." if pngs else ".")
    return 0


#: What ``evaluate --task`` runs (the names are evaluation.TASKS).
_TASK_RUNNERS = {"sts": _evaluate, "retrieval": _evaluate_retrieval}


class _CLIError(Exception):
    """An error reported as one line with exit status 1."""


@contextlib.contextmanager
def _package_log_on_stderr(level: int):
    """Show the package's log lines at ``level`` on stderr for the block.

    Only the ``sklearn_isotropy`` logger gets a handler: INFO lines of other
    libraries (e.g. matplotlib building its font cache) stay hidden. The
    package's lines do not also propagate to a root handler the caller set
    up (they would show twice), and the logger is restored on the way out,
    so that repeated calls of :func:`main` leave nothing behind.
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


def main(argv=None):
    """Run the ``sklearn-isotropy`` command; return its exit status.

    Parameters
    ----------
    argv : list of str, default=None
        Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns
    -------
    status : int
        0 on success; 1 when the run cannot start (missing data or model, an
        output directory that cannot be written) or when a method failed.
        Bad arguments exit with status 2 through :class:`SystemExit`, as
        argparse does.

    Examples
    --------
    >>> from sklearn_isotropy.cli import main
    >>> main(["evaluate", "--data", "/nonexistent/sts", "--quiet"])
    1
    """
    from .exceptions import EvaluationError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.task == "sts" and args.fit_on not in (None, "target", "train"):
        parser.error(
            f"--fit-on {args.fit_on} is for --task retrieval; use target or train"
        )
    if args.task == "retrieval" and args.fit_on == "target":
        parser.error("--fit-on target is for --task sts; use train or corpus")
    level = logging.WARNING if args.quiet else logging.INFO
    try:
        with _package_log_on_stderr(level), _one_line_warnings():
            return _TASK_RUNNERS[args.task](args)
    except (EvaluationError, _CLIError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
