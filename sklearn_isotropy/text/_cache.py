"""The per-sentence embedding cache behind ``BertPoolingVectorizer(memory=...)``."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)


def fingerprint(loaded):
    """A stable digest of the weights and tokenizer, computed once per model."""
    if loaded.fingerprint is not None:
        return loaded.fingerprint
    digest = hashlib.sha256()
    model, tokenizer = loaded.model, loaded.tokenizer
    digest.update(type(model).__name__.encode())
    digest.update(model.config.to_json_string(use_diff=False).encode())
    for name, param in model.state_dict().items():
        flat = param.detach().reshape(-1)
        step = max(1, flat.numel() // 512)
        sample = flat[::step].to("cpu").float().numpy()
        digest.update(f"{name}{tuple(param.shape)}".encode())
        digest.update(np.ascontiguousarray(sample).tobytes())
    digest.update(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        digest.update(backend.to_str().encode())
    else:
        vocab = sorted(tokenizer.get_vocab().items())
        digest.update(json.dumps(vocab).encode())
    loaded.fingerprint = digest.hexdigest()
    return loaded.fingerprint


def text_keys(texts):
    """sha256 of each text's UTF-8 bytes, as an ``(n, 32)`` uint8 array."""
    keys = np.empty((len(texts), 32), dtype=np.uint8)
    for i, text in enumerate(texts):
        keys[i] = np.frombuffer(
            hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest(), np.uint8
        )
    return keys


class EmbeddingStore:
    """Per-sentence embeddings under a ``joblib.Memory`` location.

    One directory per (model fingerprint, pooling, layers, max_length). Each
    call that encodes new sentences appends one shard file (written to a
    temporary name, then atomically renamed), so concurrent workers never
    see half-written data; shards already read in this process are not read
    again. ``joblib.Memory.clear()`` removes the store with the rest.

    The rows read or written are also kept in memory for the life of the
    process (about ``4 * hidden_size`` bytes a sentence: 1.5 GB for a
    million 384-wide embeddings), so a grid search reads each shard once.
    """

    _tables = {}
    _tables_lock = threading.Lock()

    def __init__(self, root, namespace):
        self.directory = (
            Path(root) / "sklearn_isotropy" / "BertPoolingVectorizer" / namespace
        )
        with self._tables_lock:
            self._table = self._tables.setdefault(
                str(self.directory),
                {"shards": set(), "rows": {}, "lock": threading.Lock()},
            )

    def _refresh(self):
        if not self.directory.is_dir():
            # the cache was cleared (joblib.Memory.clear() or by hand): forget
            # the rows held in memory too, so nothing stale is served
            self._table["rows"].clear()
            self._table["shards"].clear()
            return
        for shard in sorted(self.directory.glob("shard-*.npz")):
            if shard.name in self._table["shards"]:
                continue
            try:
                with np.load(shard) as data:
                    keys, values = data["keys"], data["values"]
            except (OSError, ValueError, KeyError) as exc:
                logger.warning("Ignoring unreadable cache shard %s: %s", shard, exc)
                continue
            rows = self._table["rows"]
            for key, value in zip(keys, values):
                rows.setdefault(key.tobytes(), value)
            self._table["shards"].add(shard.name)

    def get(self, keys):
        """``{position: vector}`` for the keys that are cached."""
        with self._table["lock"]:
            self._refresh()
            rows = self._table["rows"]
            found = {}
            for i, key in enumerate(keys):
                value = rows.get(key.tobytes())
                if value is not None:
                    found[i] = value
            return found

    def put(self, keys, values):
        if len(keys) == 0:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"shard-{uuid.uuid4().hex}.npz"
        tmp = self.directory / f".tmp-{name}"
        with open(tmp, "wb") as fh:
            np.savez(fh, keys=keys, values=values.astype(np.float32, copy=False))
        os.replace(tmp, self.directory / name)
        with self._table["lock"]:
            rows = self._table["rows"]
            for key, value in zip(keys, values):
                rows.setdefault(key.tobytes(), np.array(value, dtype=np.float32))
            self._table["shards"].add(name)


def store_root(memory):
    """Directory of a ``memory`` argument (None, path or joblib.Memory), or None."""
    if memory is None:
        return None
    if isinstance(memory, (str, os.PathLike)):
        return os.path.join(os.path.expanduser(os.fspath(memory)), "joblib")
    backend = getattr(memory, "store_backend", None)
    location = getattr(backend, "location", None)
    if location is None:
        location = getattr(memory, "location", None)
    return None if location is None else os.fspath(location)
