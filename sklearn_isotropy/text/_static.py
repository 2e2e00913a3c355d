"""Sentences to weighted means of static token vectors, a scikit-learn transformer."""

from __future__ import annotations

import itertools
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._utils import PrefixedFeatureNamesMixin, resolve_device
from ..exceptions import TruncationWarning
from ._base import clone_sharing_model, validate_texts
from ._static_refine import refine_table
from ._static_table import DISTILL_POOLINGS, load_table

logger = logging.getLogger(__name__)

__all__ = ["StaticEmbeddingVectorizer", "token_probabilities"]

# The tolerance below which an eigenvalue of the frequency-weighted covariance
# of the table counts as zero, relative to the largest (the table is float32,
# whose round-off alone gives relative eigenvalues near 1e-14).
_RANK_RTOL = 1e-10


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


def _ones(n_tokens, probabilities, vec):
    return np.ones(n_tokens, dtype=np.float32)


def _sif(n_tokens, probabilities, vec):
    a = vec.sif_coefficient
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


@dataclass(frozen=True)
class Weighting:
    """A weighting: the token weights of the mean and, for some, a map of the
    table applied after any refinement."""

    weights: Callable  # (n_tokens, probabilities or None, vectorizer) -> (n_tokens,)
    table: Callable | None = None  # (embeddings, probabilities) -> table


