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
    "DEFAULT_METHODS",
    "DEFAULT_POOLINGS",
    "GRID_K",
    "GRID_POWER",
    "METHODS",
    "PROTOCOLS",
    "Method",
    "MethodSettings",
    "STSEvaluation",
    "TITLE",
    "encode_pairs",
    "evaluate_sts",
    "format_table",
    "load_sts_splits",
    "register_method",
    "required_splits",
    "run_method",
    "save_figures",
    "to_json",
    "to_markdown",
    "write_reports",
]
