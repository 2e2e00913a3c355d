"""Anisotropy diagnostics of embedding matrices, and plots of them.

The measures (:func:`mean_pair_cosine`, :func:`isotropy_score`,
:func:`effective_rank`, :func:`top_component_variance_ratio`) need only
numpy/scipy. The plots need matplotlib (``pip install
"sklearn-isotropy[plot]"``), imported when a plot is drawn;
:func:`plot_quality_vs_bytes` draws a retrieval study's quality against the
size of its index.
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
from ._plots import (
    plot_cosine_histogram,
    plot_cosine_panels,
    plot_eigenvalue_spectrum,
    plot_quality_vs_bytes,
)

__all__ = [
    "anisotropy_report",
    "effective_rank",
    "isotropy_score",
    "mean_pair_cosine",
    "pair_cosines",
    "plot_cosine_histogram",
    "plot_cosine_panels",
    "plot_eigenvalue_spectrum",
    "plot_quality_vs_bytes",
    "top_component_variance_ratio",
]
