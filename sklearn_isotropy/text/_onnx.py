"""The encoder and its pooling as an ONNX graph, run with ONNX Runtime.

``BertPoolingVectorizer(backend="onnx")`` runs this instead of the torch
model. The graph is the vectorizer's own torch forward pass
(:func:`~._pooling.pooled_batch`, early exit and pooling included) traced
once by ``torch.onnx.export``: its inputs are ``input_ids``,
``attention_mask`` and, for models that take them, ``token_type_ids``
(int64, ``(batch, tokens)``, both axes dynamic); its one output,
``sentence_embedding``, is the pooled ``(batch, hidden_size)`` float32
embedding before ``normalize``. A pooling that does not need the last block
(``"embeddings_avg"``, ``layers=(0, 1)``) leaves the blocks after the
deepest one it reads out of the graph.

Every export is checked against the torch model on probe batches of other
shapes than the one traced, and is cached on disk under a name derived from
the model's fingerprint (every weight, the configuration, the tokenizer),
the pooling and the format version, so it is paid once per model and
machine and redone when the model changes. ``backend="onnx-int8"`` adds the
dynamic int8 quantisation of that graph (``quantize_dynamic``), cached the
same way.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import hashlib
import inspect
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
import warnings
import weakref
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from .._utils import import_optional, warn
from ..exceptions import CacheWarning
from . import _cache
from ._pooling import pooled_batch

logger = logging.getLogger(__name__)

#: ``backend`` value -> precision of the ONNX model it runs (None: torch).
BACKENDS = {"torch": None, "onnx": "fp32", "onnx-int8": "int8"}

#: Environment variable naming the directory of the exported models.
CACHE_ENV = "SKLEARN_ISOTROPY_ONNX_CACHE"

#: ONNX opset of the exported graphs (the default of
#: :func:`~sklearn_isotropy.export.to_onnx`, and the lowest a flow allows).
OPSET = 18

#: Version of the exported graphs (layout, export and quantisation
#: settings); part of every file's name, so a change is exported anew.
FORMAT_VERSION = 4

#: The Hugging Face attention implementation the export traces (None: the
#: model's own). Traced, torch's fused attention (SDPA) becomes a boolean
#: mask and a NaN guard after the softmax (``IsNaN``, ``Where``) in every
#: block; the plain ("eager") attention computes the same (each export is
#: checked against the model as it runs) with fewer operations, and its
#: graph of the default encoder ran about 1% faster in float32 and 5% in
#: int8 (``benchmarks/bench_encoder.py --ablation``).
EXPORT_ATTENTION = "eager"

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "sentence_embedding"

# An export must reproduce the torch forward to this, relative to the
# largest entry of the output (float32 round-off is about 1e-6).
_EXPORT_RTOL = 1e-4

_PURPOSE = 'BertPoolingVectorizer(backend="onnx")'


def import_onnx_deps():
    """Import onnx and onnxruntime, or say which extra installs them."""
    onnx = import_optional("onnx", purpose=_PURPOSE, extra="onnx")
    ort = import_optional("onnxruntime", purpose=_PURPOSE, extra="onnx")
    return onnx, ort


def cache_dir():
    """Where exported encoders are kept: ``$SKLEARN_ISOTROPY_ONNX_CACHE``, else
    ``$XDG_CACHE_HOME/sklearn_isotropy/onnx`` (``~/.cache/...`` by default)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path("~", ".cache").expanduser()
    return Path(base) / "sklearn_isotropy" / "onnx"


def cache_key_entries(backend):
    """Entries the embedding cache key gains for ``backend``.

    The fp32 graph computes the torch forward to float32 round-off (checked
    at every export), so ``"torch"`` and ``"onnx"`` share cached embeddings;
    int8 changes them by far more, so it gets entries of its own.
    """
    precision = BACKENDS[backend]
    return {} if precision in (None, "fp32") else {"encoder": f"onnx-{precision}"}


