"""What every public estimator shares: its doc link, its output names.

And the key under which an exported folder records where it came from.
"""

from __future__ import annotations

from importlib import metadata

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils.validation import check_is_fitted

from ._sklearn import _check_feature_names_in

try:  # the version is written once, in pyproject.toml
    VERSION = metadata.version("sklearn-isotropy")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    VERSION = "0+unknown"


#: The key under which the exporters record themselves in the configuration
#: of the model folders they write (model2vec's ``config.json``,
#: sentence-transformers' ``config_sentence_transformers.json``), and by
#: which ``StaticEmbeddingVectorizer`` knows such a folder when it reads it.
EXPORT_RECORD_KEY = "sklearn_isotropy"


class DocLinkMixin:
    """HTML reprs link to the estimator's page of the API reference.

    A release links to its own documentation, other versions to the latest.
    """

    _doc_link_module = "sklearn_isotropy"

    @property
    def _doc_link_template(self) -> str:  # formatted by scikit-learn's repr
        version = VERSION if VERSION.replace(".", "").isdigit() else "latest"
        return (  # the pages docs/api_reference.py generates
            f"https://sklearn-isotropy.readthedocs.io/en/{version}/api/generated/"
            "sklearn_isotropy.{estimator_name}.html"
        )


class PrefixedFeatureNamesMixin(DocLinkMixin):
    """Output names ``<_feature_name_prefix><i>``, ``_n_features_out`` of them.

    The prefix defaults to the class name, lowercased, less "transformer"
    (``whitening0``).
    """

    _feature_name_prefix: str | None = None

    def get_feature_names_out(
        self, input_features: ArrayLike | None = None
    ) -> np.ndarray:
        """Get the output feature names: what the columns hold, and their index.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Only checked against the names seen in ``fit``.

        Returns
        -------
        feature_names_out : ndarray of str objects
            ``<prefix>0``, ``<prefix>1``, ... as the class docstring says.
        """
        check_is_fitted(self, "_n_features_out")
        _check_feature_names_in(self, input_features, generate_names=False)
        prefix = self._feature_name_prefix or type(self).__name__.lower()
        prefix = prefix.removesuffix("transformer")
        return np.asarray([f"{prefix}{i}" for i in range(self._n_features_out)], object)
