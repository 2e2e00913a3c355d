"""Refining a distilled token table on the encoder's own sentence embeddings.

A static text vector is ``A @ T``: ``A`` the sparse (n_texts, n_tokens)
matrix of each text's normalised token weights (rows summing to one),
``T`` the table. A table distilled from single tokens (``T0``) does not
know how the encoder combines tokens in context; the encoder's embeddings
``Y`` of some texts do, and need no labels. :func:`fit_table` fits ``T``
to them in two ridge-regularised least-squares stages, each shrunk toward
the distilled table (model2vec's "tokenlearn" fits a table to an encoder's
outputs the same way, by gradient descent over a large corpus):

0. the encoder's embedding of a text of ``n`` tokens is modelled as the
   mean over its tokens and ``k`` more positions whose outputs are zero
   (``k = pseudo_tokens``): ``Y = n / (n + k) * A T``, so the static means
   are fitted to ``Y (n + k) / n``. Mean pooling does average each text's
   tokens with others (BERT's ``[CLS]`` and ``[SEP]``), whose share
   ``2 / (n + 2)`` shrinks the embeddings of short texts toward the
   outputs of those positions, which a mean of the text's own rows cannot
   do. The scaling acts as a weighting of the least squares (each text's
   squared error times ``((n + k) / n)^2``) as much as a model of the
   special tokens; the default ``k`` is measured against others, and by
   kind of pair, in the user guide's static page ("What we tried",
   ``benchmarks/bench_static_quality.py``);

1. an affine map of the whole table, ``T1 = T0 M + b``, from the ``d + 1``
   columns of ``A T0`` to ``Y``, with the penalty ``mu ||M - I||^2``: it
   moves every token, those the texts never use included;
2. a correction of each token that occurs, ``T = T1 + D``, minimising
   ``||A (T1 + D) - Y||^2 + alpha ||D||^2``: the normal equations
   ``(A'A + alpha I) D = A'(Y - A T1)``, solved for all ``d`` columns at
   once by conjugate gradients, preconditioned by the diagonal of ``A'A``
   (a token's row only moves where the texts use it, and rarely used
   tokens move less).

The texts are the fit texts and, by default, a copy of each with one word
deleted (:func:`one_word_deleted`), encoded by the encoder too: a pair of a
text and the same text less a word tells the least squares what that word
does to the encoder's embedding in that context, which is what a pair of
similar sentences in an STS set differs by. The other texts tried in their
place (random spans of the fit texts among them) are in the same "What we
tried" (``benchmarks/bench_static_quality.py``).

:func:`refine_on_encoder` is what the vectorizer's ``fit`` runs: it fits
the encoder of the targets (:func:`fit_encoder`, on the backend of
:func:`refine_backend`), adds the copies, encodes and calls
:func:`fit_table`. :func:`refine_table` is the public door to the same
fit, for a table, texts and targets of the caller's own.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import time
import warnings
import zlib
from typing import TYPE_CHECKING

import numpy as np
from scipy import sparse
from sklearn.exceptions import ConvergenceWarning

from ..._utils import warn
from ...exceptions import IsotropyWarning, TruncationWarning
from .._base import validate_texts
from ._means import mixing_matrix, token_ids

if TYPE_CHECKING:
    from collections.abc import Sequence

    import tokenizers
    from numpy.typing import ArrayLike

logger = logging.getLogger(__name__)

#: The largest ``refine_pseudo_tokens``. ``k`` counts positions of zeros
#: averaged with a text's tokens, and no encoder pools that many (BERT 512,
#: long-context ones 8192); once ``k`` is well beyond the longest fit text,
#: ``(n + k) / n`` is ``k / n`` and a larger ``k`` no longer weighs texts
#: differently, it only scales the targets up against the ridge penalties
#: (at 1e40 the table overflowed float32 to infinity).
MAX_PSEUDO_TOKENS = 1e4

#: The largest ``refine_alpha``. The penalty shrinks what each stage moves
#: by about ``1 / alpha`` (the affine map toward the identity, leaving the
#: offset to the targets' mean; the token rows toward zero), so past a point
#: a larger value changes nothing a float32 table can hold: on the test
#: BERT the table at 1e8 is that of 1e300 to 1e-7 of its largest entry
#: (float32's round-off; 4e-6 at 1e6). Near float64's range the penalty
#: overflows (1e308 gave a table of NaN). ``refine=False`` keeps the
#: distilled table itself.
MAX_REFINE_ALPHA = 1e8

#: ``refine_backend`` values: how :meth:`StaticEmbeddingVectorizer.fit`
#: encodes its texts for the refinement (``BertPoolingVectorizer``'s
#: ``backend``), or ``"auto"``.
REFINE_BACKENDS = ("auto", "torch", "onnx", "onnx-int8")

#: The ONNX backend ``refine_backend="auto"`` picks when onnx and
#: onnxruntime are installed and the encoder runs on the CPU (see
#: ``benchmarks/bench_static_quality.py``).
AUTO_ONNX_BACKEND = "onnx-int8"


class RefinementWarning(IsotropyWarning, ConvergenceWarning):
    """The token refinement stopped before its conjugate gradients converged.

    The table is then the last iterate, between the affine stage's table and
    the exact ridge solution (conjugate gradients lower the objective at every
    step).
    """


#: Relative residual of the normal equations at which conjugate gradients stop,
#: and the most iterations they take (far more than a fit on STS-B train
#: needs: the user guide's static page gives the count).
CG_TOL, CG_MAX_ITER = 1e-3, 500


#: Texts of fewer words than this get no copy with a word deleted: two or
#: three words less one are a fragment, not a sentence.
DELETION_MIN_WORDS = 4

#: A word: a run of characters other than whitespace (``str.split``'s words).
_WORD = re.compile(r"\S+")


def one_word_deleted(texts, copies=1):
    """Copies of the texts with one word deleted, for the refinement's targets.

    Each text of at least :data:`DELETION_MIN_WORDS` words (runs of
    characters other than whitespace; a text without spaces, in Chinese say,
    is one word) gives ``min(copies, n_words)`` texts, each without a
    different word. The word goes with the whitespace after it (before it,
    for the last word); the rest of the text is left as it is. Which words
    go depends on the text alone (the first is at position ``crc32(text) %
    n_words``, the next copies delete the words after it, cyclically), so a
    fit gives the same texts in any order and in any process, and the
    encoder's embeddings of them can be cached (``memory=``).

    Parameters
    ----------
    texts : list of str
        The fit texts.
    copies : int, default=1
        How many copies of each text, each without another word.

    Returns
    -------
    texts : list of str
        The copies, text by text.
    """
    out = []
    for text in texts:
        words = [match.span() for match in _WORD.finditer(text)]
        n_words = len(words)
        if n_words < DELETION_MIN_WORDS:
            continue
        first = zlib.crc32(text.encode("utf-8", "surrogatepass")) % n_words
        for copy in range(min(copies, n_words)):
            gone = (first + copy) % n_words
            if gone + 1 < n_words:  # up to the next word
                start, end = words[gone][0], words[gone + 1][0]
            else:  # from the end of the one before
                start, end = words[gone - 1][1], words[gone][1]
            out.append(text[:start] + text[end:])
    return out


def affine_refinement(table, mixing, targets, alpha):
    """The ridge map ``(M, b)`` of the table, shrunk towards the identity.

    ``(M, b)`` minimises ``||mixing @ (table @ M + b) - targets||^2 + mu ||M -
    I||^2``, ``mu = alpha * trace(G) / d`` with ``G`` the centred Gram matrix
    of ``mixing @ table``: the penalty is relative to the mean eigenvalue of
    ``G``, and directions the texts do not span keep ``M = I``.

    The rows of ``mixing`` sum to one, so ``b`` passes through the mean.
    """
    X = mixing @ table
    x_mean, y_mean = X.mean(axis=0), targets.mean(axis=0)
    X -= x_mean
    gram = X.T @ X
    d = len(gram)
    mu = alpha * np.trace(gram) / d
    eye = np.eye(d)
    if not mu > 0:  # one distinct text: nothing to fit but the offset
        mu = 1.0
    M = np.linalg.solve(gram + mu * eye, X.T @ (targets - y_mean) + mu * eye)
    return M, y_mean - x_mean @ M


def _ratio(a, b):
    """``a / b``, 0 where ``b`` is 0 (a column already solved exactly)."""
    return np.divide(a, b, out=np.zeros_like(a), where=b != 0)


def token_refinement(mixing, residuals, alpha):
    """``D`` minimising ``||mixing @ D - residuals||^2 + alpha ||D||^2``.

    Rows of tokens that no text uses are zero. Conjugate gradients on the
    normal equations of the used tokens, all columns at once (each its own
    step sizes), with the Jacobi preconditioner. Returns ``(D, n_iter)``.
    """
    used = np.flatnonzero(np.diff(mixing.tocsc().indptr))
    A = mixing[:, used].tocsr()
    At = A.T.tocsr()
    rhs = At @ residuals
    inverse_diagonal = 1.0 / (np.asarray(A.multiply(A).sum(axis=0)).ravel() + alpha)
    D = np.zeros_like(rhs)
    r = rhs.copy()
    z = r * inverse_diagonal[:, None]
    p = z.copy()
    rz = np.einsum("ij,ij->j", r, z)
    stop = CG_TOL * np.linalg.norm(rhs)
    n_iter = 0
    while n_iter < CG_MAX_ITER and np.linalg.norm(r) > stop:
        q = At @ (A @ p) + alpha * p
        step = _ratio(rz, np.einsum("ij,ij->j", p, q))
        D += step * p
        r -= step * q
        z = r * inverse_diagonal[:, None]
        rz_next = np.einsum("ij,ij->j", r, z)
        p = z + _ratio(rz_next, rz) * p
        rz = rz_next
        n_iter += 1
    if np.linalg.norm(r) > stop:
        warn(
            f"The token refinement did not reach a relative residual of {CG_TOL:g} "
            f"in {CG_MAX_ITER} conjugate-gradient iterations (it reached "
            f"{np.linalg.norm(r) / np.linalg.norm(rhs):.2g}); the table is used as "
            "it is. A larger refine_alpha converges faster.",
            RefinementWarning,
        )
    out = np.zeros((mixing.shape[1], residuals.shape[1]))
    out[used] = D
    return out, n_iter


def fit_table(
    table,
    mixing,
    targets,
    alpha,
    *,
    lengths=None,
    pseudo_tokens=0.0,
    affine=True,
    tokens=True,
):
    """The table refined on ``targets`` (see the module docstring), float32.

    Parameters
    ----------
    table : ndarray of shape (n_tokens, d)
        The distilled table.
    mixing : sparse matrix of shape (n_texts, n_tokens)
        Each text's normalised token weights (rows summing to one; texts
        without tokens left out).
    targets : ndarray of shape (n_texts, d)
        The encoder's embeddings of the same texts.
    alpha : float
        The ridge penalty of both stages (relative to the mean eigenvalue
        for the affine map; absolute, in units of squared weights, for the
        token rows).
    lengths : ndarray of shape (n_texts,), default=None
        Each text's number of tokens (positive); needed when
        ``pseudo_tokens > 0``.
    pseudo_tokens : float, default=0.0
        ``k`` of stage 0: the targets are scaled by ``(lengths + k) /
        lengths``; 0 fits the targets as they are.
    affine, tokens : bool
        Which stages to run (both, by default; the others are for
        comparisons).

    Returns
    -------
    table : ndarray of shape (n_tokens, d), float32
    """
    mixing = mixing.astype(np.float64)
    refined = table.astype(np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    if pseudo_tokens:
        lengths = np.asarray(lengths, dtype=np.float64)
        targets = targets * ((lengths + pseudo_tokens) / lengths)[:, None]
    if affine:
        M, b = affine_refinement(refined, mixing, targets, alpha)
        refined = refined @ M
        refined += b
    if tokens:
        D, _ = token_refinement(mixing, targets - mixing @ refined, alpha)
        refined += D
    return refined.astype(np.float32)


def refine_table(
    table: ArrayLike,
    tokenizer: tokenizers.Tokenizer,
    texts: Sequence[str],
    targets: ArrayLike,
    *,
    weights: ArrayLike | None = None,
    alpha: float = 0.1,
    pseudo_tokens: float = 16.0,
    affine: bool = True,
    tokens: bool = True,
) -> np.ndarray:
    """Fit a token table to sentence embeddings of texts.

    The refinement that :class:`~sklearn_isotropy.StaticEmbeddingVectorizer`
    runs at ``fit`` (``refine=True``), for a table, texts and target
    embeddings of the caller's own: a table the vectorizer read from a
    static model (which it never refines), say, fitted to the embeddings
    another encoder gives of some texts. The static mean of each text (its
    rows weighted by ``weights``) is fitted to its target in two ridge
    least-squares stages, each shrunk toward ``table``: an affine map of the
    whole table, then a correction of the rows of the tokens the texts use
    (see the vectorizer's Notes and :ref:`static`).

    Parameters
    ----------
    table : array-like of shape (n_tokens, n_features)
        The token table, one row per token id of ``tokenizer``.
    tokenizer : tokenizers.Tokenizer
        A fast tokenizer whose ids index the rows of ``table`` (the
        vectorizer's ``tokenizer_``). Texts are tokenized without special
        tokens, as the vectorizer does.
    texts : sequence of str
        The texts whose static means are fitted. Texts without tokens are
        left out.
    targets : array-like of shape (n_texts, n_features)
        Their embeddings, the row of each text in ``texts`` order.
    weights : array-like of shape (n_tokens,), default=None
        Each token's weight in the means (the vectorizer's
        ``token_weights_``); None weighs every token alike.
    alpha : float, default=0.1
        The ridge penalty of both stages (``refine_alpha`` of the
        vectorizer), in (0, 1e8].
    pseudo_tokens : float, default=16.0
        ``k`` of the model of mean pooling (``refine_pseudo_tokens`` of the
        vectorizer): each target is scaled by ``(n + k) / n`` for a text of
        ``n`` tokens; 0 fits the targets as they are. In [0, 1e4].
    affine : bool, default=True
        Run the first stage, the affine map of the whole table.
    tokens : bool, default=True
        Run the second stage, the correction of each used token's row.

    Returns
    -------
    table : ndarray of shape (n_tokens, n_features), float32
        The refined table.

    Raises
    ------
    ValueError
        If the shapes of ``table``, ``targets`` and ``weights`` do not
        match ``texts`` and each other, ``tokenizer`` gives ids beyond the
        rows of ``table``, no text has a token, a value is not finite, or
        ``alpha`` or ``pseudo_tokens`` is out of range.

    See Also
    --------
    sklearn_isotropy.StaticEmbeddingVectorizer : Runs this refinement on
        the encoder's own embeddings of its fit texts.

    Examples
    --------
    >>> import numpy as np
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> from sklearn_isotropy.text import refine_table
    >>> vocab = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3, "dog": 4}
    >>> tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    >>> tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> rng = np.random.default_rng(0)
    >>> table = rng.normal(size=(5, 3))
    >>> texts = ["the cat sat", "the dog sat", "the cat", "a dog"]
    >>> refined = refine_table(table, tokenizer, texts, rng.normal(size=(4, 3)))
    >>> refined.shape, refined.dtype
    ((5, 3), dtype('float32'))
    """
    texts = validate_texts(texts)
    table = np.asarray(table)
    targets = np.asarray(targets, dtype=np.float64)
    if (
        table.ndim != 2
        or targets.ndim != 2
        or targets.shape
        != (
            len(texts),
            table.shape[1],
        )
    ):
        raise ValueError(
            f"table (shape {table.shape}) must be 2-D, and targets (shape "
            f"{targets.shape}) must have one row per text ({len(texts)}) and "
            "one column per column of table; pass the embeddings of texts, "
            "in texts order."
        )
    weights = np.ones(len(table)) if weights is None else np.asarray(weights)
    if weights.shape != (len(table),):
        raise ValueError(
            f"weights has shape {weights.shape}, but table has {len(table)} "
            "rows; pass one weight per token (or None for equal weights)."
        )
    if not (0 < alpha <= MAX_REFINE_ALPHA and 0 <= pseudo_tokens <= MAX_PSEUDO_TOKENS):
        raise ValueError(
            f"alpha={alpha!r} must be in (0, {MAX_REFINE_ALPHA:g}] and "
            f"pseudo_tokens={pseudo_tokens!r} in [0, {MAX_PSEUDO_TOKENS:g}] (the "
            "vectorizer's refine_alpha and refine_pseudo_tokens)."
        )
    for name, values in (("table", table), ("targets", targets), ("weights", weights)):
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{name} holds NaN or infinite values; pass finite ones.")
    ids, lengths = token_ids(tokenizer, texts)
    if len(ids) and ids.max() >= len(table):
        raise ValueError(
            f"tokenizer gives token id {ids.max()}, but table has {len(table)} "
            "rows; pass the tokenizer whose ids index the table."
        )
    kept = np.flatnonzero(lengths)
    if not len(kept):
        raise ValueError("None of the texts has a token: nothing to fit the table to.")
    mixing = mixing_matrix(ids, lengths, weights, len(table))[kept]
    with np.errstate(invalid="ignore", over="ignore"):
        refined = fit_table(
            table,
            mixing,
            targets[kept],
            alpha,
            lengths=lengths[kept],
            pseudo_tokens=pseudo_tokens,
            affine=affine,
            tokens=tokens,
        )
    if not np.all(np.isfinite(refined)):
        raise ValueError(
            f"Fitting the table with alpha={alpha!r} and pseudo_tokens="
            f"{pseudo_tokens!r} overflowed float32; pass values nearer the "
            "defaults (0.1 and 16)."
        )
    return refined


def _check_finite(refined, targets, texts, vectorizer):
    """Raise unless the refined table is finite, saying why it is not.

    Either the encoder's embeddings of some fit texts are not finite (an
    encoder that overflows, in float16 say), or the refinement overflowed
    float32 on finite ones.
    """
    bad_rows = ~np.all(np.isfinite(refined), axis=1)
    if not bad_rows.any():
        return
    bad_texts = np.flatnonzero(~np.all(np.isfinite(targets), axis=1))
    if len(bad_texts):
        first = texts[bad_texts[0]]
        cause = (
            f"the encoder's embeddings of {len(bad_texts)} of the {len(texts)} "
            f"texts it encoded are not finite (the first: {first!r:.80}), as "
            "when an encoder overflows (run in float16, say): load it in "
            "float32, or leave those texts out of fit"
        )
    else:
        cause = (
            "the encoder's embeddings are finite, but fitting the table to them "
            f"with refine_alpha={vectorizer.refine_alpha!r} and "
            f"refine_pseudo_tokens={vectorizer.refine_pseudo_tokens!r} overflowed "
            f"float32 (the largest embedding entry is {np.max(np.abs(targets)):.3g}): "
            "pass values nearer the defaults (0.1 and 16)"
        )
    raise ValueError(
        "Refining the distilled table on the fit texts gave non-finite values in "
        f"{int(bad_rows.sum())} of its {len(refined)} token rows: {cause}. "
        "refine=False keeps the distilled table."
    )


# ----------------------------------------------------- what fit runs
def refine_backend(requested, device):
    """Choose the backend that encodes the fit texts.

    ``requested``, or for ``"auto"`` :data:`AUTO_ONNX_BACKEND` where onnx and
    onnxruntime are installed and ``device`` is the CPU, else ``"torch"``.
    """
    if requested != "auto":
        return requested
    if device.type != "cpu":
        return "torch"
    for name in ("onnx", "onnxruntime"):
        if importlib.util.find_spec(name) is None:
            return "torch"
    return AUTO_ONNX_BACKEND


def fit_encoder(vectorizer, texts, device):
    """The encoder of the refinement's targets, fitted.

    Returns ``(encoder, backend)``: the :class:`BertPoolingVectorizer` of
    ``vectorizer.model`` (mean pooling, on its ``device`` and ``memory``)
    and the backend it runs (see ``refine_backend``; ``"auto"`` falls back
    to torch when the encoder does not export to ONNX).
    """
    from .._vectorizer import BertPoolingVectorizer

    backend = refine_backend(vectorizer.refine_backend, device)

    def fit(backend):
        encoder = BertPoolingVectorizer(
            vectorizer.model,
            pooling="mean",
            device=vectorizer.device,
            backend=backend,
            memory=vectorizer.memory,
            show_progress_bar=bool(vectorizer.verbose),
        )
        return encoder.fit(texts)

    if vectorizer.refine_backend != "auto" or backend == "torch":
        return fit(backend), backend
    try:
        return fit(backend), backend
    except ValueError as exc:  # the model does not export to ONNX
        logger.info("Encoding the fit texts with torch: %s", exc)
        return fit("torch"), "torch"


def refine_on_encoder(
    vectorizer, table, weights, mixing, texts, lengths, tokenizer, device
):
    """The distilled table fitted to the encoder's embeddings of ``texts``.

    And of their copies with a word deleted (``vectorizer.refine_deletions``;
    :func:`one_word_deleted`), with the vectorizer's ``refine_alpha`` and
    ``refine_pseudo_tokens``.

    Parameters
    ----------
    vectorizer : StaticEmbeddingVectorizer
        Whose parameters say how to refine.
    table : ndarray of shape (n_tokens, d)
        The distilled table.
    weights : ndarray of shape (n_tokens,)
        The token weights of the vectorizer's ``weighting``.
    mixing : sparse matrix of shape (n_texts, n_tokens)
        The texts' normalised token weights (:func:`mixing_matrix`).
    texts : list of str
        The fit texts that have tokens.
    lengths : ndarray of shape (n_texts,)
        Their numbers of tokens (positive).
    tokenizer : tokenizers.Tokenizer
        The table's tokenizer.
    device : torch.device
        Where the encoder runs.

    Returns
    -------
    table : ndarray of shape (n_tokens, d), float32
    """
    start = time.perf_counter()
    encoder, backend = fit_encoder(vectorizer, texts, device)
    # A text the encoder truncates gets no copy: the word deleted could be
    # one the encoder never sees, and the copy would teach the table that
    # the word changes nothing.
    window = encoder.max_length_ - len(tokenizer.encode("").ids)
    whole = [text for text, n in zip(texts, lengths) if n <= window]
    copies = one_word_deleted(whole, vectorizer.refine_deletions)
    texts, n_copies = list(texts), 0
    if copies:
        copy_ids, copy_lengths = token_ids(tokenizer, copies)
        # a word can be all characters the tokenizer drops (controls)
        kept = np.flatnonzero(copy_lengths)
        copy_mixing = mixing_matrix(copy_ids, copy_lengths, weights, len(table))
        mixing = sparse.vstack([mixing, copy_mixing[kept]], format="csr")
        texts += [copies[i] for i in kept]
        lengths = np.concatenate([lengths, copy_lengths[kept]])
        n_copies = len(kept)
    with warnings.catch_warnings():
        # the targets are the encoder's embeddings as it gives them
        # (truncated at its max_length); the static means are not
        warnings.simplefilter("ignore", TruncationWarning)
        targets = encoder.transform(texts)
    encoded = time.perf_counter()
    # non-finite targets, or a table beyond float32's range, are the
    # ValueError of _check_finite, not numpy's warnings on the way there
    with np.errstate(invalid="ignore", over="ignore"):
        refined = fit_table(
            table,
            mixing,
            targets,
            vectorizer.refine_alpha,
            lengths=lengths,
            pseudo_tokens=vectorizer.refine_pseudo_tokens,
        )
    _check_finite(refined, targets, texts, vectorizer)
    if vectorizer.verbose:
        logger.info(
            "Encoded %d texts (%d with a word deleted; backend=%r) in %.2f s "
            "and refined the table in %.2f s",
            len(texts),
            n_copies,
            backend,
            encoded - start,
            time.perf_counter() - encoded,
        )
    return refined
