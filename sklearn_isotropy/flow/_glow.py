"""BERT-flow as a scikit-learn transformer: a Glow normalizing flow on embeddings.

The estimator validates, and joins the family's layers, input map, training
and runtime; torch is imported only when it is fitted or used.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, DTypeLike
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_array, check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._utils import PrefixedFeatureNamesMixin, resolve_device
from .._utils._sklearn import Interval, StrOptions, _fit_context
from ._input import fit_input_map, from_flow_input, input_log_det, to_flow_input
from ._runtime import (
    check_finite,
    dump_flow,
    import_torch,
    latent_map,
    load_flow,
    log_likelihood,
    run_flow,
)
from ._training import FLOW_PRESETS, fit_glow, glow_config

if TYPE_CHECKING:
    import torch

__all__ = ["GlowFlowTransformer"]


class GlowFlowTransformer(PrefixedFeatureNamesMixin, TransformerMixin, BaseEstimator):
    """Map embeddings to a standard Gaussian with a Glow normalizing flow (BERT-flow).

    The flow is an invertible map ``f`` trained by maximum likelihood so that
    ``f(x)`` follows a standard normal distribution; :meth:`transform` returns
    the latent ``z = f(x)`` (columns ``flow0``, ``flow1``, ...), and the same
    model is a density: :meth:`score_samples` (log-likelihood in nats per
    row), :meth:`inverse_transform` and :meth:`sample`.

    ``f`` is a fixed input map (standardisation and, with
    ``init="whitening"``, a :class:`~sklearn_isotropy.WhiteningTransformer`,
    so the flow *starts* as the Gaussian maximum-likelihood fit) followed by
    a trainable Glow of ``n_levels`` levels of ``depth`` steps (ActNorm, a
    fixed mixing layer, an affine or additive coupling).

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
    mixing : {"orthogonal", "permutation"}, default="orthogonal"
        The layer between each step's ActNorm and coupling, fixed (never
        trained): a random orthogonal matrix, so each coupling conditions on
        a random half of all directions, or BERT-flow's reverse permutation
        (no arithmetic). A trained dense mixing is not offered: at a few
        hundred features and more, its first Adam steps wreck its
        conditioning and training diverges (:ref:`density`).
    init : {"whitening", "bert-flow"}, default="whitening"
        How the flow starts.

        - ``"whitening"``: the input map ends with the whitening of the
          training rows (see ``shrinkage``) and the Glow starts as an
          orthogonal map, so before training :meth:`score_samples` is exactly
          that Gaussian's log-density. Directions in which the rows do not
          vary bypass the Glow (see ``rank_``).
        - ``"bert-flow"``: BERT-flow's initialisation: no whitening; every
          ActNorm (with Glow's log-scale factor of 3) is set from up to
          ``max(batch_size, 1024)`` training rows.
    shrinkage : "auto", float in [0, 1], "ledoit-wolf" or "oas", default="auto"
        Shrinkage of the covariance of the initial whitening (``init=
        "whitening"``; ignored otherwise), as in
        :class:`~sklearn_isotropy.WhiteningTransformer`. ``"auto"`` is 0 when
        the covariance has full numerical rank and ``"oas"`` when it does not
        (a LayerNorm output lies on a hyperplane); 0 on a singular covariance
        is an error: the flow needs a full-rank initial map.
    train_scales : bool, default=False
        Whether training changes the log-scales of the flow's own ActNorm
        layers (those of its steps and, with ``init="whitening"``, the output
        scale). False keeps them where initialisation set them (at the
        identity with ``init="whitening"``): with ``coupling="additive"``
        the trained part of the flow, additive couplings between fixed
        mixings, then preserves volume, so the scales of the Gaussian it
        starts from (the whitening, shrunk when the covariance is singular)
        stay as they are and training only adds non-Gaussian structure.
        Trained, they relearn the small variances the shrinkage raised: on
        all-mpnet-base-v2 with ``mean`` pooling that put the flow 12 nats per
        row below that Gaussian on STS-B's dev sentences, 13 below the flow
        with fixed scales (:ref:`density`). True is Glow's ActNorm, the
        ``"bert-flow"`` preset's.
    learning_rate : float, default=1e-3
        Adam learning rate, BERT-flow's (its preset's too). On STS-B dev it
        gave a higher likelihood and cosines at least as good as 3e-3 on both
        encoders and poolings measured (:ref:`density`).
    weight_decay : float, default=3.0
        Decoupled weight decay of Adam (AdamW): each step multiplies every
        trained parameter by ``1 - learning_rate * weight_decay``. With
        ``init="whitening"`` every parameter at zero is the flow's start, the
        Gaussian, so the decay pulls the flow back towards it and keeps only
        the structure the data sustain. On STS-B dev, for both encoders and
        poolings measured, it raised the held-out likelihood over no decay
        and kept the latent's cosines within 0.7 points of the whitening's
        the flow starts from (:ref:`density`). BERT-flow's optimiser uses
        0.01 (the ``"bert-flow"`` preset).
    max_grad_norm : float or None, default=None
        Clip the global norm of each step's gradient to this value, or not
        at all. The gradient is that of the batch's mean negative
        log-likelihood in bits per dimension (Glow's unit), so a value means
        the same at every width.
    batch_size : int, default=128
        Rows per gradient step. The last batch of an epoch may be smaller.
    max_iter : int, default=6
        Maximum number of epochs (passes over the training rows). 0 trains
        nothing: the flow is its initialisation. Reaching it does not warn.
        Six keep a fit of 17,000 rows of 384 features to about a tenth of the
        time their encoding took, and on STS-B (all-MiniLM-L6-v2) they
        already give the flow a likelihood above the Gaussian's on the dev
        sentences; more epochs add a little likelihood each (:ref:`density`,
        which also shows where a shift between corpora costs likelihood).
    shuffle : bool, default=True
        Whether to shuffle the rows at every epoch.
    early_stopping : bool, default=True
        Hold out ``validation_fraction`` of the rows from the gradient steps
        (not from the standardisation and the initial whitening, which use
        every row), score them before training and after each epoch, stop
        after ``n_iter_no_change`` epochs without an improvement above
        ``tol``, and keep the best evaluation's parameters. When False,
        ``tol`` and ``n_iter_no_change`` watch the training loss, as in
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
        Standardise every feature first, in float64, as part of the fitted
        map. Without it (``init="bert-flow"``) the flow sees the raw values in
        float32, which must then be of moderate magnitude.
    device : str, default="cpu"
        Torch device to train on, e.g. ``"cpu"``, ``"cuda"`` or ``"cuda:1"``;
        unpickled where CUDA is missing, a model runs on the CPU (warned).
    random_state : int, RandomState instance or None, default=None
        Seeds the parameter initialisation, the shuffling and the validation
        split; torch's global random state is never used or changed.
    verbose : int, default=0
        0 is silent; 1 prints one line per epoch to standard error (training
        NLL, validation log-likelihood, time); 2 also draws a tqdm progress
        bar over rows, if tqdm is installed.

    Attributes
    ----------
    flow_ : torch.nn.Module
        The fitted ``Glow`` module (float32 parameters), in evaluation mode.
    mean_ : ndarray of shape (n_features_in_,)
        Per-feature mean used for standardisation (zeros when
        ``standardize=False``).
    scale_ : ndarray of shape (n_features_in_,)
        Per-feature standard deviation used for standardisation (ones when
        ``standardize=False``). A feature constant up to round-off keeps the
        input's magnitude (a power of two near ``max|X|``), so it maps to
        about zero instead of to round-off at unit variance.
    whitener_ : WhiteningTransformer or None
        The initial whitening, fitted on the standardised training rows: the
        Gaussian the flow started from. None with ``init="bert-flow"``.
    rank_ : int
        Number of whitened coordinates the Glow transforms (the numerical
        rank of the covariance); the others bypass it, as they are.
    n_iter_ : int
        Number of epochs run (an epoch cut short by a non-finite loss counts).
    loss_curve_ : list of float
        Mean training negative log-likelihood (nats per row) of each epoch.
    validation_scores_ : list of float or None
        With early stopping, the mean log-likelihood (nats per row) of the
        held-out rows before training (entry 0) and after each epoch.
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

    The defaults (preset ``"density"``) make a density never worse than the
    Gaussian on the rows early stopping holds out (rows from another corpus
    can still prefer the Gaussian); the preset ``"bert-flow"`` is the
    paper's protocol for sentence similarity (:ref:`density`).

    A fitted flow is never a runaway. Training stops at a batch whose loss
    is non-finite or above the initial flow's by more than 2 nats per
    dimension, and a flow that ends worse than it started keeps the last
    parameters that were no worse (the initialisation at worst), both with a
    :class:`~sklearn_isotropy.exceptions.FlowTrainingWarning` giving the
    figures (likelihoods, median latent norm against ``sqrt(d)``); if even
    those parameters fail,
    :class:`~sklearn_isotropy.exceptions.FlowTrainingError`. On the CPU,
    training runs on one torch thread (restored afterwards): its products
    are too small for more to pay (:ref:`density`). Data-dependent
    initialisation happens once, in :meth:`fit`, and is saved with the
    model.

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
        "mixing": [StrOptions({"orthogonal", "permutation"})],
        "init": [StrOptions({"whitening", "bert-flow"})],
        "shrinkage": [
            Interval(Real, 0, 1, closed="both"),
            StrOptions({"auto", "ledoit-wolf", "oas"}),
        ],
        "train_scales": ["boolean"],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "max_grad_norm": [Interval(Real, 0, None, closed="neither"), None],
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
        mixing: str = "orthogonal",
        init: str = "whitening",
        shrinkage="auto",
        train_scales: bool = False,
        learning_rate: float = 1e-3,
        weight_decay: float = 3.0,
        max_grad_norm: float | None = None,
        batch_size: int = 128,
        max_iter: int = 6,
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
        self.mixing = mixing
        self.init = init
        self.shrinkage = shrinkage
        self.train_scales = train_scales
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.max_grad_norm = max_grad_norm
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
        """Make a transformer with the parameters of a named preset.

        Parameters
        ----------
        name : {"density", "bert-flow"}
            A key of :data:`~sklearn_isotropy.flow.FLOW_PRESETS`.
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
    def fit(self, X: ArrayLike, y=None) -> GlowFlowTransformer:
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
        import_torch()  # the ImportError that names the extra, before any work
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

        fitted = fit_input_map(X, rng, self.get_params())
        self.mean_, self.scale_, self.whitener_, self.rank_, U_train, U_val = fitted
        self._flow_config = glow_config(self.rank_, self.get_params())
        flow, result = fit_glow(
            self._flow_config,
            U_train,
            U_val,
            seed=seed,
            device=device,
            log_det=input_log_det(self.scale_, self.whitener_),
            params=self.get_params(),
        )
        self.n_iter_ = result.n_iter
        self.loss_curve_ = result.loss_curve
        self.validation_scores_ = result.validation_scores
        self.best_validation_score_ = result.best_validation_score
        self.best_epoch_ = result.best_epoch
        self.flow_ = flow
        self._n_features_out = n_features
        return self

    # ------------------------------------------------------------ inference
    def _validated_flow_input(self, X):
        """Validate ``X`` and map it to the Glow's input space, in its dtype."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return to_flow_input(X, self.mean_, self.scale_, self.whitener_)

    def transform(self, X: ArrayLike) -> np.ndarray:
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
        U = check_finite(self._validated_flow_input(X), "transform")
        return check_finite(run_flow(self.flow_, U, "forward", self.rank_), "transform")

    def inverse_transform(self, X: ArrayLike) -> np.ndarray:
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
        U = run_flow(self.flow_, Z, "inverse", self.rank_)
        X_original = from_flow_input(U, self.mean_, self.scale_, self.whitener_)
        X_original = X_original.astype(Z.dtype)
        return check_finite(X_original, "inverse_transform")

    def score_samples(self, X: ArrayLike) -> np.ndarray:
        """Compute the log-likelihood of each row under the fitted flow, in nats.

        ``log p(x) = log N(f(x); 0, I) + log|det df/dx|`` for the whole map
        ``f``, the input map included: a density of the input space,
        comparable with other density models of the same rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
            Embeddings to score.

        Returns
        -------
        log_likelihood : ndarray of shape (n_samples,)
            ``log p(x)`` of each row, float64, in nats; ``-inf`` (with a
            :class:`~sklearn_isotropy.exceptions.DensityUnderflowWarning`)
            for a row so far away that it overflows the dtype of ``X``.
        """
        U = self._validated_flow_input(X)
        log_det = input_log_det(self.scale_, self.whitener_)
        return log_likelihood(self.flow_, U, self.rank_, log_det)

    def score(self, X: ArrayLike, y=None) -> float:
        """Compute the mean log-likelihood of the rows of ``X`` (nats per row).

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

    def sample(
        self,
        n_samples: int = 1,
        random_state: int | np.random.RandomState | None = None,
    ) -> np.ndarray:
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

    def transform_module(self, dtype: DTypeLike = np.float32) -> torch.nn.Module:
        """Return the fitted map of :meth:`transform` as one torch module, for export.

        Its ``forward(x)`` maps a tensor of ``dtype`` to the latent of
        :meth:`transform`: the fixed input map in float64, then a frozen copy
        of the fitted Glow's own layers on the first ``rank_`` coordinates,
        so tracing it exports the whole map, as
        :func:`~sklearn_isotropy.export.to_onnx` does.

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
        return latent_map(self, dtype)

    def __sklearn_is_fitted__(self):
        return hasattr(self, "flow_")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    # ---------------------------------------------------------- persistence
    def __getstate__(self):
        state = dict(super().__getstate__())  # object.__getstate__ is __dict__
        flow = state.pop("flow_", None)
        if flow is not None:
            state["_flow_state_bytes"] = dump_flow(flow)
        return state

    def __setstate__(self, state):
        payload = state.pop("_flow_state_bytes", None)
        # saved before the parameter existed: every scale was trained
        state.setdefault("train_scales", True)
        super().__setstate__(state)
        if payload is not None:
            self.flow_ = load_flow(payload, self._flow_config, device=self.device)
