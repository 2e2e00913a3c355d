"""Texts as weighted means of token rows: token ids and the matrix of weights.

A static text vector is ``A @ T``: ``A`` the sparse ``(n_texts, n_tokens)``
matrix of each text's normalised token weights (:func:`mixing_matrix`),
``T`` the token table. :class:`~sklearn_isotropy.StaticEmbeddingVectorizer`
encodes with it (:func:`weighted_means`) and the refinement of its table
fits ``T`` through it (``_refine.py``).
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import sparse

__all__ = ["mixing_matrix", "token_ids", "weighted_means"]


def token_ids(tokenizer, texts):
    """``(ids, lengths)``: every text's token ids end to end, and their counts.

    One batch call of the fast tokenizer, without special tokens (as
    model2vec and sentence-transformers' ``StaticEmbedding`` tokenize).
    """
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    per_text = [encoding.ids for encoding in encode(texts, add_special_tokens=False)]
    lengths = np.fromiter(map(len, per_text), dtype=np.intp, count=len(per_text))
    ids = np.fromiter(
        itertools.chain.from_iterable(per_text), dtype=np.intp, count=lengths.sum()
    )
    return ids, lengths


def mixing_matrix(ids, lengths, weights, n_tokens, dtype=np.float64):
    """The CSR matrix of normalised token weights, a row per text.

    Row ``i`` holds ``w[t] / sum_t w[t]`` at the columns of text ``i``'s
    tokens ``t`` (a row of zeros for a text without tokens), so that
    ``mixing @ table`` is each text's weighted mean of the table's rows.
    """
    n_texts = len(lengths)
    indptr = np.zeros(n_texts + 1, dtype=np.intp)
    np.cumsum(lengths, out=indptr[1:])
    w = weights[ids].astype(np.float64)
    rows = np.repeat(np.arange(n_texts), lengths)
    # float64 even without tokens (bincount of nothing gives int64 zeros)
    totals = np.bincount(rows, weights=w, minlength=n_texts).astype(np.float64)
    scale = np.divide(1.0, totals, out=np.zeros_like(totals), where=totals > 0)
    data = (w * scale[rows]).astype(dtype)
    return sparse.csr_matrix((data, ids, indptr), shape=(n_texts, n_tokens))


def weighted_means(ids, lengths, weights, table):
    """Rows ``sum_t w[t] table[t] / sum_t w[t]`` over each text's tokens ``t``.

    One sparse product: :func:`mixing_matrix` times the table. A text
    without tokens gets a row of zeros.
    """
    mixing = mixing_matrix(ids, lengths, weights, len(table), table.dtype)
    return np.asarray(mixing @ table, dtype=table.dtype)
