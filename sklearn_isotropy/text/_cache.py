"""The per-sentence embedding cache behind ``BertPoolingVectorizer(memory=...)``.

What it guarantees (listed for users in ``docs/user_guide/reliability.rst``):

- The cache key covers every weight and buffer of the model (all of their
  bytes, hashed once per model and again whenever a tensor changes), its
  configuration, the tokenizer, the pooling, the layers and ``max_length``,
  and nothing that varies between processes (paths, library versions, the
  truncation state a tokenizer keeps from its last call).
- A shard is written under a temporary name and renamed, so no reader ever
  sees half of one. Each carries the sha256 of its contents; on reading, its
  arrays are checked (dtype, shape, width, finiteness, digest). A shard that
  fails any check is moved aside (``<name>.damaged``), one
  :class:`~sklearn_isotropy.exceptions.CacheWarning` names it, and its
  sentences are encoded again.
- A cache that cannot be written costs no work: one ``CacheWarning``, and the
  embeddings are returned as if there were no cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from pathlib import Path

import numpy as np

from .._utils import import_optional, warn
from ..exceptions import CacheWarning

logger = logging.getLogger(__name__)

#: Version of the cache layout; part of every cache key, so a change of the
#: shard format or of the fingerprint never reads entries of the old one.
FORMAT_VERSION = 2

# Config entries that say where or how a model was loaded, not what it
# computes: left out of the key so the same weights share one cache folder
# across install paths, library upgrades and per-call output flags.
_VOLATILE_CONFIG_KEYS = frozenset(
    {
        "_name_or_path",
        "_commit_hash",
        "_attn_implementation",
        "_attn_implementation_autoset",
        "transformers_version",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "use_cache",
        "dtype",  # the weights' dtypes are hashed with the weights
        "torch_dtype",
    }
)

_KEY_BYTES = 32  # sha256 of a text


# ------------------------------------------------------------------- keys


#: Entries of each tensor read by :func:`_weights_signature`.
_SIGNATURE_SAMPLES = 16


def _sample(tensor):
    """A few evenly spaced entries of ``tensor``, as bytes."""
    flat = tensor.detach().reshape(-1)
    step = max(1, flat.numel() // _SIGNATURE_SAMPLES)
    return flat[::step][:_SIGNATURE_SAMPLES].to("cpu").numpy().tobytes()


def _weights_signature(model, tokenizer):
    """Cheap identity of the current weights: tells when to hash them again.

    An in-place change to a tensor bumps its version counter and a replaced
    tensor has a new data pointer. A change through ``tensor.data`` bypasses
    the version counter, so a few evenly spaced entries of every tensor are
    compared too: a change of a whole tensor (``p.data.mul_(2)``, a copied
    state) always shows there. Computing this takes about a millisecond,
    against tenths of a second for hashing every weight.
    """
    tensors = model.state_dict(keep_vars=True)
    return (
        id(model),
        id(tokenizer),
        len(tokenizer) if hasattr(tokenizer, "__len__") else None,
        tuple(
            (name, t.data_ptr(), getattr(t, "_version", 0), str(t.dtype), _sample(t))
            for name, t in tensors.items()
        ),
    )


def _tensor_bytes(torch, tensor):
    """The raw bytes of a tensor as a uint8 numpy view (copied to the CPU)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    try:
        return flat.view(torch.uint8).numpy()
    except (RuntimeError, TypeError):  # e.g. quantized tensors: hash the values
        return np.ascontiguousarray(flat.dequantize().float().numpy()).view(np.uint8)


