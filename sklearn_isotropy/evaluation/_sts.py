"""Running the evaluation methods on an STS data set, returning results.

Nothing here prints or writes files: :func:`evaluate_sts` returns an
:class:`STSEvaluation`, which the writers of ``_report.py`` (and the command
line) turn into a table, Markdown, JSON and figures.
"""

from __future__ import annotations

import contextlib
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._utils import warn
from ..exceptions import EvaluationError, EvaluationWarning, NoSplitColumnError
from ._methods import METHODS, MethodSettings

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_POOLINGS",
    "PROTOCOLS",
    "STSEvaluation",
    "encode_pairs",
    "evaluate_sts",
    "load_sts_splits",
    "required_splits",
    "run_method",
]

DEFAULT_POOLINGS = ("mean", "embeddings_avg")
DEFAULT_METHODS = ("raw", "sn", "natsv", "whitening", "flow", "grid")
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2 (embedded default)"
#: How reports name the default encoder (its hub name).
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"

#: What each fitting protocol means, as written in every report.
PROTOCOLS = {
    "target": (
        "transforms fitted on the sentences of the test split itself ('target', "
        "the papers' transductive protocol)"
    ),
    "train": "transforms fitted on the sentences of the train split ('train')",
}


def required_splits(methods, fit_on="target"):
    """The splits an evaluation of ``methods`` under ``fit_on`` reads.

    Parameters
    ----------
    methods : sequence of str
        Method names (see :data:`~sklearn_isotropy.evaluation.METHODS`).
    fit_on : {"target", "train"}, default="target"
        The fitting protocol.

    Returns
    -------
    splits : list of str
        ``"test"``, then ``"train"`` for ``fit_on="train"``, then ``"dev"``
        if a method selects on it.

    Examples
    --------
    >>> from sklearn_isotropy.evaluation import required_splits
    >>> required_splits(["raw", "grid"], fit_on="train")
    ['test', 'train', 'dev']
    """
    needed = ["test"]
    if fit_on == "train":
        needed.append("train")
    if any(METHODS[m].needs_dev for m in methods if m in METHODS):
        needed.append("dev")
    return needed


def load_sts_splits(
    data, splits=("test",), *, max_pairs=None, random_state=0, format=None
):
    """Load the named splits of an STS data set.

    Parameters
    ----------
    data : str or path-like
        A directory with one file per split, one file (used as the test
        split; a file with a split column gives its test rows), or
        ``"stsb"`` (the STS Benchmark, downloaded once into the cache; see
        :func:`~sklearn_isotropy.datasets.load_sts`).
    splits : sequence of {"train", "dev", "test"}, default=("test",)
        The splits to load.
    max_pairs : int, default=None
        Keep a fixed random subset of at most this many pairs per split (for
        quick runs), in the original order.
    random_state : int, default=0
        Seeds the subset.
    format : str, default=None
        The file format of every split (see
        :func:`~sklearn_isotropy.datasets.load_sts`); detected when None.

    Returns
    -------
    splits : dict of str to sklearn.utils.Bunch
        ``{split: load_sts(...)}``, each with ``pairs`` and ``scores``.

    Raises
    ------
    EvaluationError
        If the data cannot be found or read, with what to pass instead.

    Examples
    --------
    >>> import tempfile, os
    >>> from sklearn_isotropy.evaluation import load_sts_splits
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.csv")
    >>> with open(path, "w") as f:
    ...     _ = f.write("A cat.,A dog.,1.0\\nA man.,A man!,5.0\\nHi.,Bye.,0.5\\n")
    >>> splits = load_sts_splits(path, max_pairs=2)
    >>> splits["test"].pairs.shape
    (2, 2)
    """
    from ..datasets import load_sts

    path = Path(data).expanduser()
    named = str(data) == "stsb"
    single_file = not named and path.is_file()
    if not named and not path.exists():
        raise EvaluationError(
            f"data not found: {str(data)!r} is neither a file nor a directory; pass "
            "a directory with train/dev/test files (e.g. path/to/stsb) or 'stsb' "
            "to download the STS Benchmark"
        )
    out = {}
    for split in splits:
        if single_file:
            if split != "test":
                raise EvaluationError(
                    f"{data} is a single file, used as the test split; the "
                    f"requested methods or protocol also need a {split!r} split: "
                    "pass a directory with train/dev/test files"
                )
            try:
                try:  # a file holding every split (sbert tsv.gz): its test rows
                    bunch = load_sts(path, split="test", format=format)
                except NoSplitColumnError:  # a file of pairs: all of it is test
                    bunch = load_sts(path, format=format)
            except (OSError, ValueError) as exc:
                raise EvaluationError(f"cannot read {data}: {exc}") from exc
        else:
            try:
                bunch = load_sts(data, split=split, format=format)
            except (OSError, ValueError) as exc:
                raise EvaluationError(
                    f"cannot read the {split} split of {data}: {exc}"
                ) from exc
        if max_pairs is not None and len(bunch.scores) > max_pairs:
            rng = np.random.RandomState(random_state)
            keep = np.sort(rng.choice(len(bunch.scores), max_pairs, replace=False))
            bunch.pairs = bunch.pairs[keep]
            bunch.scores = bunch.scores[keep]
        out[split] = bunch
    return out


