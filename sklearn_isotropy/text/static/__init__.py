"""The static vectorizer: texts as weighted means of the rows of a token table.

:class:`StaticEmbeddingVectorizer` (``_vectorizer.py``) is the estimator.
Beside it: its token table, distilled from an encoder or read from a static
model's folder (``_table.py``), and the verified disk cache of distilled
tables (``_table_cache.py``); its token weighting (``_weighting.py``); the
token ids of texts and their weighted means (``_means.py``); and the
refinement of a distilled table on the encoder's own embeddings
(``_refine.py``), whose fit :func:`refine_table` offers for a table, texts
and targets of the caller's own. What the vectorizer shares with the
contextual one (input checks, ``fit_transform``, tags, model loading) lives
one level up, in ``text/``. The public names are exported from
:mod:`sklearn_isotropy.text` (and the vectorizer from :mod:`sklearn_isotropy`).
"""

from __future__ import annotations

from ._refine import refine_table
from ._vectorizer import StaticEmbeddingVectorizer

__all__ = ["StaticEmbeddingVectorizer", "refine_table"]
