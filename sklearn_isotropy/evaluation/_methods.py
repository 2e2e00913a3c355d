"""The registry of post-processing methods, shared by every evaluation task.

A method turns a dimension ``n_components`` (the ``k`` of the papers;
None: the full width), the width of the embeddings and the task's settings
(an :class:`~sklearn_isotropy.evaluation.EvaluationSettings`) into an
unfitted transformer (or ``"passthrough"``) and the parameters to report.
Each task says at which ``n_components`` it runs a method and how it scores
it; the command line's ``--methods`` choices, its help and the report
labels all read :data:`METHODS`, so :func:`register_method` adds a method
to every task at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["METHODS", "Method", "SearchSpace", "register_method"]


@dataclass(frozen=True)
class Method:
    """One post-processing method.

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
        ``build(n_components, n_features, settings, dev)`` returns
        ``(transformer, params)``: the unfitted transformer (or
        ``"passthrough"``) and a dict of what to report about it.
        ``n_components`` is the output dimension asked for (None: the full
        width); ``dev`` is None, or
        ``(dev_pairs, dev_scores)`` for a method with ``needs_dev``.
    uses_k : bool, default=False
        Whether the method takes an output dimension (``n_components``).
    full_width : bool, default=True
        Whether a method that takes one also runs at the full width when a
        task runs several dimensions.
    needs_dev : bool, default=False
        Whether ``build`` selects the transformer on labelled dev pairs
        (only tasks that have them offer the method).
    """

    name: str
    label: str | Callable
    help: str
    build: Callable
    uses_k: bool = False
    full_width: bool = True
    needs_dev: bool = False

    def format_label(self, params: dict) -> str:
        """Return the table label with ``params`` filled in.

        Parameters
        ----------
        params : dict
            The reported parameters of a run.

        Returns
        -------
        label : str
            The label; the bare name if a field of its template is missing.
        """
        try:
            if callable(self.label):
                return str(self.label(params))
            return self.label.format(**params)
        except (KeyError, IndexError, TypeError, ValueError):
            return self.name


@dataclass(frozen=True)
class SearchSpace:
    """Candidates for a post-processing step, searched by the task with its labels.

    What a selecting method (``needs_dev``) builds for a task that selects
    on its own labels (``Task.selects_on_labels``, as the classification
    task does inside each training fold) instead of on dev pairs.

    Parameters
    ----------
    param_grid : list of dict
        A :class:`~sklearn.model_selection.GridSearchCV` grid over the
        pipeline step named ``"transformer"``, ``"passthrough"`` among the
        candidates.
    """

    param_grid: list


#: Every post-processing method, by name, in the order they are run and reported.
METHODS: dict[str, Method] = {}


def check_new_name(name, registry, kind):
    """Raise unless ``name`` can name a new entry of ``registry`` (a CLI choice)."""
    if not isinstance(name, str) or not name or "," in name:
        raise ValueError(
            f"A {kind} name must be a non-empty str without commas; got {name!r}."
        )
    if name in registry:
        raise ValueError(f"The {kind} {name!r} is already registered; pick another.")


def register_method(
    name: str,
    *,
    label: str | Callable | None = None,
    help: str = "",
    uses_k: bool = False,
    full_width: bool = True,
    needs_dev: bool = False,
) -> Callable:
    """Return a decorator that adds ``build`` to :data:`METHODS`.

    Parameters
    ----------
    name : str
        The name, not taken yet.
    label : str or callable, default=None
        The table label (see ``Method`` in ``evaluation/_methods.py``); the
        name when None.
    help, uses_k, full_width, needs_dev : see ``Method``
        The other fields of the method.

    Returns
    -------
    decorator : callable
        Registers ``build(n_components, n_features, settings, dev)`` and
        returns it.

    Examples
    --------
    >>> from sklearn.preprocessing import Normalizer
    >>> from sklearn_isotropy.evaluation import METHODS, register_method
    >>> @register_method("l2", help="unit-norm rows")
    ... def build_l2(n_components, n_features, settings, dev=None):
    ...     return Normalizer(), {}
    >>> "l2" in METHODS
    True
    >>> del METHODS["l2"]  # keep the registry as it was
    """
    check_new_name(name, METHODS, "method")

    def decorator(build):
        METHODS[name] = Method(
            name=name,
            label=label or name,
            help=help,
            build=build,
            uses_k=uses_k,
            full_width=full_width,
            needs_dev=needs_dev,
        )
        return build

    return decorator


@register_method("raw", help="the embeddings as they are")
def _build_raw(n_components, n_features, settings, dev=None):
    return "passthrough", {}


@register_method("center", label="centring", help="subtract the mean (no other change)")
def _build_center(n_components, n_features, settings, dev=None):
    from sklearn.preprocessing import StandardScaler

    return StandardScaler(with_std=False), {}


@register_method(
    "sn", label="SN (standard normalisation)", help="per-dimension standardisation"
)
def _build_sn(n_components, n_features, settings, dev=None):
    from ..linear import StandardNormalizer

    return StandardNormalizer(), {}


def _whitening(power=None, noise_variance=None):
    """Return the build of whitening at ``power`` (None: the settings' power)."""

    def build(n_components, n_features, settings, dev=None):
        from ..linear import WhiteningTransformer

        p = settings.postprocessing.power if power is None else power
        params = {"n_components": n_components or n_features, "power": p}
        whitening = WhiteningTransformer(
            n_components=n_components, power=p, noise_variance=noise_variance
        )
        return whitening, params

    return build


register_method(
    "pca",
    label="PCA-{n_components}",
    uses_k=True,
    help="centre and keep the top k principal directions (whitening, power 0)",
)(_whitening(0.0))
register_method(
    "whitening",
    label="whitening-{n_components}",
    uses_k=True,
    help="BERT-whitening keeping k dimensions, at --power",
)(_whitening())
register_method(
    "ppca",
    label="PPCA whitening-{n_components}",
    uses_k=True,
    help="whitening denoised without labels: the probabilistic-PCA posterior "
    "(noise_variance='auto'), at most k dimensions",
)(_whitening(noise_variance="auto"))


@register_method(
    "natsv",
    label="NATSV-{n_components}",
    help="null the top --natsv-components principal directions",
)
def _build_natsv(n_components, n_features, settings, dev=None):
    from ..linear import NATSVTransformer

    removed = _natsv_components(n_features, settings)
    return NATSVTransformer(n_components=removed), {"n_components": removed}


def _natsv_components(n_features, settings):
    """The directions NATSV removes: ``natsv_components``, at most ``d - 1``.

    Removing every direction would leave nothing to compare; the ``natsv``
    method and the grid's NATSV candidate both read the cap here.
    """
    return min(settings.postprocessing.natsv_components, n_features - 1)


def _first_columns(X, n_components):
    return np.asarray(X)[:, :n_components]


@register_method(
    "truncate",
    label="truncate-{n_components}",
    uses_k=True,
    full_width=False,
    help="keep the first k coordinates of the raw embeddings",
)
def _build_truncate(n_components, n_features, settings, dev=None):
    from sklearn.preprocessing import FunctionTransformer

    kept = n_components or n_features
    truncate = FunctionTransformer(_first_columns, kw_args={"n_components": kept})
    return truncate, {"n_components": kept}


@register_method("flow", label="flow (Glow)", help="the BERT-flow normalizing flow")
def _build_flow(n_components, n_features, settings, dev=None):
    from ..flow import GlowFlowTransformer

    # the paper's protocol (its initialisation, one epoch over every row),
    # not the estimator's density defaults
    epochs = settings.postprocessing.flow_epochs
    flow = GlowFlowTransformer.from_preset(
        "bert-flow",
        max_iter=epochs,
        random_state=settings.seed,
        device=settings.encoding.device,
        verbose=2 if settings.encoding.show_bars else 0,  # 2 = tqdm bar over batches
    )
    return flow, {"preset": "bert-flow", "max_iter": epochs}


def _grid_candidates(n_features, settings):
    from ..linear import WhiteningTransformer

    ks = [k for k in settings.grid_k if k < n_features] or [max(1, n_features // 2)]
    ks.append(None)
    return [
        {"transformer": ["passthrough"]},
        {
            "transformer": [WhiteningTransformer()],
            "transformer__n_components": ks,
            "transformer__power": list(settings.grid_power),
        },
    ]


def _classification_candidates(n_features, settings):
    """The label-free settings a classifier's own accuracy chooses among."""
    from sklearn.preprocessing import StandardScaler

    from ..linear import NATSVTransformer, StandardNormalizer, WhiteningTransformer

    # power 0 at full width is a rotation: the same as centring for an
    # L2-penalised logistic regression and for cosines, so it is left out
    whitenings = [WhiteningTransformer(power=p) for p in settings.grid_power if p > 0]
    return [
        {
            "transformer": [
                "passthrough",
                StandardScaler(with_std=False),
                StandardNormalizer(),
                NATSVTransformer(n_components=_natsv_components(n_features, settings)),
                WhiteningTransformer(noise_variance="auto"),
                *whitenings,
            ]
        }
    ]


def describe_choice(params: dict) -> dict:
    """Return a grid search's ``best_params_`` in words a report can hold."""
    out = {}
    for key, value in params.items():
        key = key.removeprefix("transformer__")
        if key == "transformer":
            value = value if isinstance(value, str) else _short_repr(value)
        out[key] = value
    return out


def _short_repr(estimator):
    """The estimator's class, with the parameters set if any, on one line."""
    text = " ".join(repr(estimator).split())
    return type(estimator).__name__ if text.endswith("()") else text


def _grid_label(params):
    """What the grid chose, in words: 'power=0' is a rotation, not a whitening."""
    if "searched" in params:  # one choice per fold: the task's records hold them
        return "grid (in each training fold)"
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


@register_method(
    "grid",
    label=_grid_label,
    help="GridSearchCV over the post-processing, no transform among the "
    "candidates: whitening k and power on the dev pairs (STS); the label-free "
    "methods inside each training fold, by the classifier's accuracy "
    "(classification)",
    needs_dev=True,
)
def _build_grid(n_components, n_features, settings, dev=None):
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV, KFold, ParameterGrid

    from .._utils import progress_bar
    from ..exceptions import EvaluationError
    from ..metrics import PairedCosineSimilarity

    if dev is None:  # the task searches with its own labels
        space = SearchSpace(_classification_candidates(n_features, settings))
        return space, {"searched": "inside each training fold"}
    dev_pairs, dev_scores = dev
    if len(dev_scores) < 2 * settings.cv:
        raise EvaluationError(
            f"the dev split has {len(dev_scores)} pairs, too few for "
            f"{settings.cv}-fold cross-validation (cv={settings.cv})"
        )
    candidates = _grid_candidates(n_features, settings)
    n_fits = len(ParameterGrid(candidates)) * settings.cv
    with progress_bar(
        total=n_fits,
        desc="grid search",
        unit="fit",
        enabled=settings.encoding.show_bars,
    ) as bar:

        def scoring(estimator, X, y):  # ticks the bar once per fold scored
            bar.update(1)
            return estimator.score(X, y)

        search = GridSearchCV(
            PairedCosineSimilarity(),
            candidates,
            cv=KFold(settings.cv, shuffle=True, random_state=settings.seed),
            scoring=scoring,
            refit=False,
        )
        search.fit(dev_pairs, dev_scores)
    best = clone(search.estimator).set_params(**search.best_params_)
    return best.transformer, {
        "chosen": describe_choice(search.best_params_),
        "dev_cv_spearman_x100": 100 * float(search.best_score_),
        "n_candidates": len(search.cv_results_["params"]),
    }
