"""Where exported encoder graphs are kept: files checked whenever they are read.

A graph's file is ``<stem>-<sha256>-<precision>.onnx``: the stem hashes the
model's fingerprint (every weight, the configuration, the tokenizer), the
pooling and the format version (:meth:`~._encoders.EncoderSpec.stem`), so a
graph is exported once per model and machine and again when the model
changes; the sha256 is that of the file's bytes. A file is served only if
its bytes match it, and the bytes checked are the bytes run, so a damaged,
truncated or replaced file is a :class:`~sklearn_isotropy.exceptions.\
CacheWarning` and a new export, never a wrong embedding. Each graph is
written in a staging folder of this package and renamed into place, so a
killed export leaves no graph behind.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

from .._utils import cache_home, warn, write_files
from ..exceptions import CacheWarning
from . import _onnx_graph

#: Environment variable naming the directory of the exported models.
CACHE_ENV = "SKLEARN_ISOTROPY_ONNX_CACHE"

# staging folders of this package (others' are never touched)
_STAGING = ".sklearn_isotropy-staging-"
# an export of even a large encoder takes minutes, not a day
_ABANDONED_AFTER_S = 24 * 3600
_UNWRITABLE = {}  # cache directory -> per-process fallback directory
_LOCK = threading.Lock()


def cache_dir():
    """Where exported encoders are kept.

    ``$SKLEARN_ISOTROPY_ONNX_CACHE``, else
    ``$XDG_CACHE_HOME/sklearn_isotropy/onnx`` (``~/.cache/...`` by default).
    """
    return cache_home(CACHE_ENV, "onnx")


def load(loaded, spec):
    """``(path, data)``: the graph of ``spec`` on ``loaded``'s current weights.

    A sound file of the cache directory (even read-only) or of this process's
    fallback directory is read, else the graph is exported (int8: quantised
    from a sound fp32 graph) now.
    """
    _onnx_graph.import_onnx_deps()
    stem = spec.stem(loaded.fingerprint())
    directory = cache_dir()
    for place in (directory, _UNWRITABLE.get(str(directory))):
        found = place and _read_sound(place, stem, spec.precision)
        if found:
            return found
    return _build(loaded, spec, stem)


def _read_sound(directory, stem, precision):
    """``(path, data)`` of the first cached file whose bytes match its name."""
    suffix = f"-{precision}.onnx"
    for path in sorted(directory.glob(f"{stem}-*{suffix}")):
        digest = path.name[len(stem) + 1 : -len(suffix)]
        try:
            data = path.read_bytes()
        except OSError as exc:
            problem = "it is a directory" if path.is_dir() else str(exc)
        else:
            if hashlib.sha256(data).hexdigest() == digest:
                return path, data
            problem = "its bytes do not match the sha256 in its name: damaged"
            with contextlib.suppress(OSError):
                path.unlink()
        warn(
            f"Ignoring the exported encoder {path}, which sklearn-isotropy cannot "
            f"load ({problem}); exporting it again.",
            CacheWarning,
        )
    return None


def _build(loaded, spec, stem):
    """Export (or quantise) the graph into the cache; ``(path, data)``."""
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(directory)
        staging = Path(tempfile.mkdtemp(prefix=_STAGING, dir=directory))
    except OSError as exc:
        directory = _fallback(directory, exc)
        staging = Path(tempfile.mkdtemp(prefix=_STAGING, dir=directory))
    try:
        if spec.precision == "fp32":
            data = _onnx_graph.export(loaded, spec, staging / "model.onnx")
        else:
            _, fp32 = load(loaded, replace(spec, precision="fp32"))
            data = _onnx_graph.quantize(fp32, staging / "model.onnx")
        name = f"{stem}-{hashlib.sha256(data).hexdigest()}-{spec.precision}.onnx"
        path = directory / name
        try:  # renamed in from the staging folder, then into place
            write_files(directory, {name: partial(os.replace, staging / "model.onnx")})
        except OSError as exc:  # a directory in the way, say
            warn(
                f"Cannot keep the exported encoder as {path} ({exc.strerror}); it "
                "is used from memory and exported again by the next process. "
                "Remove what is at that path.",
                CacheWarning,
            )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path, data


def _fallback(directory, exc):
    """A per-process directory for the exports ``directory`` cannot take."""
    with _LOCK:
        if str(directory) not in _UNWRITABLE:
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
        return _UNWRITABLE[str(directory)]


def _remove_abandoned(directory):
    """Remove this package's staging folders of exports killed long ago."""
    limit = time.time() - _ABANDONED_AFTER_S
    for staging in directory.glob(_STAGING + "*"):
        with contextlib.suppress(OSError):  # removed by another process
            if staging.stat().st_mtime < limit:
                shutil.rmtree(staging, ignore_errors=True)
