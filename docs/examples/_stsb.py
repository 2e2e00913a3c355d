"""Data access shared by the STS-B examples (not an example itself).

Finds the STS-B files beside the repository (``<repo>/../shared/data/stsb``)
or in the directory named by ``SKLEARN_ISOTROPY_STSB``, else downloads them
once with ``load_sts("stsb")``. In the documentation's CI mode
(``SKLEARN_ISOTROPY_DOCS_FAST=1``) :func:`load_split` keeps a fixed random
subset of the pairs and says so. Embeddings are cached on disk under
:data:`CACHE` per (model, pooling, text), so the examples encode nothing twice.
"""

import os
import tempfile
from pathlib import Path

import numpy as np

from sklearn_isotropy.datasets import load_sts

FAST = os.environ.get("SKLEARN_ISOTROPY_DOCS_FAST", "") not in ("", "0")
N_PAIRS_FAST = 400
CACHE = os.environ.get(
    "SKLEARN_ISOTROPY_CACHE",
    os.path.join(tempfile.gettempdir(), "sklearn_isotropy_examples"),
)


def stsb_source():
    """``<repo>/../shared/data/stsb`` or $SKLEARN_ISOTROPY_STSB, else "stsb"."""
    if os.environ.get("SKLEARN_ISOTROPY_STSB"):
        return os.environ["SKLEARN_ISOTROPY_STSB"]
    here = Path(__file__).resolve().parent
    for parent in (here, *here.parents):
        if (parent / "pyproject.toml").exists():
            local = parent.parent / "shared" / "data" / "stsb"
            if local.is_dir():
                return str(local)
    return "stsb"


def load_split(split):
    """``(pairs, scores)`` of an STS-B split (a fixed subset in CI mode)."""
    data = load_sts(stsb_source(), split=split)
    pairs, scores = data.pairs, data.scores
    if FAST:
        keep = np.sort(
            np.random.default_rng(0).choice(len(scores), N_PAIRS_FAST, replace=False)
        )
        print(
            f"CI mode (SKLEARN_ISOTROPY_DOCS_FAST=1): using {N_PAIRS_FAST} of "
            f"{len(scores)} {split} pairs; full runs use all of them."
        )
        pairs, scores = pairs[keep], scores[keep]
    return pairs, scores
