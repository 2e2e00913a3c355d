"""The private scikit-learn names the package uses, imported in this file only.

scikit-learn keeps these out of its public API (a leading underscore on the
module or the name), so any release may move or change them, and the
package's requirement on scikit-learn has no upper bound. Every other module
imports them from here: a release that moves one is one edit, in this file
(``tests/test_architecture.py`` checks that no other module imports a
private scikit-learn module or name).

- Parameter validation, as scikit-learn's own estimators and public
  functions do it: the constraints (:class:`Interval`, :class:`StrOptions`,
  :class:`HasMethods`, :class:`RealNotInt`), :func:`validate_params` for
  functions, ``_fit_context`` around ``fit`` and ``partial_fit``, and the
  error both raise, :class:`InvalidParameterError` (a ``ValueError`` and a
  ``TypeError``).
- The Array API helpers ``get_namespace`` and ``_convert_to_numpy``.
- Input checks of ``sklearn.utils.validation`` that ``validate_data`` runs
  inside: ``_assert_all_finite``, ``_check_sample_weight``, and the
  feature-name checks ``_check_feature_names`` (what ``validate_data`` does
  with column names) and ``_check_feature_names_in`` (what
  ``get_feature_names_out`` does with its argument).
"""

from __future__ import annotations

from sklearn.base import _fit_context
from sklearn.utils._array_api import _convert_to_numpy, get_namespace
from sklearn.utils._param_validation import (
    HasMethods,
    Interval,
    InvalidParameterError,
    RealNotInt,
    StrOptions,
    validate_params,
)
from sklearn.utils.validation import (
    _assert_all_finite,
    _check_feature_names,
    _check_feature_names_in,
    _check_sample_weight,
)

__all__ = [
    "HasMethods",
    "Interval",
    "InvalidParameterError",
    "RealNotInt",
    "StrOptions",
    "_assert_all_finite",
    "_check_feature_names",
    "_check_feature_names_in",
    "_check_sample_weight",
    "_convert_to_numpy",
    "_fit_context",
    "get_namespace",
    "validate_params",
]
