"""Where exported encoder graphs are kept: one file per graph, on disk.

A graph is named by the model's fingerprint (every weight, the
configuration, the tokenizer), the pooling and the format version
(:meth:`~._onnx.EncoderSpec.file_name`), so it is exported once per model
and machine and again when the model changes. Each is written in a staging
folder and renamed into place, so a killed export leaves no graph behind.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from .._utils import warn
from ..exceptions import CacheWarning
from . import _onnx

#: Environment variable naming the directory of the exported models.
CACHE_ENV = "SKLEARN_ISOTROPY_ONNX_CACHE"

_STAGING = ".staging-"
# an export of even a large encoder takes minutes, not a day
_ABANDONED_AFTER_S = 24 * 3600
_UNWRITABLE = {}  # cache directory -> per-process fallback directory
_LOCK = threading.Lock()


def cache_dir():
    """Where exported encoders are kept: ``$SKLEARN_ISOTROPY_ONNX_CACHE``, else
    ``$XDG_CACHE_HOME/sklearn_isotropy/onnx`` (``~/.cache/...`` by default)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path("~", ".cache").expanduser()
    return Path(base) / "sklearn_isotropy" / "onnx"


def _writable_dir():
    """The cache directory, or a per-process one if it cannot be written."""
    directory = cache_dir()
    with _LOCK:
        if str(directory) in _UNWRITABLE:
            return _UNWRITABLE[str(directory)]
        try:
            directory.mkdir(parents=True, exist_ok=True)
            probe = directory / f".probe-{uuid.uuid4().hex}"
            probe.touch()
            probe.unlink()
        except OSError as exc:
            fallback = Path(tempfile.mkdtemp(prefix="sklearn_isotropy_onnx_"))
            atexit.register(shutil.rmtree, fallback, ignore_errors=True)
            _UNWRITABLE[str(directory)] = fallback
            warn(
                f"Cannot write exported ONNX encoders to {directory} ({exc}); they "
                "are kept in a temporary directory until this process ends, so "
                f"each process exports again. Set {CACHE_ENV} to a writable "
                "directory.",
                CacheWarning,
            )
            return fallback
    return directory


def _remove_abandoned(directory):
    """Remove staging directories of exports killed long ago (not running)."""
    limit = time.time() - _ABANDONED_AFTER_S
    for staging in directory.glob(_STAGING + "*"):
        try:
            if staging.stat().st_mtime < limit:
                shutil.rmtree(staging, ignore_errors=True)
        except OSError:  # removed by another process meanwhile
            pass


def load(loaded, spec):
    """``(path, data)``: the graph of ``spec`` on ``loaded``'s current weights.

    Read from the cache, or exported (and quantised, for int8) now.
    """
    _onnx.import_onnx_deps()
    directory = _writable_dir()
    path = directory / spec.file_name(loaded.fingerprint())
    if path.is_file():
        return path, path.read_bytes()
    _remove_abandoned(directory)
    staging = Path(tempfile.mkdtemp(prefix=_STAGING, dir=directory))
    try:
        if spec.precision == "fp32":
            data = _onnx.export(loaded, spec, staging / "model.onnx")
        else:
            _, fp32 = load(loaded, replace(spec, precision="fp32"))
            data = _onnx.quantize(fp32, staging / "model.onnx")
        os.replace(staging / "model.onnx", path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path, data
