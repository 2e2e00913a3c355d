"""BERT-flow as a scikit-learn transformer: a Glow normalizing flow on embeddings.

The torch bijectors live in :mod:`sklearn_isotropy.flow._layers`; this module
only validates, trains and persists them. torch is imported lazily, inside the
methods that need it, so ``import sklearn_isotropy`` never imports torch.
"""

from __future__ import annotations

import copy
import io
import logging
import math
from numbers import Integral, Real

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._utils import import_optional, resolve_device, warn
from ..exceptions import DeviceWarning, FlowTrainingWarning
from ..linear import StandardNormalizer

__all__ = ["GlowFlowTransformer"]

logger = logging.getLogger(__name__)

_CHUNK = 8192  # rows per forward pass at transform time


def _import_torch():
    return import_optional("torch", purpose="GlowFlowTransformer", extra="flow")


def _build_flow(torch, config: dict, seed: int | None):
    """Build the Glow module from ``config`` without touching torch's global RNG."""
    from ._layers import Glow

    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.default_generator.manual_seed(seed)
        return Glow(**config)


class GlowFlowTransformer(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator
):
    """Map embeddings to a standard Gaussian with a Glow normalizing flow (BERT-flow).

    The flow is an invertible map ``f`` trained by maximum likelihood so that
    ``f(x)`` follows a standard normal distribution; :meth:`transform` returns
    the latent ``z = f(x)``, which is isotropic by construction, and the same
    model gives a density (:meth:`score_samples`), its inverse
    (:meth:`inverse_transform`) and new samples (:meth:`sample`). The encoder
    that produced the embeddings is not involved: only vectors are seen.

    The architecture is Glow for vectors: ``n_levels`` levels of ``depth``
    steps of ActNorm (data-dependent initialisation), an LU-parametrised
    invertible linear layer and a coupling layer whose conditioner is a
    residual MLP of width ``hidden_size``; after every level but the last,
    half of the remaining dimensions are factored out to the latent. The
    defaults are BERT-flow's (2 levels, depth 3, width 32, additive coupling,
    Adam with learning rate 1e-3, one epoch).

    Read more in the BERT-flow paper (Li et al., 2020).

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
    learning_rate : float, default=1e-3
        Adam learning rate. On STS-B embeddings 3e-3 was already unstable
        (finite but exploding loss); lower it rather than raise it.
    batch_size : int, default=128
        Rows per gradient step. The last batch of an epoch may be smaller. On
        STS-B embeddings (15k sentences, one epoch, 3 seeds, see
        ``benchmarks/README.md``) 128 scored 69.5 against 69.2 for 64 and 66.9
        for 32 (seed 0), with half the optimiser steps of 64.
    max_iter : int, default=1
        Maximum number of epochs (passes over the training rows). One epoch
        is BERT-flow's protocol, so reaching ``max_iter`` does not warn.
    shuffle : bool, default=True
        Whether to shuffle the rows at every epoch.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the rows, evaluate their mean
        log-likelihood after each epoch, stop when it has not improved by
        ``tol`` for ``n_iter_no_change`` epochs, and keep the parameters of
        the best epoch.
    validation_fraction : float, default=0.1
        Fraction of rows held out when ``early_stopping=True``.
    n_iter_no_change : int, default=10
        Epochs without an improvement larger than ``tol`` (of the validation
        log-likelihood with early stopping, else of the training loss) after
        which training stops.
    tol : float, default=1e-4
        Minimum improvement of the mean log-likelihood (nats per sample) that
        counts as progress.
    standardize : bool, default=True
        Standardise every feature (subtract the mean, divide by the standard
        deviation, both in float64) before the flow. The standardisation is
        part of the fitted map: :meth:`transform`, :meth:`inverse_transform`
        and :meth:`score_samples` all account for it, so the transform stays
        one invertible map and densities are in the original data space.
        Recommended: raw embeddings can have features on very different
        scales, which slows training down.
    device : str, default="cpu"
        Torch device to train on, e.g. ``"cpu"``, ``"cuda"`` or ``"cuda:1"``.
        A model trained on CUDA and unpickled on a machine without CUDA runs
        on the CPU (with a warning).
    random_state : int, RandomState instance or None, default=None
        Seeds the parameter initialisation, the shuffling and the validation
        split. Torch's global random state is never used or changed: the same
        ``random_state`` gives identical parameters and outputs.
    verbose : int, default=0
        0 is silent; 1 logs one line per epoch (``logging`` at INFO level on
        the logger ``sklearn_isotropy._glow``); 2 also shows a tqdm progress
        bar over batches, if tqdm is installed.

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
    n_iter_ : int
        Number of epochs run (an epoch cut short by a non-finite loss counts).
    loss_curve_ : list of float
        Mean training negative log-likelihood (nats per sample, in data space)
        of each epoch, averaged over its batches (over the batches that ran,
        for an epoch cut short).
    validation_scores_ : list of float or None
        Mean log-likelihood of the held-out rows after each epoch when
        ``early_stopping=True``, else None.
    best_validation_score_ : float or None
        Best entry of ``validation_scores_`` (whose parameters are kept), or
        None without early stopping.
    n_features_in_ : int
        Number of features seen during :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during :meth:`fit`, when ``X`` has string
        column names.

    See Also
    --------
    sklearn.decomposition.PCA : Linear decorrelation; with ``whiten=True`` the
        linear analogue of this transformer.

    Notes
    -----
    The training objective is the exact negative log-likelihood
    ``-log N(f(x); 0, I) - log|det df/dx|`` with Adam. If the loss or its
    gradient becomes non-finite, the offending step is not applied, training
    stops, and the last finite parameters are kept with a
    :class:`~sklearn_isotropy.exceptions.FlowTrainingWarning` naming the epoch
    (the parameters of the best epoch with early stopping); if even those give
    non-finite outputs, a ``ValueError`` explains what to change. If training
    ends with a training negative log-likelihood more than 0.1 nats per
    feature above the freshly initialised flow's (an unstable run whose loss
    stayed finite), a
    :class:`~sklearn_isotropy.exceptions.FlowTrainingWarning` says so. The flow
    computes in float32 for float32 input and in float64 (on a float64 copy of
    the parameters) for float64 input, and returns the input's dtype.

    Training uses torch's intra-op thread pool as configured by the caller;
    this estimator never changes it. On a CPU shared with other busy
    processes, ``torch.set_num_threads(1)`` can be several times faster than
    the default (measured in ``benchmarks/bench_flow.py``).

    The ActNorm layers are initialised from the first up to
    ``max(batch_size, 1024)`` (shuffled) training rows; the flag that records
    it is part of the saved state, so a loaded model is never re-initialised.

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
    >>> from sklearn_isotropy import GlowFlowTransformer
    >>> rng = np.random.RandomState(0)
    >>> X = (rng.standard_normal((200, 4)) @ np.diag([5, 2, 1, 0.1])).astype(np.float32)
    >>> flow = GlowFlowTransformer(hidden_size=8, max_iter=5, random_state=0)
    >>> Z = flow.fit_transform(X)
    >>> Z.shape, Z.dtype
    ((200, 4), dtype('float32'))
    >>> flow.n_iter_
    5
    >>> bool(np.allclose(flow.inverse_transform(Z), X, atol=1e-4))
    True
    >>> flow.score_samples(X[:3]).shape
    (3,)
    """

    _parameter_constraints: dict = {
        "n_levels": [Interval(Integral, 1, None, closed="left")],
        "depth": [Interval(Integral, 1, None, closed="left")],
        "hidden_size": [Interval(Integral, 1, None, closed="left")],
        "coupling": [StrOptions({"additive", "affine"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
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
        learning_rate: float = 1e-3,
        batch_size: int = 128,
        max_iter: int = 1,
        shuffle: bool = True,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        tol: float = 1e-4,
        standardize: bool = True,
        device: str = "cpu",
        random_state=None,
        verbose: int = 0,
    ):
        self.n_levels = n_levels
        self.depth = depth
        self.hidden_size = hidden_size
        self.coupling = coupling
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
        device = self._fit_device(torch)
        # a fit that fails half-way must not leave a previous flow_ behind
        # next to new statistics (see __sklearn_is_fitted__)
        self.__dict__.pop("flow_", None)
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(np.iinfo(np.int32).max))

        X64 = X.astype(np.float64, copy=False)
        if self.standardize:
            # the same statistics and constant-feature rule as StandardNormalizer
            normalizer = StandardNormalizer().fit(X64)
            self.mean_, self.scale_ = normalizer.mean_, normalizer.scale_
        else:
            self.mean_ = np.zeros(n_features)
            self.scale_ = np.ones(n_features)
        Xs = ((X64 - self.mean_) / self.scale_).astype(np.float32)

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
            X_val, X_train = Xs[perm[:n_val]], Xs[perm[n_val:]]
        else:
            X_val, X_train = None, Xs

        self._flow_config = {
            "n_features": n_features,
            "n_levels": self.n_levels,
            "depth": self.depth,
            "hidden_size": self.hidden_size,
            "coupling": self.coupling,
        }
        flow = _build_flow(torch, self._flow_config, seed).to(device)
        self._train(torch, flow, X_train, X_val, device, seed)
        flow.eval()
        self.flow_ = flow
        self._n_features_out = n_features
        return self

    def _fit_device(self, torch):
        return resolve_device(self.device, owner=type(self).__name__)[0]

    def _train(self, torch, flow, X_train, X_val, device, seed):
        log_det_std = -float(np.log(self.scale_).sum())
        n_train = X_train.shape[0]
        X_train = torch.from_numpy(X_train).to(device)
        X_val = None if X_val is None else torch.from_numpy(X_val).to(device)
        generator = torch.Generator().manual_seed(seed)

        def epoch_order():
            if self.shuffle:
                return torch.randperm(n_train, generator=generator).to(device)
            return torch.arange(n_train, device=device)

        # data-dependent ActNorm initialisation on a (shuffled) slice
        flow.train()
        n_init = min(n_train, max(self.batch_size, 1024))
        with torch.no_grad():
            flow(X_train[epoch_order()[:n_init]])

        # reference: the NLL of the untrained (just initialised) flow, to flag
        # training that diverged without ever producing a non-finite loss
        X_check = X_train[: min(n_train, 4096)]
        initial_nll = -self._mean_log_likelihood(torch, flow, X_check)

        params = [p for p in flow.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(params, lr=self.learning_rate)
        self.loss_curve_ = []
        self.validation_scores_ = [] if self.early_stopping else None
        self.best_validation_score_ = None
        best_state = None
        best = -np.inf  # best score: validation LL, or minus training loss
        no_improvement = 0
        diverged = None
        progress = self._progress_bar(n_train)

        self.n_iter_ = 0
        for epoch in range(1, self.max_iter + 1):
            flow.train()
            order = epoch_order()
            total, seen = 0.0, 0
            for batch, start in enumerate(range(0, n_train, self.batch_size)):
                xb = X_train[order[start : start + self.batch_size]]
                loss = -flow.log_prob(xb).mean()
                if not torch.isfinite(loss):
                    diverged = (epoch, batch + 1, "loss")
                    break
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(params, math.inf)
                if not torch.isfinite(grad_norm):
                    diverged = (epoch, batch + 1, "gradient")
                    break
                optimizer.step()
                total += loss.item() * xb.shape[0]
                seen += xb.shape[0]
                if progress is not None:
                    progress.update(xb.shape[0])
            self.n_iter_ = epoch
            if seen:
                self.loss_curve_.append(total / seen - log_det_std)
            if diverged is not None:
                break
            if self.early_stopping:
                score = self._mean_log_likelihood(torch, flow, X_val) + log_det_std
                self.validation_scores_.append(score)
                message = f"validation log-likelihood {score:.4f}"
            else:
                score = -self.loss_curve_[-1]
                message = ""
            if self.verbose:
                logger.info(
                    "epoch %d: train NLL %.4f %s", epoch, self.loss_curve_[-1], message
                )
            if score > best + self.tol:
                no_improvement = 0
            else:
                no_improvement += 1
            if score > best:
                best = score
                if self.early_stopping:
                    self.best_validation_score_ = score
                    best_state = copy.deepcopy(flow.state_dict())
            if no_improvement >= self.n_iter_no_change:
                break
        if progress is not None:
            progress.close()

        if best_state is not None:
            flow.load_state_dict(best_state)
        if diverged is not None:
            self._handle_divergence(torch, flow, X_train, diverged, best_state)
            return
        final_nll = -self._mean_log_likelihood(torch, flow, X_check)
        # noise-level changes are normal when the initial flow (standardised
        # data, ActNorm) is already about right; a blow-up is far larger
        if not final_nll <= initial_nll + 0.1 * X_check.shape[1]:
            warn(
                "Flow training made the model worse than its initialisation: the "
                "mean negative log-likelihood of the training rows rose from "
                f"{initial_nll - log_det_std:.4g} to {final_nll - log_det_std:.4g} "
                f"nats per sample, so training was unstable. Lower learning_rate "
                f"(it is {self.learning_rate:g}; try {self.learning_rate / 10:g})"
                + ("" if self.standardize else " or set standardize=True")
                + ".",
                FlowTrainingWarning,
            )

    def _handle_divergence(self, torch, flow, X_train, diverged, best_state):
        epoch, batch, what = diverged
        remedy = (
            f"lower learning_rate (it is {self.learning_rate:g}; try "
            f"{self.learning_rate / 10:g})"
            + ("" if self.standardize else ", set standardize=True")
            + (", use coupling='additive'" if self.coupling == "affine" else "")
        )
        kept = (
            "the parameters of the best validation epoch"
            if best_state is not None
            else "the last parameters with a finite loss"
        )
        flow.eval()
        check = X_train[: min(X_train.shape[0], 4096)]
        with torch.no_grad():
            z, log_det = flow(check)
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

    def _progress_bar(self, n_train):
        if self.verbose < 2:
            return None
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return None
        return tqdm(total=n_train * self.max_iter, unit="rows", desc="flow")

    @staticmethod
    def _mean_log_likelihood(torch, flow, X):
        flow.eval()
        total = 0.0
        with torch.no_grad():
            for start in range(0, X.shape[0], _CHUNK):
                total += float(flow.log_prob(X[start : start + _CHUNK]).sum())
        return total / X.shape[0]

    # ------------------------------------------------------------ inference
    def _runtime(self, dtype):
        """torch module and device to run on for input of numpy ``dtype``."""
        torch = _import_torch()
        flow = self.flow_
        device = next(flow.parameters()).device
        if dtype == np.float64:
            flow = copy.deepcopy(flow).double()
        return torch, flow, device

    def _standardize(self, X, dtype):
        return ((X.astype(np.float64, copy=False) - self.mean_) / self.scale_).astype(
            dtype, copy=False
        )

    def _run(self, X, dtype, method):
        """Apply ``method(flow, x) -> tensor`` chunk-wise to standardised ``X``."""
        torch, flow, device = self._runtime(dtype)
        Xs = self._standardize(X, dtype) if method != "inverse" else X.astype(dtype)
        outputs = []
        with torch.no_grad():
            for start in range(0, Xs.shape[0], _CHUNK):
                x = torch.from_numpy(np.ascontiguousarray(Xs[start : start + _CHUNK]))
                x = x.to(device)
                if method == "forward":
                    out = flow(x)[0]
                elif method == "inverse":
                    out = flow.inverse(x)[0]
                else:
                    out = flow.log_prob(x)
                outputs.append(out.cpu().numpy())
        return np.concatenate(outputs, axis=0)

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
            Embeddings.

        Returns
        -------
        Z : ndarray of shape (n_samples, n_features_in_)
            Latent vectors, same dtype as ``X`` (float32 or float64).
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        Z = self._run(X, X.dtype.type, "forward")
        return self._check_finite_output(Z, "transform")

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
        Xs = self._run(Z, dtype, "inverse").astype(np.float64)
        X_original = (Xs * self.scale_ + self.mean_).astype(dtype)
        return self._check_finite_output(X_original, "inverse_transform")

    def score_samples(self, X):
        """Log-likelihood of each row under the fitted flow.

        The density is in the original data space (the standardisation's
        Jacobian is included), so the flow doubles as a density model: low
        values flag outliers.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
            Embeddings.

        Returns
        -------
        log_likelihood : ndarray of shape (n_samples,)
            ``log p(x)`` of each row, float64, in nats.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        log_prob = self._run(X, X.dtype.type, "log_prob").astype(np.float64)
        log_prob -= np.log(self.scale_).sum()
        return self._check_finite_output(log_prob, "score_samples")

    def score(self, X, y=None):
        """Mean log-likelihood of the rows of ``X`` under the fitted flow.

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

        Standard normal latents are mapped through the inverse flow.

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
            torch = _import_torch()
            buffer = io.BytesIO()
            cpu_state = {k: v.detach().cpu() for k, v in flow.state_dict().items()}
            torch.save(cpu_state, buffer)
            state["_flow_state_bytes"] = buffer.getvalue()
        return state

    def __setstate__(self, state):
        payload = state.pop("_flow_state_bytes", None)
        super().__setstate__(state)
        if payload is None:
            return
        torch = _import_torch()
        state_dict = torch.load(
            io.BytesIO(payload), map_location="cpu", weights_only=True
        )
        flow = _build_flow(torch, self._flow_config, seed=None)
        flow.load_state_dict(state_dict)
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
