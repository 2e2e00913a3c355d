"""Torch devices: one resolution rule and one set of messages for the package."""

from __future__ import annotations

from ._optional import import_optional


def resolve_device(device, *, owner: str, allow_fallback: bool = False):
    """Turn a user's device string into a ``torch.device`` that is available.

    Parameters
    ----------
    device : str or torch.device
        ``"cpu"``, ``"cuda"``, ``"cuda:<n>"``, ``"mps"`` or ``"auto"`` (CUDA,
        then MPS, then the CPU).
    owner : str
        Who asked, for the messages (``"BertPoolingVectorizer"``).
    allow_fallback : bool, default=False
        When the device is valid but not available here (a model fitted on
        CUDA and loaded on a CPU-only machine), return the CPU and the reason
        instead of raising.

    Returns
    -------
    device : torch.device
    fallback_reason : str or None
        Why the CPU was used instead of ``device`` (only with
        ``allow_fallback``), else None.
    """
    torch = import_optional("torch", purpose=owner)
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
