"""Torch devices: one resolution rule and one set of messages for the package."""

from __future__ import annotations

from ._optional import import_optional


def resolve_device(
    device, *, owner: str, extra: str | None = None, allow_fallback: bool = False
):
    """Return ``(torch.device, fallback_reason)`` for a user's device string.

    ``"auto"`` is CUDA, then MPS, then the CPU; ``owner`` names who asked in
    the messages, and ``extra`` the extra of ``sklearn-isotropy`` that
    installs what the owner needs when torch is missing (``"text"`` for the
    vectorizers, whose ``transformers`` is not in ``[flow]``; torch's own
    extra, ``"flow"``, when None). With ``allow_fallback``, a valid device that
    is not available here (fitted on CUDA, loaded on a CPU-only machine)
    gives the CPU and the reason instead of an error; the reason is None
    otherwise.
    """
    torch = import_optional("torch", purpose=owner, extra=extra)
    if isinstance(device, str) and device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda"), None
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps"), None
        return torch.device("cpu"), None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{owner}: device={device!r} is not a device torch understands; use "
            "'cpu', 'cuda', 'cuda:<n>', 'mps' or 'auto'."
        ) from exc
    if dev.type not in {"cpu", "cuda", "mps"}:
        raise ValueError(
            f"{owner}: device={device!r} is not supported; use 'cpu', 'cuda', "
            "'mps' or 'auto'."
        )
    missing = None
    if dev.type == "cuda" and not torch.cuda.is_available():
        missing = "torch sees no CUDA device"
    elif dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            missing = "MPS is not available"
    if missing is None:
        return dev, None
    if allow_fallback:
        return torch.device("cpu"), f"device={device!r} was requested but {missing}"
    raise ValueError(
        f"{owner}: device={device!r} was requested but {missing}; use "
        "device='cpu' or device='auto'."
    )
