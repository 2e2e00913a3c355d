"""Exporting a fitted text pipeline as a sentence-transformers model directory.

Every exported model is loaded by sentence-transformers (in this process, or
in a fresh one without sklearn_isotropy) and its ``encode`` compared with the
pipeline's ``transform``; the directory is written as any directory the user
creates, in place of another or through a link.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline, make_pipeline

from sklearn_isotropy import (
    BertPoolingVectorizer,
    GlowFlowTransformer,
    NATSVTransformer,
    StandardNormalizer,
    WhiteningTransformer,
)
from sklearn_isotropy.export import to_sentence_transformers
from tests._data import TINY_WORDS


@pytest.fixture(scope="module")
def texts():
    rng = np.random.RandomState(0)
    out = [" ".join(rng.choice(TINY_WORDS, size=rng.randint(1, 14))) for _ in range(80)]
    # an empty text, word pieces, punctuation and a text longer than 12 tokens
    return [*out, "", "playing walked reads !", " ".join(TINY_WORDS)]


def _fit(pipe, texts):
    with warnings.catch_warnings():
        # a fit on few rows may warn about rank; not what these tests check
        warnings.simplefilter("ignore")
        return pipe.fit(texts)


def _encode(path, texts, **kwargs):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu").encode(texts, **kwargs)


def _whitening_chain():
    return [StandardNormalizer(), WhiteningTransformer(n_components=8)]


def _projection_chain():
    return [NATSVTransformer(n_components=2), StandardNormalizer(with_std=False)]


# The tiny random BERT's first-token vectors (cls, pooler) vary by ~1e-3 per
# feature: standardising or whitening them multiplies float32 round-off by
# ~1e3, so that the pipeline itself changes by ~5e-5 with its batch size.
# Those presets are therefore checked through a chain that does not rescale;
# the whitening chain is checked on the mean poolings and on MiniLM below.
POOLINGS = [
    pytest.param({"pooling": "mean"}, _whitening_chain, id="mean"),
    pytest.param({"pooling": "cls"}, _projection_chain, id="cls"),
    pytest.param({"pooling": "pooler"}, _projection_chain, id="pooler"),
    pytest.param({"pooling": "first_last_avg"}, _whitening_chain, id="first_last"),
    pytest.param({"pooling": "last2_avg"}, _whitening_chain, id="last2_avg"),
    pytest.param({"pooling": "embeddings_avg"}, _whitening_chain, id="embeddings"),
    pytest.param({"layers": (0, 2)}, _whitening_chain, id="layers-0-2"),
]


@pytest.mark.parametrize(("pooling", "chain"), POOLINGS)
def test_sentence_transformers_parity_for_every_pooling(
    pooling, chain, tiny_bert, texts, tmp_path
):
    pytest.importorskip("sentence_transformers")
    # a chain of two post-processors after the vectorizer
    pipe = _fit(
        make_pipeline(BertPoolingVectorizer(tiny_bert, **pooling), *chain()), texts
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long text is truncated
        expected = pipe.transform(texts)
    model = to_sentence_transformers(pipe, tmp_path / "model")
    got = _encode(tmp_path / "model", texts)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert_allclose(got, expected, rtol=0, atol=1e-5)
    # the returned model is the saved one
    assert_allclose(model.encode(texts[:5]), got[:5], rtol=0, atol=1e-6)


def test_sentence_transformers_normalize_and_max_length(tiny_bert, texts, tmp_path):
    pytest.importorskip("sentence_transformers")
    vec = BertPoolingVectorizer(
        tiny_bert, pooling="first_last_avg", normalize=True, max_length=6
    )
    pipe = _fit(make_pipeline(vec, WhiteningTransformer(n_components=5)), texts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # most texts are truncated to 6 tokens
        expected = pipe.transform(texts)
    to_sentence_transformers(pipe, tmp_path / "m")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tmp_path / "m"), device="cpu")
    assert model.max_seq_length == 6
    names = [type(m).__name__ for m in model]
    assert names == [
        "Transformer",
        "WeightedLayerPooling",
        "Pooling",
        "Normalize",
        "Dense",
        "Dense",
    ]
    assert_allclose(model.encode(texts), expected, rtol=0, atol=1e-5)


def test_sentence_transformers_vectorizer_alone(tiny_bert, texts, tmp_path):
    pytest.importorskip("sentence_transformers")
    vec = BertPoolingVectorizer(tiny_bert, pooling="last2_avg", normalize=True)
    pipe = _fit(Pipeline([("embed", vec)]), texts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = pipe.transform(texts)
    to_sentence_transformers(pipe, tmp_path / "m")
    got = _encode(tmp_path / "m", texts)
    assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    # a bare fitted vectorizer exports the same model
    to_sentence_transformers(vec, tmp_path / "bare")
    assert_allclose(_encode(tmp_path / "bare", texts), got, rtol=0, atol=1e-6)


def test_sentence_transformers_dense_is_identity_with_bias(tiny_bert, texts, tmp_path):
    pytest.importorskip("sentence_transformers")
    pipe = _fit(
        make_pipeline(
            BertPoolingVectorizer(tiny_bert), WhiteningTransformer(n_components=4)
        ),
        texts,
    )
    to_sentence_transformers(pipe, tmp_path / "m")
    whiten = pipe[-1]
    # the centring Dense, then the map: identity activations, real biases
    centre = json.loads((tmp_path / "m" / "2_Dense" / "config.json").read_text())
    dense = json.loads((tmp_path / "m" / "3_Dense" / "config.json").read_text())
    for config in (centre, dense):
        assert config["activation_function"] == "torch.nn.modules.linear.Identity"
        assert config["bias"] is True
    assert (dense["in_features"], dense["out_features"]) == (32, 4)
    from safetensors.numpy import load_file

    weights = load_file(tmp_path / "m" / "3_Dense" / "model.safetensors")
    assert_allclose(weights["linear.weight"], whiten.whitening_.T, rtol=1e-6)
    shift = load_file(tmp_path / "m" / "2_Dense" / "model.safetensors")
    assert_allclose(shift["linear.bias"], -whiten.mean_, rtol=1e-6)
    card = (tmp_path / "m" / "README.md").read_text()
    assert "sklearn-isotropy" in card and "trust_remote_code" in card


# A fresh process that loads a saved model with sentence-transformers alone
# once a job file appears: {"model": directory, "texts": json file, "out":
# .npy file}. It exits 3 if sklearn_isotropy was imported all the same.
FRESH_PROCESS = """
import json, os, sys, time
import numpy as np
from sentence_transformers import SentenceTransformer
job_file = sys.argv[1]
deadline = time.monotonic() + 900
while not os.path.exists(job_file):
    if time.monotonic() > deadline:
        sys.exit(4)
    time.sleep(0.01)
