"""The encoder and its pooling as an ONNX graph: export, check, quantise, open.

The graph is the vectorizer's own torch forward pass
(:func:`~._pooling.pooled_batch`, early exit and pooling included) traced
once by ``torch.onnx.export``: its inputs are ``input_ids``,
``attention_mask`` and, for models that take them, ``token_type_ids``
(int64, ``(batch, tokens)``, both axes dynamic); its one output,
``sentence_embedding``, is the pooled ``(batch, hidden_size)`` float32
embedding before ``normalize``. A pooling that does not need the last block
(``"embeddings_avg"``, ``layers=(0, 1)``) leaves the blocks after the
deepest one it reads out of the graph.

:func:`export` checks each export against the torch model on probe
batches of other shapes; :func:`quantize` makes the int8 graph of
``backend="onnx-int8"``. What a graph computes (the pooling, the
precision) is the ``spec`` (:class:`~._encoders.EncoderSpec`); graphs are
kept by ``_onnx_cache.py`` and run by ``_encoders.py``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import threading
import warnings

import numpy as np

from .._utils import import_optional
from ._pooling import pooled_batch

logger = logging.getLogger(__name__)

#: ONNX opset of the exported graphs (the default of
#: :func:`~sklearn_isotropy.export.to_onnx`, and the lowest a flow allows).
OPSET = 18

#: Version of the exported graphs (layout, export and quantisation
#: settings); part of every file's name, so a change is exported anew.
FORMAT_VERSION = 5

#: The Hugging Face attention implementation the export traces (None: the
#: model's own). Traced, torch's fused attention (SDPA) becomes a boolean
#: mask and a NaN guard after the softmax (``IsNaN``, ``Where``) in every
#: block; the plain ("eager") attention computes the same (each export is
#: checked against the model as it runs) with fewer operations. The choice
#: is measured on the default encoder in the ablation notes of
#: :ref:`onnx_runtime` (``benchmarks/bench_encoder.py --ablation``), which
#: hold the figures.
EXPORT_ATTENTION = "eager"

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
#: The one output of the exported encoder graphs, the pooled embedding
#: (``sklearn_isotropy.text.ONNX_OUTPUT_NAME``).
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


# --------------------------------------------------------------- export
def _pooled_module(loaded, spec):
    """Return the vectorizer's forward pass (model and pooling) as one module."""
    import torch

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


def _probe(loaded, spec, n_rows, n_tokens, seed):
    """Return token ids of random words, rows padded to decreasing lengths."""
    import torch

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


def _export(loaded, spec, path):
    """Trace the pooled encoder to ``path`` (fp32)."""
    import torch

    module = _pooled_module(loaded, spec)
    example = _probe(loaded, spec, 2, 8, seed=0)
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
        # Its exporter is deprecated in favour of torch.export, kept on
        # speed: the ablation notes of the ONNX Runtime page hold the
        # measured cost of torch.export's graphs.
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module="torch")
        # torch >= 2.5 has both exporters (and will default to torch.export)
        dynamo = "dynamo" in inspect.signature(torch.onnx.export).parameters
        legacy = {"dynamo": False} if dynamo else {}
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
    """Switch a Hugging Face model to another attention meanwhile.

    See :data:`EXPORT_ATTENTION`; a model without it is traced as it is.
    """
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


def export(loaded, spec, path):
    """Export the pooled encoder of ``spec`` to ``path`` (fp32).

    Returns the bytes, once they computed the torch forward on probe batches.
    """
    import_optional("torch", purpose=_PURPOSE, extra="text")
    import_onnx_deps()
    logger.info("Exporting %s to ONNX", loaded.source)
    _export(loaded, spec, path)
    data = path.read_bytes()
    _check_export(loaded, spec, EncoderSession(data, spec.input_names()))
    return data


def _check_export(loaded, spec, session):
    """Raise if ``session`` does not compute the torch forward on new shapes."""
    import torch

    module = _pooled_module(loaded, spec)
    for n_rows, n_tokens, seed in ((3, 11, 1), (1, 4, 2)):
        inputs = _probe(loaded, spec, n_rows, n_tokens, seed)
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


