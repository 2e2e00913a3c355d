"""Training of the flow: Adam on the exact negative log-likelihood.

The scikit-learn wrapper (:mod:`sklearn_isotropy.flow._glow`) prepares the
rows (standardised, whitened) and the module; :func:`train_flow` runs the
epochs, monitors them (training loss or held-out log-likelihood), keeps the
best parameters with early stopping, and stops at the first non-finite loss or
gradient without applying it. Nothing here imports torch: the caller passes
the module in.

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

__all__ = ["EpochReporter", "TrainingResult", "mean_log_likelihood", "train_flow"]

_CHUNK = 8192  # rows per forward pass when evaluating


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


def mean_log_likelihood(torch, flow, X) -> float:
    """Mean ``flow.log_prob`` of the rows of the tensor ``X`` (eval mode)."""
    flow.eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, X.shape[0], _CHUNK):
            total += float(flow.log_prob(X[start : start + _CHUNK]).sum())
    return total / X.shape[0]


def train_flow(
    torch,
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
    parameters=None,
) -> TrainingResult:
    """Train ``flow`` in place by Adam on the mean negative log-likelihood.

    Parameters
    ----------
    torch : module
        The torch module (imported by the caller).
    flow : torch.nn.Module
        Bijector with ``log_prob``; initialised (ActNorm) already.
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
    parameters : list of torch.nn.Parameter, default=None
        What the optimiser updates; every parameter requiring a gradient when
        None.

    Returns
    -------
    result : TrainingResult
        Epochs run, curves, the best epoch, and where training diverged if it
        did. With ``X_val``, the parameters of the best epoch (0 = the
        initialisation) are loaded back into ``flow``.
    """
    result = TrainingResult()
    n_train = X_train.shape[0]
    device = X_train.device
    if parameters is None:
        parameters = [p for p in flow.parameters() if p.requires_grad]
    early_stopping = X_val is not None

    def epoch_order():
        if shuffle:
            return torch.randperm(n_train, generator=generator).to(device)
        return torch.arange(n_train, device=device)

    best_state = None
    if early_stopping:
        score = mean_log_likelihood(torch, flow, X_val) + val_offset
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
            score = mean_log_likelihood(torch, flow, X_val) + val_offset
            result.validation_scores.append(score)
            detail = f", validation log-likelihood {score:.4f}"
        else:
            score = -result.loss_curve[-1]
            detail = ""
        if score > best + tol:
            no_improvement = 0
        else:
            no_improvement += 1
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
