"""Anisotropy diagnostics of embedding matrices, and plots of them.

The measures (:func:`mean_pair_cosine`, :func:`isotropy_score`,
:func:`effective_rank`, :func:`top_component_variance_ratio`) need only
numpy/scipy. The plots need matplotlib (``pip install
"sklearn-isotropy[plot]"``), imported when a plot is drawn.
"""

from __future__ import annotations

from ._measures import (
    anisotropy_report,
    effective_rank,
    isotropy_score,
    mean_pair_cosine,
    pair_cosines,
    top_component_variance_ratio,
)
from ._plots import plot_cosine_histogram, plot_eigenvalue_spectrum

__all__ = [
    "anisotropy_report",
    "effective_rank",
    "isotropy_score",
    "mean_pair_cosine",
    "pair_cosines",
    "plot_cosine_histogram",
    "plot_eigenvalue_spectrum",
    "top_component_variance_ratio",
]