def _tokenizer_state(tokenizer):
    """A text that changes whenever the tokenizer would split text differently."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        # A fast tokenizer remembers the truncation and padding of its last
        # call; the vectorizer sets both on every call (max_length is part of
        # the key), so they must not make a fresh tokenizer and a used one
        # write to different cache folders.
        state.pop("truncation", None)
        state.pop("padding", None)
        return json.dumps(state, sort_keys=True)
    settings = {
        key: value
        for key, value in getattr(tokenizer, "init_kwargs", {}).items()
        if isinstance(value, bool)
    }
    special = {
        key: str(value)
        for key, value in getattr(tokenizer, "special_tokens_map", {}).items()
    }
    vocab = sorted(tokenizer.get_vocab().items())
    return json.dumps([settings, special, vocab], sort_keys=True)


def fingerprint(loaded):
    """sha256 of every weight, the config and the tokenizer of a loaded encoder.

    Every byte of every tensor of ``state_dict()`` is hashed (for
    the default encoder, 91 MB in well under a second; see
    ``benchmarks/bench_vectorizer.py``). The digest is kept on ``loaded``
    and computed again only when a tensor has changed since.
    """
    model, tokenizer = loaded.model, loaded.tokenizer
    signature = _weights_signature(model, tokenizer)
    cached = loaded.fingerprint
    if cached is not None and cached[0] == signature:
        return cached[1]
    torch = import_optional("torch", purpose="BertPoolingVectorizer", extra="text")
    digest = hashlib.sha256()
    digest.update(type(model).__name__.encode())
    config = json.loads(model.config.to_json_string(use_diff=False))
    config = {k: v for k, v in config.items() if k not in _VOLATILE_CONFIG_KEYS}
    digest.update(json.dumps(config, sort_keys=True).encode())
    for name, tensor in model.state_dict().items():
        digest.update(f"\0{name}{tuple(tensor.shape)}{tensor.dtype}\0".encode())
        digest.update(memoryview(_tensor_bytes(torch, tensor)))
    digest.update(type(tokenizer).__name__.encode())
    digest.update(_tokenizer_state(tokenizer).encode())
    loaded.fingerprint = (signature, digest.hexdigest())
    return loaded.fingerprint[1]


def text_keys(texts):
    """sha256 of each text's UTF-8 bytes, as an ``(n, 32)`` uint8 array."""
    keys = np.empty((len(texts), _KEY_BYTES), dtype=np.uint8)
    for i, text in enumerate(texts):
        keys[i] = np.frombuffer(
            hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest(), np.uint8
        )
    return keys


def _shard_digest(keys, values):
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(keys).tobytes())
    digest.update(np.ascontiguousarray(values).tobytes())
    return np.frombuffer(digest.digest(), dtype=np.uint8)


# ----------------------------------------------------------------- shards


class _DamagedShard(Exception):
    """A shard that cannot be trusted; the message says why."""


