"""Tests of the package's warning helpers: recorded warnings, reraised once."""

from __future__ import annotations

import warnings

from sklearn_isotropy.exceptions import EvaluationWarning, RankDeficiencyWarning


def test_recorded_warnings_leave_out_those_python_hides():
    # e.g. the ImportWarning of a lazily imported module says nothing about
    # the run: it must not reach a method's record or the console
    from sklearn_isotropy._utils import record_warnings

    with record_warnings() as caught:
        warnings.warn("lazy import", ImportWarning, stacklevel=1)
        warnings.warn("old API", DeprecationWarning, stacklevel=1)
        warnings.warn("rank 3 < 4", RankDeficiencyWarning, stacklevel=1)
        warnings.warn("rank 3 < 4", RankDeficiencyWarning, stacklevel=1)  # again
    assert [w.category for w in caught] == [RankDeficiencyWarning] * 2


def test_a_warning_repeated_with_other_figures_is_shown_once():
    # the folds of a grid search raise one warning with their own figures
    from sklearn_isotropy._utils import record_warnings, reraise_once

    with record_warnings() as caught:
        for rank, ratio in [(381, "7.7e+62"), (381, "8.5e+62"), (380, "1.0e-3")]:
            msg = f"The covariance has numerical rank {rank}: a factor of {ratio}."
            warnings.warn(msg, RankDeficiencyWarning, stacklevel=1)
        warnings.warn("another cause", RankDeficiencyWarning, stacklevel=1)
        for dtype in ("float32", "float64"):  # names, not figures: both shown
            warnings.warn(f"{dtype} overflow", RankDeficiencyWarning, stacklevel=1)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        kept = reraise_once(caught, "[mean] grid", EvaluationWarning)
    assert len(kept) == 6  # the record keeps every distinct message
    assert [str(w.message) for w in shown] == [
        "[mean] grid: RankDeficiencyWarning: The covariance has numerical rank "
        "381: a factor of 7.7e+62. (and 2 similar)",  # the first one raised
        "[mean] grid: RankDeficiencyWarning: another cause",
        "[mean] grid: RankDeficiencyWarning: float32 overflow",
        "[mean] grid: RankDeficiencyWarning: float64 overflow",
    ]