def encode_pairs(
    splits,
    *,
    model=None,
    pooling="mean",
    batch_size=64,
    device="cpu",
    cache=None,
    progress=False,
):
    """Encode every distinct sentence of the splits once.

    Parameters
    ----------
    splits : dict of str to Bunch
        As returned by :func:`load_sts_splits`.
    model : None, str or path-like, default=None
        The encoder (see :class:`~sklearn_isotropy.BertPoolingVectorizer`).
    pooling : str, default="mean"
        A pooling preset.
    batch_size : int, default=64
        Encoding batch size.
    device : str, default="cpu"
        Torch device.
    cache : None, str or path-like, default=None
        Directory caching the encodings across runs (the vectorizer's
        ``memory=``).
    progress : bool or None, default=False
        The encoder's progress bar: True shows it, False hides it, None lets
        the vectorizer decide (a bar on an interactive stderr for long
        work; see ``show_progress_bar``).

    Returns
    -------
    embeddings : dict of str to ndarray of shape (n_pairs, 2, d)
        The embeddings of each split's pairs.
    n_sentences : int
        Distinct sentences encoded.
    seconds : float
        Encoding time.

    Raises
    ------
    EvaluationError
        If the model cannot be loaded.
    """
    from ..text import BertPoolingVectorizer

    sentences = {}
    for bunch in splits.values():
        for s in bunch.pairs.ravel():
            sentences.setdefault(s, len(sentences))
    vec = BertPoolingVectorizer(
        model,
        pooling=pooling,
        batch_size=batch_size,
        device=device,
        memory=cache,
        show_progress_bar=progress,
    )
    try:
        vec.fit(list(sentences)[:1])
    except (OSError, ValueError, ImportError, RuntimeError) as exc:
        name = model or "the default all-MiniLM-L6-v2"
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        raise EvaluationError(
            f"cannot load model {name}: {'; '.join(lines) or repr(exc)}"
        ) from exc
    start = time.perf_counter()
    E = vec.transform(list(sentences))
    seconds = time.perf_counter() - start
    out = {}
    for split, bunch in splits.items():
        idx = np.vectorize(sentences.__getitem__, otypes=[np.intp])(bunch.pairs)
        out[split] = E[idx]  # (n, 2, d)
    return out, len(sentences), seconds


