"""The STS sets the label-free benchmarks score on, and their cached embeddings.

STS-B train/dev/test (``../shared/data/stsb``) and SemEval STS 2012 to 2014
(``../shared/data/sts12-14``, or ``$SKLEARN_ISOTROPY_STS1214``). Each
encoder's three poolings come from one forward pass of the last block: the
masked token mean is linear, so ``first_last_avg`` (the mean of block 1 and
the last block) is the average of the two layers' means, and block 1 and
the embedding layer are read through ``layers=`` without running the other
blocks. :func:`encode_poolings` checks that composition against the
vectorizer's own ``first_last_avg`` on a few sentences before it caches.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from _common import REPO
from _stsb import stsb_dir

from sklearn_isotropy.datasets import load_sts

POOLINGS = ("mean", "first_last_avg", "embeddings_avg")
SEMEVAL = ("sts12", "sts13", "sts14")


def sts1214_dir() -> Path:
    """The directory holding ``sts12.csv``, ``sts13.csv`` and ``sts14.csv``."""
    local = REPO.parent / "shared" / "data" / "sts12-14"
    env = os.environ.get("SKLEARN_ISOTROPY_STS1214")
    for candidate in (local, Path(env) if env else None):
        if candidate is not None and (candidate / "sts12.csv").is_file():
            return candidate
    raise FileNotFoundError(
        f"STS12-14 not found at {local}; set SKLEARN_ISOTROPY_STS1214 to the "
        "directory holding sts12.csv, sts13.csv and sts14.csv"
    )


def load_sets() -> dict:
    """``{name: Bunch(pairs, scores)}`` for STS-B's splits and STS12 to STS14."""
    sets = {
        f"stsb-{split}": load_sts(stsb_dir(), split=split)
        for split in ("train", "dev", "test")
    }
    for name in SEMEVAL:
        sets[name] = load_sts(sts1214_dir() / f"{name}.csv")
    return sets


def _vectorizer(model, layers, batch_size):
    from sklearn_isotropy import BertPoolingVectorizer

    kwargs = {"layers": layers, "batch_size": batch_size, "show_progress_bar": True}
    return (
        BertPoolingVectorizer(**kwargs)
        if model is None
        else BertPoolingVectorizer(model, **kwargs)
    )


def encode_poolings(model, sentences, cache_dir, batch_size=64) -> dict:
    """``{pooling: float32 array}`` for :data:`POOLINGS`, cached in ``cache_dir``."""
    label = "None" if model is None else Path(model).name  # a folder may move
    key = hashlib.sha256(json.dumps([label, sentences]).encode("utf-8")).hexdigest()
    key = key[:16]
    path = Path(cache_dir) / f"poolings-{key}.npz"
    if path.is_file():
        with np.load(path) as stored:
            return {p: stored[p] for p in POOLINGS}
    start = time.perf_counter()
    layer = {}
    for index in (0, 1, -1):  # the embedding layer, block 1, the last block
        vec = _vectorizer(model, (index,), batch_size).fit(sentences[:1])
        layer[index] = vec.transform(sentences)
        print(f"layer {index}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    out = {
        "mean": layer[-1],
        "first_last_avg": ((layer[1] + layer[-1]) / 2).astype(np.float32),
        "embeddings_avg": layer[0],
    }
    check = _vectorizer(model, None, batch_size).set_params(pooling="first_last_avg")
    direct = check.fit(sentences[:1]).transform(sentences[:32])
    np.testing.assert_allclose(out["first_last_avg"][:32], direct, atol=1e-5)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    return out
