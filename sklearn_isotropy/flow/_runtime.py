"""The fitted flow at work: chunked inference, the export module, the pickle.

Rows come in the Glow's input space (:mod:`._input`) and are run in chunks,
in their own dtype. torch is imported inside the functions, when they run.
"""

from __future__ import annotations

import copy
import io

import numpy as np

from .._utils import import_optional, resolve_device, warn
from ..exceptions import DensityUnderflowWarning, DeviceWarning
from ._input import bypass_log_density

CHUNK = 8192  # rows per forward pass


def import_torch():
    """torch, or an ``ImportError`` that names the ``flow`` extra."""
    return import_optional("torch", purpose="GlowFlowTransformer", extra="flow")


def run_flow(flow, U: np.ndarray, method: str, rank: int) -> np.ndarray:
    """``method`` (forward, inverse, log_prob) of ``flow`` on the rows ``U``.

    The Glow sees the first ``rank`` coordinates (on a float64 copy for
    float64 rows); the others bypass it. The output has the dtype of ``U``;
    the log-density is float64, the bypassing coordinates' included.
    """
    torch = import_torch()
    device = next(flow.parameters()).device
    if U.dtype == np.float64:
        flow = copy.deepcopy(flow).double()
    apply = {
        "forward": lambda u: flow(u)[0],
        "inverse": lambda u: flow.inverse(u)[0],
        "log_prob": flow.log_prob,
    }[method]
    head, outputs = U[:, :rank], []
    with torch.no_grad():
        for start in range(0, U.shape[0], CHUNK):
            u = torch.from_numpy(np.ascontiguousarray(head[start : start + CHUNK]))
            outputs.append(apply(u.to(device)).cpu().numpy())
    out = np.concatenate(outputs, axis=0)
    if method == "log_prob":
        return out.astype(np.float64) + bypass_log_density(U, rank)
    if rank < U.shape[1]:
        out = np.concatenate([out, U[:, rank:].astype(out.dtype)], axis=1)
    return out


def log_likelihood(flow, U: np.ndarray, rank: int, log_det: float) -> np.ndarray:
    """Log-density of each row of ``U`` (float64), plus ``log_det``.

    Rows are scored independently: one too far to compute (non-finite in
    ``U`` or in its dtype's log-likelihood) scores ``-inf``, with one
    :class:`~sklearn_isotropy.exceptions.DensityUnderflowWarning`, and must
    not take the others with it.
    """
    log_prob = np.full(U.shape[0], -np.inf)
    finite = np.isfinite(U).all(axis=1)
    if finite.any():
        rows = U if finite.all() else U[finite]
        log_prob[finite] = run_flow(flow, rows, "log_prob", rank) + log_det
    far = ~np.isfinite(log_prob)
    if far.any():
        log_prob[far] = -np.inf
        retry = (
            "Score them in float64 (X.astype(numpy.float64)) for finite "
            "values, and check"
            if U.dtype == np.float32
            else "Check"
        )
        warn(
            f"{int(far.sum())} of {len(log_prob)} rows lie so far from the "
            "fitted density that their log-likelihood overflows "
            f"{U.dtype.name}; they score -inf. {retry} the input's "
            "scale (it should look like the training rows).",
            DensityUnderflowWarning,
        )
    return log_prob


def check_finite(out: np.ndarray, what: str) -> np.ndarray:
    """``out``, or a ``ValueError`` if finite input gave non-finite values."""
    if not np.all(np.isfinite(out)):
        raise ValueError(
            f"The flow produced non-finite values in {what} for finite input: "
            "some rows lie far outside the range of the training data. Check "
            "the input's scale (it should look like the training rows)."
        )
    return out


def latent_map(estimator, dtype):
    """The ``LatentMap`` of a fitted ``GlowFlowTransformer``, in ``dtype``.

    Made of copies, on the CPU, frozen, in evaluation mode: changing the
    module leaves the estimator as it is.
    """
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
    torch = import_torch()
    from ._layers import LatentMap

    flow = copy.deepcopy(estimator.flow_)
    flow = flow.to(device="cpu", dtype=getattr(torch, dtype.name))
    w = estimator.whitener_
    return LatentMap(
        flow.requires_grad_(False),
        torch.tensor(estimator.mean_),
        torch.tensor(estimator.scale_),
        None if w is None else torch.tensor(w.mean_),
        None if w is None else torch.tensor(w.whitening_),
        rank=estimator.rank_,
    ).eval()


def dump_flow(flow) -> bytes:
    """The ``state_dict`` of ``flow`` as CPU tensors, in ``torch.save`` bytes."""
    torch = import_torch()
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in flow.state_dict().items()}, buffer)
    return buffer.getvalue()


def load_flow(payload: bytes, config: dict, *, device: str):
    """The Glow of ``config`` with the state of :func:`dump_flow`, in eval mode.

    Loaded with ``weights_only=True``; on ``device``, or on the CPU with a
    :class:`~sklearn_isotropy.exceptions.DeviceWarning` where it is missing.
    """
    torch = import_torch()
    from ._layers import Glow

    state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    flow = Glow.seeded(config, seed=None)
    try:
        flow.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(
            "This GlowFlowTransformer was pickled by a version of "
            "sklearn-isotropy whose flow layers differ from this one's "
            f"({str(exc).splitlines()[0]}); fit it again with this version."
        ) from None
    flow.eval()
    owner = "GlowFlowTransformer"
    resolved, fallback = resolve_device(device, owner=owner, allow_fallback=True)
    if fallback is not None:
        warn(
            f"This {owner} was set up for device={device!r} but "
            f"{fallback.split(' but ', 1)[1]}; it runs on the CPU instead. "
            "Call set_params(device='cpu') to silence this warning.",
            DeviceWarning,
        )
    return flow.to(resolved)