@dataclass(frozen=True)
class EncoderSpec:
    """What an exported graph computes, beside the model's weights."""

    reader: str
    layers: tuple[int, ...]
    n_layers: int
    token_types: bool
    precision: str

    def file_name(self, fingerprint):
        spec = dict(asdict(self), model=fingerprint, format=FORMAT_VERSION)
        spec["opset"] = OPSET
        spec["attention"] = EXPORT_ATTENTION
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode())
        return f"encoder-{digest.hexdigest()[:32]}-{self.precision}.onnx"

    @classmethod
    def of(cls, loaded, reader, layers, n_layers, precision):
        # the inputs the vectorizer feeds: token types when the tokenizer
        # makes them
        names = getattr(loaded.tokenizer, "model_input_names", ())
        return cls(
            reader, tuple(layers), n_layers, "token_type_ids" in names, precision
        )

    def input_names(self):
        return INPUT_NAMES if self.token_types else INPUT_NAMES[:2]


# --------------------------------------------------------------- export
def _pooled_module(torch, loaded, spec):
    """The vectorizer's forward pass (model and pooling) as one module."""

    class PooledEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = loaded.model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                inputs["token_type_ids"] = token_type_ids
            return pooled_batch(
                loaded, inputs, attention_mask, spec.reader, spec.layers, spec.n_layers
            )

    return PooledEncoder().eval()


def _probe(torch, loaded, spec, n_rows, n_tokens, seed):
    """Token ids of random words, rows padded to decreasing lengths."""
    config = loaded.model.config
    generator = torch.Generator().manual_seed(seed)
    vocab = int(getattr(config, "vocab_size", 0) or 100)
    pad = getattr(loaded.tokenizer, "pad_token_id", None)
    ids = torch.randint(
        min(5, vocab - 1), vocab, (n_rows, n_tokens), generator=generator
    )
    if pad is not None:
        ids[ids == pad] = (pad + 1) % vocab
    mask = torch.ones_like(ids)
    for row in range(1, n_rows):  # the first row is full, later ones padded
        mask[row, max(1, n_tokens - 2 * row) :] = 0
        if pad is not None:
            ids[row][mask[row] == 0] = pad
    inputs = {"input_ids": ids, "attention_mask": mask}
    if spec.token_types:
        types = torch.zeros_like(ids)
        if (getattr(config, "type_vocab_size", 1) or 1) > 1:
            types[:, n_tokens // 2 :] = 1
        inputs["token_type_ids"] = types * mask
    return inputs


def _export(torch, loaded, spec, path):
    """Trace the pooled encoder to ``path`` (fp32)."""
    module = _pooled_module(torch, loaded, spec)
    example = _probe(torch, loaded, spec, 2, 8, seed=0)
    names = spec.input_names()
    axes = {name: {0: "batch", 1: "tokens"} for name in names}
    axes[OUTPUT_NAME] = {0: "batch"}
    with (
        torch.inference_mode(False),
        torch.no_grad(),
        warnings.catch_warnings(),
        _traced_attention(loaded.model, EXPORT_ATTENTION),
    ):
        # TorchScript's tracer notes the Python branches on shapes of the
        # attention code; the check below runs the graph on other shapes.
        # Its exporter is deprecated in favour of torch.export, whose graphs
        # of these encoders ran about 10% slower in onnxruntime.
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module="torch")
        # torch >= 2.5 has both exporters (and will default to torch.export)
        legacy = {"dynamo": False} if _has_dynamo_flag(torch) else {}
        try:
            torch.onnx.export(
                module,
                tuple(example[name] for name in names),
                str(path),
                **legacy,
                input_names=list(names),
                output_names=[OUTPUT_NAME],
                dynamic_axes=axes,
                opset_version=OPSET,
            )
        except Exception as exc:  # noqa: BLE001 - any failure: say what to use
            text = " ".join(str(exc).split())[:300]
            raise ValueError(
                f"Cannot export the encoder ({type(loaded.model).__name__} from "
                f"{loaded.source!r}) to ONNX: {type(exc).__name__}: {text}. Use "
                "backend='torch' for this model."
            ) from exc


