"""The options of every evaluation, with their defaults written once.

:class:`EvaluationSettings` is the only place an evaluation default is
written. Each field's metadata says which tasks read it and, for the fields
the command line exposes, its flag and help line, from which the ``--help``
of ``sklearn-isotropy evaluate``, ``retrieval`` and ``classify`` is
generated. The class docstring documents the fields;
``tests/evaluation/test_settings.py`` checks that it names each field with
its type, default and tasks.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields

from .._defaults import DEFAULT_MODEL_NAME, ENCODE_BATCH_SIZE
from ..exceptions import EvaluationError
from ..metrics import DEFAULT_RETRIEVAL_METRICS, SEARCH_BACKENDS, make_retrieval_scorer

__all__ = ["EvaluationSettings"]


def _option(default, *, tasks=None, check=None, flag=None, help=None, **cli):
    """Return a settings field: its default, the tasks reading it, its flag.

    A field with a ``flag`` (True: ``--`` and the field name with dashes)
    is a command-line option of the ``tasks`` that read it (None: every
    task, a new one included), with the ``help`` line: ``parser`` names how
    its text is read (``"positive_int"``, ``"int>=2"``, ``"seed"`` (0 to
    2**32 - 1), ``"ints"``, ``"number>=0"``...) or is a tuple of the
    choices, and ``shown`` how the help names the default, if not its value.
    ``check(names)`` raises if a non-empty tuple of names cannot run.
    """
    cli = {"flag": flag, "parser": None, "help": help, "shown": None, **cli}
    metadata = {"tasks": tasks, "cli": cli if flag else None, "check": check}
    return field(default=default, metadata=metadata)


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


def _check_senteval_tasks(names):
    from ..datasets import SENTEVAL_TASKS

    unknown = [t for t in names if t not in SENTEVAL_TASKS]
    if unknown:
        raise ValueError(
            f"unknown SentEval task(s) {unknown}; choose from "
            f"{', '.join(SENTEVAL_TASKS)}"
        )


def _check_metrics(names):
    for name in names:
        make_retrieval_scorer(name)  # raises for a name it does not know


@dataclass
class EvaluationSettings:
    """Options of an evaluation: encoding, methods, retrieval and output.

    Every default of the evaluation is written here, once; the command
    line's flags and help are generated from these fields. A task reads
    the fields it needs and ignores the others.

    Parameters
    ----------
    model : str or None, default=None
        Hugging Face model name or local directory of the encoder; None is
        the embedded default (all-MiniLM-L6-v2).
    encoder : str, default="transformer"
        ``transformer`` encodes per pooling; ``static`` is
        :class:`~sklearn_isotropy.StaticEmbeddingVectorizer` of ``model`` with
        its defaults, fitted on texts the task sets apart for it (STS: the
        train split's sentences, under every protocol; see
        the task's ``encoder_texts``); the
        poolings are not used.
    poolings : tuple of str, default=("mean", "embeddings_avg")
        Pooling presets to evaluate, in order.
    batch_size : int, default=32
        Encoding batch size.
    device : str, default="cpu"
        Torch device of the encoder and the flow.
    cache : str or None, default=None
        Directory caching sentence encodings across runs (``memory=``).
    format : str or None, default=None
        File format of STS data (see :func:`~sklearn_isotropy.datasets.load_sts`);
        detected from the files when None. STS and retrieval only.
    max_pairs : int or None, default=None
        Keep a fixed random subset of at most this many pairs per STS split.
        STS and retrieval only.
    seed : int, default=0
        Seeds the subset, the flow, the grid's folds and the timed queries;
        0 to 2**32 - 1, as numpy's seeds.
    n_components : int, default=256
        Dimension ``k`` of ``whitening``, ``pca``, ``ppca`` and ``truncate``
        (every dimension when the embeddings are not wider). STS and
        classification only.
    dimensions : tuple of int, default=(32, 64, 128, 256)
        Dimensions ``k`` of the retrieval study, for the methods that take
        one; those not below the embedding width are skipped. Retrieval only.
    power : float, default=1.0
        Power of ``whitening`` (1 whitens fully, 0 is PCA).
    natsv_components : int, default=5
        Top principal directions removed by ``natsv`` (at most ``d - 1``).
    flow_epochs : int, default=1
        Training epochs of ``flow`` (1 is BERT-flow's protocol).
    cv : int, default=5
        Folds of the ``grid`` search, at least 2: on the dev pairs (STS), or
        inside each training fold (classification). STS and classification
        only.
    grid_k : tuple of int, default=(64, 128, 256)
        Whitening dimensions the ``grid`` method searches (with every
        dimension, and no transform). STS only.
    grid_power : tuple of float, default=(0.0, 0.5, 1.0)
        Whitening powers the ``grid`` method searches (classification: the
        powers above 0, at full width). STS and classification only.
    tasks : tuple of str, default=("MR", "CR", "SUBJ", "MPQA", "TREC")
        SentEval tasks of the classification, names in
        :data:`~sklearn_isotropy.datasets.SENTEVAL_TASKS`. Classification only.
    protocol : str, default="default"
        ``default``: stratified 5-fold CV (TREC: its split), logistic
        regression with C=1; ``senteval``: SentEval's 10 folds, and C
        chosen from 2^-2 to 2^3 by an inner 10-fold search. Classification
        only.
    quantizations : tuple of str, default=("float32", "int8", "binary")
        Index precisions, names in
        :attr:`~sklearn_isotropy.evaluation.RetrievalTask.quantizations`.
        Retrieval only.
    metrics : tuple of str, default=("mrr@10", "recall@1", "recall@10", "ndcg@10")
        Retrieval scores to report (``"mrr@10"``...). Retrieval only.
    min_score : float, default=4.0
        STS pairs rated at least this are relevant. Retrieval only.
    symmetric : bool, default=False
        Query with both sentences of a relevant STS pair. Retrieval only.
    query_splits : tuple of str, default=("test",)
        STS splits whose pairs give the queries. Retrieval only.
    backend : str, default="auto"
        Exact search engine (``auto``: faiss when installed). Retrieval only.
    latency_queries : int, default=100
        Queries timed one at a time (0: no timing). Retrieval only.
    per_query : bool, default=False
        Also keep every query's scores in each record. Retrieval only.
    progress : bool or None, default=False
        Progress bars of long steps: True shows them, False hides them, None
        shows them when stderr is interactive.
    """

    model: str | None = _option(
        None,
        flag=True,
        help="Hugging Face model name or local directory",
        shown=f"the embedded {DEFAULT_MODEL_NAME}",
    )
    encoder: str = _option(
        "transformer",
        flag=True,
        parser=("transformer", "static"),
        help="transformer (per pooling) or static token means (fitted on the "
        "train split's sentences where there is one)",
    )
    poolings: tuple[str, ...] = _option(
        ("mean", "embeddings_avg"),
        flag="--pooling",
        parser="pooling",
        help="pooling preset; repeat for several",
    )
    batch_size: int = _option(
        ENCODE_BATCH_SIZE, flag=True, parser="positive_int", help="encoding batch size"
    )
    device: str = _option(
        "cpu", flag=True, help="torch device of the encoder and the flow"
    )
    cache: str | None = _option(
        None, flag=True, help="directory caching sentence encodings across runs"
    )
    format: str | None = _option(
        None,
        tasks=("sts", "retrieval"),
        flag=True,
        parser="sts_format",
        help="file format of STS data",
        shown="detected from the files",
    )
    max_pairs: int | None = _option(
        None,
        tasks=("sts", "retrieval"),
        flag=True,
        parser="positive_int",
        help="keep a random subset of at most this many pairs per STS split",
        shown="all",
    )
    seed: int = _option(
        0,
        flag=True,
        parser="seed",
        help="seeds the subset, the flow, the grid's folds and the timed queries; "
        "0 to 2**32 - 1",
    )
    n_components: int = _option(
        256,
        tasks=("sts", "classification"),
        flag=True,
        parser="positive_int",
        help="dimension k of whitening, pca and truncate",
    )
    dimensions: tuple[int, ...] = _option(
        (32, 64, 128, 256),
        tasks=("retrieval",),
        flag="--dims",
        parser="ints",
        help="comma-separated dimensions k of pca, whitening and truncate",
    )
    power: float = _option(
        1.0,
        flag=True,
        parser="number>=0",
        help="power of whitening (1 whitens fully, 0 is PCA)",
    )
    natsv_components: int = _option(
        5, flag=True, parser="positive_int", help="top directions removed by natsv"
    )
    flow_epochs: int = _option(
        1, flag=True, parser="positive_int", help="training epochs of flow"
    )
    cv: int = _option(
        5,
        tasks=("sts", "classification"),
        flag=True,
        parser="int>=2",
        help="folds of the grid search (on the dev pairs, or inside each "
        "training fold), at least 2",
    )
    grid_k: tuple[int, ...] = _option((64, 128, 256), tasks=("sts",))
    grid_power: tuple[float, ...] = _option(
        (0.0, 0.5, 1.0), tasks=("sts", "classification")
    )
    tasks: tuple[str, ...] = _option(
        ("MR", "CR", "SUBJ", "MPQA", "TREC"),
        tasks=("classification",),
        flag=True,
        parser="senteval_tasks",
        help="comma-separated SentEval tasks",
        check=_check_senteval_tasks,
    )
    protocol: str = _option(
        "default",
        tasks=("classification",),
        flag=True,
        parser=("default", "senteval"),
        help="default: 5-fold CV, logistic C=1; senteval: 10-fold CV, C chosen "
        "by inner 10-fold CV",
    )
    quantizations: tuple[str, ...] = _option(
        ("float32", "int8", "binary"),
        tasks=("retrieval",),
        flag="--quantize",
        parser="quantizations",
        help="comma-separated index precisions",
        check=_check_quantizations,
    )
    metrics: tuple[str, ...] = _option(
        DEFAULT_RETRIEVAL_METRICS, tasks=("retrieval",), check=_check_metrics
    )
    min_score: float = _option(
        4.0,
        tasks=("retrieval",),
        flag=True,
        parser="number",
        help="STS pairs rated at least this are relevant",
    )
    symmetric: bool = _option(False, tasks=("retrieval",))
    query_splits: tuple[str, ...] = _option(("test",), tasks=("retrieval",))
    backend: str = _option(
        "auto",
        tasks=("retrieval",),
        flag=True,
        parser=("auto", *SEARCH_BACKENDS),
        help="exact search engine (auto: faiss when installed)",
    )
    latency_queries: int = _option(
        100,
        tasks=("retrieval",),
        flag=True,
        parser="int>=0",
        help="queries timed one at a time for the latency figure (0: no timing)",
    )
    per_query: bool = _option(False, tasks=("retrieval",))
    progress: bool | None = _option(False)

    @property
    def show_bars(self) -> bool:
        """Whether progress bars are drawn (``progress`` with None resolved)."""
        from .._utils import interactive_stderr

        return interactive_stderr() if self.progress is None else bool(self.progress)

    def check(self, task: str) -> None:
        """Raise before any work if a field that ``task`` reads cannot run.

        Parameters
        ----------
        task : str
            The name of the task (``"sts"``, ``"retrieval"``).
        """
        for f in fields(self):
            only, check = f.metadata["tasks"], f.metadata["check"]
            if check is not None and (only is None or task in only):
                if not getattr(self, f.name):
                    raise ValueError(f"settings.{f.name} is empty; name at least one")
                check(getattr(self, f.name))

    @classmethod
    def options(cls, task: str) -> list[Field]:
        """Return the fields that ``task`` reads and the command line exposes.

        Parameters
        ----------
        task : str
            The name of the task (``"sts"``, ``"retrieval"``).

        Returns
        -------
        list of dataclasses.Field
            The fields, in declaration order.
        """
        return [
            f
            for f in fields(cls)
            if f.metadata["cli"] is not None
            and (f.metadata["tasks"] is None or task in f.metadata["tasks"])
        ]
