"""The on-disk cache of distilled token tables.

Where and what: ``$SKLEARN_ISOTROPY_STATIC_CACHE`` (default
``$XDG_CACHE_HOME/sklearn_isotropy/static``, ``~/.cache/...`` without it)
holds one folder per key, ``table-<key>/``, with the table as
``table.npy`` (float32), the sha256 of that file's bytes as
``table.npy.sha256`` and, for people, ``spec.json`` (what the key was made
of). The key hashes the encoder's fingerprint (every weight, the
configuration and the tokenizer: ``LoadedEncoder.fingerprint`` in
``text/_loading.py``), the distillation pooling and the distillation
version.

What it guarantees, as the cache of exported ONNX encoders does:

- a table is verified before use: its bytes must have the stored digest,
  and be a finite float32 array of the expected shape;
- a folder appears all at once (written in a staging folder beside it and
  renamed: ``_utils.publish_directory``), so a kill never leaves a table
  without its digest, and files get the user's umask;
- a cache that cannot be written is still read, and a table computed
  without it is returned with one :class:`~sklearn_isotropy.exceptions.
  CacheWarning` saying it was not stored;
- a damaged table (digest mismatch, unreadable, a folder without the
  table, a file in the folder's place) is a ``CacheWarning`` and a fresh
  distillation, which replaces it (atomically) where the cache is
  writable; a cache directory that is a file is a ``CacheWarning`` too,
  and a table that cannot be stored is never taken for one another
  process stored.
"""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np

from ..._utils import cache_home, publish_directory, warn
from ...exceptions import CacheWarning

#: Environment variable naming the directory of the distilled tables.
CACHE_ENV = "SKLEARN_ISOTROPY_STATIC_CACHE"

_TABLE, _DIGEST, _SPEC = "table.npy", "table.npy.sha256", "spec.json"


def cache_dir():
    """Where distilled tables are kept.

    ``$SKLEARN_ISOTROPY_STATIC_CACHE``, else
    ``$XDG_CACHE_HOME/sklearn_isotropy/static`` (``~/.cache/...`` by default).
    """
    return cache_home(CACHE_ENV, "static")


def entry_path(spec):
    """The folder of the table of ``spec`` (a JSON-serialisable dict)."""
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return cache_dir() / f"table-{key[:32]}"


def _read(folder, shape):
    """The verified table in ``folder``; None if absent; ValueError if damaged.

    An empty folder counts as absent (a table is published into it as it
    is); a file in its place, or a folder holding neither the table nor its
    digest (``spec.json`` alone, say), is damaged: a publication is atomic,
    so no writer ever leaves one.
    """
    if not folder.exists():
        return None
    if not folder.is_dir():
        raise ValueError("it is a file, not a folder")
    if not (folder / _TABLE).exists() and not (folder / _DIGEST).exists():
        if not any(folder.iterdir()):
            return None
        raise ValueError(f"it holds neither {_TABLE} nor {_DIGEST}")
    try:
        data = (folder / _TABLE).read_bytes()
        expected = (folder / _DIGEST).read_text(encoding="ascii").strip()
    except FileNotFoundError as exc:
        raise ValueError(f"{exc.filename} is missing") from None
    if hashlib.sha256(data).hexdigest() != expected:
        raise ValueError("its bytes do not have the stored sha256")
    table = np.load(io.BytesIO(data), allow_pickle=False)
    if table.dtype != np.float32 or table.shape != tuple(shape):
        raise ValueError(f"it holds a {table.dtype} array of shape {table.shape}")
    if not np.all(np.isfinite(table)):
        raise ValueError("it holds non-finite values")
    return table


def _write(folder, table, spec, overwrite):
    buffer = io.BytesIO()
    np.save(buffer, table, allow_pickle=False)
    data = buffer.getvalue()

    def write(directory):
        (directory / _TABLE).write_bytes(data)
        (directory / _DIGEST).write_text(
            hashlib.sha256(data).hexdigest() + "\n", encoding="ascii"
        )
        (directory / _SPEC).write_text(
            json.dumps({**spec, "shape": list(table.shape)}, indent=2) + "\n",
            encoding="utf-8",
        )

    publish_directory(folder, write, overwrite=overwrite, what="the static cache")


def cached_table(spec, shape, compute):
    """The table of ``spec``, from the cache or computed.

    Read and verified from the cache, or ``compute()``d and stored.

    ``shape`` is the shape a valid table has.
    """
    folder = entry_path(spec)
    if folder.parent.exists() and not folder.parent.is_dir():
        warn(
            f"The cache of distilled tables, {folder.parent}, is a file, not a "
            "directory: the table is distilled without being cached, and every "
            f"fit distills again. Set {CACHE_ENV} to a directory (or move the "
            "file away).",
            CacheWarning,
        )
        return np.ascontiguousarray(compute(), dtype=np.float32)
    damaged = False
    try:
        table = _read(folder, shape)
    except (OSError, ValueError) as exc:
        damaged = True
        warn(
            f"Ignoring the damaged distilled table in {folder} ({exc}); "
            "distilling it again and replacing it.",
            CacheWarning,
        )
    else:
        if table is not None:
            return table
    table = np.ascontiguousarray(compute(), dtype=np.float32)
    try:
        _write(folder, table, spec, overwrite=damaged)
    except OSError as exc:
        if isinstance(exc, FileExistsError) and _stored_meanwhile(folder, shape):
            return table  # another process stored it meanwhile
        warn(
            f"Cannot store the distilled table in {folder} ({exc}); it is used "
            f"without being cached, so the next fit distills again. Set "
            f"{CACHE_ENV} to a writable directory.",
            CacheWarning,
        )
    return table


def _stored_meanwhile(folder, shape):
    """Whether ``folder`` now holds a valid table (another process's)."""
    try:
        return _read(folder, shape) is not None
    except (OSError, ValueError):
        return False
