"""Tests of the on-disk cache of distilled token tables.

Each test has a fresh cache directory (``static_cache``); a cached table is
verified when read, and a damaged or unwritable cache is reported and
worked around.
"""

from __future__ import annotations

import json

import pytest
from numpy.testing import assert_allclose

pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import StaticEmbeddingVectorizer  # noqa: E402

# distilled tables go to a fresh directory per test, never ~/.cache
pytestmark = pytest.mark.usefixtures("static_cache")


def _no_distillation(monkeypatch):
    from sklearn_isotropy.text.static import _table

    def fail(*args, **kwargs):
        raise AssertionError("distilled although the table was cached")

    monkeypatch.setattr(_table, "distill", fail)


def test_a_second_fit_reads_the_verified_cache(tiny_bert, static_cache, monkeypatch):
    first = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    (entry,) = static_cache.iterdir()
    assert sorted(p.name for p in entry.iterdir()) == [
        "spec.json",
        "table.npy",
        "table.npy.sha256",
    ]
    assert json.loads((entry / "spec.json").read_text())["pooling"] == "mean"
    with monkeypatch.context() as patch:
        _no_distillation(patch)
        second = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    assert_allclose(second.embeddings_, first.embeddings_)
    # another pooling is another entry
    StaticEmbeddingVectorizer(tiny_bert, distill_pooling="token").fit(["a"])
    assert len(list(static_cache.iterdir())) == 2


@pytest.mark.parametrize(
    "damage", ["flip", "truncate", "digest", "spec only", "file", "empty"]
)
def test_a_damaged_cached_table_is_distilled_again(
    tiny_bert, static_cache, damage, monkeypatch
):
    import shutil
    import warnings

    from sklearn_isotropy.exceptions import CacheWarning

    first = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    (entry,) = static_cache.iterdir()
    table = entry / "table.npy"
    if damage == "flip":
        data = bytearray(table.read_bytes())
        data[-3] ^= 0xFF
        table.write_bytes(bytes(data))
    elif damage == "truncate":
        table.write_bytes(table.read_bytes()[:100])
    elif damage == "digest":
        (entry / "table.npy.sha256").unlink()
    elif damage == "spec only":  # the table and its digest deleted
        table.unlink()
        (entry / "table.npy.sha256").unlink()
    elif damage == "file":
        shutil.rmtree(entry)
        entry.write_text("not a folder")
    else:  # an empty folder is written into, without a warning
        shutil.rmtree(entry)
        entry.mkdir()
    if damage == "empty":
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            again = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    else:
        with pytest.warns(CacheWarning, match="damaged.*replacing it"):
            again = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    assert_allclose(again.embeddings_, first.embeddings_)
    # and replaced: the next fit reads it, without distilling or a warning
    assert sorted(p.name for p in entry.iterdir()) == [
        "spec.json",
        "table.npy",
        "table.npy.sha256",
    ]
    _no_distillation(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        served = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    assert_allclose(served.embeddings_, first.embeddings_)


def test_a_cache_directory_that_is_a_file_warns(tiny_bert, tmp_path, monkeypatch):
    from sklearn_isotropy.exceptions import CacheWarning

    cached = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    taken = tmp_path / "cache-file"
    taken.write_text("mine")
    monkeypatch.setenv("SKLEARN_ISOTROPY_STATIC_CACHE", str(taken))
    with pytest.warns(CacheWarning, match="is a file.*SKLEARN_ISOTROPY_STATIC_CACHE"):
        vec = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    assert_allclose(vec.embeddings_, cached.embeddings_)
    assert taken.read_text() == "mine"


def test_a_table_another_process_stored_is_not_a_failure(
    tiny_bert, static_cache, monkeypatch
):
    """A FileExistsError while storing is silent only over a valid table.

    Another process stored it then; otherwise it is reported.
    """
    import warnings

    from sklearn_isotropy.exceptions import CacheWarning
    from sklearn_isotropy.text.static import _table_cache

    write = _table_cache._write

    def racing(folder, table, spec, overwrite):
        write(folder, table, spec, overwrite)  # the other process wins
        raise FileExistsError(17, "File exists", str(folder))

    with monkeypatch.context() as patch:
        patch.setattr(_table_cache, "_write", racing)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])

    def refused(folder, table, spec, overwrite):
        raise FileExistsError(17, "File exists", str(folder))

    monkeypatch.setattr(_table_cache, "_write", refused)
    with pytest.warns(CacheWarning, match="Cannot store"):
        StaticEmbeddingVectorizer(tiny_bert, distill_pooling="token").fit(["a"])


def test_a_cache_that_cannot_be_written_is_read(tiny_bert, static_cache, monkeypatch):
    from sklearn_isotropy.exceptions import CacheWarning
    from sklearn_isotropy.text.static import _table_cache

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    first = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    monkeypatch.setattr(_table_cache, "publish_directory", read_only)
    with monkeypatch.context() as patch:  # a stored table is served
        _no_distillation(patch)
        served = StaticEmbeddingVectorizer(tiny_bert, weighting="uniform").fit(["a"])
    assert_allclose(served.embeddings_, first.embeddings_)
    # a new one is distilled, used and reported as not stored
    with pytest.warns(CacheWarning, match="Cannot store"):
        token = StaticEmbeddingVectorizer(tiny_bert, distill_pooling="token").fit(["a"])
    assert token.embeddings_.shape == first.embeddings_.shape
    assert len(list(static_cache.iterdir())) == 1
