"""
==============================================================
Text beside numeric and categorical columns, in a pandas table
==============================================================

Texts often come in a table with other columns: a review with its star
rating and its product's category, say. scikit-learn's
:class:`~sklearn.compose.ColumnTransformer` gives each column its own
steps; here the text column is embedded by
:class:`~sklearn_isotropy.BertPoolingVectorizer` (the default encoder,
all-MiniLM-L6-v2, offline) and whitened to 16 components by
:class:`~sklearn_isotropy.WhiteningTransformer`, beside a
:class:`~sklearn.preprocessing.StandardScaler` and a
:class:`~sklearn.preprocessing.OneHotEncoder`, with pandas output
(``set_output(transform="pandas")``) and a classifier after them, all
cross-validated as one estimator.

Every step's DataFrame carries the index of the rows it was given, as
scikit-learn's own transformers do. That is what lets the
``ColumnTransformer`` put the blocks side by side: in a cross-validation fold
the rows' index is not ``0, 1, 2, ...``, and a block with a fresh index would
not line up with the others.
"""

# %%
# A table of reviews
# ------------------
# The reviews are written from a few templates, so that the example needs no
# data set: whether the reviewer recommends the product is in the words;
# the star rating says it only roughly. Their index is a review id, as in a
# table read from a database, not a ``RangeIndex``.

import os
import tempfile

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from sklearn_isotropy import BertPoolingVectorizer, WhiteningTransformer

PRODUCTS = {
    "book": ["novel", "cookbook", "biography", "travel guide"],
    "film": ["thriller", "comedy", "documentary", "cartoon"],
    "game": ["puzzle game", "racing game", "strategy game", "card game"],
}
PRAISE = [
    "I loved every minute of this {}.",
    "A wonderful {}, I would buy it again.",
    "This {} exceeded my expectations.",
    "The best {} I have had in years, and good value.",
    "My whole family enjoyed the {}.",
]
COMPLAINTS = [
    "This {} was a waste of money.",
    "I returned the {} after a day.",
    "A dull {}; I regret buying it.",
    "The {} tried my patience within an hour.",
    "Nobody in my family finished the {}.",
]

rng = np.random.default_rng(0)
n_reviews = 120
category = rng.choice(list(PRODUCTS), size=n_reviews)
recommends = rng.random(n_reviews) < 0.5
reviews = pd.DataFrame(
    {
        "review": [
            rng.choice(PRAISE if liked else COMPLAINTS).format(
                rng.choice(PRODUCTS[kind])
            )
            for kind, liked in zip(category, recommends)
        ],
        # 4 stars on average for a recommendation, 2 otherwise, give or take 1.5
        "stars": np.clip(
            np.round(2 + 2 * recommends + rng.normal(0, 1.5, n_reviews)), 1, 5
        ),
        "category": category,
    },
    index=pd.Index(
        rng.choice(100_000, size=n_reviews, replace=False), name="review_id"
    ),
)
print(reviews.head())

# %%
# One transformer per column
# --------------------------
# The vectorizer caches its embeddings on disk (``memory=``), so each review
# is encoded once, whichever fold or model needs it.

CACHE = os.path.join(tempfile.gettempdir(), "sklearn_isotropy_examples")


def features(columns=("review", "stars", "category")):
    """The ColumnTransformer of the columns named, with pandas output."""
    steps = {
        "review": make_pipeline(
            BertPoolingVectorizer(memory=CACHE), WhiteningTransformer(n_components=16)
        ),
        "stars": StandardScaler(),
        "category": OneHotEncoder(sparse_output=False),
    }
    return ColumnTransformer(
        # the text column by name (a Series of texts), the others as lists
        [(c, steps[c], c if c == "review" else [c]) for c in columns]
    ).set_output(transform="pandas")


embedded = features().fit_transform(reviews)
print(embedded.shape)
print(embedded.iloc[:3, [0, 1, 16, 17, 18, 19]].round(3).to_string())
print("indexed by the reviews' own ids:", embedded.index.equals(reviews.index))

# %%
# Cross-validated, as one estimator
# ---------------------------------
# ``cross_val_score`` fits the whole chain on four fifths of the rows and
# scores it on the rest, five times. Each fold's rows keep their review ids,
# and every block of the ``ColumnTransformer`` carries them.

cv = KFold(5, shuffle=True, random_state=0)
for columns in [("stars", "category"), ("review",), ("review", "stars", "category")]:
    model = make_pipeline(features(columns), LogisticRegression(max_iter=1000))
    scores = cross_val_score(model, reviews, recommends, cv=cv)
    print(
        f"{' + '.join(columns):<26} accuracy {scores.mean():.3f} +- {scores.std():.3f}"
    )

# %%
# The words decide these reviews, the stars only roughly. Whitening the
# embeddings of this sentence-trained encoder is here mostly a way to a
# smaller block (16 columns instead of 384) that is on the scale of the
# others; see :ref:`downstream` for when it helps a classifier, and put
# ``"passthrough"`` among the candidates of a grid search to let the data
# decide.
