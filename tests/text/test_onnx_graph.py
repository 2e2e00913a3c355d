"""BertPoolingVectorizer(backend="onnx" | "onnx-int8"): parity, graphs, errors.

The reference of every comparison is the torch backend, whose pooling the
tests of ``test_vectorizer.py`` check against Hugging Face's own
``output_hidden_states``. Exported models go to a temporary directory
(``$SKLEARN_ISOTROPY_ONNX_CACHE``, see ``conftest.onnx_model_cache``); the
cache of exported graphs has its tests in ``test_onnx_cache.py``, the runner
of the batches in ``test_encoders.py``.
"""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.base import clone

from tests._data import BATCH_TEXTS as TEXTS

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from sklearn_isotropy import BertPoolingVectorizer  # noqa: E402
from sklearn_isotropy.text import _onnx_graph  # noqa: E402

POOLINGS = [
    {"pooling": "mean"},
    {"pooling": "cls"},
    {"pooling": "first_last_avg"},
    {"pooling": "last2_avg"},
    {"pooling": "embeddings_avg"},
    {"pooling": "pooler"},
    {"layers": (0, 1)},
    {"layers": (0, -1)},
]


# ------------------------------------------------------------------ parity
@pytest.mark.parametrize("params", POOLINGS, ids=str)
def test_every_pooling_matches_torch(tiny_bert, params):
    # batch_size=3: several batches, each padded to its own longest text
    torch_vec = BertPoolingVectorizer(tiny_bert, batch_size=3, **params)
    onnx_vec = BertPoolingVectorizer(tiny_bert, batch_size=3, backend="onnx", **params)
    expected = torch_vec.fit_transform(TEXTS)
    got = onnx_vec.fit_transform(TEXTS)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert_allclose(got, expected, rtol=0, atol=1e-4)
    assert onnx_vec.layers_ == torch_vec.layers_


def test_normalize_and_batches_do_not_change_onnx_results(tiny_bert):
    one_batch = BertPoolingVectorizer(tiny_bert, backend="onnx", batch_size=64)
    small = BertPoolingVectorizer(
        tiny_bert, backend="onnx", batch_size=2, normalize=True
    )
    raw = one_batch.fit_transform(TEXTS)
    unit = small.fit_transform(TEXTS)
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    assert_allclose(unit, raw / norms, rtol=0, atol=1e-5)


def _matmul_blocks(model):
    """Transformer blocks in a graph.

    Each has 6 weight MatMuls (Q, K, V, out, intermediate, output) besides the
    two of attention scores.
    """
    weights = {init.name for init in model.graph.initializer}
    products = [
        n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights
    ]
    return len(products) / 6


def test_the_graph_stops_after_the_deepest_block_needed(tiny_bert):
    # the tiny BERT has 2 blocks: hidden_states[1] is block 0's output
    blocks = {}
    for params in (
        {"pooling": "mean"},
        {"layers": (0, 1)},
        {"pooling": "embeddings_avg"},
    ):
        vec = BertPoolingVectorizer(tiny_bert, backend="onnx", **params).fit(["a"])
        blocks[str(params)] = _matmul_blocks(vec.get_onnx_encoder())
    assert list(blocks.values()) == [2, 1, 0]


def test_the_export_traces_the_eager_attention(tiny_bert_copy, fresh_cache):
    model, tokenizer = tiny_bert_copy
    model.set_attn_implementation("sdpa")
    vec = BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    ops = {node.op_type for node in vec.get_onnx_encoder().graph.node}
    # traced SDPA guards its softmax against NaN rows; the eager attention not
    assert "Softmax" in ops and "IsNaN" not in ops
    assert model.config._attn_implementation == "sdpa"  # the model as it was
    expected = BertPoolingVectorizer((model, tokenizer)).fit_transform(TEXTS)
    assert_allclose(vec.transform(TEXTS), expected, rtol=0, atol=1e-4)