def run_method(name, embeddings, splits, *, fit_on="target", settings=None):
    """Fit one method and score it on the test pairs.

    Parameters
    ----------
    name : str
        A method of :data:`~sklearn_isotropy.evaluation.METHODS`.
    embeddings : dict of str to ndarray of shape (n_pairs, 2, d)
        Pair embeddings per split (from :func:`encode_pairs`); ``"test"``
        always, ``"train"`` for ``fit_on="train"``, ``"dev"`` for a method
        that needs it.
    splits : dict of str to Bunch
        The splits, for their gold ``scores``.
    fit_on : {"target", "train"}, default="target"
        Fit the transform on the test sentences (the papers' protocol) or
        on the train split's.
    settings : MethodSettings, default=None
        Method options; the defaults when None.

    Returns
    -------
    model : PairedCosineSimilarity
        The fitted model.
    record : dict
        ``method``, ``spearman_x100``, ``fit_seconds``,
        ``transform_seconds`` and the method's ``params``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.utils import Bunch
    >>> from sklearn_isotropy.evaluation import run_method
    >>> rng = np.random.default_rng(0)
    >>> test = rng.normal(size=(50, 2, 8))
    >>> scores = rng.uniform(0, 5, size=50)
    >>> _, record = run_method("sn", {"test": test}, {"test": Bunch(scores=scores)})
    >>> sorted(record)
    ['fit_seconds', 'method', 'params', 'spearman_x100', 'transform_seconds']
    """
    from ..metrics import PairedCosineSimilarity, spearman_score

    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    if fit_on not in PROTOCOLS:
        raise ValueError(f"fit_on must be one of {tuple(PROTOCOLS)}; got {fit_on!r}")
    method = METHODS[name]
    settings = settings or MethodSettings()
    d = embeddings["test"].shape[2]
    fit_pairs = embeddings["test"] if fit_on == "target" else embeddings["train"]
    dev = (embeddings["dev"], splits["dev"].scores) if method.needs_dev else None
    start = time.perf_counter()
    transformer, params = method.build(d, settings, dev)
    model = PairedCosineSimilarity(transformer).fit(fit_pairs)
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    cos = model.predict(embeddings["test"])
    transform_seconds = time.perf_counter() - start
    return model, {
        "method": name,
        "spearman_x100": 100.0 * spearman_score(splits["test"].scores, cos),
        "fit_seconds": fit_seconds,
        "transform_seconds": transform_seconds,
        "params": params,
    }


def _transformed_test(model, emb_test):
    """Embeddings of the distinct test items after the fitted transform."""
    items = np.unique(emb_test.reshape(-1, emb_test.shape[2]), axis=0)
    if model.transformer_ is None:
        return items
    return np.asarray(model.transformer_.transform(items))


@dataclass
class STSEvaluation:
    """Everything one :func:`evaluate_sts` run measured.

    Attributes
    ----------
    data : str
        The data source.
    model : str or None
        The encoder asked for (None: the embedded default).
    model_name : str
        The encoder, for reports.
    poolings, methods : list of str
        What was run, in order.
    fit_on : str
        The fitting protocol; ``protocol`` says what it means.
    settings : MethodSettings
        The methods' options.
    splits : dict of str to int
        Pairs per split.
    encodings : dict
        Per pooling: distinct sentences encoded and seconds.
    results : dict
        ``(method, pooling) -> record`` (see :func:`run_method`); a failed
        method's record has ``spearman_x100=None`` and an ``error``.
    diagnostics : dict
        ``pooling -> method ->`` :func:`~sklearn_isotropy.diagnostics.anisotropy_report`
        of the transformed test sentences.
    transformed : dict
        ``pooling -> label ->`` transformed distinct test sentences (for
        figures).
    """

    data: str
    model: str | None
    poolings: list
    methods: list
    fit_on: str
    settings: MethodSettings
    splits: dict = field(default_factory=dict)
    encodings: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    transformed: dict = field(default_factory=dict)

    @property
    def model_name(self) -> str:
        return self.model or DEFAULT_MODEL_NAME

    @property
    def protocol(self) -> str:
        return PROTOCOLS[self.fit_on]

    @property
    def model_id(self) -> str:
        """The encoder by name: what was asked for, or the default's hub name."""
        return self.model or DEFAULT_MODEL_ID

    @property
    def failures(self) -> list:
        """``(method, pooling, error)`` of every run that failed."""
        return [
            (m, p, r["error"]) for (m, p), r in self.results.items() if r.get("error")
        ]

    def label(self, method, pooling=None) -> str:
        """Table label of ``method`` (from its first successful run)."""
        runs = [
            r
            for (m, p), r in self.results.items()
            if m == method and (pooling is None or p == pooling) and "error" not in r
        ]
        params = runs[0]["params"] if runs else {}
        return METHODS[method].format_label(params) if runs else method


