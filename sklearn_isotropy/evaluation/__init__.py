"""Running the post-processors on labelled data and reporting the results.

Computation and presentation meet in records. A :class:`Task` is labelled
data and a way to score a transformer: :class:`STSTask` scores Spearman's
rho of pair cosines on an STS test split, :class:`RetrievalTask` exact
cosine search (quality, index memory, latency) per dimension and precision,
:class:`ClassificationTask` what a classifier and a clustering make of the
embeddings (SentEval's tasks). One registry of post-processing methods
(:data:`METHODS`) serves them all, one
settings object holds every default (:class:`EvaluationSettings`), and one
loop runs any task (:func:`evaluate`), returning an :class:`Evaluation`
whose records a :class:`Report` renders (:data:`REPORTS`): a table
(:func:`format_table`), Markdown (:func:`to_markdown`), JSON
(:func:`to_json`), or all of them, figures included, at once
(:func:`write_reports`). The ``sklearn-isotropy evaluate``,
``sklearn-isotropy retrieval`` and ``sklearn-isotropy classify`` commands
are these functions behind argparse.

Examples
--------
>>> import numpy as np
>>> from sklearn.utils import Bunch
>>> from sklearn_isotropy.evaluation import STSTask, evaluate, format_table
>>> rng = np.random.default_rng(0)
>>> task = STSTask({"test": Bunch(scores=rng.uniform(0, 5, 30))})
>>> ev = evaluate(task, methods=["raw", "whitening"],
...               embeddings={"mean": {"test": rng.normal(size=(30, 2, 6))}})
>>> [r["label"] for r in ev.records]
['raw', 'whitening-6']
"""

from __future__ import annotations

from ._classification import ClassificationTask
from ._methods import METHODS, Method, register_method
from ._quantization import QUANTIZATIONS, Quantization, register_quantization
from ._report import (
    REPORTS,
    Column,
    Report,
    format_table,
    to_json,
    to_markdown,
    write_reports,
)
from ._retrieval import RetrievalTask
from ._settings import EvaluationSettings
from ._sts import STSTask, load_sts_splits, required_splits
from ._task import Evaluation, Task, encode_texts, evaluate

#: The evaluation tasks, by name.
TASKS = {task.name: task for task in (STSTask, RetrievalTask, ClassificationTask)}

__all__ = [
    "METHODS",
    "ClassificationTask",
    "QUANTIZATIONS",
    "REPORTS",
    "TASKS",
    "Column",
    "Evaluation",
    "EvaluationSettings",
    "Method",
    "Quantization",
    "Report",
    "RetrievalTask",
    "STSTask",
    "Task",
    "encode_texts",
    "evaluate",
    "format_table",
    "load_sts_splits",
    "register_method",
    "register_quantization",
    "required_splits",
    "to_json",
    "to_markdown",
    "write_reports",
]