@contextlib.contextmanager
def _traced_attention(model, implementation):
    """Switch a Hugging Face model to another attention meanwhile (see
    :data:`EXPORT_ATTENTION`); a model without it is traced as it is."""
    before = getattr(getattr(model, "config", None), "_attn_implementation", None)
    switched = False
    if (
        implementation is not None
        and before not in (None, implementation)
        and hasattr(model, "set_attn_implementation")
    ):
        try:
            model.set_attn_implementation(implementation)
            switched = True
        except (ValueError, ImportError, NotImplementedError):
            pass
    try:
        yield
    finally:
        if switched:
            model.set_attn_implementation(before)


def _has_dynamo_flag(torch):
    return "dynamo" in inspect.signature(torch.onnx.export).parameters


def _check_export(torch, loaded, spec, session):
    """Raise if ``session`` does not compute the torch forward on new shapes."""
    module = _pooled_module(torch, loaded, spec)
    for n_rows, n_tokens, seed in ((3, 11, 1), (1, 4, 2)):
        inputs = _probe(torch, loaded, spec, n_rows, n_tokens, seed)
        with torch.inference_mode():
            expected = module(**inputs).float().numpy()
        got = session.run({k: v.numpy() for k, v in inputs.items()})
        scale = max(1.0, float(np.max(np.abs(expected))))
        error = (
            float(np.max(np.abs(got - expected)))
            if got.shape == expected.shape
            else np.inf
        )
        if not error <= _EXPORT_RTOL * scale:
            raise ValueError(
                f"The ONNX export of the encoder ({type(loaded.model).__name__} from "
                f"{loaded.source!r}) does not reproduce its torch forward pass: "
                f"outputs differ by up to {error:.3g} on a probe batch of shape "
                f"({n_rows}, {n_tokens}). Use backend='torch' for this model."
            )


@contextlib.contextmanager
def _quiet_root_logger():
    """Drop the advice quantize_dynamic logs on the root logger.

    It calls ``logging.warning``, which would also configure the root logger
    of a program that has not (printing every later record): a handler held
    during the call keeps that from happening, and a filter drops the advice
    (to run its pre-processing, whose shape inference fails on these graphs).
    """
    root = logging.getLogger()
    guard = logging.NullHandler()

    def advice(record):
        return "pre-processing" not in record.getMessage()

    root.addHandler(guard)
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)
        root.removeHandler(guard)


def _quantize(source, target):
    """Dynamic int8 quantisation of the matrix products (weights per channel).

    ``reduce_range`` keeps the weights to 7 bits: CPUs without VNNI
    saturate in the int8 products otherwise, and the same file may serve on
    one (on the default encoder it cost no STS-B correlation against full
    range; ``benchmarks/bench_encoder.py`` prints int8's beside float32's).
    Embedding lookups (``Gather``) stay float32: they cost no arithmetic.
    """
    quantization = import_optional(
        "onnxruntime.quantization", purpose=_PURPOSE, extra="onnx"
    )
    with _quiet_root_logger():
        quantization.quantize_dynamic(
            str(source),
            str(target),
            weight_type=quantization.QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul"],
        )


# ----------------------------------------------------------- the cache
_STAGING = ".staging-"
# an export of even a large encoder takes minutes, not a day
_ABANDONED_AFTER_S = 24 * 3600
_UNWRITABLE = {}  # cache directory -> per-process fallback directory
_LOCK = threading.Lock()


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


