"""A fitted text pipeline as one ONNX graph: to_onnx(pipe), save_onnx_pipeline.

Every graph is run with onnxruntime on token ids from the pipeline's own
tokenizer and compared with ``pipeline.transform``; the saved folder is
served in a subprocess in which torch and transformers cannot be imported.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline

pytest.importorskip("torch")
pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from sklearn_isotropy import (  # noqa: E402
    BertPoolingVectorizer,
    GlowFlowTransformer,
    NATSVTransformer,
    StandardNormalizer,
    WhiteningTransformer,
)
from sklearn_isotropy._utils import normalize_rows  # noqa: E402
from sklearn_isotropy.export import save_onnx_pipeline, to_onnx  # noqa: E402

WORDS = "the a cat dog sat on mat ran fast man woman is big red blue walk ##ing".split()
QUERIES = ["the cat sat on the mat", "", "a big red dog is walking fast !", "xyzzy"]


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(WORDS, size=rng.integers(2, 10))) for _ in range(200)]


def _run(model, vec, texts):
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    enc = vec.tokenizer_(texts, padding=True, truncation=True, return_tensors="np")
    feed = {i.name: enc[i.name].astype(np.int64) for i in session.get_inputs()}
    return session.run(["sentence_embedding"], feed)[0]


CHAINS = {
    "none": lambda: [],
    "whitening": lambda: [WhiteningTransformer(n_components=8, shrinkage=0.1)],
    "sn+natsv": lambda: [StandardNormalizer(), NATSVTransformer(n_components=2)],
    # one step a level: every kind of flow layer, exported in half the time of
    # the default three (test_onnx_chain.py exports flows of several steps a level)
    "flow": lambda: [GlowFlowTransformer(depth=1, max_iter=2, random_state=0)],
}


@pytest.mark.parametrize("chain", CHAINS, ids=str)
@pytest.mark.parametrize("normalize", [False, True])
def test_one_graph_from_token_ids(tiny_bert, corpus, chain, normalize):
    vec = BertPoolingVectorizer(
        tiny_bert, pooling="first_last_avg", normalize=normalize
    )
    pipe = make_pipeline(vec, *CHAINS[chain]()).fit(corpus)
    model = to_onnx(pipe)
    assert [i.name for i in model.graph.input] == [
        "input_ids",
        "attention_mask",
        "token_type_ids",
    ]
    assert [o.name for o in model.graph.output] == ["sentence_embedding"]
    expected = pipe.transform(QUERIES + corpus[:20])
    got = _run(model, vec, QUERIES + corpus[:20])
    assert got.shape == expected.shape
    assert_allclose(got, expected, rtol=0, atol=1e-4 * max(1, np.abs(expected).max()))


def test_the_vectorizer_alone(tiny_bert):
    vec = BertPoolingVectorizer(tiny_bert, pooling="cls", normalize=True).fit(["a"])
    assert_allclose(
        _run(to_onnx(vec), vec, QUERIES), vec.transform(QUERIES), rtol=0, atol=1e-5
    )


def test_normalize_nodes_match_normalize_rows():
    # the normalisation nodes alone, on rows no encoder gives: zeros, huge
    # and tiny entries
    from sklearn_isotropy.export import _pipeline

    graph = onnx.helper.make_graph(
        [],
        "normalize",
        [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["n", 3])],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, ["n", 3])],
    )
    _pipeline._add_normalize(graph, "X", "Y")
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 18)]
    )
    X = np.array(
        [[0, 0, 0], [3, -4, 0], [3e37, 3e37, -1e37], [1e-40, 0, -2e-40]], np.float32
    )
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    got = session.run(None, {"X": X})[0]
    expected, _ = normalize_rows(X, dtype=np.float32)
    assert np.isfinite(got).all()
    assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert_allclose(got[1], [0.6, -0.8, 0], rtol=1e-6)


def test_int8_pipeline_uses_the_int8_encoder(tiny_bert, corpus):
    vec = BertPoolingVectorizer(tiny_bert, backend="onnx-int8")
    pipe = make_pipeline(vec, WhiteningTransformer(n_components=8, shrinkage=0.1))
    pipe.fit(corpus)
    model = to_onnx(pipe)
    assert "MatMulInteger" in {n.op_type for n in model.graph.node}
    # int8 activations are quantised per batch: close, not equal
    expected = pipe.transform(QUERIES)
    error = np.abs(_run(model, vec, QUERIES) - expected).max()
    assert error < 0.05 * np.abs(expected).max()


def test_int8_check_runs_text_by_text_without_the_cache(tiny_bert, corpus, tmp_path):
    vec = BertPoolingVectorizer(
        tiny_bert, backend="onnx-int8", batch_size=64, memory=tmp_path / "memory"
    )
    pipe = make_pipeline(vec, WhiteningTransformer(n_components=8, shrinkage=0.1))
    pipe.fit(corpus)
    batched = pipe.transform(QUERIES + corpus)  # cached, from batches of 64
    model = to_onnx(pipe, X_check=QUERIES)  # to 1e-4, so not those rows
    single = np.concatenate([_run(model, vec, [text]) for text in QUERIES])
    assert np.abs(single - batched[: len(QUERIES)]).max() > 1e-4


def test_a_wrong_graph_is_refused(tiny_bert, corpus, monkeypatch):
    from sklearn_isotropy.export import _pipeline

    pipe = make_pipeline(
        BertPoolingVectorizer(tiny_bert), WhiteningTransformer(n_components=8)
    ).fit(corpus)
    other = WhiteningTransformer(n_components=8).fit(pipe[0].transform(corpus[:60]))
    monkeypatch.setattr(_pipeline, "to_onnx", lambda *a, **k: to_onnx(other, **k))
    with pytest.raises(RuntimeError, match="differs from transform"):
        to_onnx(pipe)


def test_a_damaged_cached_encoder_graph_is_exported_again(
    tiny_bert, corpus, tmp_path, monkeypatch
):
    from sklearn_isotropy.exceptions import CacheWarning

    monkeypatch.setenv("SKLEARN_ISOTROPY_ONNX_CACHE", str(tmp_path / "cache"))
    pipe = make_pipeline(
        BertPoolingVectorizer(tiny_bert), WhiteningTransformer(n_components=8)
    ).fit(corpus[:60])
    vec = pipe[0]
    vec.get_onnx_encoder()  # exported and cached
    (path,) = (tmp_path / "cache").glob("*-fp32.onnx")
    sound = path.read_bytes()
    path.write_bytes(sound[:1000])  # truncated
    expected = pipe.transform(QUERIES)
    with pytest.warns(CacheWarning, match="exporting it again"):
        model = save_onnx_pipeline(pipe, tmp_path / "saved")
    assert_allclose(_run(model, vec, QUERIES), expected, rtol=0, atol=1e-4)
    # the sign of each float of the largest weight flipped: still parses
    raw = max(onnx.load(path).graph.initializer, key=lambda t: len(t.raw_data))
    start, data = sound.find(raw.raw_data), bytearray(sound)
    for i in range(start + 3, start + len(raw.raw_data), 4):
        data[i] ^= 0x80
    path.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="exporting it again"):
        model = to_onnx(pipe)
    assert_allclose(_run(model, vec, QUERIES), expected, rtol=0, atol=1e-4)


def _snippet(readme):
    (code,) = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    return code


def test_saved_folder_serves_without_torch(tiny_bert, corpus, tmp_path):
    pipe = make_pipeline(
        BertPoolingVectorizer(tiny_bert, normalize=True),
        WhiteningTransformer(n_components=8, shrinkage=0.1),
    ).fit(corpus)
    folder = tmp_path / "served"
    model = save_onnx_pipeline(pipe, folder)
    files = {p.name for p in folder.iterdir()}
    assert {"model.onnx", "tokenizer.json", "README.md"} <= files
    settings = json.loads((folder / "sklearn_isotropy_onnx.json").read_text())
    assert settings["max_length"] == pipe[0].max_length_
    assert settings["input_names"] == [i.name for i in model.graph.input]
    texts = QUERIES + corpus[:5]
    code = _snippet((folder / "README.md").read_text())
    code = code.replace('"path/to/this/folder"', repr(str(folder)))
    code = re.sub(r"texts = \[.*?\]\n", f"texts = {texts!r}\n", code)
    script = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # importing torch or transformers fails
        sys.modules["transformers"] = None
        """
    )
    script += code + "\nnp.save(sys.argv[1], embeddings)\n"
    out = tmp_path / "served.npy"
    subprocess.run(
        [sys.executable, "-c", script, str(out)], check=True, capture_output=True
    )
    assert_allclose(np.load(out), pipe.transform(texts), rtol=0, atol=1e-4)


