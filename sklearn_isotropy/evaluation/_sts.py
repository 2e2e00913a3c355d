"""The STS task: Spearman's rho of pair cosines against gold scores.

:class:`STSTask` holds the splits of an STS data set and a fitting
protocol; a method is fitted on the test sentences ("target", the papers'
transductive protocol) or on the train split's, and scored on the test
pairs by :class:`~sklearn_isotropy.metrics.PairedCosineSimilarity`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np

from ..datasets import load_sts_splits
from ..exceptions import EvaluationError
from ._methods import METHODS
from ._report import STSReport
from ._settings import EvaluationSettings
from ._task import Task, check_fit_on, encode_once

__all__ = ["STSTask", "required_splits"]


def required_splits(
    methods: Iterable[str], fit_on: str = "target", *, encoder: str = "transformer"
) -> list[str]:
    """Return the splits an STS evaluation of ``methods`` under ``fit_on`` reads.

    Parameters
    ----------
    methods : sequence of str
        Method names (see :data:`~sklearn_isotropy.evaluation.METHODS`).
    fit_on : {"target", "train"}, default="target"
        The fitting protocol.
    encoder : {"transformer", "static"}, default="transformer"
        The encoder; the static vectorizer is fitted on the train split's
        sentences under every protocol
        (:meth:`~sklearn_isotropy.evaluation.STSTask.encoder_texts`).

    Returns
    -------
    splits : list of str
        ``"test"``, then ``"train"`` for ``fit_on="train"`` or
        ``encoder="static"``, then ``"dev"`` if a method selects on it.

    Examples
    --------
    >>> from sklearn_isotropy.evaluation._sts import required_splits
    >>> required_splits(["raw", "grid"], fit_on="train")
    ['test', 'train', 'dev']
    """
    needed = ["test"]
    if fit_on == "train" or encoder == "static":
        needed.append("train")
    if any(METHODS[m].needs_dev for m in methods if m in METHODS):
        needed.append("dev")
    return needed


class STSTask(Task):
    """Rated sentence pairs: Spearman's rho x100 of cosines on the test split.

    :meth:`load` reads the splits the methods need with
    :func:`~sklearn_isotropy.datasets.load_sts_splits` (the settings'
    ``max_pairs``, ``seed`` and ``format``). See
    :mod:`sklearn_isotropy.evaluation` for an example.

    Parameters
    ----------
    splits : dict of str to Bunch
        ``{split: Bunch(pairs, scores)}`` as
        :func:`~sklearn_isotropy.datasets.load_sts_splits` returns;
        ``"test"`` always, ``"train"`` for ``fit_on="train"``, ``"dev"`` for
        a method that selects on it.
    fit_on : {"target", "train"}, default="target"
        Fit the transform on the test sentences (the papers' protocol) or on
        the train split's.
    data_name : str, default="splits passed in"
        How reports name the data.
    """

    name = "sts"
    protocols = {
        "target": (
            "transforms fitted on the sentences of the test split itself "
            "('target', the papers' transductive protocol)"
        ),
        "train": "transforms fitted on the sentences of the train split ('train')",
    }
    default_methods = ("raw", "sn", "natsv", "whitening", "ppca", "flow", "grid")
    has_dev = True

    def __init__(self, splits, *, fit_on="target", data_name="splits passed in"):
        check_fit_on(self, fit_on)
        missing = [s for s in required_splits((), fit_on) if s not in splits]
        if missing:
            raise EvaluationError(
                f"the evaluation needs the split(s) {missing}, which the splits "
                f"passed ({sorted(splits)}) do not hold"
            )
        self.splits = splits
        self.fit_on = fit_on
        self.data_name = data_name

    @classmethod
    def load(cls, data, settings=None, *, fit_on=None, methods=()):
        settings = settings or EvaluationSettings()
        fit_on = fit_on or "target"
        splits = load_sts_splits(
            data,
            required_splits(
                methods or cls.default_methods, fit_on, encoder=settings.encoder
            ),
            max_pairs=settings.max_pairs,
            random_state=settings.seed,
            format=settings.format,
        )
        return cls(splits, fit_on=fit_on, data_name=str(data))

    @classmethod
    def report_class(cls) -> type:
        return STSReport

    def embed(self, encode):
        pairs = [b.pairs.ravel() for b in self.splits.values()]
        return {
            split: E.reshape(len(b.pairs), 2, -1)
            for (split, b), E in zip(self.splits.items(), encode_once(encode, *pairs))
        }

    def encoder_texts(self) -> list[str]:
        """Return the train split's distinct sentences, under every protocol.

        The static vectorizer fitted on them scores sentences it was not
        fitted on, as the transforms do under ``fit_on="train"``; under
        ``"target"`` only the transforms see the test sentences.

        Returns
        -------
        texts : list of str
            The sentences, each once.

        Raises
        ------
        EvaluationError
            If the task holds no train split.
        """
        if "train" not in self.splits:
            raise EvaluationError(
                "the static encoder is fitted on the train split's sentences, "
                "but no train split was loaded; pass data with a train split "
                "(load the splits with required_splits(..., encoder='static'))"
            )
        return list(dict.fromkeys(self.splits["train"].pairs.ravel().tolist()))

    def dimensions(self, method, n_features, settings):
        k = settings.n_components
        return [k if method.uses_k and k < n_features else None]

    def dev_pairs(self, embeddings: dict) -> tuple[np.ndarray, np.ndarray]:
        if "dev" not in embeddings:
            raise EvaluationError("the method selects on a dev split; none was loaded")
        return embeddings["dev"], self.splits["dev"].scores

    @staticmethod
    def progress(records):
        return f"{records[0].values['spearman_x100']:.2f}"

    def score(self, transformer, embeddings, settings):
        from ..diagnostics import anisotropy_report
        from ..metrics import PairedCosineSimilarity, transform_pairs

        test = embeddings["test"]
        fit_pairs = test if self.fit_on == "target" else embeddings["train"]
        start = time.perf_counter()
        model = PairedCosineSimilarity(transformer).fit(fit_pairs)
        fit_seconds = time.perf_counter() - start
        start = time.perf_counter()
        rho = model.score(test, self.splits["test"].scores)
        transform_seconds = time.perf_counter() - start
        Z, _ = transform_pairs(model, test)  # each test sentence once
        record = {
            "spearman_x100": 100.0 * rho,
            "dimensions": int(Z.shape[1]),
            "fit_seconds": fit_seconds,
            "transform_seconds": transform_seconds,
            "diagnostics": anisotropy_report(Z, random_state=settings.seed),
        }
        return [record], Z
