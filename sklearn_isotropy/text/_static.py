"""Sentences to weighted means of static token vectors, a scikit-learn transformer."""

from __future__ import annotations

import importlib.util
import itertools
import logging
import os
import re
import time
import warnings
from collections.abc import Iterable, Mapping
from numbers import Integral, Real

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._utils import PrefixedFeatureNamesMixin, resolve_device
from ..exceptions import TruncationWarning
from ._base import clone_sharing_model, validate_texts
from ._static_refine import one_word_deleted, refine_table
from ._static_table import DISTILL_POOLINGS, load_table, static_folder

logger = logging.getLogger(__name__)

__all__ = ["StaticEmbeddingVectorizer", "token_probabilities"]

# The tolerance below which an eigenvalue of the frequency-weighted covariance
# of the table counts as zero, relative to the largest (the table is float32,
# whose round-off alone gives relative eigenvalues near 1e-14).
_RANK_RTOL = 1e-10

#: The largest ``refine_pseudo_tokens``. ``k`` counts positions of zeros
#: averaged with a text's tokens, and no encoder pools that many (BERT 512,
#: long-context ones 8192); once ``k`` is well beyond the longest fit text,
#: ``(n + k) / n`` is ``k / n`` and a larger ``k`` no longer weighs texts
#: differently, it only scales the targets up against the ridge penalties
#: (at 1e40 the table overflowed float32 to infinity).
MAX_PSEUDO_TOKENS = 1e4

#: The tokens model2vec's ``distill`` leaves out of its vocabulary by default
#: (its ``token_remove_pattern``, matched at the start of a token): BERT's
#: ``[unusedN]`` placeholders, which no text tokenizes to.
MODEL2VEC_REMOVED = re.compile(r"\[unused\d+\]")


# ------------------------------------------------------------ tokenizing
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


# ------------------------------------------------------------- refinement
#: ``refine_backend`` values: how :meth:`StaticEmbeddingVectorizer.fit`
#: encodes its texts for the refinement (``BertPoolingVectorizer``'s
#: ``backend``), or ``"auto"``.
REFINE_BACKENDS = ("auto", "torch", "onnx", "onnx-int8")

#: The ONNX backend ``refine_backend="auto"`` picks when onnx and
#: onnxruntime are installed and the encoder runs on the CPU (see
#: ``benchmarks/bench_static_quality.py``).
AUTO_ONNX_BACKEND = "onnx-int8"


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


# -------------------------------------------------------------- weighting
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


#: ``frequencies`` strings -> the counts they stand for, from the tokenizer
#: and the number of token ids.
RANK_FREQUENCIES = {"zipf": zipf_counts}


def _ones(n_tokens, probabilities, sif_coefficient):
    return np.ones(n_tokens, dtype=np.float32)


def _sif(n_tokens, probabilities, sif_coefficient):
    a = sif_coefficient
    return (a / (a + probabilities)).astype(np.float32)


def _zipf_table(embeddings, probabilities):
    table = embeddings.astype(np.float64)
    mean = probabilities @ table
    table -= mean
    covariance = table.T @ (table * probabilities[:, None])
    evals, evecs = np.linalg.eigh(covariance)
    evals, evecs = evals[::-1], evecs[:, ::-1]
    keep = evals > _RANK_RTOL * max(evals[0], 0.0)
    whitening = evecs[:, keep] / np.sqrt(evals[keep])
    return (table @ whitening).astype(np.float32)


#: ``weighting -> weights(n_tokens, probabilities, sif_coefficient)``: the
#: weights of the token rows :meth:`transform` averages.
TOKEN_WEIGHTS = {"uniform": _ones, "sif": _sif, "zipf": _ones}
#: ``weighting -> map(embeddings, probabilities)``: the map of the table,
#: applied after any refinement, of the weightings that have one.
TABLE_MAPS = {"zipf": _zipf_table}