with open(job_file) as fh:
    job = json.load(fh)
with open(job["texts"]) as fh:
    texts = json.load(fh)
model = SentenceTransformer(job["model"], device="cpu")
np.save(job["out"], model.encode(texts))
sys.exit(3 if "sklearn_isotropy" in sys.modules else 0)
"""


@pytest.fixture(scope="module", autouse=True)
def loader_process(request, tmp_path_factory):
    """``(process, job file)`` of FRESH_PROCESS, started with the module.

    Importing sentence-transformers takes the new process seconds; started
    here, when test_sentence_transformers_loads_in_a_fresh_process is
    among the tests to run, it does so while the tests before it run.
    """
    name = "test_sentence_transformers_loads_in_a_fresh_process"
    wanted = any(
        getattr(item, "module", None) is request.module
        and getattr(item, "originalname", None) == name
        for item in request.session.items
    )
    if not wanted or importlib.util.find_spec("sentence_transformers") is None:
        yield None
        return
    job = tmp_path_factory.mktemp("fresh_process") / "job.json"
    process = subprocess.Popen(
        [sys.executable, "-c", FRESH_PROCESS, str(job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield process, job
    if process.poll() is None:  # its test did not get to give it a job
        process.kill()
    process.communicate()


def test_sentence_transformers_loads_in_a_fresh_process(
    tiny_bert, texts, tmp_path, loader_process
):
    pytest.importorskip("sentence_transformers")
    process, job = loader_process
    pipe = _fit(
        make_pipeline(
            BertPoolingVectorizer(tiny_bert, pooling="first_last_avg"),
            NATSVTransformer(n_components=2),
            WhiteningTransformer(n_components=6),
        ),
        texts,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = pipe.transform(texts)
    to_sentence_transformers(pipe, tmp_path / "m")
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    paths = {"model": "m", "texts": "texts.json", "out": "out.npy"}
    staged = tmp_path / "job.json"
    staged.write_text(json.dumps({k: str(tmp_path / v) for k, v in paths.items()}))
    os.replace(staged, job)  # appears whole
    _, err = process.communicate(timeout=300)
    # 0: encoded, and the saved model needed no sklearn_isotropy
    assert process.returncode == 0, err[-2000:]
    assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=0, atol=1e-5)


def test_sentence_transformers_default_model(default_model_path, stsb_dir, tmp_path):
    pytest.importorskip("sentence_transformers")
    from sklearn_isotropy.datasets import load_sts

    sentences = load_sts(stsb_dir, split="dev").sentences1[:120]
    pipe = _fit(
        make_pipeline(
            BertPoolingVectorizer(default_model_path, pooling="first_last_avg"),
            WhiteningTransformer(n_components=64),
        ),
        sentences,
    )
    expected = pipe.transform(sentences)
    to_sentence_transformers(pipe, tmp_path / "minilm")
    got = _encode(tmp_path / "minilm", sentences, batch_size=16)
    assert got.shape == (120, 64)
    assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_sentence_transformers_errors(tiny_bert, texts, tmp_path, cone):
    pytest.importorskip("sentence_transformers")
    unfitted = make_pipeline(BertPoolingVectorizer(tiny_bert), WhiteningTransformer())
    with pytest.raises(NotFittedError, match="bertpoolingvectorizer"):
        to_sentence_transformers(unfitted, tmp_path / "a")

    vec = BertPoolingVectorizer(tiny_bert).fit(texts)
    half = Pipeline([("embed", vec), ("whiten", WhiteningTransformer())])
    with pytest.raises(NotFittedError, match="'whiten'.*not fitted"):
        to_sentence_transformers(half, tmp_path / "b")

    flow = GlowFlowTransformer(max_iter=1, random_state=0)
    with_flow = _fit(Pipeline([("embed", vec), ("flow", flow)]), texts)
    with pytest.raises(TypeError, match="'flow' \\(GlowFlowTransformer\\)"):
        to_sentence_transformers(with_flow, tmp_path / "c")

    with pytest.raises(TypeError, match="BertPoolingVectorizer"):
        to_sentence_transformers(make_pipeline(WhiteningTransformer().fit(cone)), "x")

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        to_sentence_transformers(vec, tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    to_sentence_transformers(vec, tmp_path / "full", overwrite=True)
    assert (tmp_path / "full" / "modules.json").is_file()
    assert not (tmp_path / "full" / "keep.txt").exists()


@pytest.mark.parametrize("wrong", ["pooling", "centring", "truncation"])
def test_a_wrong_export_is_refused_by_the_parity_check(
    tiny_bert, texts, tmp_path, monkeypatch, wrong
):
    """The exported model is run on check texts and compared with transform.

    A text pipeline's export used to be written unchecked. Made wrong on
    purpose (the first token for the mean, the whitening's centring left
    out, a shorter maximum length), it is now refused before anything is
    written; the right one passes (the other tests of this module).
    """
    pytest.importorskip("sentence_transformers")
    from sklearn_isotropy.export import _sentence_transformers as exporter

    pipe = _fit(
        make_pipeline(
            BertPoolingVectorizer(tiny_bert), WhiteningTransformer(n_components=8)
        ),
        texts,
    )
    if wrong == "pooling":
        monkeypatch.setitem(exporter._POOLING_EXPORTS, "mean", exporter._cls)
    elif wrong == "centring":
        real = exporter._dense_modules
        monkeypatch.setattr(exporter, "_dense_modules", lambda a: real(a)[1:])
    else:
        from sentence_transformers.sentence_transformer import modules

        real = modules.Transformer

        def shorter(*args, max_seq_length=None, **kwargs):
            return real(*args, max_seq_length=8, **kwargs)

        monkeypatch.setattr(modules, "Transformer", shorter)
    message = (
        r"to_sentence_transformers: sentence-transformers' encode of the exported "
        r"model differs from transform on 5 texts: by up to .* of a row's norm"
    )
    with pytest.raises(RuntimeError, match=message):
        to_sentence_transformers(pipe, tmp_path / "model")
    assert not (tmp_path / "model").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no staging folder


def test_the_parity_check_encodes_with_torch_outside_the_users_cache(
    tiny_bert, texts, tmp_path
):
    """An int8 ONNX vectorizer with ``memory=`` exports its torch model.

    The exported model runs the float32 torch encoder, so the check compares
    it with the vectorizer's torch encoding (the int8 embeddings differ by
    more than its tolerance), and the check texts are not written into the
    user's embedding cache.
    """
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("onnxruntime")
    import sqlite3

    vec = BertPoolingVectorizer(
        tiny_bert, backend="onnx-int8", memory=tmp_path / "memory"
    )
    pipe = _fit(make_pipeline(vec, WhiteningTransformer(n_components=8)), texts)
    pipe.transform(texts[:10])
    (database,) = (tmp_path / "memory").rglob("*.sqlite3")

    def cached():
        with sqlite3.connect(database) as connection:
            return connection.execute("select count(*) from embeddings").fetchone()[0]

    before = cached()
    to_sentence_transformers(pipe, tmp_path / "model")
    assert cached() == before
    # the same whitening, after the torch encoder
    torch_vec = BertPoolingVectorizer(tiny_bert).fit(texts)
    expected = pipe[1].transform(torch_vec.transform(texts[:10]))
    assert_allclose(_encode(tmp_path / "model", texts[:10]), expected, atol=1e-5)
    assert np.abs(pipe.transform(texts[:10]) - expected).max() > 1e-3  # int8


def test_overwrite_leaves_nothing_of_the_previous_export(tiny_bert, tmp_path, texts):
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    pipe = _fit(
        make_pipeline(
            BertPoolingVectorizer(tiny_bert, pooling="first_last_avg"),
            WhiteningTransformer(n_components=4),
        ),
        texts,
    )
    target = tmp_path / "model"
    to_sentence_transformers(pipe, target)
    assert any(p.name.endswith("_Dense") for p in target.iterdir())
    vec = BertPoolingVectorizer(tiny_bert).fit(texts)
    to_sentence_transformers(vec, target, overwrite=True)
    # no folder of the whitening export (its weights) survives
    assert not any(
        p.name.endswith(("_Dense", "_WeightedLayerPooling")) for p in target.iterdir()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging left
    got = SentenceTransformer(str(target), device="cpu").encode(texts[:3])
    assert_allclose(got, vec.transform(texts[:3]), atol=1e-5)


@pytest.fixture(scope="module")
def bare_vec(tiny_bert, texts):
    return BertPoolingVectorizer(tiny_bert).fit(texts)


def _modes(root):
    """The permission bits of ``root`` and of every file and folder in it."""
    paths = [root, *root.rglob("*")]
    dirs = {stat.S_IMODE(p.stat().st_mode) for p in paths if p.is_dir()}
    files = {stat.S_IMODE(p.stat().st_mode) for p in paths if p.is_file()}
    return dirs, files


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_exported_directory_gets_the_users_umask(bare_vec, tmp_path, umask):
    # not the 0700 of a temporary directory: what any directory the user
    # creates gets (0755 under umask 022), also when replacing one
    pytest.importorskip("sentence_transformers")
    (tmp_path / "replaced").mkdir(mode=0o700)
    (tmp_path / "replaced" / "old.txt").write_text("old")
    old = os.umask(umask)
    try:
        to_sentence_transformers(bare_vec, tmp_path / "new")
        to_sentence_transformers(bare_vec, tmp_path / "replaced", overwrite=True)
    finally:
        os.umask(old)
    for name in ("new", "replaced"):
        dirs, files = _modes(tmp_path / name)
        assert dirs == {0o777 & ~umask}, (name, dirs)
        assert files == {0o666 & ~umask}, (name, files)


def _busy_when_renaming(monkeypatch, directory):
    """Make a rename of ``directory`` itself fail as a mount point's does."""
    directory = directory.resolve()
    for name in ("replace", "rename"):
        real = getattr(os, name)

        def refuse(src, dst, *args, _real=real, **kwargs):
            if directory in (Path(src).resolve(), Path(dst).resolve()):
                raise OSError(errno.EBUSY, "Device or resource busy", str(src))
            return _real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, name, refuse)


