"""Training of the flow: Adam on the exact negative log-likelihood.

The scikit-learn wrapper (:mod:`sklearn_isotropy.flow._glow`) prepares the
rows (standardised, whitened); :func:`fit_glow` builds and initialises the
Glow, trains it and says what went wrong if training did; :func:`train_flow`
runs the epochs, monitors them (training loss or held-out log-likelihood),
keeps the best parameters with early stopping, and stops at the first
non-finite loss or gradient without applying it. torch is imported inside
the functions, when they run.

Progress goes to ``sys.stderr`` through :class:`EpochReporter`, which writes
its lines with ``tqdm.write`` when tqdm is installed, so they never break into
a progress bar that is being drawn (ours or another one).
"""

from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .._utils import warn
from ..exceptions import FlowTrainingWarning
from ._input import bypass_log_density
from ._runtime import CHUNK

__all__ = [
    "FLOW_PRESETS",
    "EpochReporter",
    "TrainingResult",
    "fit_glow",
    "glow_config",
    "mean_log_likelihood",
    "train_flow",
]

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
    diverged: tuple | None = None  # (epoch, batch, "loss" | "gradient")
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


def train_flow(
    flow,
    X_train,
    X_val,
    *,
    max_iter: int,
    batch_size: int,
    learning_rate: float,
    shuffle: bool,
    n_iter_no_change: int,
    tol: float,
    generator,
    train_offset: float,
    val_offset: float,
    reporter: EpochReporter,
) -> TrainingResult:
    """Train ``flow`` in place by Adam on the mean negative log-likelihood.

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
    batch_size, learning_rate, shuffle, n_iter_no_change, tol
        As the estimator's parameters.
    generator : torch.Generator
        Source of the shuffling.
    train_offset, val_offset : float
        Added to the flow's mean log-likelihood of the training and of the
        held-out rows, so that every reported figure is in nats per row of
        the original data space: the ``log|det|`` of the fixed map in front
        of the flow, plus the log-density of any coordinates that bypass it.
    reporter : EpochReporter
        Progress output.

    Returns
    -------
    result : TrainingResult
        Epochs run, curves, the best epoch, and where training diverged if it
        did. With ``X_val``, the parameters of the best epoch (0 = the
        initialisation) are loaded back into ``flow``.
    """
    import torch

    result = TrainingResult()
    n_train = X_train.shape[0]
    device = X_train.device
    parameters = [p for p in flow.parameters() if p.requires_grad]
    early_stopping = X_val is not None

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
        best_state = copy.deepcopy(flow.state_dict())
        best = score
        reporter.write(
            f"initialisation: validation log-likelihood {score:.4f} nats/row"
        )
    else:
        best = -np.inf
    if max_iter == 0:
        return result

    # nothing to learn (a single feature has no coupling): epochs only score
    optimizer = torch.optim.Adam(parameters, lr=learning_rate) if parameters else None
    no_improvement = 0
    for epoch in range(1, max_iter + 1):
        start_time = time.perf_counter()
        flow.train()
        order = epoch_order()
        total, seen = 0.0, 0
        for batch, start in enumerate(range(0, n_train, batch_size)):
            xb = X_train[order[start : start + batch_size]]
            loss = -flow.log_prob(xb).mean()
            if not torch.isfinite(loss):
                result.diverged = (epoch, batch + 1, "loss")
                break
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(parameters, math.inf)
                if not torch.isfinite(grad_norm):
                    result.diverged = (epoch, batch + 1, "gradient")
                    break
                optimizer.step()
            total += loss.item() * xb.shape[0]
            seen += xb.shape[0]
            reporter.update(xb.shape[0])
        result.n_iter = epoch
        if seen:
            result.loss_curve.append(total / seen - train_offset)
        if result.diverged is not None:
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
                best_state = copy.deepcopy(flow.state_dict())
                detail += " (best)"
        reporter.write(
            f"epoch {epoch}/{max_iter}: training NLL {result.loss_curve[-1]:.4f} "
            f"nats/row{detail}, {time.perf_counter() - start_time:.1f} s"
        )
        if no_improvement >= n_iter_no_change:
            result.stopped_early = epoch < max_iter
            break

    if best_state is not None:
        flow.load_state_dict(best_state)
        result.restored_best = True
        if result.best_epoch != result.n_iter:
            reporter.write(
                f"kept the parameters of epoch {result.best_epoch} (validation "
                f"log-likelihood {result.best_validation_score:.4f})"
            )
    return result


