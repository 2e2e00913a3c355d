"""The STS task: Spearman's rho of pair cosines against gold scores.

:class:`STSTask` holds the splits of an STS data set and a fitting
protocol; a method is fitted on the test sentences ("target", the papers'
transductive protocol) or on the train split's, and scored on the test
pairs by :class:`~sklearn_isotropy.metrics.PairedCosineSimilarity`.
Everything the task is lives here: its options (:class:`STSSettings`), its
report (:class:`STSReport`: the table, the anisotropy diagnostics and the
figures) and its command, ``sklearn-isotropy evaluate``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..datasets import load_sts_splits
from ..exceptions import EvaluationError
from ._methods import METHODS
from ._report import Column, Report
from ._settings import (
    EvaluationSettings,
    cv_field,
    grid_power_field,
    inherit_parameters,
    max_pairs_field,
    n_components_field,
    option,
    sts_format_field,
)
from ._task import Task, check_fit_on, encode_once

__all__ = ["STSReport", "STSSettings", "STSTask", "required_splits"]


@inherit_parameters
@dataclass
class STSSettings(EvaluationSettings):
    """Options of the STS task (``sklearn-isotropy evaluate``).

    The shared options of
    :class:`~sklearn_isotropy.evaluation.EvaluationSettings`, then the data's
    format and subset, the dimension of the methods that keep one, and the
    grid search's candidates and folds.

    Parameters
    ----------
    format : str or None, default=None
        File format of STS data (see :func:`~sklearn_isotropy.datasets.load_sts`);
        detected from the files when None.
    max_pairs : int or None, default=None
        Keep a fixed random subset of at most this many pairs per STS split.
    n_components : int, default=256
        Dimension ``k`` of ``whitening``, ``pca``, ``ppca`` and ``truncate``
        (every dimension when the embeddings are not wider).
    cv : int, default=5
        Folds of the ``grid`` search on the dev pairs, at least 2.
    grid_k : tuple of int, default=(64, 128, 256)
        Whitening dimensions the ``grid`` method searches (with every
        dimension, and no transform).
    grid_power : tuple of float, default=(0.0, 0.5, 1.0)
        Whitening powers the ``grid`` method searches.
    """

    format: str | None = sts_format_field()
    max_pairs: int | None = max_pairs_field()
    n_components: int = n_components_field()
    cv: int = cv_field()
    grid_k: tuple[int, ...] = option((64, 128, 256))
    grid_power: tuple[float, ...] = grid_power_field()


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


class STSReport(Report):
    """Spearman's rho per method, anisotropy diagnostics, spectrum and cosines."""

    title = "Spearman ρ×100 on the test split (cosine of pair embeddings)"
    stem = "results"  # the name the README and the user guide document
    figure_names = ("{}_spectrum.png", "{}_cosines.png")

    def columns(self):
        return [
            Column("ρ×100", lambda r: f"{r['spearman_x100']:.2f}", score=True),
            Column("fit s", lambda r: f"{r['fit_seconds']:.2f}"),
            Column("transform s", lambda r: f"{r['transform_seconds']:.2f}"),
        ]

    def describe(self):
        splits = self.evaluation.task.splits.items()
        return ", ".join(f"{s} {len(b.scores)} pairs" for s, b in splits)

    def json_fields(self):
        diagnostics = {}
        for r in self.evaluation.records:
            if "diagnostics" in r.values:
                diagnostics.setdefault(r.pooling, {})[_name(r)] = r.values[
                    "diagnostics"
                ]
        splits = {s: len(b.scores) for s, b in self.evaluation.task.splits.items()}
        return {"splits": splits, "diagnostics": diagnostics}

    def sections(self):
        md = [
            "## Anisotropy of the test-sentence embeddings",
            "",
            "| pooling | method | mean pair cosine | isotropy I(W) | effective rank "
            "| top-PC variance share |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in self.evaluation.records:
            if "diagnostics" in r.values:
                d = r.values["diagnostics"]
                md.append(
                    f"| {r.pooling} | {_name(r)} | {d['mean_pair_cosine']:.3f} "
                    f"| {d['isotropy_score']:.3g} | {d['effective_rank']:.1f} | "
                    f"{d['top_component_variance_ratio']:.3f} |"
                )
        return md

    def console_lines(self):
        ev = self.evaluation
        sizes = ", ".join(f"{s} {len(b.scores)}" for s, b in ev.task.splits.items())
        lines = [f"Pairs: {sizes}"]
        for r in ev.results(method="grid"):
            if r.params.get("chosen"):
                lines.append(f"grid choice for {r.pooling}: {r.params['chosen']}")
        return lines

    def figures(self):
        """``<pooling>_spectrum.png`` and ``<pooling>_cosines.png`` per pooling.

        The spectrum draws the covariance spectrum of every method's output
        on one log axis (down to each matrix's numerical rank); the cosines
        figure has one panel per method, with the raw embeddings' histogram
        behind each for reference.
        """
        from matplotlib.figure import Figure

        from ..diagnostics import plot_cosine_panels, plot_eigenvalue_spectrum

        ev, out = self.evaluation, []
        for pooling in ev.poolings:
            transformed = {
                label: Z for (p, label), Z in ev.artifacts.items() if p == pooling
            }
            if not transformed:
                continue
            raw = [r.label for r in ev.results(pooling, "raw")][:1]
            where = f"{pooling} pooling, test sentences"
            spectrum = Figure(figsize=(9, 4.8), layout="constrained")
            ax = plot_eigenvalue_spectrum(transformed, ax=spectrum.add_subplot())
            ax.set_title(f"Covariance spectrum ({where})")
            cosines = Figure(layout="constrained")
            plot_cosine_panels(
                transformed, reference=(raw or [None])[0], figure=cosines
            )
            grey = f" (grey: {raw[0]})" if raw else ""
            cosines.suptitle(f"Pair cosine similarity, {where}{grey}")
            names = [name.format(pooling) for name in self.figure_names]
            out += zip(names, (spectrum, cosines))
        return out


def _name(record):  # a run's name in the reports (a custom run's is its label)
    return record.label if record.method == "custom" else record.method


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
    settings_class = STSSettings
    report_class = STSReport
    command = "evaluate"
    command_help = (
        "compare post-processing methods on an STS data set: encode it, "
        "post-process the embeddings with each method and report Spearman x100 "
        "of pair cosines on the test split."
    )
    data_help = (
        "STS directory with train/dev/test files, a single file (used as "
        "test), or 'stsb' to download the STS Benchmark"
    )
    default_data = "stsb"
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
        settings = cls.settings_class.coerce(settings)
        fit_on = fit_on or "target"
        splits = load_sts_splits(
            data,
            required_splits(
                methods or cls.default_methods,
                fit_on,
                encoder=settings.encoding.encoder,
            ),
            max_pairs=settings.max_pairs,
            random_state=settings.seed,
            format=settings.format,
        )
        return cls(splits, fit_on=fit_on, data_name=str(data))

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

    def n_components_for(self, method, n_features, settings):
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
