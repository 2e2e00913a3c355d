"""
=======================================================
Anisotropy diagnostics of real sentence embeddings
=======================================================

How anisotropic are the embeddings of the default encoder,
all-MiniLM-L6-v2, on the STS Benchmark, and what does whitening change? This
example computes the measures of :mod:`sklearn_isotropy.diagnostics` (mean
cosine of random pairs, the isotropy score of Mu and Viswanath, effective
rank, share of variance of the top principal component) and draws the
eigenvalue spectrum and the histogram of pair cosines before and after
:class:`~sklearn_isotropy.WhiteningTransformer`, for two poolings (see
:ref:`pooling`):

* ``"mean"``, the model's own contrastively trained sentence embedding;
* ``"embeddings_avg"``, the context-free embedding layer, as anisotropic as a
  raw language model.

The figures of :ref:`anisotropy` come from this example.
"""

# %%
# Data and embeddings
# -------------------
# The whitening is fitted on the same
# sentences it is measured on.

import os
import tempfile

import matplotlib.pyplot as plt

from sklearn_isotropy import BertPoolingVectorizer, WhiteningTransformer
from sklearn_isotropy.datasets import load_sts_splits
from sklearn_isotropy.diagnostics import (
    anisotropy_report,
    plot_cosine_histogram,
    plot_eigenvalue_spectrum,
)

# ``load_sts_splits("stsb", ...)`` reads the STS Benchmark from the data
# cache (see ``sklearn_isotropy.datasets.get_data_home``), downloading it
# once, checksum verified. The documentation build sets
# ``SKLEARN_ISOTROPY_DOCS_FAST=1`` to run on a fixed random subset of 400
# pairs per split (and says so in the figure titles); without it every pair
# is used. Embeddings are cached on disk (``memory=``), so each sentence is
# encoded once across runs.
FAST = os.environ.get("SKLEARN_ISOTROPY_DOCS_FAST", "") not in ("", "0")
splits = load_sts_splits("stsb", ["test"], max_pairs=400 if FAST else None)
CACHE = os.path.join(tempfile.gettempdir(), "sklearn_isotropy_examples")

pairs = splits["test"].pairs
sentences = list(pairs.ravel())

embeddings = {}
for pooling in ("mean", "embeddings_avg"):
    X = BertPoolingVectorizer(pooling=pooling, memory=CACHE).fit_transform(sentences)
    embeddings[pooling] = {
        "raw": X,
        "whitened": WhiteningTransformer(shrinkage="ledoit-wolf").fit_transform(X),
    }

# %%
# The measures
# ------------
# An isotropic cloud has mean pair cosine near 0, isotropy score near 1,
# effective rank near the width and a small top-component share.

header = (
    f"{'pooling':<16}{'':<10}{'mean cos':>9}{'I(W)':>9}{'eff.rank':>9}{'top PC':>8}"
)
print(header)
for pooling, versions in embeddings.items():
    for name, Z in versions.items():
        r = anisotropy_report(Z, random_state=0)
        print(
            f"{pooling:<16}{name:<10}{r['mean_pair_cosine']:9.3f}"
            f"{r['isotropy_score']:9.3f}{r['effective_rank']:9.1f}"
            f"{r['top_component_variance_ratio']:8.3f}"
        )

# %%
# Eigenvalue spectra
# ------------------
# The share of variance of each principal direction, largest first, on a log
# scale. Raw spectra have a few leading directions above the rest and a long
# decaying tail; whitening flattens them (up to the small Ledoit-Wolf
# shrinkage). A direction the embeddings do not span at all (a zero
# eigenvalue) stays empty after any linear map and shows as a drop at the
# right end, clipped here.

suffix = " (CI subset)" if FAST else ""
fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for ax, (pooling, versions) in zip(axes, embeddings.items()):
    plot_eigenvalue_spectrum(versions, ax=ax)
    ax.set_ylim(bottom=1e-7)
    ax.set_title(f"pooling={pooling!r}{suffix}")
fig.tight_layout()

# %%
# Cosines of random pairs
# -----------------------
# The cosine similarity of random (mostly unrelated) sentence pairs. For the
# anisotropic embedding layer the raw cosines sit far above 0 whatever the
# sentences say; after whitening, random pairs centre on 0. The contrastively
# trained ``"mean"`` embedding is close to isotropic already.

fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for ax, (pooling, versions) in zip(axes, embeddings.items()):
    plot_cosine_histogram(versions, random_state=0, ax=ax)
    ax.set_title(f"pooling={pooling!r}{suffix}")
fig.tight_layout()