#: ``weighting -> Weighting``: the rows :meth:`transform` averages and their
#: weights.
WEIGHTINGS = {
    "uniform": Weighting(_ones),
    "sif": Weighting(_sif),
    "zipf": Weighting(_ones, _zipf_table),
}


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
          they are (float16 or int8 rows as float32).

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
        scored within 0.25 of each other.

    frequencies : None, dict or array-like of shape (n_tokens,), default=None
        Token counts (or relative frequencies) for the weighting, e.g. from
        a large corpus: a mapping from token strings (as
        ``tokenizer.encode(text).tokens`` spells them) to counts, or one
        count per token id. ``None`` counts the tokens of the texts given
        to :meth:`fit`. Ignored with ``weighting="uniform"``.

    distill_pooling : {"mean", "token"}, default="mean"
        How a distilled token's outputs become its row: ``"mean"`` averages
        the encoder's output over the whole input (``[CLS] token [SEP]``
        for BERT: the mean-pooled embedding of the one-token text);
        ``"token"`` takes the output at the token's position. ``"mean"``
        was better on STS-B dev for every weighting. Ignored for a static
        model.

    refine : bool, default=True
        Fit the distilled table to the encoder's own mean-pooled embeddings
        of the texts given to :meth:`fit` (no labels; the texts are encoded
        once per fit, the distilled table is cached): first an affine map of
        the whole table, then a correction of the rows of the tokens the
        texts use, both ridge least squares of the weighted means on the
        encoder's embeddings, shrunk toward the distilled table (see Notes).
        On STS-B it closes most of the gap to the encoder (fitted on the
        train sentences, with ``WhiteningTransformer(noise_variance="auto")``:
        dev 81.6 -> 85.1, test 69.5 -> 77.5, against the encoder's 86.7 and
        82.0; see :doc:`/user_guide/static`). ``False`` keeps the distilled
        table, and a ``fit`` that runs no transformer once the table is
        cached. Ignored for a static model, which has no encoder.

    refine_alpha : float, default=0.1
        Ridge penalty of the refinement, chosen on STS-B dev: the affine
        map's, relative to the mean eigenvalue of the Gram matrix of the
        centred weighted means, and each token row's, in units of the
        squared weights (each text's weights sum to one). Larger keeps the
        table closer to the distilled one.

    memory : None, str, os.PathLike or joblib.Memory, default=None
        Cache of the encoder's embeddings of the fit texts for ``refine``,
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
    A text with no token at all (the empty string) is the mean of no rows,
    taken as a row of zeros, as ``torch.nn.EmbeddingBag`` and model2vec
    take it.

    The distilled table of an encoder is cached under
    ``$SKLEARN_ISOTROPY_STATIC_CACHE`` (default
    ``~/.cache/sklearn_isotropy/static``), keyed by the encoder's weights,
    configuration and tokenizer and by ``distill_pooling``: a second
    :meth:`fit`, in this process or another, reads it.

    With ``refine=True``, let ``A`` be the sparse matrix of the fit texts'
    normalised token weights (a row per text that has tokens, so that the
    static means are ``A @ T``), ``T0`` the distilled table and ``Y`` the
    encoder's mean-pooled embeddings of the texts (truncated at its maximum
    length, as it encodes them). The refinement solves, with ``alpha =
    refine_alpha``:

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
        "weighting": [StrOptions(set(WEIGHTINGS))],
        "sif_coefficient": [Interval(Real, 0, None, closed="neither")],
        "frequencies": [None, Mapping, "array-like"],
        "distill_pooling": [StrOptions(set(DISTILL_POOLINGS))],
        "refine": ["boolean"],
        "refine_alpha": [Interval(Real, 0, None, closed="neither")],
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
        device, _ = resolve_device(self.device, owner=type(self).__name__)
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
                "domain are best)" + (", or pass frequencies=." if not refine else ".")
            )
        probabilities = None
        if self.weighting != "uniform":
            probabilities = token_probabilities(
                self._token_counts(table.tokenizer, ids, n_tokens)
            )
        rule = WEIGHTINGS[self.weighting]
        weights = rule.weights(n_tokens, probabilities, self)
        embeddings = table.embeddings
        if refine:
            embeddings = self._refine(embeddings, weights, ids, lengths, texts)
        if rule.table is not None:
            embeddings = rule.table(embeddings, probabilities)
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

    def _refine(self, embeddings, weights, ids, lengths, texts):
        """The distilled table fitted to the encoder's embeddings of ``texts``."""
        from ._vectorizer import BertPoolingVectorizer

        start = time.perf_counter()
        kept = np.flatnonzero(lengths)  # a text without tokens has no mean
        mixing = mixing_matrix(ids, lengths, weights, len(embeddings))[kept]
        texts = [texts[i] for i in kept]
        encoder = BertPoolingVectorizer(
            self.model,
            pooling="mean",
            device=self.device,
            memory=self.memory,
            show_progress_bar=bool(self.verbose),
        )
        with warnings.catch_warnings():
            # the targets are the encoder's embeddings as it gives them
            # (truncated at its max_length); the static means are not truncated
            warnings.simplefilter("ignore", TruncationWarning)
            targets = encoder.fit(texts).transform(texts)
        encoded = time.perf_counter()
        refined = refine_table(embeddings, mixing, targets, self.refine_alpha)
        if self.verbose:
            logger.info(
                "Encoded %d texts in %.2f s and refined the table in %.2f s",
                len(texts),
                encoded - start,
                time.perf_counter() - encoded,
            )
        return refined

    def _token_counts(self, tokenizer, ids, n_tokens):
        """Counts per token id: from ``frequencies``, or the ``ids`` of the
        texts given to fit."""
        if self.frequencies is None:
            return np.bincount(ids, minlength=n_tokens)
        if isinstance(self.frequencies, Mapping):
            counts = np.zeros(n_tokens)
            unknown = []
            for token, count in self.frequencies.items():
                index = tokenizer.token_to_id(str(token))
                if index is None:
                    unknown.append(token)
                else:
                    counts[index] = count
            if unknown:
                raise ValueError(
                    f"frequencies names {len(unknown)} tokens that are not in the "
                    f"tokenizer's vocabulary, such as {unknown[:5]!r}; give counts "
                    "of its tokens, as tokenizer.encode(text).tokens spells them."
                )
        else:
            counts = np.asarray(self.frequencies, dtype=np.float64)
            if counts.shape != (n_tokens,):
                raise ValueError(
                    f"frequencies has shape {counts.shape}, but the tokenizer has "
                    f"{n_tokens} token ids; pass one count per id, or a dict from "
                    "token to count."
                )
        if not np.all(np.isfinite(counts)) or np.any(counts < 0):
            raise ValueError(
                "frequencies must be finite and non-negative; got values from "
                f"{np.nanmin(counts)} to {np.nanmax(counts)}."
            )
        if not counts.sum() > 0:
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
        return self.fit(X, y).transform(X)

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
