"""The cache of exported encoder graphs under damage, races and refusals.

Each test has a cache directory of its own (``fresh_cache``) and a copy of the
tiny model whose weights it may change (``tiny_bert_copy``); the reference of
every comparison is the torch backend.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from tests._data import BATCH_TEXTS as TEXTS

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from sklearn_isotropy import BertPoolingVectorizer  # noqa: E402
from sklearn_isotropy.exceptions import CacheWarning  # noqa: E402
from sklearn_isotropy.text import _onnx_cache, _onnx_graph  # noqa: E402


class _CountExports:
    def __init__(self, monkeypatch):
        self.calls = 0
        original = _onnx_graph._export

        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(_onnx_graph, "_export", counted)


def test_exported_once_per_model_and_cached_on_disk(
    tiny_bert_copy, fresh_cache, monkeypatch
):
    exports = _CountExports(monkeypatch)
    model, tokenizer = tiny_bert_copy
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


def test_a_changed_model_is_exported_again(tiny_bert_copy, fresh_cache, monkeypatch):
    exports = _CountExports(monkeypatch)
    model, tokenizer = tiny_bert_copy
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
    tiny_bert_copy, fresh_cache, monkeypatch
):
    model, tokenizer = tiny_bert_copy

    def killed(loaded, spec, path):
        path.write_bytes(b"half a model")
        raise KeyboardInterrupt

    monkeypatch.setattr(_onnx_graph, "_export", killed)
    with pytest.raises(KeyboardInterrupt):
        BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    assert list(fresh_cache.iterdir()) == []  # no model, no staging directory
    monkeypatch.undo()
    monkeypatch.setenv(_onnx_cache.CACHE_ENV, str(fresh_cache))
    got = BertPoolingVectorizer((model, tokenizer), backend="onnx").fit_transform(TEXTS)
    expected = BertPoolingVectorizer((model, tokenizer)).fit_transform(TEXTS)
    assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_a_damaged_cached_model_is_exported_again(tiny_bert_copy, fresh_cache):
    model, tokenizer = tiny_bert_copy
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
    tiny_bert_copy, fresh_cache, tmp_path
):
    model, tokenizer = tiny_bert_copy
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
    tiny_bert_copy, fresh_cache, monkeypatch, damage
):
    model, tokenizer = tiny_bert_copy
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
    tiny_bert_copy, fresh_cache, monkeypatch
):
    import warnings

    model, tokenizer = tiny_bert_copy
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
    tiny_bert_copy, fresh_cache
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
    model, tokenizer = tiny_bert_copy
    BertPoolingVectorizer((model, tokenizer), backend="onnx").fit(["a"])
    assert foreign.is_dir() and (foreign / "model.onnx").read_bytes() == b"half"
    assert not ours.exists()


def test_a_directory_in_place_of_a_cached_graph(tiny_bert_copy, fresh_cache):
    model, tokenizer = tiny_bert_copy
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


def test_an_unwritable_cache_warns_and_still_encodes(
    tiny_bert_copy, tmp_path, monkeypatch
):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(_onnx_cache.CACHE_ENV, str(blocker / "cache"))
    model, tokenizer = tiny_bert_copy
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