def read_shard(path, width):
    """``(keys, values)`` of a shard file, validated.

    Raises
    ------
    _DamagedShard
        If the file cannot be parsed, lacks an array, or holds keys or
        values of the wrong dtype or shape, non-finite values, or contents
        that do not match the digest stored with them.
    """
    try:
        # open the file here: np.load leaks its own handle when the zip
        # directory cannot be parsed (a truncated shard)
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as data:
            missing = sorted({"keys", "values", "digest"} - set(data.files))
            if missing:
                raise _DamagedShard(f"it lacks the arrays {missing}")
            keys, values, digest = data["keys"], data["values"], data["digest"]
    except _DamagedShard:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to parse is damage
        # (EOFError for an empty file, BadZipFile for a truncated one,
        # ValueError for other content, OSError for an unreadable file, ...)
        text = " ".join(str(exc).split())[:200]
        raise _DamagedShard(
            f"it cannot be read ({type(exc).__name__}: {text})"
        ) from exc
    if keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != _KEY_BYTES:
        raise _DamagedShard(
            f"its keys have dtype {keys.dtype} and shape {keys.shape}, expected "
            f"uint8 of shape (n, {_KEY_BYTES})"
        )
    if values.dtype != np.float32 or values.shape != (len(keys), width):
        raise _DamagedShard(
            f"its values have dtype {values.dtype} and shape {values.shape}, "
            f"expected float32 of shape ({len(keys)}, {width})"
        )
    if not np.isfinite(values).all():
        raise _DamagedShard("its values contain NaN or infinity")
    if digest.shape != (32,) or not np.array_equal(digest, _shard_digest(keys, values)):
        raise _DamagedShard("its contents do not match the checksum stored with them")
    return keys, values


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

    Reading never fails: a damaged shard is set aside with a
    :class:`~sklearn_isotropy.exceptions.CacheWarning` (its rows are then
    missing and get encoded again). Writing never fails either: when the
    directory cannot be written, one ``CacheWarning`` says so and the rows
    are only kept in memory.
    """

    _tables = {}
    _tables_lock = threading.Lock()

    def __init__(self, root, namespace, width):
        self.directory = (
            Path(root) / "sklearn_isotropy" / "BertPoolingVectorizer" / namespace
        )
        self.width = int(width)
        with self._tables_lock:
            self._table = self._tables.setdefault(
                str(self.directory),
                {
                    "shards": set(),
                    "rows": {},
                    "lock": threading.Lock(),
                    "write_failed": False,
                    "read_failed": False,
                },
            )

    def _refresh(self):
        table = self._table
        try:
            exists = self.directory.is_dir()
            shards = sorted(self.directory.glob("shard-*.npz")) if exists else []
        except OSError as exc:
            if not table["read_failed"]:
                table["read_failed"] = True
                warn(
                    f"Cannot read the embedding cache directory {self.directory} "
                    f"({exc}); the texts are encoded without it. Check the "
                    "permissions of the memory= location.",
                    CacheWarning,
                )
            exists, shards = False, []
        if not exists:
            # the cache was cleared (joblib.Memory.clear() or by hand): forget
            # the rows held in memory too, so nothing stale is served
            table["rows"].clear()
            table["shards"].clear()
            return
        table["read_failed"] = False
        for shard in shards:
            if shard.name in table["shards"]:
                continue
            table["shards"].add(shard.name)
            try:
                keys, values = read_shard(shard, self.width)
            except _DamagedShard as exc:
                self._set_aside(shard, str(exc))
                continue
            rows = table["rows"]
            for key, value in zip(keys, values):
                rows.setdefault(key.tobytes(), value)

    def _set_aside(self, shard, reason):
        target = shard.with_name(shard.name + ".damaged")
        try:
            os.replace(shard, target)
        except FileNotFoundError:  # another process moved it first
            moved = f"It was moved to {target.name}"
        except OSError as exc:
            moved = f"It could not be moved aside ({exc}); delete it"
        else:
            moved = f"It was moved to {target.name}"
        warn(
            f"Ignoring the damaged embedding cache file {shard}: {reason}. "
            f"{moved}; its sentences are encoded again.",
            CacheWarning,
        )

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
        """Store rows; on any failure to write, warn once and keep them in RAM."""
        values = np.asarray(values, dtype=np.float32)
        # a non-finite embedding is returned to the caller but never cached,
        # so the cache holds only rows that pass the checks of read_shard
        finite = np.isfinite(values).all(axis=1)
        keys = np.ascontiguousarray(keys[finite], dtype=np.uint8)
        values = np.ascontiguousarray(values[finite])
        if len(keys) == 0:
            return
        table = self._table
        name = f"shard-{uuid.uuid4().hex}.npz"
        tmp = self.directory / f".tmp-{name}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            try:
                with open(tmp, "wb") as fh:
                    np.savez(
                        fh, keys=keys, values=values, digest=_shard_digest(keys, values)
                    )
                os.replace(tmp, self.directory / name)
            finally:
                if tmp.exists():
                    tmp.unlink()
        except OSError as exc:
            if not table["write_failed"]:
                table["write_failed"] = True
                warn(
                    f"Cannot write to the embedding cache {self.directory} "
                    f"({exc}); the embeddings are returned but not cached. Pass "
                    "a writable directory as memory=, or memory=None.",
                    CacheWarning,
                )
            name = None
        else:
            table["write_failed"] = False
        with table["lock"]:
            rows = table["rows"]
            for key, value in zip(keys, values):
                rows.setdefault(key.tobytes(), value.copy())
            if name is not None:
                table["shards"].add(name)


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
