"""What runs the encoder: a backend object, chosen once when the vectorizer fits.

As sentence-transformers picks its torch or ONNX model object at load time,
:func:`make_encoder` picks :class:`TorchEncoder` (the model itself) or
:class:`OnnxEncoder` (its exported graph, fp32 or int8, in onnxruntime);
both follow the protocol :class:`Encoder`, and the vectorizer tokenizes,
batches, caches and runs batches (:class:`BatchRunner`) alike for both.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np

from . import _onnx_cache, _onnx_graph
from ._loading import import_text_deps
from ._pooling import pooled_batch

#: ``backend`` value -> precision of the ONNX graph it runs (None: torch).
BACKENDS = {"torch": None, "onnx": "fp32", "onnx-int8": "int8"}

#: Most padded tokens (rows x width) of one onnxruntime run: a larger batch
#: runs in row slices, each trimmed of the padding it does not need.
#: onnxruntime's matrix products slow down as their operands outgrow the
#: CPU's L2 cache. The cap is measured on the default encoder, against
#: whole batches and other caps, in the ablation notes of
#: :ref:`onnx_runtime` (``benchmarks/bench_encoder.py --ablation``). int8's
#: embeddings move in the last digits with the grouping of its rows (a run
#: shares the scale of each product's input).
TOKENS_PER_RUN = 384


@dataclass(frozen=True)
class EncoderSpec:
    """What the encoder computes, beside the model's weights, on any backend.

    The pooling (``reader``, ``layers`` of ``n_layers``), whether the model
    takes token types, and the precision of an ONNX backend's graph
    (``"fp32"`` for torch, whose graph :func:`onnx_graph` exports).
    """

    reader: str
    layers: tuple[int, ...]
    n_layers: int
    token_types: bool
    precision: str

    def stem(self, fingerprint):
        """The start of the graph's file name (see ``_onnx_cache.py``)."""
        spec = dict(asdict(self), model=fingerprint, format=_onnx_graph.FORMAT_VERSION)
        spec["opset"] = _onnx_graph.OPSET
        spec["attention"] = _onnx_graph.EXPORT_ATTENTION
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode())
        return f"encoder-{digest.hexdigest()[:32]}"

    @classmethod
    def of(cls, loaded, reader, layers, n_layers, precision):
        # the inputs the vectorizer feeds: token types when the tokenizer
        # makes them
        names = getattr(loaded.tokenizer, "model_input_names", ())
        return cls(
            reader, tuple(layers), n_layers, "token_type_ids" in names, precision
        )

    def input_names(self):
        """The graph's inputs: token types only for a model that takes them."""
        names = _onnx_graph.INPUT_NAMES
        return names if self.token_types else names[:2]


class Encoder(Protocol):
    """What the vectorizer needs of a backend."""

    #: Entries the ``memory=`` cache key gains: none for a backend that
    #: agrees with torch to float32 round-off, so that they share rows.
    cache_entries: dict
    #: Batches run at once, each on a thread of its own.
    threads: int
    #: Most padded tokens of one run (a batch runs in row slices); None: whole.
    tokens_per_run: int | None

    def open(self) -> contextlib.AbstractContextManager[Callable]:
        """A context giving the function that encodes one padded batch.

        The function maps int64 ``(batch, tokens)`` arrays ``input_ids``,
        ``attention_mask`` and ``token_type_ids`` (None for models without) to
        the pooled float32 rows of the model's current weights. Threads may
        call it at once.
        """


def make_encoder(backend, loaded, spec):
    """Return the :class:`Encoder` of ``backend`` for ``loaded``.

    ``spec`` (an :class:`EncoderSpec`) says what the encoder computes:
    the pooling and, for an ONNX backend, the precision of its graph, which
    is exported now (once per model), so that a failure shows at ``fit``.
    """
    if BACKENDS[backend] is None:
        return TorchEncoder(loaded, spec)
    return OnnxEncoder(loaded, spec)


def onnx_graph(loaded, spec):
    """Return the ``onnx.ModelProto`` that computes ``spec`` for ``loaded``."""
    onnx, _ = _onnx_graph.import_onnx_deps()
    return onnx.load_from_string(_onnx_cache.load(loaded, spec)[1])


class TorchEncoder:
    """The model itself, in torch, on its device (in eval mode meanwhile)."""

    cache_entries = {}
    threads = 1  # torch splits each batch over its own threads
    tokens_per_run = None

    def __init__(self, loaded, spec):
        self.loaded = loaded
        self.pooling = (spec.reader, spec.layers, spec.n_layers)

    @contextlib.contextmanager
    def open(self):
        torch, _ = import_text_deps()
        model = self.loaded.model
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()

        def run(inputs):
            mask = inputs["attention_mask"]
            mask_t = torch.from_numpy(mask).to(device)
            feed = {"input_ids": torch.from_numpy(inputs["input_ids"]).to(device)}
            if not mask[:, -1].all():
                # without padding the mask is all ones; omitting it lets
                # SDPA use its unmasked kernel (same result)
                feed["attention_mask"] = mask_t
            if inputs["token_type_ids"] is not None:
                types = torch.from_numpy(inputs["token_type_ids"])
                feed["token_type_ids"] = types.to(device)
            with torch.inference_mode():
                pooled = pooled_batch(self.loaded, feed, mask_t, *self.pooling)
                return pooled.float().cpu().numpy()

        try:
            yield run
        finally:
            if was_training:
                model.train()