def _build(torch, loaded, spec, directory, name):
    """Write the model ``name`` into ``directory``; atomic (rename at the end).

    Returns the session the export was checked with (fp32), or None.
    """
    _remove_abandoned(directory)
    staging = Path(tempfile.mkdtemp(prefix=_STAGING, dir=directory))
    try:
        if spec.precision == "fp32":
            logger.info("Exporting %s to ONNX", loaded.source)
            _export(torch, loaded, spec, staging / "model.onnx")
            session = EncoderSession(staging / "model.onnx", spec.input_names())
            _check_export(torch, loaded, spec, session)
            session.path = directory / name
        else:
            session = None
            fp32, _ = _ensure_model(loaded, replace(spec, precision="fp32"))
            logger.info("Quantising %s to %s", fp32, spec.precision)
            _quantize(fp32, staging / "model.onnx")
        os.replace(staging / "model.onnx", directory / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return session


def model_path(loaded, reader, layers, n_layers, precision):
    """Path of the exported model of a pooling, exported now if not cached.

    ``reader`` and ``layers`` are those of a pooling preset (``layers``
    non-negative), ``precision`` is ``"fp32"`` or ``"int8"``.
    """
    spec = EncoderSpec.of(loaded, reader, layers, n_layers, precision)
    return _ensure_model(loaded, spec)[0]


def _ensure_model(loaded, spec):
    """``(path, session or None)``: the model's path, and the session an
    export made now was checked with."""
    torch = import_optional("torch", purpose=_PURPOSE, extra="text")
    import_onnx_deps()
    directory = _writable_dir()
    name = spec.file_name(_cache.fingerprint(loaded))
    path = directory / name
    session = None
    if not path.is_file():
        session = _build(torch, loaded, spec, directory, name)
    return path, session


# ------------------------------------------------------------- running
# onnxruntime's fusion of the residual Add into its SkipLayerNormalization
# kernel made the int8 graph slower: 2,513 texts/s with it, 3,151 without
# (float32: 974 and 997;
# ``benchmarks/bench_encoder.py --ablation``). An int8 graph is reproduced
# exactly only with the same fusions, so every session of an exported graph
# (the pipeline export's check, its README) takes these options.
SESSION_OPTIONS = {
    "providers": ["CPUExecutionProvider"],
    "disabled_optimizers": ["SkipLayerNormFusion"],
}


class EncoderSession:
    """An onnxruntime session of an exported encoder, called with numpy arrays.

    Each call runs on the calling thread alone (one intra-op thread): the
    vectorizer runs several batches at once instead (:class:`BatchRunner`).
    A transformer's batch is many small operations (layer norms,
    activations, the attention of short texts) that gain little from
    splitting each across threads and pay a synchronisation at each; whole
    batches on separate threads scale better. On 2 CPUs, the default
    encoder ran 2,000 STS-B sentences in batches of 32 at 974 texts/s in
    float32 and 2,513 in int8, against 926 and 2,075 on one session of two
    intra-op threads (best of 5 rounds; ``benchmarks/bench_encoder.py
    --ablation``).
    """

    def __init__(self, path, input_names):
        _, ort = import_onnx_deps()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.path = Path(path)
        self.input_names = tuple(input_names)
        self._session = ort.InferenceSession(
            str(path),
            options,
            **SESSION_OPTIONS,
        )

    def run(self, inputs):
        """Pooled embeddings, float32 ``(batch, hidden_size)``, of int64 inputs."""
        feed = {name: inputs[name] for name in self.input_names}
        return self._session.run([OUTPUT_NAME], feed)[0]


#: Most padded tokens (rows x width) of one session run: a larger batch runs
#: in row slices, each trimmed of the padding it does not need. onnxruntime's
#: matrix products slow down as their operands outgrow the CPU's L2 cache;
#: on the default encoder, 2,000 STS-B sentences in batches of 32 (the
#: longest 46 tokens) ran 2 to 4% faster in float32 and 5 to 6% in int8 than
#: in whole batches (``benchmarks/bench_encoder.py --ablation``). Caps from
#: 320 to 512 tokens ran as fast; int8's STS-B correlation moves by a few
#: hundredths with the grouping of its rows (a run shares the scale of each
#: product's input), and is 81.91 with this cap (``bench_encoder.py``).
TOKENS_PER_RUN = 384


def worker_threads():
    """Batches run at once: as many as the threads torch runs the encoder on."""
    torch = import_optional("torch", purpose=_PURPOSE, extra="text")
    return max(1, torch.get_num_threads())


class BatchRunner:
    """Run batches on a session from several threads; pooled rows go to ``out``.

    :meth:`submit` a batch's row indices and padded inputs, in any number;
    each is run on one of :func:`worker_threads` threads and written to
    ``out[rows]`` by the submitting thread (at most two runs per thread
    are in flight), and :meth:`close` waits for the rest. A batch of more
    than :data:`TOKENS_PER_RUN` padded tokens is run in row slices of at
    most that many, and with fewer batches than threads each batch is split
    so that a small call uses every thread too; each slice is trimmed of
    the padding it does not need.

    Parameters
    ----------
    session : EncoderSession
    out : ndarray of shape (n_texts, hidden_size)
    n_batches : int
        How many batches will be submitted.
    on_done : callable, default=None
        Called in the submitting thread with the row indices and the pooled
        rows of each finished slice (to store them, and to move a progress
        bar).
    """

    def __init__(self, session, out, n_batches, on_done=None):
        self.session = session
        self.out = out
        self.on_done = on_done
        self.workers = worker_threads()
        self.slices = max(1, -(-self.workers // max(1, n_batches)))
        self.pending = collections.deque()
        self.pool = None
        if self.workers > 1:
            self.pool = concurrent.futures.ThreadPoolExecutor(
                self.workers, thread_name_prefix="sklearn_isotropy_onnx"
            )

    def submit(self, rows, inputs):
        for piece, piece_inputs in row_slices(rows, inputs, self.slices):
            if self.pool is None:
                self._write(piece, self.session.run(piece_inputs))
                continue
            while len(self.pending) >= 2 * self.workers:
                self._finish_one()
            future = self.pool.submit(self.session.run, piece_inputs)
            self.pending.append((piece, future))

    def _finish_one(self):
        piece, future = self.pending.popleft()
        self._write(piece, future.result())

    def _write(self, rows, pooled):
        self.out[rows] = pooled
        if self.on_done is not None:
            self.on_done(rows, self.out[rows])

    def close(self):
        """Wait for the batches in flight (and raise the first failure)."""
        try:
            while self.pending:
                self._finish_one()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)


def row_slices(rows, inputs, n_slices=1):
    """``(rows, inputs)`` cut into runs of the session, each without extra padding.

    ``n_slices`` slices of rows at least, and at least as many as runs of
    :data:`TOKENS_PER_RUN` padded tokens the batch fills (one row each at
    most); each is trimmed to its longest row.
    """
    n_slices = max(n_slices, -(-inputs["attention_mask"].size // TOKENS_PER_RUN))
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


# loaded encoder -> {spec: (fingerprint, session)}; clones of a vectorizer
# share the loaded encoder, and so its sessions
_SESSIONS = weakref.WeakKeyDictionary()


def session_for(loaded, reader, layers, n_layers, precision):
    """The (cached) session of a pooling on ``loaded``'s current weights.

    Arguments as for :func:`model_path`.
    """
    import_onnx_deps()  # a clear ImportError, even with a session at hand
    spec = EncoderSpec.of(loaded, reader, layers, n_layers, precision)
    fingerprint = _cache.fingerprint(loaded)
    key = (spec, EXPORT_ATTENTION)
    with _LOCK:
        sessions = _SESSIONS.setdefault(loaded, {})
        found = sessions.get(key)
    if found is not None and found[0] == fingerprint:
        return found[1]
    path, session = _ensure_model(loaded, spec)
    try:
        if session is None:
            session = EncoderSession(path, spec.input_names())
    except Exception as exc:  # noqa: BLE001 - a damaged file: export again
        warn(
            f"Ignoring the exported encoder {path}, which onnxruntime cannot "
            f"load ({type(exc).__name__}: {str(exc)[:200]}); exporting it again.",
            CacheWarning,
        )
        path.unlink(missing_ok=True)
        path, session = _ensure_model(loaded, spec)
        session = session or EncoderSession(path, spec.input_names())
    with _LOCK:
        _SESSIONS[loaded][key] = (fingerprint, session)
    return session
