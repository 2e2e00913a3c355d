"""Tests of how an encoder is loaded: its dependencies and its fingerprint."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import StaticEmbeddingVectorizer  # noqa: E402


def test_without_torch_the_vectorizers_name_the_text_extra(tiny_bert, monkeypatch):
    from sklearn_isotropy import BertPoolingVectorizer

    monkeypatch.setitem(sys.modules, "torch", None)
    for vec in (StaticEmbeddingVectorizer(tiny_bert), BertPoolingVectorizer(tiny_bert)):
        with pytest.raises(ImportError, match=r"sklearn-isotropy\[text\]"):
            vec.fit(["a"])


def test_fingerprint_hashes_every_byte_and_is_reused(tiny_bert):
    from transformers import AutoModel, AutoTokenizer

    from sklearn_isotropy.text._loading import LoadedEncoder

    model = AutoModel.from_pretrained(tiny_bert).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    loaded = LoadedEncoder(model, tokenizer, "test")
    first = loaded.fingerprint()
    assert loaded.fingerprint() == first  # computed once, then reused
    # every element matters, e.g. the last one of the largest tensor
    name = max(model.state_dict(), key=lambda k: model.state_dict()[k].numel())
    flat = model.state_dict()[name].view(-1)
    original = flat[-1].item()
    with torch.no_grad():
        flat[-1] += 1e-3
    assert loaded.fingerprint() != first
    with torch.no_grad():
        flat[-1] = original
    # the same bytes again give the same key, in a new encoder object too
    assert loaded.fingerprint() == first
    assert LoadedEncoder(model, tokenizer, "test").fingerprint() == first
