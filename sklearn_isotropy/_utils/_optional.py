"""Optional dependencies: imported where used, with the extra that installs them."""

from __future__ import annotations

import importlib
import sys

# the pip extra that installs each optional top-level package
_EXTRAS = {
    "torch": "flow",
    "transformers": "text",
    "tqdm": "text",
    "matplotlib": "plot",
    "dask": "dask",
    "onnx": "export",
    "onnxruntime": "export",
    "skl2onnx": "export",
    "faiss": "export",
    "sentence_transformers": "export",
}


def import_optional(name: str, *, purpose: str, extra: str | None = None):
    """Import module ``name`` or raise an ImportError saying how to install it.

    Parameters
    ----------
    name : str
        Module to import, e.g. ``"torch"`` or ``"matplotlib.pyplot"``.
    purpose : str
        What needs it, for the message: ``"GlowFlowTransformer"``.
    extra : str, default=None
        The extra of ``sklearn-isotropy`` that installs it; looked up from
        the top-level package name when None.
    """
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        top = name.split(".", 1)[0]
        extra = extra or _EXTRAS.get(top, "all")
        raise ImportError(
            f"{purpose} needs {top}, which is not installed or failed to import "
            f'({exc}). Install it with: pip install "sklearn-isotropy[{extra}]"'
        ) from exc


def is_dask_collection(obj) -> bool:
    """True for a dask collection, without importing dask.

    A dask collection can only exist once dask has been imported, so when
    ``dask`` is absent from ``sys.modules`` the answer is False at no cost.
    """
    dask = sys.modules.get("dask")
    if dask is None:
        return False
    is_collection = getattr(dask, "is_dask_collection", None)
    return bool(is_collection is not None and is_collection(obj))