def test_export_into_an_empty_mount_point(bare_vec, texts, tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers")
    mount = tmp_path / "mnt"
    mount.mkdir()
    _busy_when_renaming(monkeypatch, mount)
    to_sentence_transformers(bare_vec, mount)
    monkeypatch.undo()
    assert (mount / "modules.json").is_file()
    assert not [p for p in mount.iterdir() if p.name.startswith(".")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mnt"]
    assert_allclose(_encode(mount, texts[:4]), bare_vec.transform(texts[:4]), atol=1e-5)


def test_export_into_the_empty_working_directory(
    bare_vec, texts, tmp_path, monkeypatch
):
    pytest.importorskip("sentence_transformers")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    to_sentence_transformers(bare_vec, ".")
    assert (tmp_path / "here" / "modules.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]
    assert_allclose(_encode(".", texts[:2]), bare_vec.transform(texts[:2]), atol=1e-5)


def _refused_before_any_work(monkeypatch):
    import sentence_transformers

    def building(*args, **kwargs):
        raise AssertionError("the model was built before the path was refused")

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", building)


def test_overwrite_refuses_what_cannot_be_replaced(bare_vec, tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers")
    _refused_before_any_work(monkeypatch)
    real = tmp_path / "real"
    real.mkdir()
    (real / "keep.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    before = sorted(p.name for p in tmp_path.iterdir())

    with pytest.raises(ValueError, match=rf"symbolic link to {real}.*Pass the"):
        to_sentence_transformers(bare_vec, link, overwrite=True)
    monkeypatch.chdir(real)
    with pytest.raises(ValueError, match="working directory"):
        to_sentence_transformers(bare_vec, ".", overwrite=True)
    with pytest.raises(ValueError, match="working directory or contains it"):
        to_sentence_transformers(bare_vec, tmp_path, overwrite=True)
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == real)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="mount point"):
        to_sentence_transformers(bare_vec, real, overwrite=True)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError, match="does not exist"):
        to_sentence_transformers(bare_vec, tmp_path / "dangling")
    # nothing written, renamed or left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "dangling"])
    assert link.is_symlink() and link.resolve() == real
    assert [p.name for p in real.iterdir()] == ["keep.txt"]


def test_export_through_a_link_to_an_empty_directory(bare_vec, texts, tmp_path):
    pytest.importorskip("sentence_transformers")
    (tmp_path / "real").mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real", target_is_directory=True)
    to_sentence_transformers(bare_vec, link)
    assert link.is_symlink()  # written into the directory it points to
    assert (tmp_path / "real" / "modules.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_nested_pipelines_and_foreign_steps(tiny_bert, tmp_path, texts, cone):
    pytest.importorskip("sentence_transformers")
    from sklearn.decomposition import PCA

    vec = BertPoolingVectorizer(tiny_bert).fit(texts)
    inner = make_pipeline(StandardNormalizer(), WhiteningTransformer(n_components=4))
    nested = _fit(Pipeline([("embed", vec), ("post", inner)]), texts)
    model = to_sentence_transformers(nested, tmp_path / "nested")
    assert_allclose(model.encode(texts[:3]), nested.transform(texts[:3]), atol=1e-5)
    with_pca = _fit(Pipeline([("embed", vec), ("pca", PCA(4))]), texts)
    with pytest.raises(TypeError, match="'pca' \\(PCA\\)") as err:
        to_sentence_transformers(with_pca, tmp_path / "pca")
    assert "GlowFlowTransformer" not in str(err.value).split("(")[-1]
    assert "nonlinear" not in str(err.value)
