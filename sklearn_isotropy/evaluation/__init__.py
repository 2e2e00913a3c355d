"""Running the post-processors on labelled data and reporting the results.

Computation and presentation meet in records. A task is labelled data and
a way to score a transformer: :class:`STSTask` scores Spearman's rho of
pair cosines on an STS test split, :class:`RetrievalTask` exact cosine
search (quality, index memory, latency) per dimension and precision,
:class:`ClassificationTask` what a classifier and a clustering make of the
embeddings (SentEval's tasks); :data:`TASKS` lists them. One registry of
post-processing methods (:data:`METHODS`, :func:`register_method`) serves
them all, one settings object holds every default
(:class:`EvaluationSettings`), and one loop runs any task
(:func:`evaluate`), returning an :class:`Evaluation` of typed
:class:`Record` s, which the task's report renders as a table
(:func:`format_table`) or as Markdown, JSON and figures at once
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
>>> [r.label for r in ev.records]
['raw', 'whitening-6']
"""

from __future__ import annotations

from ._classification import ClassificationTask
from ._methods import METHODS, register_method
from ._report import format_table, write_reports
from ._retrieval import RetrievalTask
from ._settings import EvaluationSettings
from ._sts import STSTask
from ._task import Evaluation, Record, evaluate

#: The evaluation tasks, by name: each is a command of ``sklearn-isotropy``.
TASKS = {task.name: task for task in (STSTask, RetrievalTask, ClassificationTask)}

__all__ = [
    "METHODS",
    "TASKS",
    "ClassificationTask",
    "Evaluation",
    "EvaluationSettings",
    "Record",
    "RetrievalTask",
    "STSTask",
    "evaluate",
    "format_table",
    "register_method",
    "write_reports",
]