def glow_config(rank: int, params: dict) -> dict:
    """Keyword arguments of the Glow for the estimator's ``get_params()``."""
    names = ("n_levels", "depth", "hidden_size", "coupling")
    config = {"n_features": rank, **{name: params[name] for name in names}}
    if params["init"] == "whitening":
        config["output_scale"] = True
    return config


def fit_glow(config, U_train, U_val, *, seed, device, log_det, params):
    """Build, initialise and train the Glow of ``config``: ``(flow, result)``.

    ``U_train`` and ``U_val`` (None without early stopping) are rows after the
    fixed input map, whose ``log|det|`` is ``log_det``; their coordinates past
    ``config["n_features"]`` bypass the Glow. ``seed`` seeds the parameters,
    the rows that set ActNorm and the shuffling; ``params`` are the
    estimator's. The flow is returned in evaluation mode.
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
    if params["init"] == "whitening":
        flow.initialize_identity()
    else:  # BERT-flow: data-dependent ActNorm on a (shuffled) slice
        n_init = min(len(X_train), max(params["batch_size"], 1024))
        rows = X_train[:n_init]
        if params["shuffle"]:
            rows = X_train[torch.randperm(len(X_train), generator=generator)[:n_init]]
        flow.train()
        with torch.no_grad():
            flow(rows)

    X_check = X_train[: min(X_train.shape[0], 4096)]
    initial_nll = -mean_log_likelihood(flow, X_check)
    if not np.isfinite(initial_nll):
        raise ValueError(
            "The initial flow gives non-finite log-likelihoods on the "
            "training rows: their values are too large or too spread for "
            "its float32 computations. Set standardize=True or rescale the "
            "input."
        )
    if params["init"] == "whitening":
        flow.fix_mixing()  # the whitening is the best linear map already
    reporter = EpochReporter(
        params["verbose"], X_train.shape[0] * params["max_iter"], "GlowFlowTransformer"
    )
    try:
        result = train_flow(
            flow,
            X_train,
            X_val,
            max_iter=params["max_iter"],
            batch_size=params["batch_size"],
            learning_rate=params["learning_rate"],
            shuffle=params["shuffle"],
            n_iter_no_change=params["n_iter_no_change"],
            tol=params["tol"],
            generator=generator,
            train_offset=train_offset,
            val_offset=val_offset,
            reporter=reporter,
        )
    finally:
        reporter.close()
    flow.eval()
    lr = params["learning_rate"]
    if result.diverged is not None:
        _check_diverged(flow, X_check, result, params)
        return flow, result
    final_nll = -mean_log_likelihood(flow, X_check)
    # noise-level changes are normal when the initial flow is already
    # about right; a blow-up is far larger
    if not final_nll <= initial_nll + 0.1 * X_check.shape[1]:
        warn(
            "Flow training made the model worse than its initialisation: the "
            "mean negative log-likelihood of the training rows rose from "
            f"{initial_nll - train_offset:.4g} to "
            f"{final_nll - train_offset:.4g} nats per row, so training was "
            f"unstable. Lower learning_rate (it is {lr:g}; try {lr / 10:g})"
            + ("" if params["standardize"] else " or set standardize=True")
            + ".",
            FlowTrainingWarning,
        )
    return flow, result


def _check_diverged(flow, X_check, result, params):
    """Handle a training stopped at a non-finite step.

    Warn, or raise if the parameters kept give non-finite outputs too.
    """
    import torch

    epoch, batch, what = result.diverged
    lr = params["learning_rate"]
    remedy = (
        f"lower learning_rate (it is {lr:g}; try {lr / 10:g})"
        + ("" if params["standardize"] else ", set standardize=True")
        + (", use coupling='additive'" if params["coupling"] == "affine" else "")
    )
    kept = (
        f"the parameters of the best evaluation (epoch {result.best_epoch})"
        if result.restored_best
        else "the last parameters with a finite loss"
    )
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