# a figure in a message (not digits inside a name such as float32)
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")

#: warnings Python hides by default (they concern the code, not the run):
#: not recorded with a method's result
_HIDDEN_BY_DEFAULT = (
    ImportWarning,
    ResourceWarning,
    PendingDeprecationWarning,
    DeprecationWarning,
)


@contextlib.contextmanager
def record_warnings():
    """Record every warning raised in the block, repeats included.

    Yields the list of caught warnings. Warnings that Python does not show
    by default (e.g. an ``ImportWarning`` from a lazily imported module) are
    left out: they say nothing about the run.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for category in _HIDDEN_BY_DEFAULT:
            warnings.simplefilter("ignore", category)
        yield caught


def _raise_once(caught, where):
    """Record the distinct warnings a method raised; raise each one again, once.

    The method ran under ``catch_warnings(record=True)`` so that its warnings
    are kept with its result; each distinct (class, message) is raised again
    as an :class:`~sklearn_isotropy.exceptions.EvaluationWarning` that says
    ``where`` it came from, so that it is seen during the run. A grid search
    repeats a warning for every fold, sometimes with the fold's own figures:
    messages equal up to their numbers are shown once, the first one raised,
    with how many others there were.

    Returns
    -------
    messages : list of str
        The distinct messages, sorted.
    """
    messages = sorted({(w.category.__name__, str(w.message)) for w in caught})
    # the folds of a grid search repeat one warning with their own figures
    # (a rank, a ratio): show the first of each such family, and how many
    families = {}  # in the order they were first raised
    for w in caught:
        category, text = w.category.__name__, " ".join(str(w.message).split())
        texts = families.setdefault((category, _NUMBER.sub("#", text)), [])
        if text not in texts:
            texts.append(text)
    for (category, _), texts in families.items():
        more = f" (and {len(texts) - 1} similar)" if len(texts) > 1 else ""
        warn(f"{where}: {category}: {texts[0]}{more}", EvaluationWarning)
    return [message for _, message in messages]


def evaluate_sts(
    data="stsb",
    *,
    model=None,
    poolings=DEFAULT_POOLINGS,
    methods=DEFAULT_METHODS,
    fit_on="target",
    settings=None,
    max_pairs=None,
    batch_size=64,
    cache=None,
    progress=False,
    log=None,
    data_name=None,
    format=None,
):
    """Encode an STS data set and score every method on its test split.

    Each method's failure (e.g. a numerical error) is recorded as a result
    and the run goes on. The warnings each method raised are recorded with
    its result, and each distinct one is raised again once, as an
    :class:`~sklearn_isotropy.exceptions.EvaluationWarning` naming the
    pooling and the method.

    Parameters
    ----------
    data : str, path-like or dict, default="stsb"
        Where to read the splits (see :func:`load_sts_splits`), or the
        splits already loaded by it (holding at least
        :func:`required_splits`).
    model : None, str or path-like, default=None
        The encoder; None is the embedded all-MiniLM-L6-v2.
    poolings : sequence of str, default=("mean", "embeddings_avg")
        Pooling presets to evaluate.
    methods : sequence of str, default=all registered defaults
        Names in :data:`~sklearn_isotropy.evaluation.METHODS`.
    fit_on : {"target", "train"}, default="target"
        The fitting protocol (see :data:`PROTOCOLS`).
    settings : MethodSettings, default=None
        Method options.
    max_pairs : int, default=None
        Random subset of at most this many pairs per split.
    batch_size : int, default=64
        Encoding batch size.
    cache : None, str or path-like, default=None
        Directory caching encodings across runs.
    progress : bool or None, default=False
        Progress bars of the encoder, the flow and the grid search: True
        shows them, False hides them, None shows them only on an interactive
        stderr (a terminal or a notebook).
    log : callable, default=None
        Called with one line of progress text after each step.
    data_name : str, default=None
        How the reports name the data; ``str(data)`` when None.
    format : str, default=None
        The file format of the splits (see
        :func:`~sklearn_isotropy.datasets.load_sts`); detected when None.

    Returns
    -------
    evaluation : STSEvaluation
    """
    from ..diagnostics import anisotropy_report

    settings = settings or MethodSettings()
    settings.progress = progress
    poolings = list(dict.fromkeys(poolings))
    methods = list(dict.fromkeys(methods))
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(
            f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}"
        )
    if fit_on not in PROTOCOLS:
        raise ValueError(f"fit_on must be one of {tuple(PROTOCOLS)}; got {fit_on!r}")
    log = log or (lambda line: None)
    needed = required_splits(methods, fit_on)
    if isinstance(data, dict):
        missing = [s for s in needed if s not in data]
        if missing:
            raise EvaluationError(
                f"the evaluation needs the split(s) {missing}, which the splits "
                f"passed ({sorted(data)}) do not hold"
            )
        splits = data
    else:
        splits = load_sts_splits(
            data,
            needed,
            max_pairs=max_pairs,
            random_state=settings.seed,
            format=format,
        )
    ev = STSEvaluation(
        data=data_name or ("splits passed in" if isinstance(data, dict) else str(data)),
        model=None if model is None else str(model),
        poolings=poolings,
        methods=methods,
        fit_on=fit_on,
        settings=settings,
        splits={s: len(b.scores) for s, b in splits.items()},
    )
    for pooling in poolings:
        emb, n_sentences, seconds = encode_pairs(
            splits,
            model=model,
            pooling=pooling,
            batch_size=batch_size,
            device=settings.device,
            cache=cache,
            progress=progress,
        )
        ev.encodings[pooling] = {"sentences": n_sentences, "seconds": seconds}
        log(f"[{pooling}] encoded {n_sentences} distinct sentences in {seconds:.1f} s")
        ev.transformed[pooling] = {}
        ev.diagnostics[pooling] = {}
        for name in methods:
            with record_warnings() as caught:
                try:
                    fitted, record = run_method(
                        name, emb, splits, fit_on=fit_on, settings=settings
                    )
                except (ValueError, RuntimeError, np.linalg.LinAlgError) as exc:
                    # a numerical failure of one method is a result, not a crash
                    msg = " ".join(str(exc).split())
                    log(f"[{pooling}] {name} failed: {msg}")
                    fitted, record = (
                        None,
                        {
                            "method": name,
                            "pooling": pooling,
                            "label": name,
                            "spearman_x100": None,
                            "fit_seconds": None,
                            "transform_seconds": None,
                            "params": {},
                            "error": msg,
                        },
                    )
            record["warnings"] = _raise_once(caught, f"[{pooling}] {name}")
            ev.results[(name, pooling)] = record
            if fitted is None:
                continue
            record["pooling"] = pooling
            label = record["label"] = METHODS[name].format_label(record["params"])
            Z = _transformed_test(fitted, emb["test"])
            ev.transformed[pooling][label] = Z
            ev.diagnostics[pooling][name] = anisotropy_report(
                Z, random_state=settings.seed
            )
            log(f"[{pooling}] {label}: {record['spearman_x100']:.2f}")
    return ev
