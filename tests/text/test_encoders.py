"""The encoder backend at work: batches on threads, slices, failures, progress.

The ONNX backend's runner against the torch backend's rows, on texts of
several lengths.
"""

from __future__ import annotations

import pytest
from numpy.testing import assert_allclose

from tests._data import BATCH_TEXTS as TEXTS

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from sklearn_isotropy import BertPoolingVectorizer  # noqa: E402
from sklearn_isotropy.text import _encoders, _onnx_graph  # noqa: E402


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
    original = _onnx_graph.EncoderSession.run

    def recorded(self, inputs):
        shapes.append(inputs["attention_mask"].shape)
        return original(self, inputs)

    monkeypatch.setattr(_onnx_graph.EncoderSession, "run", recorded)
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
    original = _onnx_graph.EncoderSession.run

    def flaky(self, inputs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("out of memory in batch 3")
        return original(self, inputs)

    monkeypatch.setattr(_onnx_graph.EncoderSession, "run", flaky)
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
