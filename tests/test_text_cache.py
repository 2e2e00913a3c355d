"""The embedding cache of BertPoolingVectorizer(memory=...) under hostile conditions.

Every test works on real files in a temporary directory: shards damaged the
ways a crash, a full disk, a bad copy or a hand edit damage them; locations
that cannot be written; models whose weights change where a sampled hash
would not look. A "fresh process" is simulated by emptying the store's
in-process table of rows, so the files are read again.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import re
import shutil
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import BertPoolingVectorizer  # noqa: E402
from sklearn_isotropy.exceptions import CacheWarning, TruncationWarning  # noqa: E402
from sklearn_isotropy.text import _cache  # noqa: E402

TEXTS = [
    "the cat sat on the mat",
    "a dog ran",
    "",
    "the big red dog was playing fast !",
    "a small blue cat",
    "the woman is reading , the man is walking .",
]


class CallCounter:
    """Forward pre-hook counting the texts that reach the encoder."""

    def __init__(self, module):
        self.texts = 0
        self.handle = module.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        if "input_ids" in kwargs:
            self.texts += kwargs["input_ids"].shape[0]

    def remove(self):
        self.handle.remove()


@pytest.fixture
def fresh_process(monkeypatch):
    """Call to forget every cache row held in memory, as a new process would."""
    monkeypatch.setattr(_cache.EmbeddingStore, "_tables", {})

    def reset():
        _cache.EmbeddingStore._tables.clear()

    return reset


@pytest.fixture(scope="module")
def uncached(tiny_bert):
    return BertPoolingVectorizer(tiny_bert).fit(TEXTS).transform(TEXTS)


def _shards(root, pattern="shard-*.npz"):
    return sorted(Path(root).rglob(pattern))


def _our_warnings(caught, category=CacheWarning):
    return [w for w in caught if issubclass(w.category, category)]


def _transform_recording(vec, texts):
    counter = CallCounter(vec.model_)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            X = vec.transform(texts)
    finally:
        counter.remove()
    return X, counter.texts, _our_warnings(caught)


# ------------------------------------------------------------ damaged shards


def _digest(keys, values):
    return np.frombuffer(
        hashlib.sha256(keys.tobytes() + values.tobytes()).digest(), np.uint8
    )


def _rewrite(path, **arrays):
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def _load(path):
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def _truncate(path):
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])


def _empty(path):
    path.write_bytes(b"")


def _text(path):
    path.write_text("this is not an embedding shard\n")


def _pickle(path):
    np.save(path.open("wb"), np.array([{"evil": 1}], dtype=object), allow_pickle=True)


def _missing_array(path):
    arrays = _load(path)
    _rewrite(path, keys=arrays["keys"])


def _int_values(path):
    a = _load(path)
    values = np.round(a["values"] * 100).astype(np.int32)
    _rewrite(path, keys=a["keys"], values=values, digest=_digest(a["keys"], values))


def _wrong_width(path):
    a = _load(path)
    values = np.ascontiguousarray(a["values"][:, :-1])
    _rewrite(path, keys=a["keys"], values=values, digest=_digest(a["keys"], values))


def _nan(path):
    a = _load(path)
    values = a["values"].copy()
    values[1, 3] = np.nan
    _rewrite(path, keys=a["keys"], values=values, digest=_digest(a["keys"], values))


def _inf(path):
    a = _load(path)
    values = a["values"].copy()
    values[0, 0] = np.inf
    _rewrite(path, keys=a["keys"], values=values, digest=_digest(a["keys"], values))


def _float64(path):
    a = _load(path)
    values = a["values"].astype(np.float64)
    _rewrite(path, keys=a["keys"], values=values, digest=_digest(a["keys"], values))


def _bad_keys(path):
    a = _load(path)
    keys = a["keys"][:, :16].copy()
    _rewrite(path, keys=keys, values=a["values"], digest=_digest(keys, a["values"]))


def _flipped_value(path):
    # finite, right dtype and shape, but not what was written: only the
    # checksum stored with the rows can tell
    a = _load(path)
    values = a["values"].copy()
    values[2, 5] += 1.0
    _rewrite(path, keys=a["keys"], values=values, digest=a["digest"])


def _row_count_mismatch(path):
    a = _load(path)
    values = np.ascontiguousarray(a["values"][:-1])
    _rewrite(path, keys=a["keys"], values=values, digest=_digest(a["keys"], values))


DAMAGE = {
    "truncated": (_truncate, "cannot be read"),
    "emptied": (_empty, "cannot be read"),
    "text": (_text, "cannot be read"),
    "pickle": (_pickle, "cannot be read"),
    "missing-array": (_missing_array, "lacks the arrays"),
    "int-values": (_int_values, "dtype int32"),
    "float64-values": (_float64, "dtype float64"),
    "wrong-width": (_wrong_width, r"expected float32 of shape \(6, 32\)"),
    "row-count": (_row_count_mismatch, "shape"),
    "bad-keys": (_bad_keys, "keys have dtype"),
    "nan": (_nan, "NaN or infinity"),
    "inf": (_inf, "NaN or infinity"),
    "flipped-value": (_flipped_value, "checksum"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_shard_is_set_aside_and_rows_re_encoded(
    damage, tiny_bert, tmp_path, fresh_process, uncached
):
    damage_fn, reason = DAMAGE[damage]
    vec = BertPoolingVectorizer(tiny_bert, memory=tmp_path).fit(TEXTS)
    vec.transform(TEXTS)
    (shard,) = _shards(tmp_path)
    damage_fn(shard)

    fresh_process()
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(shard) in message and "damaged" in message
    assert re.search(reason, message), message
    assert n_encoded == len(TEXTS)  # every row of the bad shard re-encoded
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    assert np.isfinite(X).all() and X.dtype == np.float32
    assert (shard.parent / (shard.name + ".damaged")).exists()
    assert not shard.exists()

    # the next process reads the fresh shard: no warning, nothing encoded
    fresh_process()
    X2, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert caught == [] and n_encoded == 0
    assert_allclose(X2, uncached, rtol=1e-6, atol=1e-7)


def test_damaged_shard_among_good_ones_costs_only_its_rows(
    tiny_bert, tmp_path, fresh_process, uncached
):
    vec = BertPoolingVectorizer(tiny_bert, memory=tmp_path).fit(TEXTS)
    vec.transform(TEXTS[:3])
    (first,) = _shards(tmp_path)
    vec.transform(TEXTS)  # writes a second shard with the other three
    assert len(_shards(tmp_path)) == 2
    _truncate(first)
    fresh_process()
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert len(caught) == 1 and str(first) in str(caught[0].message)
    assert n_encoded == 3
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)


def test_shard_damaged_in_the_same_process_is_still_served_correctly(
    tiny_bert, tmp_path, uncached
):
    # rows already read are held in memory: damage afterwards changes nothing
    vec = BertPoolingVectorizer(tiny_bert, memory=tmp_path).fit(TEXTS)
    vec.transform(TEXTS)
    (shard,) = _shards(tmp_path)
    _empty(shard)
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert caught == [] and n_encoded == 0
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)


def test_cli_cache_with_a_damaged_shard(
    tiny_bert, tiny_sts_dir, tmp_path, fresh_process, capsys
):
    from sklearn_isotropy.cli import main

    cache = tmp_path / "cache"

    def run(out):
        argv = [
            "evaluate",
            "--data",
            str(tiny_sts_dir),
            "--model",
            str(tiny_bert),
            "--pooling",
            "mean",
            "--methods",
            "raw,whitening",
            "--n-components",
            "4",
            "--cache",
            str(cache),
            "--out",
            str(tmp_path / out),
            "--no-figures",
            "--quiet",
        ]
        with redirect_stdout(io.StringIO()):
            status = main(argv)
        assert status == 0
        payload = json.loads((tmp_path / out / "results.json").read_text())
        scores = {r["method"]: r["spearman_x100"] for r in payload["results"]}
        # the command line prints each warning as one line on stderr
        err = capsys.readouterr().err.splitlines()
        return scores, [ln for ln in err if ln.startswith("sklearn-isotropy: warning:")]

    first, shown = run("out1")
    assert shown == []
    shards = _shards(cache)
    assert shards
    for shard in shards:
        _truncate(shard)
    fresh_process()
    second, shown = run("out2")
    assert len(shown) == len(shards)
    assert all("damaged" in line for line in shown)
    assert all(str(shard) in " ".join(shown) for shard in shards)
    assert second == first


# -------------------------------------------------------- unwritable caches


def test_memory_pointing_at_a_file_warns_once_and_returns(
    tiny_bert, tmp_path, fresh_process, uncached
):
    target = tmp_path / "not-a-directory"
    target.write_text("a file\n")
    vec = BertPoolingVectorizer(tiny_bert, memory=target).fit(TEXTS)
    X, n_encoded, caught = _transform_recording(vec, TEXTS[:3])
    assert len(caught) == 1
    assert "Cannot write to the embedding cache" in str(caught[0].message)
    assert_allclose(X, uncached[:3], rtol=1e-6, atol=1e-7)
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert caught == []  # warned once
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    assert target.read_text() == "a file\n"


def _permissions_bind(directory):
    """Whether this process is refused writes to a read-only ``directory``."""
    try:
        (directory / "probe").write_text("x")
    except PermissionError:
        return True
    (directory / "probe").unlink()
    return False


def test_read_only_directory_warns_once_and_returns(
    tiny_bert, tmp_path, fresh_process, uncached
):
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o555)
    try:
        if not _permissions_bind(root):
            pytest.skip("file permissions do not bind this user (root)")
        vec = BertPoolingVectorizer(tiny_bert, memory=root).fit(TEXTS)
        X, _, caught = _transform_recording(vec, TEXTS)
        assert len(caught) == 1 and "Cannot write" in str(caught[0].message)
        assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    finally:
        root.chmod(0o755)


def test_read_only_cache_folder_with_a_damaged_shard(
    tiny_bert, tmp_path, fresh_process, uncached, monkeypatch
):
    vec = BertPoolingVectorizer(tiny_bert, memory=tmp_path).fit(TEXTS)
    vec.transform(TEXTS)
    (shard,) = _shards(tmp_path)
    _empty(shard)
    fresh_process()

    def refuse(src, dst):  # what a read-only directory does to a rename
        raise PermissionError(13, "Permission denied", str(src))

    monkeypatch.setattr(_cache.os, "replace", refuse)
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    messages = [str(w.message) for w in caught]
    assert len(caught) == 2, messages
    assert "could not be moved aside" in messages[0] and str(shard) in messages[0]
    assert "Cannot write" in messages[1]
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    assert shard.exists()
    assert not list(tmp_path.rglob(".tmp-*"))  # no half-written file left


def test_disk_full_while_writing_leaves_no_partial_file(
    tiny_bert, tmp_path, fresh_process, uncached, monkeypatch
):
    real_savez = np.savez

    def full(fh, **arrays):
        real_savez(io.BytesIO(), **arrays)
        fh.write(b"PK\x03\x04partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_cache.np, "savez", full)
    vec = BertPoolingVectorizer(tiny_bert, memory=tmp_path).fit(TEXTS)
    X, _, caught = _transform_recording(vec, TEXTS)
    assert len(caught) == 1 and "No space left" in str(caught[0].message)
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    monkeypatch.undo()
    # once the disk has room again, the cache works (and says nothing)
    fresh_process()
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert caught == [] and n_encoded == len(TEXTS)
    assert len(_shards(tmp_path)) == 1


# ---------------------------------------------------------------- the key


def _namespaces(root):
    base = Path(root) / "joblib" / "sklearn_isotropy" / "BertPoolingVectorizer"
    return sorted(p.name for p in base.iterdir()) if base.is_dir() else []


def _fresh_pair(path):
    from transformers import AutoModel, AutoTokenizer

    return AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def _unsampled_weight(model):
    """A weight element the old 512-values-a-tensor sample never read."""
    weight = model.encoder.layer[0].intermediate.dense.weight
    step = max(1, weight.numel() // 512)
    assert step > 1
    return weight, (0, 1)  # flat index 1, between samples 0 and step


def test_a_change_to_any_weight_changes_the_key(tiny_bert, tmp_path):
    model, tokenizer = _fresh_pair(tiny_bert)
    changed = copy.deepcopy(model)
    weight, index = _unsampled_weight(changed)
    with torch.no_grad():
        weight[index] += 0.5
    # tokenize once first, so both keys see the tokenizer in the same state
    BertPoolingVectorizer((model, tokenizer)).fit(TEXTS).transform(TEXTS)
    vec = BertPoolingVectorizer((model, tokenizer), memory=tmp_path).fit(TEXTS)
    before = vec.transform(TEXTS)
    vec2 = BertPoolingVectorizer((changed, tokenizer), memory=tmp_path).fit(TEXTS)
    after, n_encoded, _ = _transform_recording(vec2, TEXTS)
    assert n_encoded == len(TEXTS)
    assert len(_namespaces(tmp_path)) == 2
    expected = BertPoolingVectorizer((changed, tokenizer)).fit(TEXTS).transform(TEXTS)
    assert_allclose(after, expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(after, before)


def test_weights_changed_in_place_after_fit_are_noticed(tiny_bert, tmp_path):
    model, tokenizer = _fresh_pair(tiny_bert)
    vec = BertPoolingVectorizer((model, tokenizer), memory=tmp_path).fit(TEXTS)
    before = vec.transform(TEXTS)
    weight, index = _unsampled_weight(model)
    with torch.no_grad():
        weight[index] -= 0.5
    after, n_encoded, _ = _transform_recording(vec, TEXTS)
    assert n_encoded == len(TEXTS)
    expected = BertPoolingVectorizer((model, tokenizer)).fit(TEXTS).transform(TEXTS)
    assert_allclose(after, expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(after, before)


def test_key_does_not_depend_on_a_previous_uncached_run(
    tiny_bert, tmp_path, fresh_process
):
    # process A: encodes first without memory= (which leaves the tokenizer's
    # truncation set), then with it
    model, tokenizer = _fresh_pair(tiny_bert)
    pair = (model, tokenizer)
    with pytest.warns(TruncationWarning):
        BertPoolingVectorizer(pair, max_length=12).fit(TEXTS).transform(TEXTS)
    BertPoolingVectorizer(pair, memory=tmp_path).fit(TEXTS).transform(TEXTS)
    # process B: a fresh tokenizer and model, straight to the cache
    fresh_process()
    vec = BertPoolingVectorizer(_fresh_pair(tiny_bert), memory=tmp_path).fit(TEXTS)
    _, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert len(_namespaces(tmp_path)) == 1
    assert n_encoded == 0 and caught == []


def test_same_model_in_another_directory_shares_the_cache(
    tiny_bert, tmp_path, fresh_process
):
    copy_dir = tmp_path / "elsewhere" / "model"
    shutil.copytree(tiny_bert, copy_dir)
    cache = tmp_path / "cache"
    BertPoolingVectorizer(tiny_bert, memory=cache).fit(TEXTS).transform(TEXTS)
    fresh_process()
    vec = BertPoolingVectorizer(_fresh_pair(copy_dir), memory=cache).fit(TEXTS)
    _, n_encoded, _ = _transform_recording(vec, TEXTS)
    assert n_encoded == 0
    assert len(_namespaces(cache)) == 1


def test_fingerprint_hashes_every_byte_and_is_reused(tiny_bert):
    from sklearn_isotropy.text._loading import LoadedEncoder

    model, tokenizer = _fresh_pair(tiny_bert)
    loaded = LoadedEncoder(model, tokenizer, "test")
    first = _cache.fingerprint(loaded)
    assert _cache.fingerprint(loaded) == first  # computed once, then reused
    # every element matters, e.g. the last one of the largest tensor
    name = max(model.state_dict(), key=lambda k: model.state_dict()[k].numel())
    flat = model.state_dict()[name].view(-1)
    original = flat[-1].item()
    with torch.no_grad():
        flat[-1] += 1e-3
    assert _cache.fingerprint(loaded) != first
    with torch.no_grad():
        flat[-1] = original
    # the same bytes again give the same key, in a new encoder object too
    assert _cache.fingerprint(loaded) == first
    assert _cache.fingerprint(LoadedEncoder(model, tokenizer, "test")) == first


def test_a_whole_tensor_changed_through_data_is_noticed(tiny_bert, tmp_path):
    # .data bypasses torch's version counter; the sampled entries catch it
    model, tokenizer = _fresh_pair(tiny_bert)
    vec = BertPoolingVectorizer((model, tokenizer), memory=tmp_path).fit(TEXTS)
    before = vec.transform(TEXTS)
    model.embeddings.word_embeddings.weight.data.mul_(2.0)
    after, n_encoded, _ = _transform_recording(vec, TEXTS)
    assert n_encoded == len(TEXTS)
    expected = BertPoolingVectorizer((model, tokenizer)).fit(TEXTS).transform(TEXTS)
    assert_allclose(after, expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(after, before)
