"""Training of the flow: Adam on the exact negative log-likelihood.

The scikit-learn wrapper (:mod:`sklearn_isotropy.flow._glow`) prepares the
rows (standardised, whitened); :func:`fit_glow` builds and initialises the
Glow, trains it and checks the result; :func:`train_flow` runs the epochs,
monitors them (training loss or held-out log-likelihood), keeps the best
parameters with early stopping, and stops at a batch whose loss is
non-finite or runs away, going back to the last good parameters. A fitted
flow is never a runaway: it keeps its fallback parameters with a warning
that gives the figures, or training raises. torch is imported inside the
functions, when they run.

Progress goes to ``sys.stderr`` through :class:`EpochReporter`, which writes
its lines with ``tqdm.write`` when tqdm is installed, so they never break into
a progress bar that is being drawn (ours or another one).
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from .._utils import warn
from ..exceptions import FlowTrainingError, FlowTrainingWarning
from ._input import bypass_log_density
from ._runtime import CHUNK

__all__ = [
    "FLOW_PRESETS",
    "EpochReporter",
    "TrainingResult",
    "fit_glow",
    "glow_config",
    "latent_check",
    "make_optimizer",
    "mean_log_likelihood",
    "train_flow",
    "training_threads",
]

#: Named parameter sets for :meth:`GlowFlowTransformer.from_preset`.
#:
#: - ``"density"``: the defaults, written out: the flow starts at the
#:   Gaussian maximum-likelihood fit (``init="whitening"``), mixes with fixed
#:   random orthogonal matrices, keeps its scales (``train_scales=False``:
#:   the trained part preserves volume), trains with a weight decay that pulls it
#:   back towards that Gaussian, until the log-likelihood of held-out rows
#:   stops improving, and keeps the best parameters. For density
#:   estimation, outlier scores and sampling.
#: - ``"bert-flow"``: the configuration BERT-flow's code ships
#:   (``flow/config/config_l3_d3_w32.json``, ``run_siamese.py``,
#:   ``optimization_bert_flow.py``): 3 levels of 3 steps, additive couplings
#:   of width 32, a fixed reverse permutation as the mixing, ActNorm set from
#:   the data with its log-scale factor 3 and trained, weight-decay Adam (0.01) at a
#:   constant learning rate of 1e-3 with the gradient norm clipped, batches
#:   of 32 pairs (64 rows), one epoch, no held-out rows. The flow page
#:   (:ref:`density`) sets each value beside the reference's and says where
#:   this one departs. Used by the ``flow`` method of
#:   :mod:`sklearn_isotropy.evaluation`.
FLOW_PRESETS: dict[str, dict] = {
    "density": {
        "n_levels": 2,
        "depth": 3,
        "hidden_size": 32,
        "coupling": "additive",
        "mixing": "orthogonal",
        "init": "whitening",
        "train_scales": False,
        "learning_rate": 1e-3,
        "weight_decay": 3.0,
        "max_grad_norm": None,
        "batch_size": 128,
        "max_iter": 6,
        "early_stopping": True,
        "validation_fraction": 0.1,
        "n_iter_no_change": 3,
        "tol": 1e-3,
    },
    "bert-flow": {
        "n_levels": 3,
        "depth": 3,
        "hidden_size": 32,
        "coupling": "additive",
        "mixing": "permutation",
        "init": "bert-flow",
        "train_scales": True,
        "learning_rate": 1e-3,
        "weight_decay": 0.01,
        # the reference clips the gradient of the sum of both sentences' mean
        # losses (in bits per dimension) at 1.0: twice the mean over the 64
        # rows that trains here, so 0.5 on this mean is its 1.0
        "max_grad_norm": 0.5,
        "batch_size": 64,
        "max_iter": 1,
        "early_stopping": False,
    },
}

#: A training batch whose negative log-likelihood exceeds the initial flow's
#: by more than this many nats per dimension is a runaway (a flow that
#: diverges reaches millions): training stops there.
RUNAWAY_NATS_PER_DIMENSION = 2.0
#: A fitted flow whose mean negative log-likelihood on the training rows is
#: above the initial flow's by more than this many nats per dimension is
#: worse than where it started: the last state no worse than the start is
#: kept instead. Noise-level changes are far smaller.
WORSE_NATS_PER_DIMENSION = 0.1
#: Steps between two snapshots of the parameters (taken only when the
#: batch's loss is no worse than the initial flow's), the state a runaway
#: training falls back to.
SNAPSHOT_EVERY = 25


class EpochReporter:
    """One line per epoch on stderr (``verbose >= 1``) and a bar (``>= 2``).

    scikit-learn's iterative estimators print their progress without any
    logging set up; so does this. Lines are written with ``tqdm.write`` when
    tqdm is importable: it clears the progress bars drawn on the same stream,
    writes the line and redraws them, so a line never lands in the middle of
    a bar.

    Parameters
    ----------
    verbose : int
        0 silent, 1 epoch lines, 2 epoch lines and a bar over rows.
    total : int
        Rows the bar counts to (rows per epoch times ``max_iter``).
    desc : str
        Prefix of the lines and label of the bar.
    """

    def __init__(self, verbose: int, total: int, desc: str):
        self.verbose = int(verbose)
        self.desc = desc
        self.bar = None
        self._tqdm = None
        if self.verbose >= 1:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # plain lines without tqdm
                tqdm = None
            self._tqdm = tqdm
        if self.verbose >= 2 and self._tqdm is not None and total > 0:
            self.bar = self._tqdm(
                total=total, unit="rows", desc=desc, file=sys.stderr, leave=False
            )

    def write(self, text: str) -> None:
        """Write one line to the current ``sys.stderr``, around any bar."""
        if self.verbose < 1:
            return
        line = f"{self.desc}: {text}"
        if self._tqdm is not None:
            self._tqdm.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def update(self, n_rows: int) -> None:
        if self.bar is not None:
            self.bar.update(n_rows)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@dataclass
class TrainingResult:
    """What :func:`train_flow` did; the estimator turns it into attributes."""

    n_iter: int = 0
    loss_curve: list = field(default_factory=list)
    validation_scores: list | None = None
    best_validation_score: float | None = None
    best_epoch: int | None = None
    #: (epoch, batch, the batch's NLL in nats per row) where training ran away
    diverged: tuple | None = None
    #: where the parameters kept after a runaway come from, in words
    restored: str | None = None
    #: (parameters, where from) to fall back to if the trained flow is worse
    #: than the initial one (without early stopping)
    fallback: tuple | None = None
    restored_best: bool = False
    stopped_early: bool = False


def mean_log_likelihood(flow, X) -> float:
    """Return the mean ``flow.log_prob`` of the rows of tensor ``X`` (eval mode)."""
    import torch

    flow.eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, X.shape[0], CHUNK):
            total += float(flow.log_prob(X[start : start + CHUNK]).sum())
    return total / X.shape[0]


def latent_check(flow, X) -> tuple[float, float]:
    """Mean negative log-likelihood (nats per row) and median latent norm of ``X``.

    One forward pass, in evaluation mode: what the estimator checks before
    and after training.
    """
    import torch

    from ._layers import standard_normal_log_prob

    flow.eval()
    nll, norms = 0.0, []
    with torch.no_grad():
        for start in range(0, X.shape[0], CHUNK):
            z, log_det = flow(X[start : start + CHUNK])
            nll -= float((standard_normal_log_prob(z) + log_det).sum())
            norms.append(z.norm(dim=1))
    median = float(np.median(torch.cat(norms).cpu().numpy())) if norms else 0.0
    return nll / X.shape[0], median


def make_optimizer(flat: FlatParameters, learning_rate: float, weight_decay: float):
    """Adam with decoupled weight decay (AdamW) on ``flat``, fused where torch has it.

    One parameter group per learning-rate factor of ``flat`` (Glow's
    log-scale factor, see
    :func:`~sklearn_isotropy.flow._layers.learning_rate_factors`): the rate
    times the factor, the weight decay divided by it, so that the decay per
    step is the same for every parameter. ``eps=1e-6`` is BERT's (and
    BERT-flow's). Fused Adam on the CPU needs torch 2.4; older releases get
    the ``foreach`` form. Either is one update a group.
    """
    import torch

    groups = [
        {
            "params": [tensor],
            "lr": learning_rate * factor,
            "weight_decay": weight_decay / factor,
        }
        for factor, tensor in flat.groups
    ]
    options = {"betas": (0.9, 0.999), "eps": 1e-6}
    try:
        return torch.optim.AdamW(groups, fused=True, **options)
    except (RuntimeError, ValueError, TypeError):  # no fused kernel here
        return torch.optim.AdamW(groups, foreach=True, **options)


class FlatParameters:
    """The trainable parameters of a module as views of a few flat tensors.

    Each parameter's data and gradient become slices of the flat tensor of
    its learning-rate factor and of that tensor's gradient (autograd
    accumulates into an existing gradient in place), so the optimiser, the
    gradient clipping, the zeroing and the snapshots are one operation per
    factor instead of one per tensor: on the CPU, where torch has no
    multi-tensor kernels, those loops cost as much as a small flow's forward
    pass. :meth:`release` gives every parameter its own storage back.

    Parameters
    ----------
    parameters : list of torch.nn.Parameter
        The parameters to train (not empty).
    factors : dict, default=None
        ``{id(parameter): learning-rate factor}``; 1 for those not listed.
    """

    def __init__(self, parameters, factors=None):
        import torch

        self.parameters = list(parameters)
        factors = factors or {}
        by_factor = {}
        for p in self.parameters:
            by_factor.setdefault(float(factors.get(id(p), 1.0)), []).append(p)
        self.groups = []  # (factor, flat tensor)
        self._members = []  # the parameters of each group, in its order
        for factor, members in sorted(by_factor.items()):
            with torch.no_grad():
                data = torch.cat([p.detach().reshape(-1) for p in members])
            flat = torch.nn.Parameter(data)
            flat.grad = torch.zeros_like(data)
            offset = 0
            for p in members:
                size = p.numel()
                p.data = flat.data[offset : offset + size].view_as(p)
                p.grad = flat.grad[offset : offset + size].view_as(p)
                offset += size
            self.groups.append((factor, flat))
            self._members.append(members)

    @property
    def tensors(self) -> list:
        """The flat tensors, one per learning-rate factor."""
        return [flat for _, flat in self.groups]

    def zero_grad(self) -> None:
        for flat in self.tensors:
            flat.grad.zero_()

    def snapshot(self) -> list:
        return [flat.detach().clone() for flat in self.tensors]

    def restore(self, snapshot) -> None:
        for flat, saved in zip(self.tensors, snapshot):
            flat.data.copy_(saved)

    def split(self, snapshot) -> list:
        """A snapshot as one tensor per parameter, in ``parameters``' order."""
        parts = {}
        for saved, members in zip(snapshot, self._members):
            sizes = [p.numel() for p in members]
            for p, part in zip(members, saved.split(sizes)):
                parts[id(p)] = part.view_as(p)
        return [parts[id(p)] for p in self.parameters]

    def release(self) -> None:
        """Give each parameter its own storage, and no gradient."""
        for p in self.parameters:
            p.data = p.data.clone()
            p.grad = None


