"""BertPoolingVectorizer(backend="onnx" | "onnx-int8"): parity, cache, errors.

The reference of every comparison is the torch backend, whose pooling the
tests of ``test_vectorizer.py`` check against Hugging Face's own
``output_hidden_states``. Exported models go to a temporary directory
(``$SKLEARN_ISOTROPY_ONNX_CACHE``, see ``conftest.onnx_model_cache``).
"""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.base import clone

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from sklearn_isotropy import BertPoolingVectorizer  # noqa: E402
from sklearn_isotropy.exceptions import CacheWarning  # noqa: E402
from sklearn_isotropy.text import _encoders, _onnx, _onnx_cache  # noqa: E402

# several lengths (so several padded batches), an empty text, word pieces
TEXTS = [
    "a small blue cat sat on the red mat",
    "the dog ran",
    "",
    "walking , reading and playing !",
    "qwerty",
    "the man is big and the woman is fast .",
    "a cat",
    "walked",
]

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


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache directory of this test's own."""
    monkeypatch.setenv(_onnx_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _copy_of(tiny_bert_objects):
    """A private copy of the tiny model (its weights are changed by the test)."""
    import copy

    model, tokenizer = tiny_bert_objects
    return copy.deepcopy(model), tokenizer


class _CountExports:
    def __init__(self, monkeypatch):
        self.calls = 0
        original = _onnx._export

        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(_onnx, "_export", counted)


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


@pytest.mark.parametrize("workers", [1, 3])
def test_batches_on_several_threads_give_the_same_rows(tiny_bert, monkeypatch, workers):
    monkeypatch.setattr(_encoders, "worker_threads", lambda: workers)
    expected = BertPoolingVectorizer(tiny_bert).fit_transform(TEXTS)
    # many batches (at most two per thread in flight), and one batch cut in
    # row slices so that every thread has one
    for batch_size in (1, 3, 64):
        vec = BertPoolingVectorizer(tiny_bert, backend="onnx", batch_size=batch_size)
        assert_allclose(vec.fit_transform(TEXTS), expected, rtol=0, atol=1e-4)


def test_large_batches_run_in_slices_of_few_tokens(tiny_bert, monkeypatch):
    expected = BertPoolingVectorizer(tiny_bert).fit_transform(TEXTS)
    vec = BertPoolingVectorizer(tiny_bert, backend="onnx", batch_size=64).fit(["a"])
    shapes = []
    original = _onnx.EncoderSession.run

    def recorded(self, inputs):
        shapes.append(inputs["attention_mask"].shape)
        return original(self, inputs)

    monkeypatch.setattr(_onnx.EncoderSession, "run", recorded)
    monkeypatch.setattr(_encoders, "TOKENS_PER_RUN", 30)
    assert_allclose(vec.transform(TEXTS), expected, rtol=0, atol=1e-4)
    # one batch of 8 texts padded to 14 tokens (112): 4 slices of 2 rows,
    # each trimmed to its longer text
    widths = sorted(len(ids) for ids in vec.tokenizer_(TEXTS)["input_ids"])[::-1]
    assert widths[0] == 14
    assert shapes == [(2, width) for width in widths[::2]]
    assert all(rows * width <= 30 for rows, width in shapes)


def test_a_failing_batch_fails_the_transform(tiny_bert, monkeypatch):
    monkeypatch.setattr(_encoders, "worker_threads", lambda: 2)
    vec = BertPoolingVectorizer(tiny_bert, backend="onnx", batch_size=2).fit(["a"])
    calls = []
    original = _onnx.EncoderSession.run

    def flaky(self, inputs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("out of memory in batch 3")
        return original(self, inputs)

    monkeypatch.setattr(_onnx.EncoderSession, "run", flaky)
    with pytest.raises(RuntimeError, match="batch 3"):
        vec.transform(TEXTS)


def test_the_progress_bar_counts_every_text(tiny_bert, monkeypatch):
    from sklearn_isotropy.text import _vectorizer

    counted = []

    class Bar:
        def __init__(self, total, **kwargs):
            self.total = total

        def update(self, n):
            counted.append(n)

        def close(self):
            pass

    monkeypatch.setattr(_vectorizer, "progress_bar", Bar)
    vec = BertPoolingVectorizer(
        tiny_bert, backend="onnx", batch_size=3, show_progress_bar=True
    )
    vec.fit(["a"]).transform(TEXTS)
    assert sum(counted) == len(TEXTS)


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


def test_the_export_traces_the_eager_attention(tiny_bert_objects, fresh_cache):
    model, tokenizer = _copy_of(tiny_bert_objects)
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
@pytest.mark.parametrize("params", POOLINGS + [{"layers": (0, 2, 6)}], ids=str)
def test_default_model_matches_torch(default_model_path, params):
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
    original = _onnx.EncoderSession.run

    def counted(self, inputs):
        runs.append(self.path.name)
        return original(self, inputs)

    monkeypatch.setattr(_onnx.EncoderSession, "run", counted)
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


# ------------------------------------------------------- the model's cache
def test_exported_once_per_model_and_cached_on_disk(
    tiny_bert_objects, fresh_cache, monkeypatch
):
    exports = _CountExports(monkeypatch)
    model, tokenizer = _copy_of(tiny_bert_objects)
    first = BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    out = first.transform(TEXTS)
    # a new vectorizer of the same weights (a new loaded encoder, new session)
    # reads the file; so does int8, which quantises that file
    again = BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    assert_allclose(again.transform(TEXTS), out, rtol=0, atol=0)
    BertPoolingVectorizer((model, tokenizer), backend="onnx-int8").fit(["a"])
    assert exports.calls == 1
    files = [p.name for p in fresh_cache.iterdir()]
    assert sorted(name.rpartition("-")[2] for name in files) == [
        "fp32.onnx",
        "int8.onnx",
    ]


def test_a_changed_model_is_exported_again(tiny_bert_objects, fresh_cache, monkeypatch):
    exports = _CountExports(monkeypatch)
    model, tokenizer = _copy_of(tiny_bert_objects)
    vec = BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    before = vec.transform(TEXTS)
    with torch.no_grad():
        for p in model.encoder.layer[-1].parameters():
            p.mul_(1.5)
    after = vec.transform(TEXTS)  # the same fitted vectorizer sees the change
    expected = BertPoolingVectorizer((model, tokenizer)).fit_transform(TEXTS)
    assert exports.calls == 2
    assert np.abs(after - before).max() > 1e-3
    assert_allclose(after, expected, rtol=0, atol=1e-4)
    assert len(list(fresh_cache.glob("*-fp32.onnx"))) == 2


def test_a_killed_export_leaves_nothing_behind(
    tiny_bert_objects, fresh_cache, monkeypatch
):
    model, tokenizer = _copy_of(tiny_bert_objects)

    def killed(loaded, spec, path):
        path.write_bytes(b"half a model")
        raise KeyboardInterrupt

    monkeypatch.setattr(_onnx, "_export", killed)
    with pytest.raises(KeyboardInterrupt):
        BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    assert list(fresh_cache.iterdir()) == []  # no model, no staging directory
    monkeypatch.undo()
    monkeypatch.setenv(_onnx_cache.CACHE_ENV, str(fresh_cache))
    got = BertPoolingVectorizer((model, tokenizer), backend="onnx").fit_transform(TEXTS)
    expected = BertPoolingVectorizer((model, tokenizer)).fit_transform(TEXTS)
    assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_a_damaged_cached_model_is_exported_again(tiny_bert_objects, fresh_cache):
    model, tokenizer = _copy_of(tiny_bert_objects)
    BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    (path,) = fresh_cache.glob("*.onnx")
    path.write_bytes(path.read_bytes()[:1000])  # damaged on disk
    with pytest.warns(CacheWarning, match="cannot load"):
        vec = BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    expected = BertPoolingVectorizer((model, tokenizer)).fit_transform(TEXTS)
    assert_allclose(vec.transform(TEXTS), expected, rtol=0, atol=1e-4)
    assert path.stat().st_size > 100_000


def _flip_signs(path):
    """Negate the largest weight of a cached graph in place (it still parses)."""
    data = bytearray(path.read_bytes())
    largest = max(onnx.load(path).graph.initializer, key=lambda t: len(t.raw_data))
    start = data.find(largest.raw_data)
    for i in range(start + 3, start + len(largest.raw_data), 4):
        data[i] ^= 0x80  # the sign bit of each float32
    path.write_bytes(bytes(data))


def test_a_bit_flipped_graph_is_exported_again_not_served(
    tiny_bert_objects, fresh_cache, tmp_path
):
    model, tokenizer = _copy_of(tiny_bert_objects)
    BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    (path,) = fresh_cache.glob("*-fp32.onnx")
    _flip_signs(path)
    # a new loaded encoder opens the file, as a new process does
    with pytest.warns(CacheWarning, match="do not match"):
        vec = BertPoolingVectorizer(
            (model, tokenizer), backend="onnx", memory=tmp_path
        ).fit(["a"])
    expected = BertPoolingVectorizer((model, tokenizer)).fit_transform(TEXTS)
    assert_allclose(vec.transform(TEXTS), expected, rtol=0, atol=1e-4)
    # the rows it cached are torch's too
    cached = BertPoolingVectorizer((model, tokenizer), memory=tmp_path).fit(["a"])
    assert_allclose(cached.transform(TEXTS), expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_int8_is_never_built_from_a_damaged_fp32_graph(
    tiny_bert_objects, fresh_cache, monkeypatch, damage
):
    model, tokenizer = _copy_of(tiny_bert_objects)
    expected = BertPoolingVectorizer(
        (model, tokenizer), backend="onnx-int8"
    ).fit_transform(TEXTS)  # from a sound fp32 graph
    monkeypatch.setenv(_onnx_cache.CACHE_ENV, str(fresh_cache / "other"))
    BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    (path,) = (fresh_cache / "other").glob("*-fp32.onnx")
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:1000])
    else:
        _flip_signs(path)
    with pytest.warns(CacheWarning, match="exporting it again"):
        int8 = BertPoolingVectorizer((model, tokenizer), backend="onnx-int8")
        got = int8.fit_transform(TEXTS)
    assert_allclose(got, expected, rtol=0, atol=0)  # quantisation is deterministic


def _read_only(monkeypatch, directory):
    """Refuse every write under ``directory`` (root ignores a chmod)."""
    import os

    real_open, real_mkdir = os.open, os.mkdir

    def inside(path):
        return str(os.path.abspath(os.fspath(path))).startswith(str(directory))

    def refused(path):
        raise PermissionError(13, "Permission denied", os.fspath(path))

    def opened(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and inside(path):
            refused(path)
        return real_open(path, flags, *args, **kwargs)

    def made(path, *args, **kwargs):
        if inside(path):
            refused(path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "mkdir", made)


def test_a_read_only_cache_of_sound_graphs_is_served(
    tiny_bert_objects, fresh_cache, monkeypatch
):
    import warnings

    model, tokenizer = _copy_of(tiny_bert_objects)
    for backend in ("onnx", "onnx-int8"):
        BertPoolingVectorizer((model, tokenizer), backend=backend).fit(["a"])
    exports = _CountExports(monkeypatch)
    _read_only(monkeypatch, fresh_cache)
    expected = BertPoolingVectorizer((model, tokenizer)).fit_transform(TEXTS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        for backend in ("onnx", "onnx-int8"):
            vec = BertPoolingVectorizer((model, tokenizer), backend=backend)
            got = vec.fit_transform(TEXTS)
            assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max()
    assert exports.calls == 0


def test_an_export_removes_only_its_own_abandoned_staging_folders(
    tiny_bert_objects, fresh_cache
):
    import os
    import time

    fresh_cache.mkdir()
    old = time.time() - 3 * 24 * 3600
    foreign = fresh_cache / ".staging-of-another-tool"
    ours = fresh_cache / f"{_onnx_cache._STAGING}killed"
    for folder in (foreign, ours):
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"half")
        os.utime(folder, (old, old))
    model, tokenizer = _copy_of(tiny_bert_objects)
    BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    assert foreign.is_dir() and (foreign / "model.onnx").read_bytes() == b"half"
    assert not ours.exists()


def test_a_directory_in_place_of_a_cached_graph(tiny_bert_objects, fresh_cache):
    model, tokenizer = _copy_of(tiny_bert_objects)
    BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    (path,) = fresh_cache.glob("*-fp32.onnx")
    path.unlink()
    path.mkdir()
    (path / "something").write_text("not ours")
    with pytest.warns(CacheWarning) as caught:
        vec = BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    # it cannot be read, nor replaced by the new export, which is used anyway
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and all(str(path) in m for m in messages)
    assert "it is a directory" in messages[0]
    assert "Is a directory" in messages[1] and "Remove" in messages[1]
    expected = BertPoolingVectorizer((model, tokenizer)).fit_transform(TEXTS)
    assert_allclose(vec.transform(TEXTS), expected, rtol=0, atol=1e-4)
    assert (path / "something").read_text() == "not ours"  # left alone


def test_an_int8_export_logs_nothing_through_onnxruntime(
    tiny_bert_objects, fresh_cache
):
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
        model, tokenizer = _copy_of(tiny_bert_objects)
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


def test_an_unwritable_cache_warns_and_still_encodes(
    tiny_bert_objects, tmp_path, monkeypatch
):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(_onnx_cache.CACHE_ENV, str(blocker / "cache"))
    model, tokenizer = _copy_of(tiny_bert_objects)
    with pytest.warns(CacheWarning, match=_onnx_cache.CACHE_ENV):
        vec = BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    expected = BertPoolingVectorizer((model, tokenizer)).fit_transform(TEXTS)
    assert_allclose(vec.transform(TEXTS), expected, rtol=0, atol=1e-4)


def test_cache_directory_default(monkeypatch, tmp_path):
    monkeypatch.delenv(_onnx_cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _onnx_cache.cache_dir() == tmp_path / "sklearn_isotropy" / "onnx"
    monkeypatch.setenv(_onnx_cache.CACHE_ENV, str(tmp_path / "mine"))
    assert _onnx_cache.cache_dir() == tmp_path / "mine"


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
