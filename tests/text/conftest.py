"""Fixtures of the text tests: a private ONNX cache, a private copy of the model."""

from __future__ import annotations

import copy

import pytest


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache directory of exported encoder graphs, this test's own."""
    from sklearn_isotropy.text import _onnx_cache

    monkeypatch.setenv(_onnx_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def tiny_bert_copy(tiny_bert_objects):
    """A private copy of the tiny model (its weights are changed by the test)."""
    model, tokenizer = tiny_bert_objects
    return copy.deepcopy(model), tokenizer