def train_flow(
    flow,
    X_train,
    X_val,
    *,
    max_iter: int,
    batch_size: int,
    learning_rate: float,
    weight_decay: float,
    max_grad_norm: float | None,
    shuffle: bool,
    n_iter_no_change: int,
    tol: float,
    generator,
    train_offset: float,
    val_offset: float,
    initial_nll: float,
    reporter: EpochReporter,
) -> TrainingResult:
    """Train ``flow`` in place by Adam on the mean negative log-likelihood.

    The loss a step differentiates is the batch's mean negative
    log-likelihood in bits per dimension (Glow's and BERT-flow's unit), so
    ``max_grad_norm`` means the same at every width; the curves are
    reported in nats per row. A Glow of additive couplings computes it and
    its gradients with :class:`~sklearn_isotropy.flow._step.AdditiveStep`
    (no autograd graph); any other flow through autograd.

    Parameters
    ----------
    flow : torch.nn.Module
        Bijector with ``log_prob``; initialised (ActNorm) already. The
        optimiser updates the parameters that require a gradient.
    X_train : torch.Tensor of shape (n_train, d)
        Training rows in the flow's input space.
    X_val : torch.Tensor of shape (n_val, d) or None
        Held-out rows for early stopping, or None to monitor the training loss.
    max_iter : int
        Maximum number of epochs; 0 trains nothing.
    batch_size, learning_rate, weight_decay, max_grad_norm, shuffle, \
n_iter_no_change, tol
        As the estimator's parameters.
    generator : torch.Generator
        Source of the shuffling.
    train_offset, val_offset : float
        Added to the flow's mean log-likelihood of the training and of the
        held-out rows, so that every reported figure is in nats per row of
        the original data space: the ``log|det|`` of the fixed map in front
        of the flow, plus the log-density of any coordinates that bypass it.
    initial_nll : float
        Mean negative log-likelihood (nats per row, the flow's own space) of
        the initial flow on the training rows: a batch above it by more than
        :data:`RUNAWAY_NATS_PER_DIMENSION` per dimension (or non-finite)
        stops training, and the parameters go back to the last snapshot
        taken at a batch no worse than it (the initialisation at worst).
    reporter : EpochReporter
        Progress output.

    Returns
    -------
    result : TrainingResult
        Epochs run, curves, the best epoch, and where training ran away if it
        did. With ``X_val``, the parameters of the best epoch (0 = the
        initialisation) are loaded back into ``flow``.
    """
    from ._layers import learning_rate_factors
    from ._step import AdditiveStep

    parameters = [p for p in flow.parameters() if p.requires_grad]
    # nothing to learn (a single feature has no coupling): epochs only score
    flat = None
    if parameters:
        flat = FlatParameters(parameters, learning_rate_factors(flow))
    try:
        import torch

        result = TrainingResult()
        n_train, n_dims = X_train.shape
        device = X_train.device
        early_stopping = X_val is not None
        bits = 1.0 / (n_dims * math.log(2))  # nats per row -> bits per dimension
        runaway = initial_nll + RUNAWAY_NATS_PER_DIMENSION * n_dims

        def epoch_order():
            if shuffle:
                return torch.randperm(n_train, generator=generator).to(device)
            return torch.arange(n_train, device=device)

        best_state = None
        if early_stopping:
            score = mean_log_likelihood(flow, X_val) + val_offset
            result.validation_scores = [score]
            result.best_validation_score = score
            result.best_epoch = 0
            best_state = None if flat is None else flat.snapshot()
            best = score
            reporter.write(
                f"initialisation: validation log-likelihood {score:.4f} nats/row"
            )
        else:
            best = -np.inf
        if max_iter == 0:
            return result

        optimizer = step_of = None
        if flat is not None:
            optimizer = make_optimizer(flat, learning_rate, weight_decay)
            if AdditiveStep.supports(flow):  # no autograd graph (see _step)
                step_of = AdditiveStep(flow)
        good = None if flat is None else flat.snapshot()
        good_at = "the initialisation"
        no_improvement = step = 0
        for epoch in range(1, max_iter + 1):
            start_time = time.perf_counter()
            flow.train()
            order = epoch_order()
            total, seen = 0.0, 0
            for batch, start in enumerate(range(0, n_train, batch_size)):
                xb = X_train[order[start : start + batch_size]]
                if step_of is not None:  # the loss, and its gradients written
                    nll = step_of(xb, bits)
                else:
                    nll = -flow.log_prob(xb).mean()
                value = nll.item()
                if not value <= runaway:  # non-finite, or running away
                    result.diverged = (epoch, batch + 1, value)
                    break
                # a snapshot now and then (step 0 is the initialisation)
                snapshot_due = step and step % SNAPSHOT_EVERY == 0
                if snapshot_due and value <= initial_nll and flat is not None:
                    good = flat.snapshot()
                    good_at = f"epoch {epoch}, batch {batch + 1}"
                if optimizer is not None:
                    if step_of is None:
                        flat.zero_grad()
                        (nll * bits).backward()
                    if max_grad_norm is not None:
                        torch.nn.utils.clip_grad_norm_(flat.tensors, max_grad_norm)
                    optimizer.step()
                step += 1
                total += value * xb.shape[0]
                seen += xb.shape[0]
                reporter.update(xb.shape[0])
            result.n_iter = epoch
            if seen:
                result.loss_curve.append(total / seen - train_offset)
            if result.diverged is not None:
                if not early_stopping and flat is not None:
                    flat.restore(good)
                    result.restored = good_at
                break
            if early_stopping:
                score = mean_log_likelihood(flow, X_val) + val_offset
                result.validation_scores.append(score)
                detail = f", validation log-likelihood {score:.4f}"
            else:
                score = -result.loss_curve[-1]
                detail = ""
            no_improvement = 0 if score > best + tol else no_improvement + 1
            if score > best:
                best = score
                if early_stopping:
                    result.best_validation_score = score
                    result.best_epoch = epoch
                    best_state = None if flat is None else flat.snapshot()
                    detail += " (best)"
            reporter.write(
                f"epoch {epoch}/{max_iter}: training NLL {result.loss_curve[-1]:.4f} "
                f"nats/row{detail}, {time.perf_counter() - start_time:.1f} s"
            )
            if no_improvement >= n_iter_no_change:
                result.stopped_early = epoch < max_iter
                break

        if early_stopping:
            if flat is not None:
                flat.restore(best_state)
            result.restored_best = True
            if result.diverged is not None:
                result.restored = f"the best evaluation (epoch {result.best_epoch})"
            if result.best_epoch != result.n_iter:
                reporter.write(
                    f"kept the parameters of epoch {result.best_epoch} (validation "
                    f"log-likelihood {result.best_validation_score:.4f})"
                )
        elif result.diverged is None and flat is not None:
            # the last steps are not checked by a batch: keep the fallback handy,
            # as one tensor per parameter (the flat tensor goes with training)
            result.fallback = (flat.split(good), good_at)
        return result

    finally:
        if flat is not None:
            flat.release()