class StaticEmbeddingVectorizer(
    PrefixedFeatureNamesMixin, TransformerMixin, BaseEstimator
):
    """Encode texts as weighted means of static token vectors.

    A text becomes the weighted mean of the rows of a token table over its
    tokens: no transformer runs at :meth:`transform`, which is one call of
    the fast tokenizer and one sparse matrix product, about two orders of
    magnitude faster than encoding with the transformer (see
    :doc:`/user_guide/static`). :meth:`fit` builds the table, either
    distilled from a Hugging Face encoder (each vocabulary token alone
    through the model) or read from a static model (model2vec,
    sentence-transformers ``StaticEmbedding``), estimates the token
    frequencies the weighting needs from the texts it is given and fits a
    distilled table to the encoder's own embeddings of those texts (no
    labels in either).

    Static means are far more anisotropic than contextual embeddings, and
    whitening helps them much more: ``make_pipeline(StaticEmbeddingVectorizer(),
    WhiteningTransformer(...))`` is the intended use, and it exports as one
    static table with the whitening folded in
    (:func:`~sklearn_isotropy.export.to_sentence_transformers`,
    :func:`~sklearn_isotropy.export.to_onnx`).

    Parameters
    ----------
    model : None, str, os.PathLike, (model, tokenizer) or SentenceTransformer, \
            default=None
        Where the table comes from.

        - an encoder, as for :class:`BertPoolingVectorizer`: ``None`` (the
          default encoder, offline), a Hugging Face hub name or local
          directory, a ``(model, tokenizer)`` pair or a
          ``SentenceTransformer`` whose first module is a Transformer. Its
          vocabulary is distilled into a table (see ``distill_pooling``),
          which is cached on disk keyed by the encoder's weights.
        - a static model: a folder holding ``model.safetensors`` and
          ``tokenizer.json`` from model2vec (tensor ``embeddings``, and
          ``mapping`` and ``weights`` if it has them, folded as
          sentence-transformers folds them) or from sentence-transformers'
          ``StaticEmbedding`` (tensor ``embedding.weight``), or a
          sentence-transformers model folder or ``SentenceTransformer``
          whose first module is a ``StaticEmbedding``. Its rows are read as
          they are (float16 or int8 rows as float32). The modules after the
          ``StaticEmbedding`` are folded into the table: a ``Dense`` with
          the identity activation (what
          :func:`~sklearn_isotropy.export.to_sentence_transformers` writes
          after a whitening) maps each row. A text's weights sum to one, so
          the mean of the mapped rows is the ``Dense`` of the mean: with
          ``weighting="uniform"``, the model's output for every text with a
          token (a text without tokens stays a row of zeros, where the model
          gives the ``Dense``'s bias). A ``Normalize`` at the end, a positive
          scale per text, is left out, as model2vec's ``normalize`` setting
          is. Any other module, or a ``Normalize`` before a ``Dense``, is
          refused with a ``ValueError`` that names it.

        The tokenizer must be a fast (Rust-backed) one.

    weighting : {"uniform", "sif", "zipf"}, default="sif"
        How the token rows are combined. With the refined table,
        ``"uniform"`` and ``"sif"`` were within 0.1 of each other on STS-B
        dev, raw and before a ``WhiteningTransformer(noise_variance="auto")``,
        and ``"zipf"`` behind; without refinement, ``"sif"`` was the best
        before that post-processor and ``"zipf"`` without one (see
        :doc:`/user_guide/static`).

        - ``"uniform"``: the plain mean of the rows.
        - ``"sif"``: smooth inverse frequency, each token weighted
          ``a / (a + p(t))`` with ``a = sif_coefficient`` (Arora et al.).
        - ``"zipf"``: Zipfian whitening (Yokoi et al.): the table is
          centred and whitened under the token frequencies (mean and
          covariance weighted by ``p(t)``), then rows are averaged
          uniformly. A token's row norm then grows with its information
          content, so rare tokens weigh more through their norms.
          Directions in which the table does not vary under ``p(t)``
          (eigenvalues below ``1e-10`` of the largest) are dropped, so the
          output can be narrower than the table: 381 of 384 features for
          the default encoder, whose mean-pooled outputs have three
          features that are constant to 1e-7.

        ``p(t)`` comes from ``frequencies``, or from the texts given to
        :meth:`fit`; tokens never seen share the probability Good and
        Turing give to an unseen token (the mass of the rarest seen ones).
        A full-rank whitening after the vectorizer makes
        ``"zipf"`` and ``"uniform"`` give the same cosines (whitening is
        invariant to an affine map of its input); they differ raw, and
        with partial whitening such as ``noise_variance``.

    sif_coefficient : float, default=1e-2
        ``a`` of ``weighting="sif"``. Chosen on STS-B dev with the default
        encoder (``benchmarks/bench_static.py``); refined, 3e-3 to 3e-2
        scored within 0.3 of each other (with the copies of
        ``refine_deletions``, 3e-2 is 0.05 above 1e-2, within the spread of
        which words the copies lose).

    frequencies : None, "zipf", dict or array-like of shape (n_tokens,), \
            default=None
        Token counts (or relative frequencies) for the weighting. ``None``
        counts the tokens of the texts given to :meth:`fit`. The others need
        no texts:

        - ``"zipf"``: model2vec's estimate from the vocabulary alone: the
          tokens in id order are taken as ranked by frequency, and the
          token at 0-based rank ``r`` counts ``1 / (r + 2)`` (Zipf's law;
          model2vec's ``distill`` weights its rows with these
          probabilities). BERT's ``[unusedN]`` placeholders, which
          model2vec leaves out, are not ranked (see
          :doc:`/user_guide/static`).
        - counts from a large corpus, say: a mapping from token strings (as
          ``tokenizer.encode(text).tokens`` spells them) to counts, or one
          count per token id.

        Ignored with ``weighting="uniform"``.

    distill_pooling : {"mean", "token"}, default="mean"
        How a distilled token's outputs become its row: ``"mean"`` averages
        the encoder's output over the whole input (``[CLS] token [SEP]``
        for BERT: the mean-pooled embedding of the one-token text);
        ``"token"`` takes the output at the token's position. ``"mean"``
        was better on STS-B dev for every weighting. Ignored for a static
        model.

    refine : bool, default=True
        Fit the distilled table to the encoder's own mean-pooled embeddings
        of the texts given to :meth:`fit` (no labels; the texts, and their
        copies less a word of ``refine_deletions``, are encoded once per fit,
        the distilled table is cached): first an affine map of
        the whole table, then a correction of the rows of the tokens the
        texts use, both ridge least squares of the weighted means on the
        encoder's embeddings, shrunk toward the distilled table (see Notes).
        On STS-B it closes most of the gap to the encoder (fitted on the
        train sentences, with ``WhiteningTransformer(noise_variance="auto")``:
        dev 81.6 -> 85.3, against the encoder's 86.7; see
        :doc:`/user_guide/static`). ``False`` keeps the distilled
        table, and a ``fit`` that runs no transformer once the table is
        cached. Ignored for a static model, which has no encoder.

    refine_alpha : float, default=0.1
        Ridge penalty of the refinement, chosen on STS-B dev: the affine
        map's, relative to the mean eigenvalue of the Gram matrix of the
        centred weighted means, and each token row's, in units of the
        squared weights (each text's weights sum to one). Larger keeps the
        table closer to the distilled one.

    refine_pseudo_tokens : float, default=16.0
        ``k`` of the refinement's model of mean pooling: the encoder's
        embedding of a text of ``n`` tokens is taken as the mean over its
        tokens and ``k`` more positions of zeros, so the static mean is
        fitted to the embedding times ``(n + k) / n`` (see Notes). Mean
        pooling averages a text's tokens with ``[CLS]`` and ``[SEP]`` (for
        BERT), whose share shrinks the embeddings of short texts; a mean of
        the text's own rows cannot. Equivalently, ``n / (n + k)`` times the
        static mean is fitted to the embedding with each text's squared
        error weighted by ``((n + k) / n)^2``: short texts weigh more.
        Chosen on STS-B dev (fitted on the train sentences, with
        ``WhiteningTransformer(noise_variance="auto")``: 85.36 with 16,
        against 85.08 with 0, 85.25 with 4 and 85.35 with 32); 0 fits the
        embeddings as they are. At most 10 000: ``k`` counts positions, more
        than any encoder pools, and beyond the longest text a larger ``k``
        only scales the fit's targets.

    refine_deletions : int, default=1
        How many copies of each fit text of four words or more (runs of
        non-whitespace characters), each with one word deleted, are encoded
        and fitted beside the fit texts (0: the fit texts alone). A text and
        the same text less a word show the refinement what that word does
        to the encoder's embedding in context, which is how similar
        sentences differ. Which word goes depends on the text alone, so
        refits are reproducible and ``memory=`` caches the copies'
        embeddings too. Texts the encoder truncates get no copy (the word
        could be one it never sees). The token frequencies of the weighting
        come from the fit texts only. Each copy adds about as many texts to
        encode as the fit texts of four words or more. On STS-B dev it
        gains on pairs with a negation on one side and on pairs of nearly
        the same words, and leaves the rest within the spread of which
        words are drawn (see :doc:`/user_guide/static`). Ignored where
        nothing is refined (``refine=False``, a static model).

    refine_backend : {"auto", "torch", "onnx", "onnx-int8"}, default="auto"
        What encodes the fit texts for ``refine``: the ``backend`` of
        :class:`BertPoolingVectorizer` (see :ref:`onnx_runtime`).
        ``"auto"`` runs the encoder's ONNX graph quantised to int8 in
        onnxruntime when onnx and onnxruntime are installed (the ``onnx``
        extra) and ``device`` is the CPU, else torch (and torch too if the
        encoder does not export to ONNX). The graph is exported once per
        encoder and machine and cached on disk; the first export takes a
        few seconds. int8 cost the default pipeline (with
        ``WhiteningTransformer(noise_variance="auto")``) nothing on STS-B
        dev and 0.03 points of Spearman x100 on the mean over STS-B test and
        STS12 to STS14, and refits on 10,536 STS-B sentences (and their
        copies less a word) in 12 to 14 s on two CPUs, against 23 s for
        ``"onnx"`` and 46 s for torch (see :doc:`/user_guide/static`).
        ``"onnx"`` gives torch's embeddings to float32 round-off; int8
        embeddings move in the last digits with the batch they are encoded
        in. Ignored where nothing is refined.

    memory : None, str, os.PathLike or joblib.Memory, default=None
        Cache of the encoder's embeddings of the fit texts (and of their
        copies less a word) for ``refine``,
        as :class:`BertPoolingVectorizer`'s ``memory``: with it, a second
        :meth:`fit` on the same texts (a grid search over the weighting,
        say) encodes only the texts not cached yet.

    batch_size : int, default=512
        Vocabulary tokens per forward pass while distilling.

    device : {"cpu", "cuda", "mps", "auto"} or str, default="cpu"
        Where the encoder runs while distilling. :meth:`transform` runs on
        the CPU.

    verbose : int, default=0
        If > 0, show a progress bar while distilling and log timings at
        INFO level to the ``sklearn_isotropy`` logger.

    Attributes
    ----------
    embeddings_ : ndarray of shape (n_tokens, hidden_size_), float32
        The table :meth:`transform` averages, one row per token id (for
        ``weighting="zipf"``, the whitened table).

    token_weights_ : ndarray of shape (n_tokens,), float32
        The weight of each token id in the mean (ones for ``"uniform"`` and
        ``"zipf"``).

    token_probabilities_ : ndarray of shape (n_tokens,) or None
        The smoothed token probabilities the weighting used; None for
        ``weighting="uniform"``.

    tokenizer_ : tokenizers.Tokenizer
        The fast tokenizer, without padding or truncation.

    hidden_size_ : int
        Width of the output.

    model_name_ : str
        Where the table came from: the encoder's directory or hub name, the
        static model's folder, or a description of the object passed.

    table_kind_ : {"distilled", "model2vec", "sentence-transformers"}
        How the table was obtained.

    refined_ : bool
        Whether the table was refined on the fit texts (``refine=True`` and a
        distilled table).

    See Also
    --------
    BertPoolingVectorizer : The contextual encoder itself, slower and better.
    sklearn_isotropy.export.to_sentence_transformers : Export a fitted
        static pipeline as a sentence-transformers ``StaticEmbedding``.
    sklearn_isotropy.export.to_model2vec : Export a fitted static pipeline
        as a model2vec folder, which this vectorizer also reads.

    Notes
    -----
    Texts are tokenized without special tokens and without a length limit.
    A text with no token at all (the empty string, spaces, a control
    character such as ``"\\x00"``) is the mean of no rows, taken as a row
    of zeros, as ``torch.nn.EmbeddingBag`` and model2vec take it. The steps
    after the vectorizer map it as any other row: in a pipeline with a
    :class:`~sklearn_isotropy.WhiteningTransformer` it becomes ``(0 -
    mean_) @ whitening_``, which is not neutral (it has a sizeable cosine
    with common words). The pipeline's ``transform`` and its exports
    (:func:`~sklearn_isotropy.export.to_onnx`,
    :func:`~sklearn_isotropy.export.to_sentence_transformers`) all give
    that same row. Where such texts should match nothing, find them from
    the vectorizer's zero rows and drop them.

    The distilled table of an encoder is cached under
    ``$SKLEARN_ISOTROPY_STATIC_CACHE`` (default
    ``~/.cache/sklearn_isotropy/static``), keyed by the encoder's weights,
    configuration and tokenizer and by ``distill_pooling``: a second
    :meth:`fit`, in this process or another, reads it.

    With ``refine=True``, let ``A`` be the sparse matrix of the fit texts'
    normalised token weights (a row per text that has tokens, so that the
    static means are ``A @ T``; then a row per copy less a word, see
    ``refine_deletions``), ``T0`` the distilled table and ``Y`` the
    encoder's mean-pooled embeddings of the texts (truncated at its maximum
    length, as it encodes them). The refinement solves, with ``alpha =
    refine_alpha``:

    0. ``Y`` is scaled row by row by ``(n + k) / n``, ``n`` the text's
       number of tokens and ``k = refine_pseudo_tokens``;
    1. ``min ||A (T0 M + b) - Y||^2 + mu ||M - I||^2`` over the affine map
       ``(M, b)``, with ``mu`` alpha times the mean eigenvalue of the Gram
       matrix of the centred ``A T0`` (so directions the texts do not span
       keep ``M = I``), then ``T1 = T0 M + b``: every row moves, those of
       tokens the texts never use included;
    2. ``min ||A (T1 + D) - Y||^2 + alpha ||D||^2`` over ``D``, by
       conjugate gradients on the normal equations of the rows the texts
       use, preconditioned by their diagonal (to a relative residual of
       1e-3), and ``T = T1 + D``.

    A text's weights are those of ``weighting`` (uniform for ``"zipf"``,
    whose whitening of the table follows the refinement). model2vec's
    "tokenlearn" likewise fits a static table to an encoder's outputs on a
    corpus, by gradient descent.

    References
    ----------
    .. [1] Arora, Liang and Ma, "A Simple but Tough-to-Beat Baseline for
       Sentence Embeddings", ICLR 2017.
    .. [2] Yokoi, Bao, Kurita and Shimodaira, "Zipfian Whitening", NeurIPS
       2024, arXiv:2411.00680.
    .. [3] Tulkens and van Dongen, "Model2Vec: Fast State-of-the-Art Static
       Embeddings", 2024.

    Examples
    --------
    A tiny randomly initialised BERT keeps this example offline and fast:

    >>> from transformers import BertConfig, BertModel, BertTokenizerFast
    >>> from sklearn_isotropy import StaticEmbeddingVectorizer
    >>> words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    >>> tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(words)})
    >>> config = BertConfig(vocab_size=len(words), hidden_size=16,
    ...                     num_hidden_layers=2, num_attention_heads=2,
    ...                     intermediate_size=32)
    >>> vec = StaticEmbeddingVectorizer((BertModel(config), tokenizer),
    ...                                 weighting="sif")
    >>> X = vec.fit_transform(["the cat sat", "the cat", "sat"])
    >>> X.shape, X.dtype
    ((3, 16), dtype('float32'))
    >>> vec.embeddings_.shape
    (8, 16)

    With the default encoder and a whitening, fitted on unlabelled texts:

    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn_isotropy import WhiteningTransformer
    >>> pipe = make_pipeline(StaticEmbeddingVectorizer(), WhiteningTransformer())
    >>> embeddings = pipe.fit_transform(sentences)  # doctest: +SKIP
    """

    _parameter_constraints: dict = {
        "model": "no_validation",  # resolved in fit, with a clear TypeError
        "weighting": [StrOptions(set(TOKEN_WEIGHTS))],
        "sif_coefficient": [Interval(Real, 0, None, closed="neither")],
        "frequencies": [None, StrOptions(set(RANK_FREQUENCIES)), Mapping, "array-like"],
        "distill_pooling": [StrOptions(set(DISTILL_POOLINGS))],
        "refine": ["boolean"],
        "refine_alpha": [Interval(Real, 0, None, closed="neither")],
        "refine_pseudo_tokens": [Interval(Real, 0, MAX_PSEUDO_TOKENS, closed="both")],
        "refine_deletions": [Interval(Integral, 0, None, closed="left")],
        "refine_backend": [StrOptions(set(REFINE_BACKENDS))],
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "device": [str],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        model=None,
        *,
        weighting="sif",
        sif_coefficient=1e-2,
        frequencies=None,
        distill_pooling="mean",
        refine=True,
        refine_alpha=0.1,
        refine_pseudo_tokens=16.0,
        refine_deletions=1,
        refine_backend="auto",
        memory=None,
        batch_size=512,
        device="cpu",
        verbose=0,
    ):
        self.model = model
        self.weighting = weighting
        self.sif_coefficient = sif_coefficient
        self.frequencies = frequencies
        self.distill_pooling = distill_pooling
        self.refine = refine
        self.refine_alpha = refine_alpha
        self.refine_pseudo_tokens = refine_pseudo_tokens
        self.refine_deletions = refine_deletions
        self.refine_backend = refine_backend
        self.memory = memory
        self.batch_size = batch_size
        self.device = device
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Iterable[str], y=None) -> StaticEmbeddingVectorizer:
        """Build the token table and the token weights.

        Parameters
        ----------
        X : iterable of str
            Texts (a list, tuple, 1-D array or pandas Series) whose tokens
            are counted for the weighting, unless ``frequencies`` is given.
        y : None
            Ignored.

        Returns
        -------
        self : StaticEmbeddingVectorizer
            The fitted vectorizer.
        """
        texts = validate_texts(X)
        start = time.perf_counter()
        device = None
        if static_folder(self.model) is None:
            # only an encoder needs torch: a static (model2vec) folder is read
            # with tokenizers and safetensors alone
            device, _ = resolve_device(
                self.device, owner=type(self).__name__, extra="text"
            )
        table = load_table(
            self.model,
            self.distill_pooling,
            self.batch_size,
            device,
            verbose=self.verbose,
        )
        n_tokens = len(table.embeddings)
        ids, lengths = token_ids(table.tokenizer, texts)
        refine = self.refine and table.kind == "distilled"
        counted = self.weighting != "uniform" and self.frequencies is None
        if (counted or refine) and not len(ids):
            needs = [f"weighting={self.weighting!r}"] if counted else []
            needs += ["refine=True"] if refine else []
            verb = "learns" if len(needs) == 1 else "learn"
            raise ValueError(
                f"{' and '.join(needs)} {verb} from the texts given to fit, but "
                "they hold no token. Fit on texts (unlabelled ones from the "
                "domain are best)"
                + (
                    ", or pass frequencies= (corpus counts, or 'zipf' to need none)."
                    if not refine
                    else "."
                )
            )
        probabilities = None
        if self.weighting != "uniform":
            probabilities = token_probabilities(
                self._token_counts(table.tokenizer, ids, n_tokens)
            )
        weigh = TOKEN_WEIGHTS[self.weighting]
        weights = weigh(n_tokens, probabilities, self.sif_coefficient)
        embeddings = table.embeddings
        if refine:
            embeddings = self._refine(
                embeddings, weights, table.tokenizer, ids, lengths, texts, device
            )
        if self.weighting in TABLE_MAPS:
            embeddings = TABLE_MAPS[self.weighting](embeddings, probabilities)
        self.embeddings_ = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.token_weights_ = weights
        self.token_probabilities_ = probabilities
        self.tokenizer_ = table.tokenizer
        self.hidden_size_ = int(self.embeddings_.shape[1])
        self.model_name_ = table.source
        self.table_kind_ = table.kind
        self.refined_ = refine
        if self.verbose:
            logger.info(
                "Fitted a %s table of %d tokens x %d in %.2f s",
                table.kind,
                *self.embeddings_.shape,
                time.perf_counter() - start,
            )
        return self

    def _refine(self, embeddings, weights, tokenizer, ids, lengths, texts, device):
        """The distilled table fitted to the encoder's embeddings of ``texts``.

        And of their copies with a word deleted (``refine_deletions``).
        """
        start = time.perf_counter()
        n_tokens = len(embeddings)
        kept = np.flatnonzero(lengths)  # a text without tokens has no mean
        mixing = mixing_matrix(ids, lengths, weights, n_tokens)[kept]
        texts = [texts[i] for i in kept]
        lengths = lengths[kept]
        encoder, backend = self._fit_encoder(texts, device)
        # A text the encoder truncates gets no copy: the word deleted could be
        # one the encoder never sees, and the copy would teach the table that
        # the word changes nothing.
        window = encoder.max_length_ - len(tokenizer.encode("").ids)
        whole = [text for text, n in zip(texts, lengths) if n <= window]
        copies = one_word_deleted(whole, self.refine_deletions)
        n_copies = 0
        if copies:
            copy_ids, copy_lengths = token_ids(tokenizer, copies)
            # a word can be all characters the tokenizer drops (controls)
            kept = np.flatnonzero(copy_lengths)
            copy_mixing = mixing_matrix(copy_ids, copy_lengths, weights, n_tokens)
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
        refined = refine_table(
            embeddings,
            mixing,
            targets,
            self.refine_alpha,
            lengths=lengths,
            pseudo_tokens=self.refine_pseudo_tokens,
        )
        if self.verbose:
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

    def _fit_encoder(self, texts, device):
        """The encoder of the refinement's targets, fitted.

        Returns ``(encoder, backend)``: the :class:`BertPoolingVectorizer`
        (mean pooling) and the backend it runs (see ``refine_backend``).
        """
        from ._vectorizer import BertPoolingVectorizer

        backend = refine_backend(self.refine_backend, device)

        def fit(backend):
            encoder = BertPoolingVectorizer(
                self.model,
                pooling="mean",
                device=self.device,
                backend=backend,
                memory=self.memory,
                show_progress_bar=bool(self.verbose),
            )
            return encoder.fit(texts)

        if self.refine_backend != "auto" or backend == "torch":
            return fit(backend), backend
        try:
            return fit(backend), backend
        except ValueError as exc:  # the model does not export to ONNX
            logger.info("Encoding the fit texts with torch: %s", exc)
            return fit("torch"), "torch"

    def _token_counts(self, tokenizer, ids, n_tokens):
        """Counts per token id.

        From ``frequencies``, or the ``ids`` of the texts given to fit.
        """
        if self.frequencies is None:
            return np.bincount(ids, minlength=n_tokens)
        if isinstance(self.frequencies, str):
            return RANK_FREQUENCIES[self.frequencies](tokenizer, n_tokens)
        if isinstance(self.frequencies, Mapping):
            counts = np.zeros(n_tokens)
            unknown = []
            for token, count in self.frequencies.items():
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
            counts = _real_counts(self.frequencies)
            if counts.shape != (n_tokens,):
                raise ValueError(
                    f"frequencies has shape {counts.shape}, but the tokenizer has "
                    f"{n_tokens} token ids; pass one count per id, or a dict from "
                    "token to count."
                )
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
        return counts

    def transform(self, X: Iterable[str]) -> np.ndarray:
        """Encode texts.

        Parameters
        ----------
        X : iterable of str
            Texts (a list, tuple, 1-D array or pandas Series).

        Returns
        -------
        X_new : ndarray of shape (n_texts, hidden_size_), float32
            The weighted mean of each text's token rows, in input order (a
            row of zeros for a text without tokens).
        """
        check_is_fitted(self)
        texts = validate_texts(X)
        ids, lengths = token_ids(self.tokenizer_, texts)
        return weighted_means(ids, lengths, self.token_weights_, self.embeddings_)

    def fit_transform(self, X: Iterable[str], y=None) -> np.ndarray:
        """Fit, then encode ``X``; same as ``fit(X).transform(X)``.

        ``X`` is read once, so a generator or ``map`` works as a list does.

        Parameters
        ----------
        X : iterable of str
            Texts.
        y : None
            Ignored.

        Returns
        -------
        X_new : ndarray of shape (n_texts, hidden_size_), float32
            The encoded texts.
        """
        texts = validate_texts(X)
        return self.fit(texts, y).transform(texts)

    @property
    def _n_features_out(self):
        return self.hidden_size_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.requires_fit = True
        tags.transformer_tags.preserves_dtype = []
        return tags

    def __sklearn_clone__(self):
        return clone_sharing_model(self)