def test_the_graph_inputs_and_output(tiny_bert):
    vec = BertPoolingVectorizer(tiny_bert, backend="onnx").fit(["a"])
    model = vec.get_onnx_encoder()
    names = [i.name for i in model.graph.input]
    assert names == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in model.graph.output] == ["sentence_embedding"]
    # batch and sequence axes are dynamic
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param for d in dims] == ["batch", "tokens"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "params",
    [{"pooling": "mean"}, {"pooling": "pooler"}, {"layers": (0, 2, 6)}],
    ids=str,
)
def test_default_model_matches_torch(default_model_path, params):
    # every pooling is checked on the tiny BERT above; the real model (an
    # export of its own each) at the default pooling, its pooler head, and
    # a stack that reaches the deepest layer through an inner one
    torch_vec = BertPoolingVectorizer(default_model_path, **params)
    sentences = [
        "A man is playing a guitar.",
        "A woman is slicing an onion with a very sharp knife in a small kitchen.",
        "",
        "Two dogs run on the beach.",
    ]
    expected = torch_vec.fit_transform(sentences)
    got = BertPoolingVectorizer(
        default_model_path, backend="onnx", **params
    ).fit_transform(sentences)
    assert_allclose(got, expected, rtol=0, atol=1e-4)


# -------------------------------------------------------------------- int8
def test_int8_is_quantised_and_close(tiny_bert):
    torch_vec = BertPoolingVectorizer(tiny_bert, pooling="mean")
    int8 = BertPoolingVectorizer(tiny_bert, pooling="mean", backend="onnx-int8")
    expected = torch_vec.fit_transform(TEXTS)
    got = int8.fit_transform(TEXTS)
    ops = {n.op_type for n in int8.get_onnx_encoder().graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    assert "MatMul" not in ops or _matmul_blocks(int8.get_onnx_encoder()) == 0
    error = np.abs(got - expected).max()
    scale = np.abs(expected).max()
    assert 0 < error < 0.05 * scale


def test_int8_never_shares_cached_embeddings(tiny_bert, tmp_path, monkeypatch):
    memory = tmp_path / "memory"
    fp32 = BertPoolingVectorizer(tiny_bert, memory=memory).fit(TEXTS)
    from_torch = fp32.transform(TEXTS)
    runs = []
    original = _onnx_graph.EncoderSession.run

    def counted(self, inputs):
        runs.append(self.path.name)
        return original(self, inputs)

    monkeypatch.setattr(_onnx_graph.EncoderSession, "run", counted)
    # fp32 ONNX equals torch to round-off: it reads torch's cached rows
    onnx_vec = BertPoolingVectorizer(tiny_bert, memory=memory, backend="onnx")
    assert_allclose(onnx_vec.fit(TEXTS).transform(TEXTS), from_torch, rtol=0, atol=0)
    assert runs == []
    # int8 does not: it encodes, and its rows differ
    int8 = BertPoolingVectorizer(tiny_bert, memory=memory, backend="onnx-int8")
    got = int8.fit(TEXTS).transform(TEXTS)
    assert runs and all("int8" in name for name in runs)
    assert np.abs(got - from_torch).max() > 0
    # and a second int8 transform reads its own cached rows
    n_runs = len(runs)
    assert_allclose(int8.transform(TEXTS), got, rtol=0, atol=0)
    assert len(runs) == n_runs


def test_an_int8_export_logs_nothing_through_onnxruntime(tiny_bert_copy, fresh_cache):
    import logging

    class Recorder(logging.Handler):
        def __init__(self):
            super().__init__(logging.DEBUG)
            self.records = []

        def emit(self, record):
            self.records.append(record)

    # an application that logs at INFO
    root, recorder = logging.getLogger(), Recorder()
    level, handlers, filters = root.level, list(root.handlers), list(root.filters)
    quantization = logging.getLogger("onnxruntime.quantization")
    root.addHandler(recorder)
    root.setLevel(logging.INFO)
    try:
        model, tokenizer = tiny_bert_copy
        BertPoolingVectorizer((model, tokenizer), backend="onnx-int8").fit(["a"])
        state = (
            root.level,
            list(root.handlers),
            list(root.filters),
            quantization.level,
        )
    finally:
        root.removeHandler(recorder)
        root.setLevel(level)
    foreign = [r for r in recorder.records if not r.name.startswith("sklearn_isotropy")]
    assert foreign == []
    assert any("int8" in r.getMessage() for r in recorder.records)  # ours, kept
    # the logging configuration is as it was
    assert state == (logging.INFO, [*handlers, recorder], filters, logging.NOTSET)


# ----------------------------------------------------- estimator contract
def test_pickle_and_clone_keep_the_backend(tiny_bert):
    vec = BertPoolingVectorizer(tiny_bert, backend="onnx", pooling="first_last_avg")
    expected = vec.fit_transform(TEXTS)
    restored = pickle.loads(pickle.dumps(vec))
    assert restored.backend == "onnx"
    assert_allclose(restored.transform(TEXTS), expected, rtol=0, atol=0)
    assert clone(vec).get_params()["backend"] == "onnx"


# ------------------------------------------------------------------ errors
def test_unknown_backend_lists_the_choices(tiny_bert):
    with pytest.raises(ValueError, match="backend.*onnx-int8"):
        BertPoolingVectorizer(tiny_bert, backend="tensorrt").fit(["a"])


def test_onnx_backend_needs_the_cpu(tiny_bert, monkeypatch):
    from sklearn_isotropy.text import _vectorizer

    monkeypatch.setattr(_vectorizer, "_resolve_device", lambda d: torch.device("cuda"))
    with pytest.raises(ValueError, match="device='cpu', or backend='torch'"):
        BertPoolingVectorizer(tiny_bert, backend="onnx", device="cuda").fit(["a"])


def test_a_model_that_cannot_be_exported(tiny_bert_objects, fresh_cache):
    from transformers import BertModel

    model, tokenizer = tiny_bert_objects

    class CumulativeBert(BertModel):  # aten::cummax has no ONNX export
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.last_hidden_state = torch.cummax(out.last_hidden_state, dim=1)[0]
            return out

    net = CumulativeBert(model.config).eval()
    net.load_state_dict(model.state_dict())
    with pytest.raises(ValueError, match="Cannot export.*backend='torch'"):
        BertPoolingVectorizer((net, tokenizer), backend="onnx").fit(["a"])
    assert list(fresh_cache.iterdir()) == []
    # the torch backend runs it
    assert BertPoolingVectorizer((net, tokenizer)).fit_transform(["a"]).shape == (
        1,
        32,
    )


def test_an_export_that_computes_something_else_is_refused(
    tiny_bert_objects, fresh_cache
):
    from transformers import BertModel

    model, tokenizer = tiny_bert_objects

    class ShapeBranchingBert(BertModel):
        # a Python branch on the sequence length: the tracer keeps the branch
        # taken for the example it traces, so the graph is wrong on others
        def forward(self, input_ids=None, **kwargs):
            out = super().forward(input_ids=input_ids, **kwargs)
            if input_ids.shape[1] > 8:
                out.last_hidden_state = out.last_hidden_state * 2
            return out

    net = ShapeBranchingBert(model.config).eval()
    net.load_state_dict(model.state_dict())
    with pytest.raises(ValueError, match="does not reproduce.*backend='torch'"):
        BertPoolingVectorizer((net, tokenizer), backend="onnx").fit(["a"])
    assert list(fresh_cache.iterdir()) == []


def test_missing_onnxruntime_names_the_extra(tiny_bert, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r"sklearn-isotropy\[onnx\]"):
        BertPoolingVectorizer(tiny_bert, backend="onnx").fit(["a"])
