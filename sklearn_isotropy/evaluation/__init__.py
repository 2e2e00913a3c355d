"""Running the post-processors on labelled data and reporting the results.

Computation and presentation meet in records. A task is labelled data and
a way to score a transformer: :class:`STSTask` scores Spearman's rho of
pair cosines on an STS test split, :class:`RetrievalTask` exact cosine
search (quality, index memory, latency) per dimension and precision,
:class:`ClassificationTask` what a classifier and a clustering make of the
embeddings (SentEval's tasks); :data:`TASKS` lists them. One registry of
post-processing methods (:data:`METHODS`, :func:`register_method`) serves
them all. Each task reads its own settings (:class:`STSSettings`,
:class:`RetrievalSettings`, :class:`ClassificationSettings`), which add the
task's fields to those every task shares (:class:`EvaluationSettings`: the
encoder's options, :class:`EncodingSettings`, the methods',
:class:`MethodSettings`, and the seed); each default is written once, where
its field is declared. One loop runs
any task (:func:`evaluate`), returning an :class:`Evaluation` of typed
:class:`Record` s, which the task's report renders as a table
(:func:`format_table`) or as Markdown, JSON and figures at once
(:func:`write_reports`). The ``sklearn-isotropy evaluate``,
``sklearn-isotropy retrieval`` and ``sklearn-isotropy classify`` commands
are these functions behind argparse, each built from its task's class
attributes and settings fields.

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

from ._classification import ClassificationSettings, ClassificationTask
from ._methods import METHODS, register_method
from ._report import format_table, write_reports
from ._retrieval import RetrievalSettings, RetrievalTask
from ._settings import EncodingSettings, EvaluationSettings, MethodSettings
from ._sts import STSSettings, STSTask
from ._task import Evaluation, Record, evaluate

#: The evaluation tasks, by name: each is a command of ``sklearn-isotropy``
#: (the task's ``command``).
TASKS = {task.name: task for task in (STSTask, RetrievalTask, ClassificationTask)}

__all__ = [
    "METHODS",
    "TASKS",
    "ClassificationSettings",
    "ClassificationTask",
    "EncodingSettings",
    "Evaluation",
    "EvaluationSettings",
    "MethodSettings",
    "Record",
    "RetrievalSettings",
    "RetrievalTask",
    "STSSettings",
    "STSTask",
    "evaluate",
    "format_table",
    "register_method",
    "write_reports",
]