def glow_config(rank: int, params: dict) -> dict:
    """Keyword arguments of the Glow for the estimator's ``get_params()``."""
    names = ("n_levels", "depth", "hidden_size", "coupling", "mixing")
    config = {"n_features": rank, **{name: params[name] for name in names}}
    if params["init"] == "whitening":
        config["output_scale"] = True
    else:  # BERT-flow's Glow: its ActNorm log-scale factor
        config["logscale_factor"] = BERT_FLOW_LOGSCALE_FACTOR
    return config


#: Glow's (and so BERT-flow's) ``logscale_factor`` of every ActNorm.
BERT_FLOW_LOGSCALE_FACTOR = 3.0
#: Rows (at most) that set the ActNorm layers with ``init="bert-flow"``.
ACTNORM_INIT_ROWS = 1024
#: Training rows (at most) on which the flow is checked before and after.
CHECK_ROWS = 4096


def fit_glow(config, U_train, U_val, *, seed, device, log_det, params):
    """Build, initialise and train the Glow of ``config``: ``(flow, result)``.

    ``U_train`` and ``U_val`` (None without early stopping) are rows after the
    fixed input map, whose ``log|det|`` is ``log_det``; their coordinates past
    ``config["n_features"]`` bypass the Glow. ``seed`` seeds the parameters,
    the rows that set ActNorm and the shuffling; ``params`` are the
    estimator's. Training on the CPU runs on one torch thread (see
    :func:`training_threads`). The flow is returned in evaluation mode.
    """
    import torch

    from ._layers import Glow

    rank = config["n_features"]
    flow = Glow.seeded(config, seed).to(device)
    X_train, X_val = (
        None
        if U is None
        else torch.from_numpy(U[:, :rank].astype(np.float32)).to(device)
        for U in (U_train, U_val)
    )
    train_offset, val_offset = (
        log_det + (0.0 if U is None else float(np.mean(bypass_log_density(U, rank))))
        for U in (U_train, U_val)
    )
    generator = torch.Generator().manual_seed(seed)
    with training_threads(device):
        if params["init"] == "whitening":
            flow.initialize_identity()  # the steps' ActNorm layers
        # data-dependent ActNorm, on a (shuffled) slice: every layer not set
        # yet (all of them with init="bert-flow", BERT-flow's initialisation;
        # the conditioners' hidden layers with init="whitening")
        n_init = min(len(X_train), max(params["batch_size"], ACTNORM_INIT_ROWS))
        rows = X_train[:n_init]
        if params["shuffle"]:
            order = torch.randperm(len(X_train), generator=generator)
            rows = X_train[order[:n_init].to(X_train.device)]
        flow.train()
        with torch.no_grad():
            flow(rows)
        # without train_scales the trained part of the flow keeps its volume
        frozen = [] if params["train_scales"] else flow.scale_parameters()
        for log_scale in frozen:
            log_scale.requires_grad_(False)

        X_check = X_train[: min(X_train.shape[0], CHECK_ROWS)]
        initial_nll, _ = latent_check(flow, X_check)
        if not np.isfinite(initial_nll):
            raise ValueError(
                "The initial flow gives non-finite log-likelihoods on the "
                "training rows: their values are too large or too spread for "
                "its float32 computations. Set standardize=True or rescale the "
                "input."
            )
        reporter = EpochReporter(
            params["verbose"],
            X_train.shape[0] * params["max_iter"],
            "GlowFlowTransformer",
        )
        try:
            result = train_flow(
                flow,
                X_train,
                X_val,
                max_iter=params["max_iter"],
                batch_size=params["batch_size"],
                learning_rate=params["learning_rate"],
                weight_decay=params["weight_decay"],
                max_grad_norm=params["max_grad_norm"],
                shuffle=params["shuffle"],
                n_iter_no_change=params["n_iter_no_change"],
                tol=params["tol"],
                generator=generator,
                train_offset=train_offset,
                val_offset=val_offset,
                initial_nll=initial_nll,
                reporter=reporter,
            )
        finally:
            reporter.close()
        _check_result(flow, X_check, result, params, initial_nll, train_offset)
    for log_scale in frozen:
        log_scale.requires_grad_(True)
    flow.eval()
    return flow, result