def worker_threads():
    """Batches run at once: as many as the threads torch runs the encoder on."""
    torch, _ = import_text_deps()
    return max(1, torch.get_num_threads())


class OnnxEncoder:
    """The exported graph (fp32 or int8) in onnxruntime, on the CPU.

    Batches run side by side, one thread each (see
    :class:`~._onnx_graph.EncoderSession`), in runs of at most
    :data:`TOKENS_PER_RUN` padded tokens. A weight changed after ``fit`` is
    noticed at the next :meth:`open`, which then runs the graph of the new
    weights.
    """

    def __init__(self, loaded, spec):
        self.loaded = loaded
        self.spec = spec
        # the fp32 graph computes the torch forward to float32 round-off
        # (checked at every export); int8 changes it by far more
        fp32 = spec.precision == "fp32"
        self.cache_entries = {} if fp32 else {"encoder": "onnx-int8"}
        self.session()  # export now (once per model): fail early

    @property
    def threads(self):
        """Batches run at once: as many as the threads torch runs on."""
        return worker_threads()

    @property
    def tokens_per_run(self):
        """Most padded tokens of one run: :data:`TOKENS_PER_RUN`, read now."""
        return TOKENS_PER_RUN

    def session(self):
        """The session of the graph of the model's current weights."""
        # a clear ImportError, even with a session at hand
        _onnx_graph.import_onnx_deps()
        fingerprint = self.loaded.fingerprint()
        key = (self.spec, _onnx_graph.EXPORT_ATTENTION)
        found = self.loaded.sessions.get(key)  # (fingerprint, session)
        if found is not None and found[0] == fingerprint:
            return found[1]
        path, data = _onnx_cache.load(self.loaded, self.spec)
        session = _onnx_graph.EncoderSession(data, self.spec.input_names(), path)
        self.loaded.sessions[key] = (fingerprint, session)
        return session

    @contextlib.contextmanager
    def open(self):
        yield self.session().run


class BatchRunner:
    """Run batches with an encoder, as a context; pooled rows go to ``out``.

    Inside ``with BatchRunner(...) as runner``, :meth:`submit` a batch's row
    indices and padded inputs, in any number; each is run on one of
    ``encoder.threads`` threads and written to ``out[rows]`` by the
    submitting thread (at most two runs per thread are in flight), and the
    end of the block waits for the rest (and raises the first failure). A
    batch of more than ``encoder.tokens_per_run`` padded tokens is run in
    row slices of at most that many, and with fewer batches than threads
    each batch is split so that a small call uses every thread too; each
    slice is trimmed of the padding it does not need. With one thread, each
    batch runs whole, in the submitting thread.

    Parameters
    ----------
    encoder : Encoder
    out : ndarray of shape (n_texts, hidden_size)
    n_batches : int
        How many batches will be submitted.
    on_done : callable, default=None
        Called in the submitting thread with the row indices and the pooled
        rows of each finished slice (to store them, and to move a progress
        bar).
    """

    def __init__(self, encoder, out, n_batches, on_done=None):
        self.encoder = encoder
        self.out = out
        self.on_done = on_done
        self.workers = encoder.threads
        self.slices = max(1, -(-self.workers // max(1, n_batches)))
        self.pending = collections.deque()

    def __enter__(self):
        with contextlib.ExitStack() as stack:
            self.run = stack.enter_context(self.encoder.open())
            self.pool = None
            if self.workers > 1:
                self.pool = stack.enter_context(
                    concurrent.futures.ThreadPoolExecutor(
                        self.workers, thread_name_prefix="sklearn_isotropy_encoder"
                    )
                )
            stack.callback(self._finish_all)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc_info):
        return self._stack.__exit__(*exc_info)

    def submit(self, rows, inputs):
        tokens = self.encoder.tokens_per_run
        for piece, piece_inputs in row_slices(rows, inputs, self.slices, tokens):
            if self.pool is None:
                self._write(piece, self.run(piece_inputs))
                continue
            while len(self.pending) >= 2 * self.workers:
                self._finish_one()
            future = self.pool.submit(self.run, piece_inputs)
            self.pending.append((piece, future))

    def _finish_one(self):
        piece, future = self.pending.popleft()
        self._write(piece, future.result())

    def _finish_all(self):
        try:
            while self.pending:
                self._finish_one()
        finally:
            for _, future in self.pending:
                future.cancel()

    def _write(self, rows, pooled):
        self.out[rows] = pooled
        if self.on_done is not None:
            self.on_done(rows, self.out[rows])


def row_slices(rows, inputs, n_slices=1, tokens_per_run=None):
    """``(rows, inputs)`` cut into runs, each without extra padding.

    ``n_slices`` slices of rows at least, and at least as many as runs of
    ``tokens_per_run`` padded tokens the batch fills (one row each at
    most); each is trimmed to its longest row.
    """
    if tokens_per_run is not None:
        n_tokens = inputs["attention_mask"].size
        n_slices = max(n_slices, -(-n_tokens // tokens_per_run))
    if n_slices == 1 or len(rows) == 1:
        yield rows, inputs
        return
    mask = inputs["attention_mask"]
    for part in np.array_split(np.arange(len(rows)), min(n_slices, len(rows))):
        width = int(mask[part].sum(axis=1).max())
        yield (
            rows[part],
            {
                name: None if value is None else value[part, :width]
                for name, value in inputs.items()
            },
        )
