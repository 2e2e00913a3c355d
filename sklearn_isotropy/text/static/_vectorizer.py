"""Sentences to weighted means of static token vectors, a scikit-learn transformer."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..._utils import PrefixedFeatureNamesMixin, resolve_device, warn
from ..._utils._sklearn import HasMethods, Interval, StrOptions, _fit_context
from ...exceptions import DoubleWeightingWarning
from .._base import TextVectorizerMixin, validate_texts
from ._means import mixing_matrix, token_ids, weighted_means
from ._refine import (
    MAX_PSEUDO_TOKENS,
    MAX_REFINE_ALPHA,
    REFINE_BACKENDS,
    refine_on_encoder,
)
from ._table import DISTILL_POOLINGS, load_table, static_folder
from ._weighting import (
    sif_weights,
    token_counts,
    token_probabilities,
    zipf_whitened,
)

logger = logging.getLogger(__name__)

__all__ = ["StaticEmbeddingVectorizer"]


class StaticEmbeddingVectorizer(
    TextVectorizerMixin, PrefixedFeatureNamesMixin, TransformerMixin, BaseEstimator
):
    """Encode texts as weighted means of static token vectors.

    A text becomes the weighted mean of the rows of a token table over its
    tokens: no transformer runs at :meth:`transform`, which is one call of
    the fast tokenizer and one sparse matrix product (its speed against
    the transformer is measured in :doc:`/user_guide/static`). :meth:`fit`
    builds the table, either
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
          they are (float16 or int8 rows as float32). A ``Dense`` with the
          identity activation after the ``StaticEmbedding`` is folded into
          the table, and a ``Normalize`` at the end left out; any other
          module is refused with a ``ValueError`` that names it (see
          :doc:`/user_guide/static`).

        The tokenizer must be a fast (Rust-backed) one.

    weighting : {"auto", "uniform", "sif", "zipf"}, default="auto"
        How the token rows are combined (compared on STS-B dev in
        :doc:`/user_guide/static`).

        - ``"auto"``: ``"uniform"`` for a folder written by
          :func:`~sklearn_isotropy.export.to_model2vec` or
          :func:`~sklearn_isotropy.export.to_sentence_transformers` (its
          configuration says so), whose rows carry their token weights
          already, so that it reads back as the pipeline it was exported
          from; ``"sif"`` for anything else. ``weighting_`` says which.
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
          output can be narrower than the table (as for the default
          encoder, see :doc:`/user_guide/static`).

        ``p(t)`` comes from ``frequencies``, or from the texts given to
        :meth:`fit`; tokens never seen share the probability Good and
        Turing give to an unseen token (the mass of the rarest seen ones).
        A full-rank whitening after the vectorizer makes ``"zipf"`` and
        ``"uniform"`` give the same cosines (whitening is invariant to an
        affine map of its input); they differ raw, and with partial
        whitening such as ``noise_variance``. Another weighting than
        ``"uniform"`` for a folder this package exported weighs its rows a
        second time: it is used as asked, with a
        :class:`~sklearn_isotropy.exceptions.DoubleWeightingWarning`.

    sif_coefficient : float, default=1e-2
        ``a`` of ``weighting="sif"``. The default is a measured choice, with
        the scores of its neighbours in :doc:`/user_guide/static`
        (``benchmarks/bench_static.py``).

    frequencies : None, "zipf", dict or array-like of shape (n_tokens,), \
            default=None
        Token counts (or relative frequencies) for the weighting. ``None``
        counts the tokens of the texts given to :meth:`fit`. The others need
        no texts:

        - ``"zipf"``: model2vec's estimate from the vocabulary alone: the
          tokens in id order are taken as ranked by frequency, and the
          token at 0-based rank ``r`` counts ``1 / (r + 2)`` (Zipf's law;
          model2vec's ``distill`` weights its rows with these probabilities).
          BERT's ``[unusedN]`` placeholders, which model2vec leaves out, are
          not ranked (see :doc:`/user_guide/static`).
        - counts from a large corpus, say: a mapping from token strings (as
          ``tokenizer.encode(text).tokens`` spells them) to counts, or one
          count per token id.

        Ignored with ``weighting="uniform"``.

    distill_pooling : {"mean", "token"}, default="mean"
        How a distilled token's outputs become its row: ``"mean"`` averages
        the encoder's output over the whole input (``[CLS] token [SEP]``
        for BERT: the mean-pooled embedding of the one-token text);
        ``"token"`` takes the output at the token's position (the two are
        compared in :doc:`/user_guide/static`). Ignored for a static
        model.

    refine : bool, default=True
        Fit the distilled table to the encoder's own mean-pooled embeddings
        of the texts given to :meth:`fit` (no labels; the texts, and their
        copies less a word of ``refine_deletions``, are encoded once per fit,
        the distilled table is cached): first an affine map of the whole
        table, then a correction of the rows of the tokens the texts use,
        both ridge least squares of the weighted means on the encoder's
        embeddings, shrunk toward the distilled table (see Notes; how much
        of the gap to the encoder it closes is measured in
        :doc:`/user_guide/static`). ``False`` keeps the distilled table, and
        a ``fit`` that runs no transformer once the table is cached. Ignored
        for a static model, which has no encoder.

    refine_alpha : float, default=0.1
        Ridge penalty of the refinement (a measured default, see
        :doc:`/user_guide/static`): the affine map's, relative to the mean
        eigenvalue of the Gram matrix of the centred weighted means, and
        each token row's, in units of the squared weights (each text's
        weights sum to one). Larger keeps the
        table closer to the distilled one (shifted to the embeddings' mean).
        At most 1e8: each stage's change shrinks as about ``1 / alpha``, and
        beyond that the table no longer changes in float32 (values near
        float64's range overflowed to a table of NaN). A refined table that
        is not finite (an encoder whose embeddings overflow, say) is a
        ``ValueError`` that says why.

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
        The default is a measured choice (see :doc:`/user_guide/static`);
        0 fits the embeddings as they are. At
        most 10 000: ``k`` counts positions, more than any encoder pools,
        and beyond the longest text a larger ``k`` only scales the fit's
        targets.

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
        encode as the fit texts of four words or more. What the copies mend
        (pairs with a negation on one side, pairs of nearly the same words)
        is measured in :doc:`/user_guide/static`. Ignored where nothing is
        refined (``refine=False``, a static model).

    refine_backend : {"auto", "torch", "onnx", "onnx-int8"}, default="auto"
        What encodes the fit texts for ``refine``: the ``backend`` of
        :class:`BertPoolingVectorizer` (see :ref:`onnx_runtime`).
        ``"auto"`` runs the encoder's ONNX graph quantised to int8 in
        onnxruntime when onnx and onnxruntime are installed (the ``onnx``
        extra) and ``device`` is the CPU, else torch (and torch too if the
        encoder does not export to ONNX). The graph is exported once per
        encoder and machine and cached on disk; the first export takes a
        few seconds. int8 is the default for its refit time and its small
        cost to the default pipeline, both measured in
        :doc:`/user_guide/static`. ``"onnx"`` gives torch's embeddings to
        float32 round-off; int8 embeddings move in the last digits with the
        batch they are encoded in. Ignored where nothing is refined.

    memory : None, str, os.PathLike or joblib.Memory, default=None
        Cache of the encoder's embeddings of the fit texts (and of their
        copies less a word) for ``refine``, as :class:`BertPoolingVectorizer`'s
        ``memory``: with it, a second :meth:`fit` on the same texts (a grid
        search over the weighting, say) encodes only the texts not cached yet.

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
    weighting_ : {"uniform", "sif", "zipf"}
        The weighting used: ``weighting``, with ``"auto"`` resolved.

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

    With ``refine=True``, with ``A`` the sparse matrix of the normalised
    token weights of the fit texts that have tokens and of their copies
    less a word (so that the static means are ``A @ T``), ``T0`` the
    distilled table, ``Y`` the encoder's mean-pooled embeddings of the same
    texts (truncated as it encodes them) and ``alpha = refine_alpha``: each
    row of ``Y`` is scaled by ``(n + k) / n`` (``n`` tokens, ``k =
    refine_pseudo_tokens``); the affine map ``T1 = T0 M + b`` minimises
    ``||A (T0 M + b) - Y||^2 + mu ||M - I||^2``, ``mu`` alpha times the mean
    eigenvalue of the Gram matrix of the centred ``A T0`` (every row moves);
    then ``T = T1 + D`` minimises ``||A (T1 + D) - Y||^2 + alpha ||D||^2``,
    by conjugate gradients on the rows the texts use (to a relative residual
    of 1e-3). The user guide details each stage. A text's weights are those
    of ``weighting`` (uniform for ``"zipf"``, whose whitening of the table
    follows the refinement). model2vec's "tokenlearn" likewise fits a static
    table to an encoder's outputs on a corpus, by gradient descent.

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
        "weighting": [StrOptions({"auto", "uniform", "sif", "zipf"})],
        "sif_coefficient": [Interval(Real, 0, None, closed="neither")],
        "frequencies": [None, StrOptions({"zipf"}), Mapping, "array-like"],
        "distill_pooling": [StrOptions(set(DISTILL_POOLINGS))],
        "refine": ["boolean"],
        # past MAX_REFINE_ALPHA the table no longer changes (see its comment)
        "refine_alpha": [Interval(Real, 0, MAX_REFINE_ALPHA, closed="right")],
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
        weighting="auto",
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
        weighting = self._resolve_weighting(table)
        n_tokens = len(table.embeddings)
        ids, lengths = token_ids(table.tokenizer, texts)
        refine = self.refine and table.kind == "distilled"
        counted = weighting != "uniform" and self.frequencies is None
        if (counted or refine) and not len(ids):
            needs = [f"weighting={weighting!r}"] if counted else []
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
        if weighting != "uniform":
            counts = token_counts(self.frequencies, table.tokenizer, ids, n_tokens)
            probabilities = token_probabilities(counts)
        if weighting == "sif":
            weights = sif_weights(probabilities, self.sif_coefficient)
        else:  # "uniform"; "zipf" weighs its tokens by its table's row norms
            weights = np.ones(n_tokens, dtype=np.float32)
        embeddings = table.embeddings
        if refine:
            kept = np.flatnonzero(lengths)  # a text without tokens has no mean
            embeddings = refine_on_encoder(
                self,
                embeddings,
                weights,
                mixing_matrix(ids, lengths, weights, n_tokens)[kept],
                [texts[i] for i in kept],
                lengths[kept],
                table.tokenizer,
                device,
            )
        if weighting == "zipf":  # after the refinement, which it whitens
            embeddings = zipf_whitened(embeddings, probabilities)
        self.weighting_ = weighting
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

    def _resolve_weighting(self, table):
        """``weighting``, with ``"auto"`` resolved for ``table``.

        A folder this package exported holds each token's weight times its
        row (its configuration records the export): its plain mean is the
        exported pipeline's output times a positive number per text, and
        any other weighting applies the weights a second time (with SIF,
        cosines with the pipeline down to 0.88 on the tests' pipeline).
        """
        if table.exported is None:
            return "sif" if self.weighting == "auto" else self.weighting
        if self.weighting in ("auto", "uniform"):
            return "uniform"
        exporter = table.exported.get("exporter", "an exporter of sklearn-isotropy")
        warn(
            f"{table.source!r} was written by {exporter}, so each of its rows "
            "is its token's weight times its row already; "
            f"weighting={self.weighting!r} weighs the rows a second time, and "
            "the output is no longer that of the pipeline it was exported "
            "from. Leave weighting at its default 'auto' (or pass 'uniform') "
            "to read it back as exported.",
            DoubleWeightingWarning,
        )
        return self.weighting

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

    @property
    def _n_features_out(self):
        return self.hidden_size_