def test_save_refuses_to_overwrite(tiny_bert, corpus, tmp_path):
    vec = BertPoolingVectorizer(tiny_bert).fit(corpus)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_onnx_pipeline(vec, tmp_path / "taken")
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"
    save_onnx_pipeline(vec, tmp_path / "taken", overwrite=True)
    assert not (tmp_path / "taken" / "keep.txt").exists()


def test_text_pipeline_errors(tiny_bert, corpus):
    with pytest.raises(NotFittedError):
        to_onnx(make_pipeline(BertPoolingVectorizer(tiny_bert), WhiteningTransformer()))
    vec = BertPoolingVectorizer(tiny_bert).fit(corpus)
    with pytest.raises(ValueError, match="dtype=numpy.float32"):
        to_onnx(vec, dtype=np.float64)
    with pytest.raises(ValueError, match="n_features=None"):
        to_onnx(vec, n_features=32)
    with pytest.raises(ValueError, match="target_opset=None or 18"):
        to_onnx(vec, target_opset=17)
    with pytest.raises(TypeError, match="StandardScaler"):
        from sklearn.preprocessing import StandardScaler

        to_onnx(make_pipeline(vec, StandardScaler().fit(vec.transform(corpus))))


@pytest.mark.slow
def test_default_model_int8_pipeline_is_exact_one_text_at_a_time(
    default_model_path, stsb_dir
):
    # whitening to 128 dimensions amplifies int8 noise: a graph fusion other
    # than the vectorizer's moved this pipeline by far more than 1e-4
    from sklearn_isotropy.datasets import load_sts

    data = load_sts(stsb_dir, split="dev")
    sentences = list(dict.fromkeys(data.sentences1 + data.sentences2))[:400]
    vec = BertPoolingVectorizer(
        default_model_path, pooling="first_last_avg", backend="onnx-int8"
    )
    pipe = make_pipeline(vec, WhiteningTransformer(n_components=128)).fit(sentences)
    model = to_onnx(pipe, X_check=sentences[:8])  # checked to 1e-4 inside
    session = ort.InferenceSession(
        model.SerializeToString(),
        providers=["CPUExecutionProvider"],
        disabled_optimizers=["SkipLayerNormFusion"],
    )
    for text in sentences[8:12]:
        enc = vec.tokenizer_([text], return_tensors="np")
        feed = {i.name: enc[i.name].astype(np.int64) for i in session.get_inputs()}
        got = session.run(["sentence_embedding"], feed)[0]
        assert_allclose(got, pipe.transform([text]), rtol=0, atol=1e-3)
