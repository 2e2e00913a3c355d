"""Exporting fitted pipelines: sentence-transformers, ONNX, faiss.

Every exported artefact is run by its own runtime (sentence-transformers,
onnxruntime, faiss) and compared with the pipeline's ``transform``.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_isotropy import (
    BertPoolingVectorizer,
    GlowFlowTransformer,
    NATSVTransformer,
    StandardNormalizer,
    WhiteningTransformer,
)
from sklearn_isotropy.export import (
    register_skl2onnx_converters,
    to_faiss,
    to_onnx,
    to_sentence_transformers,
)
from sklearn_isotropy.export._affine import fold_affine

WORDS = (
    "the a cat dog sat on mat ran fast slow man woman is was big small red blue "
    "play read walk"
).split()


@pytest.fixture(scope="module")
def texts():
    rng = np.random.RandomState(0)
    out = [" ".join(rng.choice(WORDS, size=rng.randint(1, 14))) for _ in range(80)]
    # an empty text, word pieces, punctuation and a text longer than 12 tokens
    return [*out, "", "playing walked reads !", " ".join(WORDS)]


@pytest.fixture(scope="module")
def cone(make_cone):
    return make_cone(400, 12, seed=1)


def _fit(pipe, texts):
    with warnings.catch_warnings():
        # a fit on few rows may warn about rank; not what these tests check
        warnings.simplefilter("ignore")
        return pipe.fit(texts)


def _onnx_run(model, X):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, {session.get_inputs()[0].name: X})[0]


# ---------------------------------------------------------------- the fold
LINEAR = [
    pytest.param(lambda: WhiteningTransformer(), id="whitening"),
    pytest.param(lambda: WhiteningTransformer(n_components=5), id="whitening-k5"),
    pytest.param(
        lambda: WhiteningTransformer(noise_variance="auto"), id="whitening-auto"
    ),
    pytest.param(lambda: WhiteningTransformer(method="zca", power=0.5), id="zca"),
    pytest.param(lambda: NATSVTransformer(n_components=2), id="natsv"),
    pytest.param(lambda: NATSVTransformer(2, center=False), id="natsv-uncentred"),
    pytest.param(lambda: StandardNormalizer(), id="sn"),
    pytest.param(lambda: StandardNormalizer(with_mean=False), id="sn-no-mean"),
    pytest.param(lambda: StandardNormalizer(with_std=False), id="sn-no-std"),
]


@pytest.mark.parametrize("make", LINEAR)
def test_fold_is_the_transform_in_float64(make, cone):
    est = make().fit(cone)
    affine = fold_affine([("step", est)], what="test")
    X = cone[:50] * 1.5 - 0.3  # rows the estimator was not fitted on
    assert_allclose(affine.apply(X), est.transform(X), rtol=1e-12, atol=1e-12)
    assert_allclose(X @ affine.weight + affine.offset, est.transform(X), atol=1e-9)


def test_fold_keeps_standard_normalizer_constant_features(cone):
    X = cone.copy()
    X[:, 3] = 7.0  # a constant feature: scale_ is 1 there, not 0
    est = StandardNormalizer().fit(X)
    affine = fold_affine([("sn", est)], what="test")
    assert np.all(np.isfinite(affine.weight))
    assert_allclose(affine.apply(X), est.transform(X), atol=1e-12)


def test_fold_of_a_chain_is_the_composition(cone):
    pipe = make_pipeline(
        StandardNormalizer(), NATSVTransformer(1), WhiteningTransformer(n_components=4)
    ).fit(cone)
    affine = fold_affine(list(pipe.steps), what="test")
    assert affine.steps == (
        "standardnormalizer",
        "natsvtransformer",
        "whiteningtransformer",
    )
    assert (affine.n_features_in, affine.n_features_out) == (12, 4)
    assert_allclose(affine.apply(cone), pipe.transform(cone), atol=1e-10)


# ------------------------------------------------------- sentence-transformers
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


# -------------------------------------------------------------------- ONNX
@pytest.mark.parametrize("make", LINEAR)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_parity_linear(make, dtype, cone):
    pytest.importorskip("onnx")
    est = make().fit(cone)
    X = cone.astype(dtype)
    got = _onnx_run(to_onnx(est, dtype=dtype), X)
    assert got.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert_allclose(got, est.transform(X), rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_chain_is_one_affine_map(dtype, cone):
    onnx = pytest.importorskip("onnx")
    pipe = make_pipeline(StandardNormalizer(), WhiteningTransformer(n_components=5))
    pipe.fit(cone)
    model = to_onnx(pipe, n_features=12, dtype=dtype, X_check=cone)
    assert [n.op_type for n in model.graph.node] == ["Sub", "MatMul", "Add"]
    onnx.checker.check_model(model)
    X = cone.astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert_allclose(_onnx_run(model, X), pipe.transform(X), rtol=0, atol=tol)
    # a list is a chain too
    as_list = to_onnx(list(pipe), dtype=dtype)
    assert_allclose(_onnx_run(as_list, X), pipe.transform(X), rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_skl2onnx_converts_them_inside_a_pipeline(dtype, cone):
    skl2onnx = pytest.importorskip("skl2onnx")
    register_skl2onnx_converters()
    pipe = make_pipeline(
        StandardScaler(),  # a scikit-learn step between ours
        NATSVTransformer(1),
        WhiteningTransformer(n_components=4),
    ).fit(cone)
    X = cone.astype(dtype)
    model = skl2onnx.to_onnx(pipe, X[:1])
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert_allclose(_onnx_run(model, X), pipe.transform(X), rtol=0, atol=tol)


@pytest.fixture(scope="module")
def flow(cone):
    # two steps a level (the tests below have one): consecutive steps and
    # both levels, in two thirds of the export time of the default three
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GlowFlowTransformer(
            depth=2, max_iter=2, coupling="affine", hidden_size=8, random_state=0
        ).fit(cone)


@pytest.fixture(scope="module")
def flow_onnx(flow):
    """``to_onnx(flow, dtype=dtype)``, exported once per dtype."""
    pytest.importorskip("onnx")
    models = {}

    def get(dtype):
        if dtype not in models:
            models[dtype] = to_onnx(flow, dtype=dtype)  # checked on sample() rows
        return models[dtype]

    return get


# The exported flow against transform. float32: 1e-4; the Glow runs in
# float32 in both, and onnxruntime's kernels (exp, tanh, products) and the
# exporter's folded constants differ from torch's in the last bits, which the
# flow carries to about 2e-5 on latents of magnitude 30 -- as far as float32
# transform itself is from float64 there. float64: 1e-10.
FLOW_TOL = {np.float32: 1e-4, np.float64: 1e-10}


def _assert_flow_parity(model, X, expected):
    got = _onnx_run(model, X)
    assert got.dtype == X.dtype and got.shape == expected.shape
    assert_allclose(got, expected, rtol=0, atol=FLOW_TOL[X.dtype.type])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_flow_parity(flow, flow_onnx, dtype, make_cone):
    X = make_cone(300, 12, seed=2).astype(dtype)  # new rows, another batch size
    _assert_flow_parity(flow_onnx(dtype), X, flow.transform(X))
    _assert_flow_parity(flow_onnx(dtype), X[:1], flow.transform(X[:1]))


def test_onnx_flow_parity_rank_deficient(make_cone):
    # a singular covariance makes the Glow see only rank_ coordinates while
    # the others bypass it
    pytest.importorskip("onnx")
    X = make_cone(200, 8, seed=3)
    X = np.hstack([X, X[:, :2] + X[:, 2:4]])  # two dependent columns
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = GlowFlowTransformer(
            depth=1,  # one step a level has every kind of layer, exports faster
            max_iter=2,
            coupling="affine",
            hidden_size=8,
            random_state=0,
        ).fit(X)
    assert est.rank_ == 8 < X.shape[1]
    model = to_onnx(est, X_check=X[:20])
    X = X.astype(np.float32)
    _assert_flow_parity(model, X, est.transform(X))


def test_onnx_linear_then_flow_without_initial_whitening(make_cone):
    """A linear chain, then a flow of init="bert-flow", in one graph.

    The flow has no initial whitening; the linear steps fold into one affine
    map before the Glow.
    """
    pytest.importorskip("onnx")
    X = make_cone(200, 8, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flow = GlowFlowTransformer(
            init="bert-flow",
            depth=1,
            max_iter=2,
            coupling="affine",
            hidden_size=8,
            random_state=0,
        ).fit(X)
    assert flow.whitener_ is None
    pipe = make_pipeline(StandardNormalizer(), NATSVTransformer(1)).fit(X)
    chain = [*pipe, flow]  # the flow was fitted on the raw rows: any input works
    model = to_onnx(chain, X_check=X[:20])
    X = X.astype(np.float32)
    _assert_flow_parity(model, X, flow.transform(pipe.transform(X)))


def _preset_flow(preset, X):
    """A flow of ``preset`` with one step a level (every kind of layer)."""
    return GlowFlowTransformer.from_preset(
        preset,
        depth=1,  # one step a level has every kind of layer, and exports faster
        hidden_size=8,
        max_iter=2,
        early_stopping=False,  # so the couplings surely move off the identity
        learning_rate=1e-2,
        random_state=0,
    ).fit(X)


# The two presets, whose couplings are additive (the affine ones are tested
# above with either initialisation), each on an odd width, so the couplings
# and the factoring-out split unevenly; each graph is written in the opset
# asked for, with the lowest IR version of that opset (opsets whose IR
# versions differ, from onnx's release table): "bert-flow" in opset 21 (IR
# 10) here, "density" in the default opset 18 (IR 8) with a new layer below.
def test_onnx_flow_parity_presets(make_cone):
    pytest.importorskip("onnx")
    est = _preset_flow("bert-flow", make_cone(300, 7, seed=4))
    model = to_onnx(est, target_opset=21)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 21)]
    assert model.ir_version == 10
    X = make_cone(200, 7, seed=5).astype(np.float32)
    _assert_flow_parity(model, X, est.transform(X))


def test_onnx_flow_with_a_new_layer_needs_no_export_code(make_cone):
    """A flow with a layer defined here exports and matches transform.

    The layer (in the "density" preset) is inside the flow's first level: the
    graph is traced from the layers themselves.
    """
    pytest.importorskip("onnx")
    torch = pytest.importorskip("torch")

    class SinhArcsinh(torch.nn.Module):
        """A flow layer no export code knows of: ``z = sinh(a asinh(x) + b)``.

        The sinh-arcsinh map of Jones and Pewsey (2009), per feature with
        ``a = exp(log_a) > 0``, written to the layer contract only:
        ``forward(x) -> (z, log_det)`` and ``inverse(z) -> (x, log_det)``.
        """

        def __init__(self, n_features):
            super().__init__()
            gen = torch.Generator().manual_seed(0)
            self.log_a = torch.nn.Parameter(
                0.5 * torch.randn(n_features, generator=gen)
            )
            self.b = torch.nn.Parameter(0.5 * torch.randn(n_features, generator=gen))

        def forward(self, x):
            y = torch.exp(self.log_a) * torch.asinh(x) + self.b
            log_det = self.log_a + torch.log(torch.cosh(y)) - 0.5 * torch.log1p(x**2)
            return torch.sinh(y), log_det.sum(1)

        def inverse(self, z):
            y = torch.asinh(z)
            x = torch.sinh((y - self.b) * torch.exp(-self.log_a))
            log_det = -self.log_a - torch.log(torch.cosh(y)) + 0.5 * torch.log1p(x**2)
            return x, log_det.sum(1)

    X = make_cone(300, 7, seed=4)
    est = _preset_flow("density", X)
    layer = SinhArcsinh(est.rank_)
    u = torch.randn(5, est.rank_, dtype=torch.float64)
    with torch.no_grad():  # it keeps the contract
        z, log_det = layer.double()(u)
        u_back, inv_log_det = layer.inverse(z)
    assert_allclose(u_back.numpy(), u.numpy(), atol=1e-10)
    assert_allclose(inv_log_det.numpy(), -log_det.numpy(), atol=1e-10)
    before = est.transform(X)
    est.flow_.levels[0].layers.insert(1, layer.float())
    Z = est.transform(X)
    assert np.abs(Z - before).max() > 0.1  # the new layer is part of the map
    assert_allclose(est.inverse_transform(Z), X, atol=1e-4)

    model = to_onnx(est)  # checked on sample() rows inside, through the inverse
    assert {"Asinh", "Sinh"} <= {node.op_type for node in model.graph.node}
    # the default opset, with its lowest IR version
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 18)]
    assert model.ir_version == 8
    X32 = X.astype(np.float32)
    _assert_flow_parity(model, X32, est.transform(X32))


def test_onnx_flow_layer_that_cannot_trace_is_named(make_cone):
    """A layer with a Python branch on a tensor's value cannot be traced.

    torch.export refuses it: the error says so and names the step.
    """
    pytest.importorskip("onnx")
    torch = pytest.importorskip("torch")

    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # a branch on a value: not traceable
                return x, x.new_zeros(x.shape[0])
            return -x, x.new_zeros(x.shape[0])

    X = make_cone(100, 4, seed=8)
    est = GlowFlowTransformer(depth=1, hidden_size=8, max_iter=0).fit(X)
    # first in the flow: the trace stops there, at once
    est.flow_.levels[0].layers.insert(0, Branchy())
    with pytest.raises(
        RuntimeError, match=r"steps GlowFlowTransformer \(.*\)\. .*no Python branch"
    ):
        to_onnx(est)


def test_onnx_models_of_one_opset_compose(cone, flow, flow_onnx):
    """A linear model and a flow model exported apart join into one graph.

    With onnx.compose (same opset, same IR version), "Z" feeding "X".
    """
    onnx = pytest.importorskip("onnx")
    pipe = make_pipeline(StandardNormalizer(), NATSVTransformer(1)).fit(cone)
    linear = onnx.compose.add_prefix(to_onnx(pipe), "linear/")
    glow = onnx.compose.add_prefix(flow_onnx(np.float32), "flow/")
    merged = onnx.compose.merge_models(linear, glow, io_map=[("linear/Z", "flow/X")])
    X = cone.astype(np.float32)
    _assert_flow_parity(merged, X, flow.transform(pipe.transform(X)))


def test_onnx_target_opset_is_checked_before_any_export(cone, flow, monkeypatch):
    onnx = pytest.importorskip("onnx")
    torch = pytest.importorskip("torch")
    newest = onnx.defs.onnx_opset_version()
    whiten = WhiteningTransformer().fit(cone)

    def no_export(*args, **kwargs):
        raise AssertionError("export work started")

    monkeypatch.setattr(torch.onnx, "export", no_export)
    for est, opset, lowest in [
        (whiten, 3, 9),
        (whiten, newest + 1, 9),
        (flow, 3, 18),
        (flow, 17, 18),
        (flow, newest + 1, 18),
        ([whiten, flow], 17, 18),
    ]:
        match = (
            rf"target_opset={opset} is out of range: .* needs opset {lowest} or "
            rf"later, .* knows opsets up to {newest}\. Pass target_opset between "
            rf"{lowest} and {newest}"
        )
        with pytest.raises(ValueError, match=match):
            to_onnx(est, target_opset=opset)
    for opset in ["18", 18.0, True]:
        with pytest.raises(TypeError, match="target_opset must be an integer"):
            to_onnx(whiten, target_opset=opset)
    # both ends of the range are written as asked, and run
    for opset in (9, newest):
        model = to_onnx(whiten, target_opset=opset, X_check=cone[:10])
        assert model.opset_import[0].version == opset


def test_onnx_errors(tiny_bert, cone):
    pytest.importorskip("onnx")
    with pytest.raises(NotFittedError, match="not fitted"):
        to_onnx(WhiteningTransformer())
    with pytest.raises(NotFittedError, match="not fitted"):
        to_onnx(GlowFlowTransformer())
    whiten = WhiteningTransformer().fit(cone)
    with pytest.raises(ValueError, match="n_features=5"):
        to_onnx(whiten, n_features=5)
    with pytest.raises(ValueError, match="float32 or numpy.float64"):
        to_onnx(whiten, dtype=np.float16)
    # a text pipeline is exported whole (tests/test_onnx_pipeline.py); a
    # vectorizer anywhere else is refused
    vec = BertPoolingVectorizer(tiny_bert)
    with pytest.raises(TypeError, match="to_sentence_transformers"):
        to_onnx([whiten, vec])
    with pytest.raises(TypeError, match="StandardScaler"):
        to_onnx([whiten, StandardScaler().fit(cone)])
    with pytest.raises(ValueError, match="expects 12 features"):
        to_onnx([WhiteningTransformer(n_components=3).fit(cone), whiten])


# ------------------------------------------------------------ parity check
def check_parity(got, expected, **kwargs):
    from sklearn_isotropy.export._common import check_parity

    check_parity(
        got,
        expected,
        what="to_onnx",
        graph="the graph",
        n_checked="6 rows",
        owner="estimator",
        **kwargs,
    )


def row_cosines(A, B):
    return np.sum(A * B, axis=1) / np.linalg.norm(A, axis=1) / np.linalg.norm(B, axis=1)


def test_parity_check_compares_each_row_in_direction_and_length():
    # what the check saw on a static pipeline that whitened float32 round-off:
    # a text off the fitted support, stretched to 7e7, set the tolerance of
    # every entry, and the other rows, in other directions, passed
    rng = np.random.default_rng(0)
    expected = rng.normal(size=(6, 8))
    expected[0] *= 7e7
    got = expected.copy()
    got[1:] = rng.normal(size=(5, 8))
    assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()  # old rule
    lowest = row_cosines(got, expected).min()
    message = rf"a row's norm .* between a row and transform's is {lowest:.4f}"
    with pytest.raises(RuntimeError, match=message):
        check_parity(got, expected)
    with pytest.raises(RuntimeError, match="refit it on the embeddings as they are"):
        check_parity(got, expected, lengths=False)
    # float32 round-off passes, also of a row at zero (an output at the mean)
    expected[3] = 0.0
    near = expected + 1e-6 * np.abs(expected).max(axis=1, keepdims=True) * (
        rng.normal(size=expected.shape)
    )
    near[3] = 1e-6 * rng.normal(size=8)
    check_parity(near.astype(np.float32), expected)
    # lengths=False: a positive factor per row is no difference, a sign is
    factors = rng.uniform(0.1, 10.0, size=(6, 1))
    check_parity(expected * factors, expected, lengths=False)
    with pytest.raises(RuntimeError, match="by up to"):
        check_parity(expected * factors, expected)
    flipped = expected * factors
    flipped[5] *= -1
    with pytest.raises(RuntimeError, match=r"transform's is -1\.0000"):
        check_parity(flipped, expected, lengths=False)
    # NaN and a wrong shape are differences too
    broken = expected.copy()
    broken[2, 1] = np.nan
    with pytest.raises(RuntimeError, match="differs from transform"):
        check_parity(broken, expected)
    with pytest.raises(RuntimeError, match=r"shape \(6, 7\) where transform returns"):
        check_parity(expected[:, :7], expected)


# ------------------------------------------------------------------- faiss
def test_faiss_linear_transform_parity(cone):
    faiss = pytest.importorskip("faiss")
    pipe = make_pipeline(
        StandardNormalizer(), WhiteningTransformer(n_components=6)
    ).fit(cone)
    transform = to_faiss(pipe)
    assert isinstance(transform, faiss.LinearTransform)
    assert (transform.d_in, transform.d_out) == (12, 6)
    assert transform.is_trained and transform.have_bias
    X = cone.astype(np.float32)
    assert_allclose(transform.apply(X), pipe.transform(X), rtol=0, atol=1e-5)


@pytest.mark.parametrize("make", LINEAR)
def test_faiss_parity_each_estimator(make, cone):
    pytest.importorskip("faiss")
    est = make().fit(cone)
    X = cone.astype(np.float32)
    assert_allclose(to_faiss(est).apply(X), est.transform(X), rtol=0, atol=1e-5)


def test_faiss_index_pre_transform_whitens_database_and_queries(cone, make_cone):
    faiss = pytest.importorskip("faiss")
    whiten = WhiteningTransformer(n_components=8).fit(cone)
    index = faiss.IndexPreTransform(to_faiss(whiten), faiss.IndexFlatIP(8))
    database = cone.astype(np.float32)
    queries = make_cone(20, 12, seed=3).astype(np.float32)
    index.add(database)
    scores, ids = index.search(queries, 5)
    Zq, Zd = whiten.transform(queries), whiten.transform(database)
    brute = Zq @ Zd.T
    expected = np.argsort(-brute, axis=1, kind="stable")[:, :5]
    assert_allclose(scores, np.take_along_axis(brute, expected, 1), rtol=1e-4)
    assert np.array_equal(ids[:, 0], expected[:, 0])


def test_faiss_errors(cone, flow):
    pytest.importorskip("faiss")
    with pytest.raises(NotFittedError):
        to_faiss(NATSVTransformer())
    with pytest.raises(TypeError, match="GlowFlowTransformer"):
        to_faiss([WhiteningTransformer().fit(cone), flow])
    with pytest.raises(ValueError, match="no estimator"):
        to_faiss(Pipeline([("skip", "passthrough")]))


# ------------------------------------------------------------ the docs page
def _python_blocks(path):
    """The ``.. code-block:: python`` blocks of an rst file, dedented."""
    blocks, current = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() == ".. code-block:: python":
            current = []
            blocks.append(current)
        elif current is not None:
            if line.strip() and not line.startswith("   "):
                current = None
            else:
                current.append(line)
    return [textwrap.dedent("\n".join(b)).strip() for b in blocks]


@pytest.mark.slow
def test_deploying_page_runs(default_model_path, stsb_dir, tmp_path, monkeypatch):
    """Every example of docs/user_guide/deploying.rst runs, in order."""
    for name in ("sentence_transformers", "onnxruntime", "skl2onnx", "faiss"):
        pytest.importorskip(name)
    from pathlib import Path

    page = Path(__file__).resolve().parents[1] / "docs/user_guide/deploying.rst"
    blocks = _python_blocks(page)
    assert len(blocks) == 8
    home = tmp_path / "data"
    home.mkdir()
    (home / "stsb").symlink_to(Path(stsb_dir).resolve())
    monkeypatch.setenv("SKLEARN_ISOTROPY_DATA", str(home))
    monkeypatch.chdir(tmp_path)
    namespace = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. a flow's slow-convergence notes
        for block in blocks:
            exec(compile(block, str(page), "exec"), namespace)  # noqa: S102
    pipe, queries = namespace["pipe"], namespace["queries"]
    expected = pipe.transform(queries)
    assert_allclose(namespace["served"], expected, rtol=0, atol=1e-5)
    assert_allclose(namespace["Z"], expected, rtol=0, atol=1e-5)
    assert_allclose(namespace["onnx_served"], expected, rtol=0, atol=1e-4)
    assert (tmp_path / "whitened-minilm-onnx" / "tokenizer.json").is_file()
    assert (tmp_path / "whitened-minilm" / "modules.json").is_file()
    assert namespace["ids"].shape == (2, 5)