def _remedy(params) -> str:
    lr = params["learning_rate"]
    return (
        f"lower learning_rate (it is {lr:g}; try {lr / 10:g})"
        + ("" if params["standardize"] else ", set standardize=True")
        + (", use coupling='additive'" if params["coupling"] == "affine" else "")
    )


def _check_result(flow, X_check, result, params, initial_nll, offset) -> None:
    """Make sure the fitted flow is no runaway; warn or raise where it was one.

    After a runaway (:func:`train_flow` has already gone back to its
    fallback), and whenever the trained flow ends worse than it started on
    the check rows by more than :data:`WORSE_NATS_PER_DIMENSION` per
    dimension, the flow keeps its fallback parameters with a
    :class:`~sklearn_isotropy.exceptions.FlowTrainingWarning` that gives the
    figures. If even those are non-finite or run away,
    :class:`~sklearn_isotropy.exceptions.FlowTrainingError`.
    """
    n_dims = X_check.shape[1]
    final_nll, norm = latent_check(flow, X_check)
    expected = f"about sqrt({n_dims}) = {math.sqrt(n_dims):.1f}"
    worse = initial_nll + WORSE_NATS_PER_DIMENSION * n_dims
    if result.diverged is None:
        if final_nll <= worse:
            return
        fallback = result.fallback
        if fallback is None:  # early stopping kept its best evaluation
            return
        import torch

        parameters = [p for p in flow.parameters() if p.requires_grad]
        with torch.no_grad():
            for p, saved in zip(parameters, fallback[0]):
                p.copy_(saved)
        result.restored = fallback[1]
        kept_nll, kept_norm = latent_check(flow, X_check)
        what = (
            "Flow training made the model worse than its initialisation: the "
            "mean negative log-likelihood of the training rows rose from "
            f"{initial_nll - offset:.4g} to {final_nll - offset:.4g} nats per "
            f"row, with a median latent norm of {norm:.4g} ({expected})"
        )
    else:
        epoch, batch, value = result.diverged
        kept_nll, kept_norm = final_nll, norm
        if np.isfinite(value):
            what = (
                f"Flow training ran away at epoch {epoch}, batch {batch}: the "
                "batch's mean negative log-likelihood reached "
                f"{value - offset:.4g} nats per row, from "
                f"{initial_nll - offset:.4g} at the start"
            )
        else:
            what = (
                f"Flow training stopped at epoch {epoch}, batch {batch}: the "
                "batch's negative log-likelihood became non-finite"
            )
    if not (np.isfinite(kept_nll) and kept_nll <= initial_nll + 2 * n_dims):
        raise FlowTrainingError(
            f"{what}, and the parameters of {result.restored} give non-finite "
            f"or runaway outputs too. To fix it, {_remedy(params)}."
        )
    warn(
        f"{what}. Kept the parameters of {result.restored} (negative "
        f"log-likelihood {kept_nll - offset:.4g} nats per row, median latent "
        f"norm {kept_norm:.4g}). To train further, {_remedy(params)}.",
        FlowTrainingWarning,
    )


@contextmanager
def training_threads(device):
    """Train on one intra-op torch thread on the CPU; restore the count after.

    A training step multiplies a batch (a few hundred rows at most) by
    matrices of the flow's width: products too small for a second thread to
    pay for its synchronisation, and on a busy machine a thread that waits
    for a core makes every step wait (``benchmarks/README.md``, Flow). Other
    devices are left alone.
    """
    import torch

    if torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
