"""BERT-flow as a scikit-learn transformer: a Glow normalizing flow on embeddings.

The torch bijectors live in :mod:`sklearn_isotropy.flow._layers` and the
training loop in :mod:`sklearn_isotropy.flow._training`; this module
validates, prepares the rows (the fixed input map: standardisation and the
initial whitening), and persists. torch is imported lazily, inside the
methods that need it, so ``import sklearn_isotropy`` never imports torch.
"""

from __future__ import annotations

import copy
import io
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._utils import PrefixedFeatureNamesMixin, import_optional, resolve_device, warn
from ..exceptions import DensityUnderflowWarning, DeviceWarning, FlowTrainingWarning
from ._input import (
    bypass_log_density,
    check_raw_magnitude,
    fit_whitener,
    input_log_det,
    standardization,
    standardize,
    unstandardize,
)
from ._training import EpochReporter, mean_log_likelihood, train_flow

__all__ = ["FLOW_PRESETS", "GlowFlowTransformer"]

_CHUNK = 8192  # rows per forward pass at transform time

#: Named parameter sets for :meth:`GlowFlowTransformer.from_preset`.
#:
#: - ``"density"``: the defaults, written out: the flow starts at the
#:   Gaussian maximum-likelihood fit (``init="whitening"``) and trains until
#:   the log-likelihood of held-out rows stops improving, keeping the best
#:   parameters. For density estimation, outlier scores and sampling.
#: - ``"bert-flow"``: the BERT-flow paper's protocol for sentence similarity
#:   (Li et al., 2020): its initialisation (ActNorm from the data, random
#:   orthogonal mixing), one epoch over every row, no held-out rows. Used by
#:   the ``flow`` method of :mod:`sklearn_isotropy.evaluation`.
FLOW_PRESETS: dict[str, dict] = {
    "density": {
        "init": "whitening",
        "learning_rate": 3e-3,
        "max_iter": 20,
        "early_stopping": True,
        "validation_fraction": 0.1,
        "n_iter_no_change": 3,
        "tol": 1e-3,
    },
    "bert-flow": {
        "n_levels": 2,
        "depth": 3,
        "hidden_size": 32,
        "coupling": "additive",
        "init": "bert-flow",
        "learning_rate": 1e-3,
        "max_iter": 1,
        "early_stopping": False,
    },
}


def _import_torch():
    return import_optional("torch", purpose="GlowFlowTransformer", extra="flow")


def _build_flow(torch, config: dict, seed: int | None):
    """Build the Glow module from ``config`` without touching torch's global RNG."""
    from ._layers import Glow

    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.default_generator.manual_seed(seed)
        return Glow(**config)


def _fix_mixing(flow) -> None:
    """Freeze the invertible linear layers of ``flow`` (``init="whitening"``).

    No gradients at all, and each layer then runs as one cached matrix
    product (about 40% of the time of a training step on 384 features). Done
    again after loading, so a loaded model computes exactly as the fitted one.
    """
    from ._layers import InvertibleLinear

    for module in flow.modules():
        if isinstance(module, InvertibleLinear):
            module.requires_grad_(False)


