"""Independent computations that several test modules compare the package with.

Each is written plainly, with numpy, scipy, transformers' tokenizer or
onnxruntime, and shares no code with the package's own.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.metrics.pairwise import paired_cosine_distances


def two_pass(X, w=None):
    """Reference: float64 two-pass mean and scatter (numpy)."""
    X = np.asarray(X, dtype=np.float64)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=np.float64)
    mean = np.average(X, axis=0, weights=w)
    Y = X - mean
    mean = mean + np.average(Y, axis=0, weights=w)
    Y = X - mean
    return mean, (Y * w[:, None]).T @ Y


def cosine(a, b):
    """The cosine of each row of ``a`` with the same row of ``b``, in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def spearman_of_cosines(a, b, y):
    """Spearman's rho of the gold scores ``y`` and the pair cosines (scipy)."""
    # rounded so that float noise (-2e-16 vs 0) does not break ties differently
    return spearmanr(y, np.round(1.0 - paired_cosine_distances(a, b), 12)).statistic


def loop_reference(hf, texts, table, weights):
    """Weighted means computed text by text, token by token.

    ``hf`` is the tiny BERT's ``(model, tokenizer)``; its tokenizer splits the
    texts.
    """
    _, tokenizer = hf
    out = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        total, acc = 0.0, np.zeros(table.shape[1])
        for i in ids:
            acc += weights[i] * table[i].astype(np.float64)
            total += weights[i]
        out.append(acc / total if ids else acc)
    return np.array(out)


def run_onnx(model, X):
    """The output of an ONNX graph of one input on ``X``, run by onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, {session.get_inputs()[0].name: X})[0]
