"""The test data that several test modules share, written once.

Texts in the vocabulary of the tiny BERT (``conftest.tiny_bert``), the
settings of a few synthetic data sets, the post-processors and metrics that
several modules run over, where the shared data sets lie, and writers of
small data folders in the layouts the loaders read. Constants a single
module uses stay in that module.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
from sklearn.utils import Bunch

from sklearn_isotropy import NATSVTransformer, StandardNormalizer, WhiteningTransformer
from sklearn_isotropy.datasets import make_cone

#: The repository's root; the shared data sets lie beside it, in ../shared/data.
REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def find_stsb():
    """The STS Benchmark folder (../shared/data/stsb or $SKLEARN_ISOTROPY_STSB).

    None when neither holds a test.csv.
    """
    candidates = [SHARED_DATA / "stsb"]
    if os.environ.get("SKLEARN_ISOTROPY_STSB"):
        candidates.append(Path(os.environ["SKLEARN_ISOTROPY_STSB"]))
    return next((c for c in candidates if (c / "test.csv").is_file()), None)


# ------------------------------------------------------- texts of the tiny BERT
#: 21 words of one token each: a text of them is a weighted mean of 21 rows of
#: a static table, in their 20-dimensional affine span.
TINY_WORDS = (
    "the a cat dog sat on mat ran fast slow man woman is was big small red blue "
    "play read walk"
).split()

#: Texts of the static vectorizer's tests and exports: word pieces,
#: punctuation, an unknown word.
TEXTS = [
    "the cat sat on the mat",
    "a dog ran fast",
    "the big red dog was playing !",
    "xyzzy",
    "the woman is reading , the man is walking .",
    "a small blue cat sat",
    "the dog and the cat",
    "walking reads played",
]

#: Eight texts of four words, each word in several of them.
FOUR_WORD_TEXTS = [
    "the cat sat fast",
    "a dog ran slow",
    "the man is big",
    "a woman was small",
    "the mat sat red",
    "the cat walked blue",
    "a dog read on",
    "the man played the",
]

#: What the static vectorizers of the tests are fitted on.
FIT_TEXTS = FOUR_WORD_TEXTS * 4 + ["x y z"]  # tokens seen once

#: Texts of the encoder backends' tests: several lengths (so several padded
#: batches), an empty text, word pieces.
BATCH_TEXTS = [
    "a small blue cat sat on the red mat",
    "the dog ran",
    "",
    "walking , reading and playing !",
    "qwerty",
    "the man is big and the woman is fast .",
    "a cat",
    "walked",
]

# ------------------------------------------------------- synthetic embeddings
#: ``make_cone(n, d, **CONE)``: unrotated (the columns are the principal axes,
#: scales 8 to 0.5) around an offset of scale 5.
CONE = {"offset": 5.0, "spread": (8.0, 0.5), "rotate": False}


def sts_pairs(rng, n, d, offset=3.0):
    """Pairs of anisotropic embeddings with scores tied to their cosine."""
    mean = np.full(d, offset)
    base = make_cone(
        n, d, spread=(5, 0.05), offset=mean, rotate=False, random_state=rng
    )
    other = base + rng.normal(scale=2.0, size=(n, d))
    emb = np.stack([base, other], axis=1)
    scores = rng.uniform(0, 5, size=n)
    return emb, Bunch(scores=scores)


# -------------------------------------------------- what the tests run over
#: The linear post-processors an export folds, in the settings worth folding.
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


#: The metrics of a retrieval record, by default.
RETRIEVAL_METRICS = ("mrr@10", "recall@1", "recall@10", "ndcg@10")


# ------------------------------------------------------------ data folders
#: A UTF-8 byte-order mark, as Excel and Notepad start a file with.
BOM = "\ufeff"


def write_sbert(path):
    """Write a gzipped STS file of sentence-transformers' layout (a split column)."""
    header = "split\tgenre\tdataset\tyear\tsid\tscore\tsentence1\tsentence2"
    rows = [
        "train\tmain-captions\tMSRvid\t2012test\t1\t5.0\tA man plays.\tA man plays.",
        'dev\tmain-news\theadlines\t2013\t2\t2.5\tStray "quote\tB.',
        "test\tmain-forum\tdeft\t2014\t3\t1.0\tC.\tD.",
        "test\tmain-forum\tdeft\t2014\t4\t4.0\tE.\tF.",
    ]
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join([header, *rows]) + "\n")


def write_beir(folder, *, qrels=None, corpus=None, queries=None):
    """Write a small BEIR folder (corpus, queries, test qrels); return it."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    corpus = corpus or [
        {"_id": "d1", "title": "Cats", "text": "a cat sat on the mat"},
        {"_id": "d2", "title": "", "text": "a dog ran fast"},
        {"_id": "q2", "text": "a man is walking"},  # shares q2's id
        {"_id": 4, "text": "the red car"},
    ]
    queries = queries or [
        {"_id": "q1", "text": "where did the cat sit"},
        {"_id": "q2", "text": "a man walks"},
        {"_id": "q3", "text": "fast animals"},
        {"_id": "q4", "text": "unused query"},
    ]
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(d) + "\n" for d in corpus)
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(q) + "\n" for q in queries)
    qrels = qrels or [
        ("q1", "d1", 2),
        ("q1", "4", 0),
        ("q2", "q2", 1),  # judged relevant: not excluded
        ("q2", "d2", 1),
        ("q3", "d2", 0),  # q3 has no relevant document
    ]
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in qrels]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return folder


def write_model2vec_folder(hf, folder, **tensors):
    """Write a small model2vec folder: a random row per tiny-tokenizer token id.

    ``hf`` is the tiny BERT's ``(model, tokenizer)``; ``tensors`` replace or
    add tensors. Returns the rows.
    """
    from safetensors.numpy import save_file

    n_tokens = max(hf[1].get_vocab().values()) + 1
    rows = np.random.default_rng(2).normal(size=(n_tokens, 6)).astype(np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"embeddings": rows, **tensors}, str(folder / "model.safetensors"))
    hf[1].backend_tokenizer.save(str(folder / "tokenizer.json"))
    return rows