_QUANTIZING = threading.Lock()


@contextlib.contextmanager
def _quiet_quantization():
    """Keep ``quantize_dynamic``'s log records out of the application's log.

    It logs a dozen lines per graph through the root logger, and more under
    ``onnxruntime.quantization``. Meanwhile, a root filter drops the records
    of onnxruntime's code, a level silences the others, and a handler keeps
    ``logging.warning`` from configuring the root logger of a program that
    has not (printing every later record).
    """
    import onnxruntime

    root, named = logging.getLogger(), logging.getLogger("onnxruntime.quantization")
    package = os.path.dirname(onnxruntime.__file__)
    guard, level = logging.NullHandler(), named.level

    def foreign(record):
        return not record.pathname.startswith(package)

    with _QUANTIZING:  # one at a time: they share the loggers
        root.addHandler(guard)
        root.addFilter(foreign)
        named.setLevel(logging.CRITICAL + 1)
        try:
            yield
        finally:
            named.setLevel(level)
            root.removeFilter(foreign)
            root.removeHandler(guard)


def quantize(source, target):
    """Quantise the fp32 graph ``source`` (bytes) into ``target``; its bytes.

    Dynamic int8 quantisation of the matrix products (weights per channel).
    ``reduce_range`` keeps the weights to 7 bits: CPUs without VNNI
    saturate in the int8 products otherwise, and the same file may serve on
    one (what the narrower weights cost is measured in :ref:`onnx_runtime`;
    ``benchmarks/bench_encoder.py`` prints int8's beside float32's).
    Embedding lookups (``Gather``) stay float32: they cost no arithmetic.
    """
    onnx, _ = import_onnx_deps()
    quantization = import_optional(
        "onnxruntime.quantization", purpose=_PURPOSE, extra="onnx"
    )
    logger.info("Quantising an encoder graph to int8")
    with _quiet_quantization():
        quantization.quantize_dynamic(
            onnx.load_from_string(source),
            str(target),
            weight_type=quantization.QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul"],
        )
    return target.read_bytes()


# ------------------------------------------------------------- opening
#: The keyword arguments of ``onnxruntime.InferenceSession`` that run an
#: exported graph as the vectorizer does
#: (``sklearn_isotropy.text.ONNX_SESSION_OPTIONS``). onnxruntime's fusion of
#: the residual Add into its SkipLayerNormalization kernel is turned off, a
#: choice measured in the ablation notes of :ref:`onnx_runtime`
#: (``benchmarks/bench_encoder.py --ablation``). An int8
#: graph is reproduced exactly only with the same fusions, so every session
#: of an exported graph (the pipeline export's check, its README) takes
#: these options.
SESSION_OPTIONS = {
    "providers": ["CPUExecutionProvider"],
    "disabled_optimizers": ["SkipLayerNormFusion"],
}


class EncoderSession:
    """An onnxruntime session of an exported encoder, called with numpy arrays.

    Each call runs on the calling thread alone (one intra-op thread): the
    vectorizer runs several batches at once instead
    (:class:`~._encoders.BatchRunner`). A transformer's batch is many small
    operations (layer norms, activations, the attention of short texts)
    that gain little from splitting each across threads and pay a
    synchronisation at each, so whole batches run on separate threads
    rather than one session of several intra-op threads (a choice measured
    in the ablation notes of :ref:`onnx_runtime`).
    ``model`` is the graph's bytes, ``path`` where they were read from.
    """

    def __init__(self, model, input_names, path=None):
        _, ort = import_onnx_deps()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.path = path
        self.input_names = tuple(input_names)
        self._session = ort.InferenceSession(model, options, **SESSION_OPTIONS)

    def run(self, inputs):
        """Pooled embeddings, float32 ``(batch, hidden_size)``, of int64 inputs."""
        feed = {name: inputs[name] for name in self.input_names}
        return self._session.run([OUTPUT_NAME], feed)[0]
