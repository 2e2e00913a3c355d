"""The registry of evaluation methods: what ``--methods`` and the reports know.

A method turns the width of the embeddings and the :class:`MethodSettings`
into a transformer (or ``"passthrough"``) and the parameters to report. The
command line's ``--methods`` choices, its help text, the table labels and
:func:`~sklearn_isotropy.evaluation.run_method` all read :data:`METHODS`, so
:func:`register_method` adds a method everywhere at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "GRID_K",
    "GRID_POWER",
    "METHODS",
    "Method",
    "MethodSettings",
    "register_method",
]

#: Whitening dimensions and powers the ``grid`` method searches (plus "no
#: transform" and every dimension).
GRID_K = (64, 128, 256)
GRID_POWER = (0.0, 0.5, 1.0)


@dataclass
class MethodSettings:
    """Options of the evaluation methods (the command line's flags).

    Parameters
    ----------
    n_components : int, default=256
        Kept dimensions of ``whitening`` (every dimension when the
        embeddings are not wider).
    natsv_components : int, default=5
        Top directions removed by ``natsv`` (at most ``d - 1``).
    flow_epochs : int, default=1
        Training epochs of ``flow``, which otherwise follows the preset
        ``"bert-flow"`` of :class:`~sklearn_isotropy.GlowFlowTransformer`
        (1 epoch is BERT-flow's protocol).
    cv : int, default=5
        Folds of the ``grid`` search on the dev pairs.
    seed : int, default=0
        Seeds the flow and the grid's folds.
    device : str, default="cpu"
        Torch device of the flow.
    progress : bool or None, default=False
        Progress bars of long steps (the flow's epoch, the grid search's
        fits): True shows them, False hides them, None shows them only on an
        interactive stderr (a terminal or a notebook, not a log file).
    """

    n_components: int = 256
    natsv_components: int = 5
    flow_epochs: int = 1
    cv: int = 5
    seed: int = 0
    device: str = "cpu"
    progress: bool | None = False

    @property
    def show_bars(self) -> bool:
        """Whether progress bars are drawn (``progress`` with None resolved)."""
        from .._utils import interactive_stderr

        return interactive_stderr() if self.progress is None else bool(self.progress)


@dataclass(frozen=True)
class Method:
    """One evaluation method.

    Parameters
    ----------
    name : str
        The ``--methods`` name.
    label : str or callable
        Table label: a template whose ``{key}`` fields are filled from the
        reported params (``"whitening-{n_components}"``), or a function
        ``label(params) -> str`` for labels that depend on what was chosen.
    help : str
        One line for ``--help``.
    build : callable
        ``build(n_features, settings, dev)`` returns ``(transformer, params)``:
        the unfitted transformer (or ``"passthrough"``) applied to the
        embeddings, and a dict of what to report about it. ``dev`` is None,
        or ``(dev_pairs, dev_scores)`` for a method with ``needs_dev``.
    needs_dev : bool, default=False
        Whether ``build`` selects the transformer on the dev split.
    """

    name: str
    label: str | Callable
    help: str
    build: Callable
    needs_dev: bool = False

    def format_label(self, params: dict) -> str:
        """The table label with ``params`` filled in (the bare name if missing)."""
        try:
            if callable(self.label):
                return str(self.label(params))
            return self.label.format(**params)
        except (KeyError, IndexError, TypeError, ValueError):
            return self.name


#: Every evaluation method, by name, in the order they are run and reported.
METHODS: dict[str, Method] = {}


def check_new_name(name, registry, kind):
    """Raise unless ``name`` can name a new entry of ``registry`` (a CLI choice)."""
    if not isinstance(name, str) or not name or "," in name:
        raise ValueError(
            f"A method name must be a non-empty str without commas; got {name!r}."
        )
    if name in registry:
        raise ValueError(f"The {kind} {name!r} is already registered.")


def register_method(name, *, label=None, help="", needs_dev=False):
    """Decorator that adds ``build`` to :data:`METHODS` under ``name``.

    Parameters
    ----------
    name : str
        The ``--methods`` name; must not be taken.
    label : str or callable, default=None
        Table label: a template with ``str.format`` fields from the reported
        params, or a function of the params; the name when None.
    help : str, default=""
        One line for ``--help``.
    needs_dev : bool, default=False
        Whether the method selects its transformer on the dev split.

    Returns
    -------
    decorator : callable
        Registers and returns the build function (see :class:`Method`).

    Examples
    --------
    >>> from sklearn.preprocessing import Normalizer
    >>> from sklearn_isotropy.evaluation import METHODS, register_method
    >>> @register_method("l2", help="unit-norm rows")
    ... def build_l2(n_features, settings, dev=None):
    ...     return Normalizer(), {}
    >>> "l2" in METHODS
    True
    >>> del METHODS["l2"]  # keep the registry as it was
    """
    check_new_name(name, METHODS, "evaluation method")

    def decorator(build):
        METHODS[name] = Method(name, label or name, help, build, needs_dev)
        return build

    return decorator


@register_method(
    "raw", label="raw (no post-processing)", help="the embeddings as they are"
)
def _build_raw(n_features, settings, dev=None):
    return "passthrough", {}


@register_method(
    "sn", label="SN (standard normalisation)", help="per-dimension standardisation"
)
def _build_sn(n_features, settings, dev=None):
    from ..linear import StandardNormalizer

    return StandardNormalizer(), {}


@register_method(
    "natsv",
    label="NATSV-{n_components}",
    help="null the top --natsv-components principal directions",
)
def _build_natsv(n_features, settings, dev=None):
    from ..linear import NATSVTransformer

    k = min(settings.natsv_components, n_features - 1)
    return NATSVTransformer(n_components=k), {"n_components": k}


@register_method(
    "whitening",
    label="whitening-{n_components}",
    help="BERT-whitening keeping --n-components dimensions",
)
def _build_whitening(n_features, settings, dev=None):
    from ..linear import WhiteningTransformer

    k = settings.n_components if settings.n_components < n_features else None
    return WhiteningTransformer(n_components=k), {"n_components": k or n_features}


@register_method("flow", label="flow (Glow)", help="the BERT-flow normalizing flow")
def _build_flow(n_features, settings, dev=None):
    from ..flow import GlowFlowTransformer

    # the paper's protocol (its initialisation, one epoch over every row),
    # not the estimator's density defaults
    flow = GlowFlowTransformer.from_preset(
        "bert-flow",
        max_iter=settings.flow_epochs,
        random_state=settings.seed,
        device=settings.device,
        verbose=2 if settings.show_bars else 0,  # 2 = tqdm bar over batches
    )
    return flow, {"preset": "bert-flow", "max_iter": settings.flow_epochs}


def _grid_candidates(n_features):
    from ..linear import WhiteningTransformer

    ks = [k for k in GRID_K if k < n_features] or [max(1, n_features // 2)]
    ks.append(None)
    return [
        {"transformer": ["passthrough"]},
        {
            "transformer": [WhiteningTransformer()],
            "transformer__n_components": ks,
            "transformer__power": list(GRID_POWER),
        },
    ]


def _describe_params(params):
    out = {}
    for key, value in params.items():
        key = key.removeprefix("transformer__")
        if key == "transformer":
            value = value if isinstance(value, str) else type(value).__name__
        out[key] = value
    return out


def _grid_label(params):
    """What the grid chose, in words: 'power=0' is a rotation, not a whitening."""
    chosen = params.get("chosen")
    if not chosen:
        return "grid (whitening k, power on dev)"
    if chosen.get("transformer") == "passthrough":
        return "grid: no transform (raw), chosen on dev"
    k = chosen.get("n_components")
    k = "all" if k is None else k
    power = float(chosen.get("power", 1.0))
    if power == 0:
        return f"grid: rotation only / no whitening, k={k}"
    kind = "whitening" if power == 1 else f"partial whitening (power {power:g})"
    return f"grid: {kind}, k={k}"


class _FitCounter:
    """A scorer that ticks a progress bar once per fold it scores."""

    def __init__(self, bar):
        self.bar = bar

    def __call__(self, estimator, X, y):
        score = estimator.score(X, y)
        self.bar.update(1)
        return score


@register_method(
    "grid",
    label=_grid_label,
    help="GridSearchCV over whitening k and power (and none) on the dev split",
    needs_dev=True,
)
def _build_grid(n_features, settings, dev=None):
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV, KFold

    from ..exceptions import EvaluationError
    from ..metrics import PairedCosineSimilarity

    dev_pairs, dev_scores = dev
    if len(dev_scores) < 2 * settings.cv:
        raise EvaluationError(
            f"the dev split has {len(dev_scores)} pairs, too few for "
            f"{settings.cv}-fold cross-validation (cv={settings.cv})"
        )
    from sklearn.model_selection import ParameterGrid

    from .._utils import progress_bar

    candidates = _grid_candidates(n_features)
    n_fits = len(ParameterGrid(candidates)) * settings.cv
    with progress_bar(
        total=n_fits, desc="grid search", unit="fit", enabled=settings.show_bars
    ) as bar:
        search = GridSearchCV(
            PairedCosineSimilarity(),
            candidates,
            cv=KFold(settings.cv, shuffle=True, random_state=settings.seed),
            scoring=_FitCounter(bar),
            refit=False,
        )
        search.fit(dev_pairs, dev_scores)
    best = clone(search.estimator).set_params(**search.best_params_)
    return best.transformer, {
        "chosen": _describe_params(search.best_params_),
        "dev_cv_spearman_x100": 100 * float(search.best_score_),
        "n_candidates": len(search.cv_results_["params"]),
    }
