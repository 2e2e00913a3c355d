"""Array API support of the linear post-processors: namespaces and devices.

With ``sklearn.set_config(array_api_dispatch=True)`` the linear estimators
accept the arrays of any Array API namespace (torch tensors, CuPy arrays,
``array_api_strict`` arrays) and leave them on their device: the products
over the rows run there (see :func:`~._scatter_kernels.accumulate`), only
the ``d x d`` statistics come to host memory, where they are merged in
float64, and the fitted arrays go back to the device of the input. The
estimators run the same lines for every namespace, numpy's included; the
helpers here say which namespace and device an array has, and move arrays
between the host and a device.

The helpers take the namespace of an array from the array itself (the
vendored ``array_api_compat`` of scikit-learn), not from the dispatch
setting, so that an estimator fitted on a device keeps converting its
lazily computed map to that device whatever the setting of the moment.
"""

from __future__ import annotations

import numpy as np
from sklearn import get_config
from sklearn.externals import array_api_compat

__all__ = [
    "check_fitted_namespace",
    "describe",
    "float_dtype",
    "for_pickle",
    "input_namespace",
    "is_array",
    "namespace_of",
    "on_device",
    "to_host",
]


def namespace_name(xp) -> str:
    """``"torch"``, ``"numpy"``, ``"array_api_strict"``... of a namespace."""
    return xp.__name__.rsplit("array_api_compat.", 1)[-1]


def namespace_of(a):
    """``(xp, device)`` of an array, whatever the dispatch setting."""
    return array_api_compat.array_namespace(a), array_api_compat.device(a)


def input_namespace(X):
    """``(xp, device)`` of an input to keep in its own namespace, else None.

    None (``check_array`` makes numpy arrays, as usual) without
    ``array_api_dispatch``, for numpy arrays and for what is not an Array
    API array (lists, pandas frames, sparse matrices).
    """
    if not get_config()["array_api_dispatch"] or isinstance(X, np.ndarray):
        return None
    if not array_api_compat.is_array_api_obj(X):
        return None
    xp, device = namespace_of(X)
    if namespace_name(xp) == "numpy":
        return None
    return xp, device


def is_array(a) -> bool:
    """Whether ``a`` is an array of numpy or another Array API namespace."""
    return array_api_compat.is_array_api_obj(a)


def float_dtype(xp, device):
    """float64 where ``device`` supports it, else float32 (Apple MPS)."""
    supported = xp.__array_namespace_info__().dtypes(
        kind="real floating", device=device
    )
    return xp.float64 if "float64" in supported else xp.float32


def to_host(a) -> np.ndarray:
    """``a`` as a numpy array in host memory (it may share ``a``'s memory).

    Never modify the result in place: for an array already in host memory
    it can be a view of ``a`` itself.
    """
    if isinstance(a, (np.ndarray, np.generic)):
        return np.asarray(a)
    xp, device = namespace_of(a)
    name = namespace_name(xp)
    if name == "torch":
        return a.detach().cpu().numpy()
    if name == "cupy":  # pragma: no cover (no GPU here)
        return a.get()
    if name == "array_api_strict":
        return np.asarray(xp.asarray(a, device=xp.Device("CPU_DEVICE")))
    return np.asarray(a)


def on_device(a: np.ndarray, like):
    """Host array ``a`` in the namespace and on the device of array ``like``.

    Floating arrays take the widest float dtype the device supports
    (float64, else float32).
    """
    xp, device = namespace_of(like)
    a = np.array(a)  # a fresh copy: torch rejects negative strides (a[::-1])
    if a.dtype.kind == "f":
        dtype = float_dtype(xp, device)
        if dtype == xp.float32:
            a = a.astype(np.float32)
        return xp.asarray(a, dtype=dtype, device=device)
    return xp.asarray(a, device=device)


def for_pickle(value):
    """``value``, or a CPU copy of it if it is a torch tensor on an accelerator."""
    if type(value).__module__.startswith("torch") and hasattr(value, "cpu"):
        if getattr(value, "device", None) is not None and value.device.type != "cpu":
            return value.cpu()
    return value


def describe(a) -> str:
    """``"torch tensors on cuda:0"``, ``"numpy arrays"``: for error messages."""
    if a is None or isinstance(a, np.ndarray):
        return "numpy arrays"
    try:
        xp, device = namespace_of(a)
    except TypeError:
        return f"{type(a).__module__}.{type(a).__qualname__} objects"
    name = namespace_name(xp)
    kind = "tensors" if name == "torch" else "arrays"
    return f"{name} {kind} on device {device!r}"


def check_fitted_namespace(estimator, X, method: str) -> None:
    """Raise unless ``X`` has the namespace and device of the fitting input.

    ``estimator._fitted_on`` is a 0-size array in the namespace and on the
    device of the rows it was fitted on (None for numpy). Rows of another
    namespace or device are an error naming both, never a silent copy that
    would change the type of the result.
    """
    fitted = estimator.__dict__.get("_fitted_on")
    target = input_namespace(X)
    if fitted is None and target is None:
        return
    if fitted is not None and target is not None:
        xp, device = namespace_of(fitted)
        if namespace_name(xp) == namespace_name(target[0]) and device == target[1]:
            return
    name = type(estimator).__name__
    dispatch = get_config()["array_api_dispatch"]
    if fitted is None:
        todo = (
            "Fit on arrays of the namespace and device of X, or pass numpy "
            "arrays (e.g. a torch tensor's .cpu().numpy())."
        )
    elif not dispatch:
        todo = (
            "Turn Array API dispatch on (sklearn.set_config("
            "array_api_dispatch=True)) to pass arrays of the fitting namespace, "
            "or call estimator.to_numpy() for a copy that takes numpy arrays."
        )
    else:
        todo = (
            "Move X to the namespace and device of the fit, or call "
            "estimator.to_numpy() for a copy that takes numpy arrays."
        )
    got = describe(X) if target is not None else "numpy arrays"
    off = "" if dispatch else " (array_api_dispatch is off)"
    raise ValueError(
        f"Inputs passed to {name}.{method}() must use the same namespace and the "
        f"same device as those passed to fit(): it was fitted on "
        f"{describe(fitted)} and got {got}{off}. {todo}"
    )
