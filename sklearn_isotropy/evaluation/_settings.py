"""The options of every evaluation, with their defaults written once.

:class:`EvaluationSettings` is the only place an evaluation default is
written. Each field's metadata says which tasks read it and, for the fields
the command line exposes, its flag and help line: ``sklearn-isotropy
evaluate --help``, ``sklearn-isotropy retrieval --help`` and the class's own
docstring are generated from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

from .._defaults import DEFAULT_MODEL_NAME, ENCODE_BATCH_SIZE
from ..exceptions import EvaluationError
from ..metrics import DEFAULT_RETRIEVAL_METRICS, SEARCH_BACKENDS, make_retrieval_scorer

__all__ = ["EvaluationSettings"]

_TASK_NAMES = {"sts": "STS", "retrieval": "Retrieval"}  # for the docstring


def _option(default, doc, *, tasks=None, check=None, flag=None, **cli):
    """A settings field: its default, its documentation, its command line.

    A field with a ``flag`` (True: ``--`` and the field name with dashes)
    is a command-line option of the ``tasks`` that read it (None: every
    task, a new one included): ``parser`` names how
    its text is read (``"positive_int"``, ``"ints"``, ``"number>=0"``...) or
    is a tuple of the choices; ``help`` is its help line (``doc`` when
    None) and ``shown`` how the help names the default, if not its value.
    ``check(names)`` raises if a non-empty tuple of names cannot run.
    """
    cli = {"flag": flag, "parser": None, "help": None, "shown": None, **cli}
    metadata = {"doc": doc, "tasks": tasks, "cli": cli if flag else None}
    return field(default=default, metadata={**metadata, "check": check})


def _check_quantizations(names):
    from ._quantization import QUANTIZATIONS

    unknown = [q for q in names if q not in QUANTIZATIONS]
    if unknown:
        raise ValueError(
            f"unknown quantization(s) {unknown}; choose from {', '.join(QUANTIZATIONS)}"
        )
    missing = {q: QUANTIZATIONS[q].missing() for q in names}
    missing = {q: modules for q, modules in missing.items() if modules}
    if missing:
        needs = sorted({m for modules in missing.values() for m in modules})
        raise EvaluationError(
            f"the precision(s) {', '.join(missing)} need {', '.join(needs)}, which "
            'is not installed: pip install "sklearn-isotropy[retrieval]", or keep '
            "to float32 (--quantize float32)"
        )


def _check_metrics(names):
    for name in names:
        make_retrieval_scorer(name)  # raises for a name it does not know


@dataclass
class EvaluationSettings:
    # the docstring is generated from the fields (see the end of the module)
    model: str | None = _option(
        None,
        "Hugging Face model name or local directory of the encoder; None is "
        f"the embedded default ({DEFAULT_MODEL_NAME}).",
        flag=True,
        help="Hugging Face model name or local directory",
        shown=f"the embedded {DEFAULT_MODEL_NAME}",
    )
    poolings: tuple[str, ...] = _option(
        ("mean", "embeddings_avg"),
        "Pooling presets to evaluate, in order.",
        flag="--pooling",
        parser="pooling",
        help="pooling preset; repeat for several",
    )
    batch_size: int = _option(
        ENCODE_BATCH_SIZE, "Encoding batch size.", flag=True, parser="positive_int"
    )
    device: str = _option("cpu", "Torch device of the encoder and the flow.", flag=True)
    cache: str | None = _option(
        None,
        "Directory caching sentence encodings across runs (the vectorizer's "
        "``memory=``).",
        flag=True,
        help="directory caching sentence encodings across runs",
    )
    format: str | None = _option(
        None,
        "File format of STS data (see :func:`~sklearn_isotropy.datasets."
        "load_sts`); detected from the files when None.",
        flag=True,
        parser="sts_format",
        help="file format of STS data",
        shown="detected from the files",
    )
    max_pairs: int | None = _option(
        None,
        "Keep a fixed random subset of at most this many pairs per STS split "
        "(for quick runs).",
        flag=True,
        parser="positive_int",
        shown="all",
    )
    seed: int = _option(
        0,
        "Seeds the subset, the flow, the grid's folds and the timed queries.",
        flag=True,
        parser="int",
    )
    n_components: int = _option(
        256,
        "Dimension ``k`` of ``whitening``, ``pca`` and ``truncate`` on STS "
        "(every dimension when the embeddings are not wider).",
        tasks=("sts",),
        flag=True,
        parser="positive_int",
    )
    dimensions: tuple[int, ...] = _option(
        (32, 64, 128, 256),
        "Dimensions ``k`` of the retrieval study, for the methods that take "
        "one; those not below the embedding width are skipped.",
        tasks=("retrieval",),
        flag="--dims",
        parser="ints",
        help="comma-separated dimensions k of pca, whitening and truncate",
    )
    power: float = _option(
        1.0,
        "Power of ``whitening`` (1 whitens fully, 0 is PCA).",
        flag=True,
        parser="number>=0",
    )
    natsv_components: int = _option(
        5,
        "Top principal directions removed by ``natsv`` (at most ``d - 1``).",
        flag=True,
        parser="positive_int",
    )
    flow_epochs: int = _option(
        1,
        "Training epochs of ``flow`` (1 is BERT-flow's protocol).",
        flag=True,
        parser="positive_int",
    )
    cv: int = _option(
        5,
        "Folds of the ``grid`` search on the dev pairs.",
        tasks=("sts",),
        flag=True,
        parser="positive_int",
    )
    grid_k: tuple[int, ...] = _option(
        (64, 128, 256),
        "Whitening dimensions the ``grid`` method searches (with every "
        "dimension, and no transform).",
        tasks=("sts",),
    )
    grid_power: tuple[float, ...] = _option(
        (0.0, 0.5, 1.0),
        "Whitening powers the ``grid`` method searches.",
        tasks=("sts",),
    )
    quantizations: tuple[str, ...] = _option(
        ("float32", "int8", "binary"),
        "Index precisions of the retrieval study (names in "
        ":data:`~sklearn_isotropy.evaluation.QUANTIZATIONS`).",
        tasks=("retrieval",),
        flag="--quantize",
        parser="quantizations",
        help="comma-separated index precisions",
        check=_check_quantizations,
    )
    metrics: tuple[str, ...] = _option(
        DEFAULT_RETRIEVAL_METRICS,
        "Retrieval scores to report (see "
        ":func:`~sklearn_isotropy.metrics.retrieval_scores`).",
        tasks=("retrieval",),
        check=_check_metrics,
    )
    min_score: float = _option(
        4.0,
        "STS pairs rated at least this are relevant (4.0 is 80% of STS-B's 0-5 scale).",
        tasks=("retrieval",),
        flag=True,
        parser="number",
        help="STS pairs rated at least this are relevant",
    )
    symmetric: bool = _option(
        False, "Query with both sentences of a relevant STS pair.", tasks=("retrieval",)
    )
    query_splits: tuple[str, ...] = _option(
        ("test",), "STS splits whose pairs give the queries.", tasks=("retrieval",)
    )
    backend: str = _option(
        "auto",
        "Exact search engine: ``auto`` (faiss when installed), ``numpy`` or ``faiss``.",
        tasks=("retrieval",),
        flag=True,
        parser=("auto", *SEARCH_BACKENDS),
        help="exact search engine (auto: faiss when installed)",
    )
    latency_queries: int = _option(
        100,
        "Queries timed one at a time for the latency figure (0: no timing).",
        tasks=("retrieval",),
        flag=True,
        parser="int>=0",
    )
    per_query: bool = _option(
        False,
        "Also keep every query's scores in each record (``per_query``), for "
        "paired comparisons.",
        tasks=("retrieval",),
    )
    progress: bool | None = _option(
        False,
        "Progress bars of long steps (encoding, the flow's epoch, the grid "
        "search): True shows them, False hides them, None shows them only on "
        "an interactive stderr.",
    )

    @property
    def show_bars(self) -> bool:
        """Whether progress bars are drawn (``progress`` with None resolved)."""
        from .._utils import interactive_stderr

        return interactive_stderr() if self.progress is None else bool(self.progress)

    def check(self, task):
        """Raise before any work if a field ``task`` reads cannot run."""
        for f in fields(self):
            only, check = f.metadata["tasks"], f.metadata["check"]
            if check is not None and (only is None or task in only):
                if not getattr(self, f.name):
                    raise ValueError(f"settings.{f.name} is empty; name at least one")
                check(getattr(self, f.name))

    @classmethod
    def options(cls, task):
        """The fields ``task`` reads and the command line exposes, in order."""
        return [
            f
            for f in fields(cls)
            if f.metadata["cli"] is not None
            and (f.metadata["tasks"] is None or task in f.metadata["tasks"])
        ]


def _docstring():
    lines = [
        "Options of an evaluation: encoding, methods, retrieval and output.",
        "",
        "Every default of the evaluation is written here, once; the command",
        "line's flags and help are generated from these fields. A task reads",
        "the fields it needs and ignores the others.",
        "",
        "Parameters",
        "----------",
    ]
    for f in fields(EvaluationSettings):
        kind = re.sub(r"tuple\[(\w+), \.\.\.\]", r"tuple of \1", str(f.type))
        lines.append(f"{f.name} : {kind.replace(' | ', ' or ')}, default={f.default!r}")
        only = f.metadata["tasks"]
        names = ", ".join(_TASK_NAMES.get(t, t) for t in only or ())
        where = f" ({names} only.)" if names else ""
        lines.append(f"    {f.metadata['doc']}{where}")
    return "\n".join(lines) + "\n"


EvaluationSettings.__doc__ = _docstring()
