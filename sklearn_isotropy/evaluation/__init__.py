"""Running the post-processors on labelled data and reporting the results.

:func:`evaluate_sts` encodes an STS data set, fits every method of the
registry :data:`METHODS` under a fitting protocol and scores it on the test
pairs, returning an :class:`STSEvaluation`; the writers turn that into a
table (:func:`format_table`), Markdown (:func:`to_markdown`), JSON
(:func:`to_json`) and figures (:func:`save_figures`), or all of them at once
(:func:`write_reports`). The ``sklearn-isotropy evaluate`` command is these
functions behind argparse; the steps are public too
(:func:`load_sts_splits`, :func:`encode_pairs`, :func:`run_method`), so a
benchmark or a notebook can run one method on its own data.
"""

from __future__ import annotations

from ._methods import (
    GRID_K,
    GRID_POWER,
    METHODS,
    Method,
    MethodSettings,
    register_method,
)
from ._report import (
    TITLE,
    format_table,
    save_figures,
    to_json,
    to_markdown,
    write_reports,
)
from ._retrieval import (
    RetrievalEvaluation,
    encode_texts,
    evaluate_retrieval,
    run_compression_study,
    score_retrieval,
)
from ._retrieval_methods import (
    DEFAULT_DIMENSIONS,
    DEFAULT_QUANTIZATIONS,
    DEFAULT_RETRIEVAL_METHODS,
    QUANTIZATIONS,
    RETRIEVAL_METHODS,
    RETRIEVAL_PROTOCOLS,
    TASKS,
    Quantization,
    RetrievalMethod,
    RetrievalSettings,
    register_quantization,
    register_retrieval_method,
)
from ._retrieval_report import (
    RETRIEVAL_TITLE,
    format_retrieval_table,
    plot_quality_vs_bytes,
    retrieval_to_json,
    retrieval_to_markdown,
    save_retrieval_figures,
    write_retrieval_reports,
)
from ._retrieval_task import RetrievalTask, load_retrieval_task
from ._sts import (
    DEFAULT_METHODS,
    DEFAULT_POOLINGS,
    PROTOCOLS,
    STSEvaluation,
    encode_pairs,
    evaluate_sts,
    load_sts_splits,
    required_splits,
    run_method,
)

__all__ = [
    "DEFAULT_DIMENSIONS",
    "DEFAULT_METHODS",
    "DEFAULT_POOLINGS",
    "DEFAULT_QUANTIZATIONS",
    "DEFAULT_RETRIEVAL_METHODS",
    "GRID_K",
    "GRID_POWER",
    "METHODS",
    "PROTOCOLS",
    "QUANTIZATIONS",
    "RETRIEVAL_METHODS",
    "RETRIEVAL_PROTOCOLS",
    "RETRIEVAL_TITLE",
    "TASKS",
    "TITLE",
    "Method",
    "MethodSettings",
    "Quantization",
    "RetrievalEvaluation",
    "RetrievalMethod",
    "RetrievalSettings",
    "RetrievalTask",
    "STSEvaluation",
    "encode_pairs",
    "encode_texts",
    "evaluate_retrieval",
    "evaluate_sts",
    "format_retrieval_table",
    "format_table",
    "load_retrieval_task",
    "load_sts_splits",
    "plot_quality_vs_bytes",
    "register_method",
    "register_quantization",
    "register_retrieval_method",
    "required_splits",
    "retrieval_to_json",
    "retrieval_to_markdown",
    "run_compression_study",
    "run_method",
    "save_figures",
    "save_retrieval_figures",
    "score_retrieval",
    "to_json",
    "to_markdown",
    "write_reports",
    "write_retrieval_reports",
]