class GlowFlowTransformer(PrefixedFeatureNamesMixin, TransformerMixin, BaseEstimator):
    """Map embeddings to a standard Gaussian with a Glow normalizing flow (BERT-flow).

    The flow is an invertible map ``f`` trained by maximum likelihood so that
    ``f(x)`` follows a standard normal distribution; :meth:`transform` returns
    the latent ``z = f(x)``, which is isotropic by construction, and the same
    model is a density: :meth:`score_samples` (log-likelihood in nats per
    row), :meth:`inverse_transform` and :meth:`sample`. The encoder that
    produced the embeddings is not involved: only vectors are seen. The
    latent's columns are named ``flow0``, ``flow1``, ...

    ``f`` is a fixed input map followed by a trainable Glow. The input map
    standardises every feature (``standardize=True``) and, with
    ``init="whitening"``, whitens the rows with the Gaussian maximum-likelihood
    fit (a :class:`~sklearn_isotropy.WhiteningTransformer`), so the flow
    *starts* as the Gaussian that whitening implies and training only adds
    non-Gaussian structure. The Glow has ``n_levels`` levels of ``depth``
    steps of ActNorm, an LU-parametrised invertible linear layer and a
    coupling layer whose conditioner is a residual MLP of width
    ``hidden_size``; after every level but the last, half of the remaining
    dimensions are factored out to the latent.

    Read more in the :ref:`User Guide <density>`.

    Parameters
    ----------
    n_levels : int, default=2
        Number of levels of the multi-scale architecture.
    depth : int, default=3
        Flow steps (ActNorm, invertible linear, coupling) per level.
    hidden_size : int, default=32
        Width of the residual MLP in each coupling layer.
    coupling : {"additive", "affine"}, default="additive"
        ``"additive"`` (volume preserving, as in BERT-flow) or ``"affine"``
        (with a log-scale bounded to ``(-1, 1)`` per layer).
    init : {"whitening", "bert-flow"}, default="whitening"
        How the flow starts.

        - ``"whitening"``: the input map ends with the whitening map of the
          training rows (mean and covariance by maximum likelihood, shrunk if
          the covariance is singular, see ``shrinkage``); the Glow starts as
          an orthogonal map (ActNorm at the identity, random orthogonal mixing,
          couplings at the identity). Before training, :meth:`score_samples`
          is exactly the log-density of that Gaussian, and :meth:`transform`
          is the whitening up to a rotation. Training then updates the
          couplings and the ActNorm scales, and the Glow ends with a learned
          per-coordinate scale; the mixing layers stay at their random
          orthogonal start: the whitening already is the best linear map for
          a Gaussian, and Adam turns their near-zero gradients into noise of
          the size of the learning rate on ``d**2`` entries per layer (on
          STS-B embeddings, training them too made the first epoch far worse
          than the initial Gaussian, see ``benchmarks/README.md``); fixed,
          they also run faster. Directions in which the rows do not vary
          bypass the Glow (see ``rank_``).
        - ``"bert-flow"``: BERT-flow's initialisation: no whitening; every
          ActNorm is set from the first up to ``max(batch_size, 1024)``
          (shuffled) training rows so that its output has zero mean and unit
          variance per feature, the mixing matrices are random orthogonal, and
          the couplings start at the identity; everything trains. Before
          training the density is a Gaussian too, but one fitted only through
          per-feature scales, which misses most correlations.
    shrinkage : "auto", float in [0, 1], "ledoit-wolf" or "oas", default="auto"
        Shrinkage of the covariance of the initial whitening (``init=
        "whitening"``; ignored otherwise), as in
        :class:`~sklearn_isotropy.WhiteningTransformer`. ``"auto"`` uses the
        plain maximum-likelihood covariance when it has full numerical rank and
        ``"oas"`` when it does not (fewer rows than features, constant or
        collinear features, or embeddings that lie on a hyperplane, as the
        LayerNorm output of a transformer does). The flow needs a full-rank
        initial map, so ``0`` on a singular covariance is an error.
    learning_rate : float, default=3e-3
        Adam learning rate. With ``init="whitening"`` on STS-B embeddings,
        3e-3 gained more held-out likelihood than 1e-3 and 1e-2 (see
        ``benchmarks/README.md``); with ``init="bert-flow"``, where every
        layer trains, 3e-3 was unstable (finite but exploding loss), and the
        preset ``"bert-flow"`` uses BERT-flow's 1e-3.
    batch_size : int, default=128
        Rows per gradient step. The last batch of an epoch may be smaller.
    max_iter : int, default=20
        Maximum number of epochs (passes over the training rows). 0 trains
        nothing: the flow is its initialisation (with ``init="whitening"``,
        the Gaussian fit). Reaching it does not warn: on sentence embeddings
        the held-out likelihood can still creep up after 20 epochs, and the
        default bounds the fit on 17k x 384 to under a minute on two cores.
    shuffle : bool, default=True
        Whether to shuffle the rows at every epoch.
    early_stopping : bool, default=True
        Hold out ``validation_fraction`` of the rows (from the gradient steps
        and from the initial whitening), evaluate their mean log-likelihood
        before training and after each epoch, stop when it has not improved
        by more than ``tol`` for ``n_iter_no_change`` epochs, and keep the
        parameters of the best evaluation (which may be the initialisation:
        training then never makes the held-out likelihood worse). When
        False, every row is used for training and ``tol`` and
        ``n_iter_no_change`` apply to the training loss, as in
        :class:`~sklearn.neural_network.MLPRegressor`.
    validation_fraction : float, default=0.1
        Fraction of rows held out when ``early_stopping=True``.
    n_iter_no_change : int, default=3
        Epochs without an improvement larger than ``tol`` after which
        training stops.
    tol : float, default=1e-3
        Minimum improvement of the mean log-likelihood (nats per row) that
        counts as progress.
    standardize : bool, default=True
        Standardise every feature (subtract the mean, divide by the standard
        deviation, both in float64, safe for any finite magnitude) first. The
        standardisation is part of the fitted map, so :meth:`transform`,
        :meth:`inverse_transform` and :meth:`score_samples` account for it.
        With ``init="bert-flow"`` and ``standardize=False`` the flow sees the
        raw values in float32, which must then be of moderate magnitude.
    device : str, default="cpu"
        Torch device to train on, e.g. ``"cpu"``, ``"cuda"`` or ``"cuda:1"``.
        A model trained on CUDA and unpickled on a machine without CUDA runs
        on the CPU (with a warning).
    random_state : int, RandomState instance or None, default=None
        Seeds the parameter initialisation, the shuffling and the validation
        split. Torch's global random state is never used or changed: the same
        ``random_state`` gives identical parameters and outputs.
    verbose : int, default=0
        0 is silent; 1 prints one line per epoch to standard error (training
        NLL, validation log-likelihood, time), without any logging set up;
        2 also draws a tqdm progress bar over rows, if tqdm is installed.
        Lines are written with ``tqdm.write``, so they never break a bar.

    Attributes
    ----------
    flow_ : torch.nn.Module
        The fitted :class:`~sklearn_isotropy.flow._layers.Glow` module (float32
        parameters), in evaluation mode.
    mean_ : ndarray of shape (n_features_in_,)
        Per-feature mean used for standardisation (zeros when
        ``standardize=False``).
    scale_ : ndarray of shape (n_features_in_,)
        Per-feature standard deviation used for standardisation (ones when
        ``standardize=False``; constant features get 1).
    whitener_ : WhiteningTransformer or None
        The initial whitening (``init="whitening"``), fitted on the
        standardised training rows; None with ``init="bert-flow"``. Its
        ``mean_`` and ``covariance_`` are the Gaussian the flow started from,
        in standardised coordinates.
    rank_ : int
        Number of whitened coordinates the Glow transforms: the numerical rank
        of the covariance of the standardised training rows (``n_features_in_``
        with ``init="bert-flow"``). The remaining whitened coordinates are
        directions in which the training rows do not vary beyond round-off
        (e.g. the hyperplane every LayerNorm output lies on, or all but
        ``n_samples - 1`` directions when rows are few); they bypass the Glow
        and reach the latent as they are, under the shrunk Gaussian.
    n_iter_ : int
        Number of epochs run (an epoch cut short by a non-finite loss counts).
    loss_curve_ : list of float
        Mean training negative log-likelihood (nats per row, in the input
        space) of each epoch, averaged over its batches (over the batches that
        ran, for an epoch cut short).
    validation_scores_ : list of float or None
        With ``early_stopping=True``, the mean log-likelihood (nats per row)
        of the held-out rows before training (entry 0) and after each epoch
        (entry ``i``), so ``n_iter_ + 1`` entries; else None.
    best_validation_score_ : float or None
        Best entry of ``validation_scores_``, whose parameters are kept, or
        None without early stopping.
    best_epoch_ : int or None
        Index of that entry (0: the initialisation was kept), or None without
        early stopping.
    n_features_in_ : int
        Number of features seen during :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during :meth:`fit`, when ``X`` has string
        column names.

    See Also
    --------
    WhiteningTransformer : The linear map the flow starts from by default.
    sklearn.mixture.GaussianMixture : Another density model with
        ``score_samples``, ``score`` and ``sample``.

    Notes
    -----
    The training objective is the exact negative log-likelihood
    ``-log N(f(x); 0, I) - log|det df/dx|`` with Adam. All log-likelihoods
    (``score_samples``, ``score``, ``loss_curve_``, ``validation_scores_``)
    are in nats per row of the *original* input space: the log-determinant of
    the fixed input map is included. They depend on the units of the input
    (rescaling every feature by ``c`` shifts them by ``-d log c``).

    Two uses, two protocols (see :data:`~sklearn_isotropy.flow.FLOW_PRESETS`
    and :meth:`from_preset`): the defaults (preset ``"density"``) make a density
    model that is never worse than the Gaussian on held-out rows by
    construction; the preset ``"bert-flow"`` is the paper's protocol for
    sentence similarity (its initialisation, one epoch over all rows).

    If the loss or its gradient becomes non-finite, the offending step is not
    applied, training stops, and the last finite parameters (with early
    stopping, those of the best evaluation) are kept with a
    :class:`~sklearn_isotropy.exceptions.FlowTrainingWarning` naming the
    epoch; if even those give non-finite outputs, a ``ValueError`` explains
    what to change. If training ends with a training negative log-likelihood
    more than 0.1 nats per feature above the initial flow's (an unstable run
    whose loss stayed finite), a
    :class:`~sklearn_isotropy.exceptions.FlowTrainingWarning` says so. The
    fixed input map is computed in float64; the Glow in float32 for float32
    input and in float64 (on a float64 copy of the parameters) for float64
    input, and the output has the input's dtype.

    Training uses torch's intra-op thread pool as configured by the caller;
    this estimator never changes it. On a CPU shared with other busy
    processes, ``torch.set_num_threads(1)`` can be several times faster than
    the default (measured in ``benchmarks/bench_flow.py``).

    Data-dependent initialisation (the input map, ActNorm) happens once, in
    :meth:`fit`, and is part of the saved state: a loaded model is never
    re-initialised.

    References
    ----------
    .. [1] B. Li, H. Zhou, J. He, M. Wang, Y. Yang and L. Li, "On the Sentence
       Embeddings from Pre-trained Language Models", EMNLP 2020,
       arXiv:2011.05864.
    .. [2] D. P. Kingma and P. Dhariwal, "Glow: Generative Flow with
       Invertible 1x1 Convolutions", NeurIPS 2018, arXiv:1807.03039.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import multivariate_normal
    >>> from sklearn_isotropy import GlowFlowTransformer
    >>> rng = np.random.RandomState(0)
    >>> X = rng.standard_normal((300, 4)) @ rng.standard_normal((4, 4)) + 5
    >>> # untrained: exactly the Gaussian fitted by maximum likelihood (to
    >>> # every row: without early stopping no row is held out)
    >>> gaussian = GlowFlowTransformer(max_iter=0, early_stopping=False).fit(X)
    >>> reference = multivariate_normal(X.mean(0), np.cov(X, rowvar=False))
    >>> bool(np.allclose(gaussian.score_samples(X), reference.logpdf(X)))
    True
    >>> flow = GlowFlowTransformer(hidden_size=8, random_state=0).fit(X)
    >>> Z = flow.transform(X)
    >>> Z.shape
    (300, 4)
    >>> bool(np.allclose(flow.inverse_transform(Z), X))
    True
    >>> flow.score_samples(X[:3]).shape
    (3,)
    """

    _feature_name_prefix = "flow"
    _parameter_constraints: dict = {
        "n_levels": [Interval(Integral, 1, None, closed="left")],
        "depth": [Interval(Integral, 1, None, closed="left")],
        "hidden_size": [Interval(Integral, 1, None, closed="left")],
        "coupling": [StrOptions({"additive", "affine"})],
        "init": [StrOptions({"whitening", "bert-flow"})],
        "shrinkage": [
            Interval(Real, 0, 1, closed="both"),
            StrOptions({"auto", "ledoit-wolf", "oas"}),
        ],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "shuffle": ["boolean"],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "standardize": ["boolean"],
        "device": [str],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        *,
        n_levels: int = 2,
        depth: int = 3,
        hidden_size: int = 32,
        coupling: str = "additive",
        init: str = "whitening",
        shrinkage="auto",
        learning_rate: float = 3e-3,
        batch_size: int = 128,
        max_iter: int = 20,
        shuffle: bool = True,
        early_stopping: bool = True,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 3,
        tol: float = 1e-3,
        standardize: bool = True,
        device: str = "cpu",
        random_state=None,
        verbose: int = 0,
    ):
        self.n_levels = n_levels
        self.depth = depth
        self.hidden_size = hidden_size
        self.coupling = coupling
        self.init = init
        self.shrinkage = shrinkage
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.standardize = standardize
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    @classmethod
    def from_preset(cls, name: str, **params) -> GlowFlowTransformer:
        """A transformer with the parameters of a named preset.

        Parameters
        ----------
        name : {"density", "bert-flow"}
            A key of :data:`~sklearn_isotropy.flow.FLOW_PRESETS`:
            ``"density"`` (the defaults) or ``"bert-flow"`` (the paper's
            one-epoch protocol for sentence similarity, with its
            initialisation).
        **params
            Parameters that override the preset's (``random_state``,
            ``device``, ``max_iter``, ...).

        Returns
        -------
        transformer : GlowFlowTransformer
            Unfitted.

        Examples
        --------
        >>> from sklearn_isotropy import GlowFlowTransformer
        >>> flow = GlowFlowTransformer.from_preset("bert-flow", random_state=0)
        >>> flow.init, flow.max_iter, flow.early_stopping
        ('bert-flow', 1, False)
        """
        if name not in FLOW_PRESETS:
            raise ValueError(
                f"Unknown flow preset {name!r}; the presets are "
                f"{sorted(FLOW_PRESETS)}. Pass parameters directly for "
                "anything else."
            )
        return cls(**{**FLOW_PRESETS[name], **params})

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Fit the flow to ``X`` by maximum likelihood.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training embeddings, ``n_samples >= 2``.
        y : None
            Ignored.

        Returns
        -------
        self : GlowFlowTransformer
            Fitted transformer.
        """
        torch = _import_torch()
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        n_samples, n_features = X.shape
        if n_samples < 2:
            raise ValueError(
                f"GlowFlowTransformer needs at least 2 samples to fit a density; "
                f"got n_samples={n_samples}. Pass more rows."
            )
        device = resolve_device(self.device, owner=type(self).__name__)[0]
        # a fit that fails half-way must not leave a previous flow_ behind
        # next to new statistics (see __sklearn_is_fitted__)
        self.__dict__.pop("flow_", None)
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(np.iinfo(np.int32).max))

        X64 = X.astype(np.float64, copy=False)
        if self.standardize:
            self.mean_, self.scale_ = standardization(X64)
        else:
            self.mean_ = np.zeros(n_features)
            self.scale_ = np.ones(n_features)
        Xs = standardize(X64, self.mean_, self.scale_)

        if self.early_stopping:
            n_val = max(1, int(round(self.validation_fraction * n_samples)))
            if n_samples - n_val < 2:
                raise ValueError(
                    f"early_stopping=True with validation_fraction="
                    f"{self.validation_fraction} leaves {n_samples - n_val} "
                    f"training rows out of n_samples={n_samples}; at least 2 are "
                    "needed. Pass more rows, a smaller validation_fraction, or "
                    "early_stopping=False."
                )
            perm = rng.permutation(n_samples)
            Xs_val, Xs_train = Xs[perm[:n_val]], Xs[perm[n_val:]]
        else:
            Xs_val, Xs_train = None, Xs

        if not self.standardize:
            check_raw_magnitude(X64, self.init)
        if self.init == "whitening":
            self.whitener_, self.rank_ = fit_whitener(Xs_train, self.shrinkage)
            U_train = self.whitener_.transform(Xs_train)
            U_val = None if Xs_val is None else self.whitener_.transform(Xs_val)
        else:
            self.whitener_, self.rank_ = None, n_features
            U_train, U_val = Xs_train, Xs_val

        self._flow_config = {
            "n_features": self.rank_,
            "n_levels": self.n_levels,
            "depth": self.depth,
            "hidden_size": self.hidden_size,
            "coupling": self.coupling,
        }
        if self.init == "whitening":
            self._flow_config["output_scale"] = True
        flow = _build_flow(torch, self._flow_config, seed).to(device)
        r = self.rank_
        X_train = torch.from_numpy(U_train[:, :r].astype(np.float32)).to(device)
        X_val = None
        if U_val is not None:
            X_val = torch.from_numpy(U_val[:, :r].astype(np.float32)).to(device)
        offsets = [
            self._input_log_det()
            + (0.0 if U is None else float(np.mean(bypass_log_density(U, r))))
            for U in (U_train, U_val)
        ]
        generator = torch.Generator().manual_seed(seed)
        self._initialize(torch, flow, X_train, generator)
        self._train(torch, flow, X_train, X_val, generator, offsets)
        flow.eval()
        self.flow_ = flow
        self._n_features_out = n_features
        return self

    def _initialize(self, torch, flow, X_train, generator):
        if self.init == "whitening":
            flow.initialize_identity()
            return
        # BERT-flow: data-dependent ActNorm on a (shuffled) slice
        n_train = X_train.shape[0]
        n_init = min(n_train, max(self.batch_size, 1024))
        order = torch.randperm(n_train, generator=generator) if self.shuffle else None
        rows = X_train[:n_init] if order is None else X_train[order[:n_init]]
        flow.train()
        with torch.no_grad():
            flow(rows)

    def _train(self, torch, flow, X_train, X_val, generator, offsets):
        train_offset, val_offset = offsets
        X_check = X_train[: min(X_train.shape[0], 4096)]
        initial_nll = -mean_log_likelihood(torch, flow, X_check)
        if not np.isfinite(initial_nll):
            raise ValueError(
                "The initial flow gives non-finite log-likelihoods on the "
                "training rows: their values are too large or too spread for "
                "its float32 computations. Set standardize=True or rescale the "
                "input."
            )
        reporter = EpochReporter(
            self.verbose, X_train.shape[0] * self.max_iter, type(self).__name__
        )
        # train_flow takes these parameters of the estimator by their names
        settings = "max_iter batch_size learning_rate shuffle n_iter_no_change tol"
        try:
            result = train_flow(
                torch,
                flow,
                X_train,
                X_val,
                **{name: getattr(self, name) for name in settings.split()},
                generator=generator,
                train_offset=train_offset,
                val_offset=val_offset,
                reporter=reporter,
                parameters=self._trainable(flow),
            )
        finally:
            reporter.close()
        self.n_iter_ = result.n_iter
        self.loss_curve_ = result.loss_curve
        self.validation_scores_ = result.validation_scores
        self.best_validation_score_ = result.best_validation_score
        self.best_epoch_ = result.best_epoch

        if result.diverged is not None:
            self._handle_divergence(torch, flow, X_check, result)
            return
        final_nll = -mean_log_likelihood(torch, flow, X_check)
        # noise-level changes are normal when the initial flow is already
        # about right; a blow-up is far larger
        if not final_nll <= initial_nll + 0.1 * X_check.shape[1]:
            warn(
                "Flow training made the model worse than its initialisation: the "
                "mean negative log-likelihood of the training rows rose from "
                f"{initial_nll - train_offset:.4g} to "
                f"{final_nll - train_offset:.4g} nats per row, so training was "
                f"unstable. Lower learning_rate (it is {self.learning_rate:g}; "
                f"try {self.learning_rate / 10:g})"
                + ("" if self.standardize else " or set standardize=True")
                + ".",
                FlowTrainingWarning,
            )

    def _trainable(self, flow):
        """The parameters the optimiser updates.

        With ``init="whitening"`` the input map already is the best linear
        map for a Gaussian, so the gradients of the dense mixing layers are
        sampling noise there, which Adam turns into steps of size
        ``learning_rate`` on every one of their ``d**2`` entries per layer
        (the ablation in ``benchmarks/README.md``). They stay at their random
        orthogonal start, like the fixed permutations of RealNVP; the
        couplings, the ActNorm scales and the output scale learn.
        """
        if self.init == "whitening":
            _fix_mixing(flow)
        return [p for p in flow.parameters() if p.requires_grad]

    def _handle_divergence(self, torch, flow, X_check, result):
        epoch, batch, what = result.diverged
        remedy = (
            f"lower learning_rate (it is {self.learning_rate:g}; try "
            f"{self.learning_rate / 10:g})"
            + ("" if self.standardize else ", set standardize=True")
            + (", use coupling='additive'" if self.coupling == "affine" else "")
        )
        kept = (
            f"the parameters of the best evaluation (epoch {result.best_epoch})"
            if result.restored_best
            else "the last parameters with a finite loss"
        )
        flow.eval()
        with torch.no_grad():
            z, log_det = flow(X_check)
        if not (torch.isfinite(z).all() and torch.isfinite(log_det).all()):
            raise ValueError(
                f"Flow training diverged: the {what} became non-finite at epoch "
                f"{epoch}, batch {batch}, and the parameters reached by then give "
                f"non-finite outputs. To fix it, {remedy}."
            )
        warn(
            f"Flow training stopped early: the {what} became non-finite at epoch "
            f"{epoch}, batch {batch}; kept {kept}. To train further, {remedy}.",
            FlowTrainingWarning,
        )

    # ------------------------------------------------------------ inference
    def _runtime(self, dtype):
        """torch module and device to run on for input of numpy ``dtype``."""
        torch = _import_torch()
        flow = self.flow_
        device = next(flow.parameters()).device
        if dtype == np.float64:
            flow = copy.deepcopy(flow).double()
        return torch, flow, device

    def _to_flow_input(self, X, dtype):
        """The fixed input map: standardisation, then the initial whitening."""
        U = standardize(X.astype(np.float64, copy=False), self.mean_, self.scale_)
        if self.whitener_ is not None:
            U = self.whitener_.transform(U)
        with np.errstate(over="ignore"):  # rows too far for float32 become inf
            return U.astype(dtype, copy=False)

    def _validated_flow_input(self, X):
        """Validate ``X`` and map it to the Glow's input space: ``(U, dtype)``."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        dtype = X.dtype.type
        return self._to_flow_input(X, dtype), dtype

    def _from_flow_input(self, U):
        """Inverse of :meth:`_to_flow_input`, in float64."""
        U = U.astype(np.float64, copy=False)
        if self.whitener_ is not None:
            U = self.whitener_.inverse_transform(U)
        return unstandardize(U, self.mean_, self.scale_)

    def _input_log_det(self) -> float:
        return input_log_det(self.scale_, self.whitener_)

    def _run(self, U, dtype, method):
        """Apply ``method`` of the flow chunk-wise to the flow-space rows ``U``.

        The Glow sees the first ``rank_`` coordinates; the others bypass it
        (see ``rank_``).
        """
        torch, flow, device = self._runtime(dtype)
        rank = self.rank_ or U.shape[1]
        head = U[:, :rank]
        outputs = []
        with torch.no_grad():
            for start in range(0, U.shape[0], _CHUNK):
                chunk = np.ascontiguousarray(head[start : start + _CHUNK])
                u = torch.from_numpy(chunk).to(device)
                if method == "forward":
                    out = flow(u)[0]
                elif method == "inverse":
                    out = flow.inverse(u)[0]
                else:
                    out = flow.log_prob(u)
                outputs.append(out.cpu().numpy())
        out = np.concatenate(outputs, axis=0)
        if method == "log_prob":
            return out.astype(np.float64) + bypass_log_density(U, self.rank_)
        if rank < U.shape[1]:
            out = np.concatenate([out, U[:, rank:].astype(out.dtype)], axis=1)
        return out

    @staticmethod
    def _check_finite_output(out, what):
        if not np.all(np.isfinite(out)):
            raise ValueError(
                f"The flow produced non-finite values in {what} for finite input: "
                "some rows lie far outside the range of the training data. Check "
                "the input's scale (it should look like the training rows)."
            )
        return out

    def transform(self, X):
        """Map ``X`` to the flow's Gaussian latent space.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
            Embeddings to map.

        Returns
        -------
        Z : ndarray of shape (n_samples, n_features_in_)
            Latent vectors, same dtype as ``X`` (float32 or float64).
        """
        U, dtype = self._validated_flow_input(X)
        U = self._check_finite_output(U, "transform")
        return self._check_finite_output(self._run(U, dtype, "forward"), "transform")

    def inverse_transform(self, X):
        """Map latent vectors back to the data space.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
            Latent vectors, e.g. the output of :meth:`transform`.

        Returns
        -------
        X_original : ndarray of shape (n_samples, n_features_in_)
            Embeddings, same dtype as the input.
        """
        check_is_fitted(self)
        Z = check_array(X, dtype=[np.float64, np.float32])
        if Z.shape[1] != self._n_features_out:
            raise ValueError(
                f"X has {Z.shape[1]} features, but inverse_transform expects "
                f"{self._n_features_out} (the width of the latent); pass the "
                "output of transform"
            )
        dtype = Z.dtype.type
        U = self._run(Z, dtype, "inverse")
        X_original = self._from_flow_input(U).astype(dtype)
        return self._check_finite_output(X_original, "inverse_transform")

    def score_samples(self, X):
        """Log-likelihood of each row under the fitted flow, in nats.

        ``log p(x) = log N(f(x); 0, I) + log|det df/dx|`` for the whole map
        ``f`` (the fixed input map included), so the density is one of the
        original input space: it integrates to 1 over it and can be compared
        with any other density model of the same rows (e.g. a Gaussian, whose
        ``logpdf`` it equals before training with ``init="whitening"``). Low
        values flag unusual rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
            Embeddings to score.

        Returns
        -------
        log_likelihood : ndarray of shape (n_samples,)
            ``log p(x)`` of each row, float64, in nats. A row so far from the
            fitted density that its log-likelihood overflows the dtype of the
            computation (that of ``X``) scores ``-inf``, as a density that
            underflows, with a
            :class:`~sklearn_isotropy.exceptions.DensityUnderflowWarning`
            saying how many rows did; the other rows score as they would
            alone.
        """
        U, dtype = self._validated_flow_input(X)
        log_prob = np.full(U.shape[0], -np.inf)
        # rows are scored independently: one too far to compute must not
        # take the others with it
        finite = np.isfinite(U).all(axis=1)
        if finite.any():
            rows = U if finite.all() else U[finite]
            log_prob[finite] = self._run(rows, dtype, "log_prob")
            log_prob += self._input_log_det()
        far = ~np.isfinite(log_prob)
        if far.any():
            log_prob[far] = -np.inf
            retry = (
                "Score them in float64 (X.astype(numpy.float64)) for finite "
                "values, and check"
                if dtype == np.float32
                else "Check"
            )
            warn(
                f"{int(far.sum())} of {len(log_prob)} rows lie so far from the "
                "fitted density that their log-likelihood overflows "
                f"{np.dtype(dtype).name}; they score -inf. {retry} the input's "
                "scale (it should look like the training rows).",
                DensityUnderflowWarning,
            )
        return log_prob

    def score(self, X, y=None):
        """Mean log-likelihood of the rows of ``X`` (nats per row).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
            Embeddings.
        y : None
            Ignored.

        Returns
        -------
        score : float
            Mean of :meth:`score_samples`.
        """
        return float(np.mean(self.score_samples(X)))

    def sample(self, n_samples=1, random_state=None):
        """Draw rows from the fitted density.

        Standard normal latents are mapped through the inverse flow, so the
        rows follow the density whose log is :meth:`score_samples`.

        Parameters
        ----------
        n_samples : int, default=1
            Number of rows to draw.
        random_state : int, RandomState instance or None, default=None
            Seeds the latent draws (numpy, so torch's global RNG is untouched).

        Returns
        -------
        X : ndarray of shape (n_samples, n_features_in_)
            Samples in the data space, float64.
        """
        check_is_fitted(self)
        if not isinstance(n_samples, Integral) or isinstance(n_samples, bool):
            raise TypeError(
                f"n_samples must be an integer, got {type(n_samples).__name__}"
            )
        if n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {n_samples}")
        rng = check_random_state(random_state)
        Z = rng.standard_normal((n_samples, self._n_features_out))
        return self.inverse_transform(Z)

    def transform_module(self, dtype=np.float32):
        """The fitted map of :meth:`transform` as one torch module, for export.

        The module's ``forward(x)`` takes a tensor of shape ``(n_samples,
        n_features_in_)`` and ``dtype`` and returns the latent of
        :meth:`transform`, of the same shape and dtype: the fixed input map
        in float64 (standardisation, then the initial whitening), then the
        fitted Glow in ``dtype`` on the first ``rank_`` coordinates, the
        others passing through. It is made of the Glow's own layers (a copy,
        on the CPU, in evaluation mode, with no trainable parameter), so
        tracing it with ``torch.export`` or ``torch.onnx.export`` exports the
        whole map: :func:`~sklearn_isotropy.export.to_onnx` does exactly
        that, and a flow with other layers that keep the layer contract
        (``forward(x) -> (z, log_det)``, traceable in evaluation mode)
        exports the same way.

        Parameters
        ----------
        dtype : {numpy.float32, numpy.float64}, default=numpy.float32
            Dtype of the input, the output and the Glow's parameters. As in
            :meth:`transform`, the input map computes in float64 either way.

        Returns
        -------
        module : torch.nn.Module
            A ``LatentMap`` of ``sklearn_isotropy.flow._layers``, in
            evaluation mode; changing it leaves this estimator as it is.

        Examples
        --------
        >>> import numpy as np
        >>> import torch
        >>> from sklearn_isotropy import GlowFlowTransformer
        >>> X = np.random.RandomState(0).standard_normal((100, 4))
        >>> flow = GlowFlowTransformer(hidden_size=8, max_iter=2, random_state=0)
        >>> flow = flow.fit(X)
        >>> module = flow.transform_module(np.float64)
        >>> with torch.no_grad():
        ...     Z = module(torch.from_numpy(X)).numpy()
        >>> bool(np.allclose(Z, flow.transform(X)))
        True
        """
        check_is_fitted(self)
        try:
            dtype = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(
                f"dtype must be numpy.float32 or numpy.float64; got {dtype!r}."
            ) from exc
        if dtype not in (np.float32, np.float64):
            raise ValueError(
                f"dtype must be numpy.float32 or numpy.float64; got {dtype}. The "
                "flow computes in the dtype of its input."
            )
        torch = _import_torch()
        from ._layers import LatentMap

        torch_dtype = torch.float64 if dtype == np.float64 else torch.float32
        flow = copy.deepcopy(self.flow_).to(device="cpu", dtype=torch_dtype)
        w = self.whitener_
        # copies (torch.tensor), so the module shares no memory with self
        return LatentMap(
            flow.requires_grad_(False),
            torch.tensor(self.mean_),
            torch.tensor(self.scale_),
            None if w is None else torch.tensor(w.mean_),
            None if w is None else torch.tensor(w.whitening_),
            rank=self.rank_,
        ).eval()

    def __sklearn_is_fitted__(self):
        return hasattr(self, "flow_")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    # ---------------------------------------------------------- persistence
    #: parameters and attributes added after release 0.1.0.dev0, with the
    #: values that describe a model pickled by that release
    _LEGACY_DEFAULTS = {
        "init": "bert-flow",
        "shrinkage": "auto",
        "whitener_": None,
        "rank_": None,
        "best_epoch_": None,
    }

    def __getstate__(self):
        state = dict(super().__getstate__())  # object.__getstate__ is __dict__
        flow = state.pop("flow_", None)
        if flow is not None:
            torch = _import_torch()
            buffer = io.BytesIO()
            cpu_state = {k: v.detach().cpu() for k, v in flow.state_dict().items()}
            torch.save(cpu_state, buffer)
            state["_flow_state_bytes"] = buffer.getvalue()
        return state

    def __setstate__(self, state):
        payload = state.pop("_flow_state_bytes", None)
        fitted = payload is not None
        for key, value in self._LEGACY_DEFAULTS.items():
            if key.endswith("_") and not fitted:
                continue
            state.setdefault(key, value)
        super().__setstate__(state)
        if not fitted:
            return
        torch = _import_torch()
        state_dict = torch.load(
            io.BytesIO(payload), map_location="cpu", weights_only=True
        )
        flow = _build_flow(torch, self._flow_config, seed=None)
        flow.load_state_dict(state_dict)
        if self.whitener_ is not None:
            _fix_mixing(flow)
        flow.eval()
        device, fallback = resolve_device(
            self.device, owner=type(self).__name__, allow_fallback=True
        )
        if fallback is not None:
            warn(
                f"This GlowFlowTransformer was set up for device={self.device!r} "
                f"but {fallback.split(' but ', 1)[1]}; it runs on the CPU instead. "
                "Call set_params(device='cpu') to silence this warning.",
                DeviceWarning,
            )
        self.flow_ = flow.to(device)
