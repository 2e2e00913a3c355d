"""
=====================================================
Whitening synthetic anisotropic embeddings (no model)
=====================================================

Raw sentence embeddings crowd into a narrow cone: every vector shares a large
common component, and a handful of directions carry most of the variance.
Cosine similarity between such vectors is high for *any* pair, so it says
little about meaning.

This example builds "embeddings" with exactly that geometry from random
numbers, then measures the anisotropy before and after each post-processor of
:mod:`sklearn_isotropy`. It needs only numpy, scipy, scikit-learn and the
package (matplotlib draws the figure when it is installed), runs headless in
seconds, and is what the README's first command runs.

Two measures are printed:

* **mean pairwise cosine** of random pairs of held-out rows: about 0 for an
  isotropic cloud, close to 1 for a narrow cone;
* **condition number of the covariance**: largest over smallest eigenvalue,
  1 when every direction has the same variance. Directions a transform sets to
  exactly zero (NATSV nulls some, truncated whitening drops some) are left
  out, and the number of remaining directions is printed as the rank.
"""

# %%
# A narrow cone in 64 dimensions
# ------------------------------
# :func:`~sklearn_isotropy.datasets.make_cone` draws such rows: a common
# mean (here of norm about 10: 64 coordinates of standard deviation 1.25),
# three dominant directions with standard deviations 6, 4 and 3, and 61 more
# whose standard deviation decays from 0.5 to 0.05 (real spectra decay too),
# in a random orthogonal basis. The transforms are fitted on one half of the
# rows and measured on the other, as a user would fit on a corpus and apply
# the map to new sentences.

import numpy as np

from sklearn_isotropy import NATSVTransformer, StandardNormalizer, WhiteningTransformer
from sklearn_isotropy.datasets import make_cone

n_samples, n_features = 4000, 64
spread = np.r_[6.0, 4.0, 3.0, np.geomspace(0.5, 0.05, n_features - 3)]
X = make_cone(n_samples, n_features, spread=spread, offset=1.25, random_state=0)
X = X.astype(np.float32)
X_fit, X_new = X[: n_samples // 2], X[n_samples // 2 :]


def mean_pairwise_cosine(Z, n_pairs=5000, seed=0):
    """Mean cosine similarity of random pairs of distinct rows."""
    pair_rng = np.random.default_rng(seed)
    i = pair_rng.integers(0, len(Z), size=n_pairs)
    j = (i + pair_rng.integers(1, len(Z), size=n_pairs)) % len(Z)
    Zn = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    return float(np.mean(np.sum(Zn[i] * Zn[j], axis=1)))


def covariance_condition_number(Z):
    """Largest over smallest non-null eigenvalue of the covariance, and the rank."""
    evals = np.linalg.eigvalsh(np.cov(Z, rowvar=False, dtype=np.float64))
    kept = evals[evals > evals[-1] * 1e-9]
    return float(kept[-1] / kept[0]), kept.size


# %%
# Anisotropy before and after
# ---------------------------
# Whitening maps the covariance to the identity, so both measures go to their
# isotropic values (on held-out rows, up to estimation error). Standard
# normalisation centres and rescales each coordinate, which removes the common
# component, but it keeps the correlations, so the dominant directions stay
# dominant. Nulling the top principal directions (NATSV) removes the dominant
# directions but leaves the decaying spectrum of the rest as it was.

transformers = {
    "raw": None,
    "StandardNormalizer": StandardNormalizer(),
    "NATSVTransformer(3)": NATSVTransformer(n_components=3),
    "WhiteningTransformer": WhiteningTransformer(),
    "WhiteningTransformer(16)": WhiteningTransformer(n_components=16),
}

embedded = {}
print(f"{'transform':<26} {'mean cosine':>12} {'cond(cov)':>12} {'rank':>5}")
for name, transformer in transformers.items():
    Z = X_new if transformer is None else transformer.fit(X_fit).transform(X_new)
    embedded[name] = Z
    cond, rank = covariance_condition_number(Z)
    print(f"{name:<26} {mean_pairwise_cosine(Z):>12.3f} {cond:>12.1f} {rank:>5}")

# %%
# The eigenvalue spectrum
# -----------------------
# The raw spectrum falls off a cliff after three directions; the whitened one
# is flat. (Drawn only when matplotlib is installed; the script runs with the
# non-interactive Agg backend, so it works without a display.)

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # matplotlib is the optional "plot" extra
    plt = None

if plt is not None:
    fig, (ax_spec, ax_cos) = plt.subplots(1, 2, figsize=(10, 4))
    for name in ("raw", "NATSVTransformer(3)", "WhiteningTransformer"):
        Z = embedded[name]
        evals = np.linalg.eigvalsh(np.cov(Z, rowvar=False))[::-1]
        ax_spec.semilogy(np.arange(1, evals.size + 1), evals, label=name)
        Zn = Z / np.linalg.norm(Z, axis=1, keepdims=True)
        cosines = (Zn[:500] @ Zn[500:1000].T).ravel()
        ax_cos.hist(cosines, bins=60, range=(-1, 1), alpha=0.5, label=name)
    ax_spec.set(xlabel="component", ylabel="eigenvalue", title="Covariance spectrum")
    ax_cos.set(xlabel="cosine", ylabel="pairs", title="Cosines of random pairs")
    ax_spec.legend()
    ax_cos.legend()
    fig.tight_layout()
