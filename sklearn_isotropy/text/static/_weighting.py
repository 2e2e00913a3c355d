"""Token weighting of the static vectorizer: counts, probabilities, weights.

:class:`~sklearn_isotropy.StaticEmbeddingVectorizer` combines a text's token
rows by its ``weighting``, from token probabilities estimated from counts
(its ``frequencies``, or the tokens of the texts it is fitted on). Each step
is a plain function, and ``fit`` calls them through a visible ``if``:

- :func:`token_counts`: the counts of ``frequencies``, checked
  (:func:`zipf_counts` for ``"zipf"``, model2vec's estimate from the
  vocabulary alone);
- :func:`token_probabilities`: the counts smoothed into probabilities;
- :func:`sif_weights`: the row weights of ``weighting="sif"``;
- :func:`zipf_whitened`: the table of ``weighting="zipf"``, centred and
  whitened under the probabilities (its rows are then averaged uniformly).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from ..._utils import sorted_eigh

__all__ = [
    "MODEL2VEC_REMOVED",
    "sif_weights",
    "token_counts",
    "token_probabilities",
    "zipf_counts",
    "zipf_whitened",
]

# The tolerance below which an eigenvalue of the frequency-weighted covariance
# of the table counts as zero, relative to the largest (the table is float32,
# whose round-off alone gives relative eigenvalues near 1e-14).
_RANK_RTOL = 1e-10

#: The tokens model2vec's ``distill`` leaves out of its vocabulary by default
#: (its ``token_remove_pattern``, matched at the start of a token): BERT's
#: ``[unusedN]`` placeholders, which no text tokenizes to.
MODEL2VEC_REMOVED = re.compile(r"\[unused\d+\]")


# ----------------------------------------------------------------- counts
def token_counts(frequencies, tokenizer, ids, n_tokens):
    """Counts per token id, from ``frequencies`` or the fit texts' ``ids``.

    Parameters
    ----------
    frequencies : None, "zipf", dict or array-like of shape (n_tokens,)
        The vectorizer's ``frequencies``: None counts ``ids``; ``"zipf"``
        ranks the vocabulary (:func:`zipf_counts`); a mapping from token
        strings, or an array by token id, gives the counts.
    tokenizer : tokenizers.Tokenizer
        The table's tokenizer.
    ids : ndarray of int
        The token ids of the texts given to fit, end to end.
    n_tokens : int
        The number of token ids (rows of the table).

    Returns
    -------
    counts : ndarray of shape (n_tokens,)
        Finite, non-negative, not all zero.
    """
    if frequencies is None:
        return np.bincount(ids, minlength=n_tokens)
    if isinstance(frequencies, str):  # "zipf", the one rank estimate
        counts = zipf_counts(tokenizer, n_tokens)
    elif isinstance(frequencies, Mapping):
        counts = np.zeros(n_tokens)
        unknown = []
        for token, count in frequencies.items():
            index = tokenizer.token_to_id(str(token))
            if index is None:
                unknown.append(token)
            else:
                counts[index] = _real_counts([count])[0]
        if unknown:
            raise ValueError(
                f"frequencies names {len(unknown)} tokens that are not in the "
                f"tokenizer's vocabulary, such as {unknown[:5]!r}; give counts "
                "of its tokens, as tokenizer.encode(text).tokens spells them."
            )
    else:
        counts = _real_counts(frequencies)
        if counts.shape != (n_tokens,):
            raise ValueError(
                f"frequencies has shape {counts.shape}, but the tokenizer has "
                f"{n_tokens} token ids; pass one count per id, or a dict from "
                "token to count."
            )
    _check_counts(counts)
    return counts


def _real_counts(values):
    """``values`` as a float64 array, refusing what is not a real number.

    numpy would cast complex counts to their real part with a
    ``ComplexWarning``, and strings to floats.
    """
    array = np.asarray(values)
    if array.dtype.kind not in "biuf":
        raise TypeError(
            f"frequencies must hold real numbers (counts); got values of dtype "
            f"{array.dtype} ({array.ravel()[:3].tolist()!r:.80}). Pass ints or "
            "floats."
        )
    return array.astype(np.float64)


def _check_counts(counts):
    """Raise unless ``counts`` are finite, non-negative and not all zero."""
    bad = {
        "NaN": np.isnan(counts),
        "infinite": np.isinf(counts),
        "negative": counts < 0,
    }
    found = {what: np.flatnonzero(mask) for what, mask in bad.items()}
    found = {what: ids for what, ids in found.items() if len(ids)}
    if found:
        described = "; ".join(
            f"{len(ids)} {what} (token ids {ids[:5].tolist()})"
            for what, ids in found.items()
        )
        raise ValueError(
            f"frequencies must be finite and non-negative; got {described}. "
            "Pass counts (or relative frequencies) of the tokens, 0 for an "
            "unseen one."
        )
    if not counts.max() > 0:  # the sum may overflow; they are not negative
        raise ValueError(
            "frequencies are all zero; pass the counts of at least one token."
        )


def zipf_counts(tokenizer, n_tokens):
    """Pseudo-counts of the tokens from their rank alone: ``1 / (rank + 2)``.

    This is how model2vec estimates them.

    model2vec's ``distill`` (``compute_weights``) takes the order of its
    vocabulary, by token id, as a frequency rank (Zipf's law: the ``r``-th
    most frequent token has a probability proportional to ``1 / r``, and
    WordPiece and BPE vocabularies list frequent tokens first) and gives the
    token at 0-based position ``r`` the probability ``1 / (r + 2)``,
    normalised. The tokens it leaves out by default
    (:data:`MODEL2VEC_REMOVED`) are not ranked and get a count of 0, as do
    ids that name no token.

    Parameters
    ----------
    tokenizer : tokenizers.Tokenizer
        Its vocabulary, added tokens included, gives the ranks.
    n_tokens : int
        The number of token ids (rows of the table).

    Returns
    -------
    counts : ndarray of shape (n_tokens,), float64
        ``1 / (rank + 2)`` for the ranked tokens, 0 for the others.
    """
    ranked = np.zeros(n_tokens, dtype=bool)
    for token, index in tokenizer.get_vocab(with_added_tokens=True).items():
        if index < n_tokens and not MODEL2VEC_REMOVED.match(token):
            ranked[index] = True
    ranks = np.cumsum(ranked) - 1
    return np.where(ranked, 1.0 / (ranks + 2.0), 0.0)


# ---------------------------------------------------------- probabilities
def token_probabilities(counts):
    """Token probabilities from counts, the unseen tokens smoothed.

    The unseen tokens (count 0) share the probability mass of a new token
    that Good and Turing estimate from the rarest seen ones: ``n_min * c_min
    / N``, where ``c_min`` is the smallest positive count, ``n_min`` how many
    tokens have it and ``N`` the sum of the counts (with integer counts,
    the share of the tokens seen once), capped at one half. The seen
    tokens' relative frequencies are scaled down by that mass. The rule
    depends only on ratios of counts, so relative frequencies work too.

    Parameters
    ----------
    counts : ndarray of shape (n_tokens,)
        Non-negative, finite, with a positive sum.

    Returns
    -------
    probabilities : ndarray of shape (n_tokens,), float64
        Positive, summing to one.
    """
    counts = np.asarray(counts, dtype=np.float64)
    largest = counts.max(initial=0.0)
    if largest > 0:
        # only ratios matter: scaled by the largest, the sum cannot overflow
        # (counts near 1e308 summed to inf, and every probability to 0)
        counts = counts / largest
    total = counts.sum()
    seen = counts > 0
    n_unseen = counts.size - np.count_nonzero(seen)
    probabilities = counts / total
    if n_unseen:
        smallest = counts[seen].min()
        new_mass = min(0.5, np.count_nonzero(counts == smallest) * smallest / total)
        probabilities *= 1.0 - new_mass
        probabilities[~seen] = new_mass / n_unseen
    return probabilities


# -------------------------------------------------------------- weightings
def sif_weights(probabilities, sif_coefficient):
    """Smooth inverse frequency: ``a / (a + p(t))``, ``a = sif_coefficient``."""
    a = sif_coefficient
    return (a / (a + probabilities)).astype(np.float32)


def zipf_whitened(embeddings, probabilities):
    """The table centred and whitened under the token probabilities.

    Zipfian whitening (Yokoi et al.): the mean and covariance of the rows are
    weighted by ``probabilities``; directions in which the table does not
    vary under them (eigenvalues below ``1e-10`` of the largest) are
    dropped, so the table can come out narrower.
    """
    table = embeddings.astype(np.float64)
    table -= probabilities @ table
    covariance = table.T @ (table * probabilities[:, None])
    evals, evecs = sorted_eigh(covariance)
    keep = evals > _RANK_RTOL * max(evals[0], 0.0)
    whitening = evecs[:, keep] / np.sqrt(evals[keep])
    return (table @ whitening).astype(np.float32)
