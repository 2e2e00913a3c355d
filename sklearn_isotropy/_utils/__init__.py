"""Helpers shared by every family of the package (private).

One home each for what several families need: importing an optional
dependency with the extra that installs it (:func:`import_optional`),
resolving a torch device (:func:`resolve_device`), scaling rows to unit norm
without overflow (:func:`normalize_rows`), telling dask collections apart
without importing dask (:func:`is_dask_collection`), progress bars that
cost nothing when off (:func:`progress_bar`), warning at the user's line
(:func:`warn`), keeping a step's warnings with its result
(:func:`record_warnings`, :func:`reraise_once`), the caches' homes
(:func:`cache_home`), writing files all or nothing (:func:`write_files`)
and a directory all at once with the user's permissions
(:func:`publish_directory`, :func:`new_directory`); eigenpairs
with deterministic signs and the effective rank of a spectrum
(:func:`sorted_eigh`, :func:`fix_signs`, :func:`spectrum_effective_rank`);
the doc links and output names of the estimators (:class:`DocLinkMixin`,
:class:`PrefixedFeatureNamesMixin`), and the key of an exported folder's
record (:data:`EXPORT_RECORD_KEY`).
"""

from __future__ import annotations

from ._conventions import (
    EXPORT_RECORD_KEY,
    DocLinkMixin,
    PrefixedFeatureNamesMixin,
)
from ._device import resolve_device
from ._eigen import fix_signs, sorted_eigh, spectrum_effective_rank
from ._files import (
    cache_home,
    check_target,
    new_directory,
    publish_directory,
    write_files,
)
from ._optional import import_optional, is_dask_collection
from ._progress import interactive_stderr, progress_bar
from ._rows import normalize_rows
from ._warnings import record_warnings, reraise_once, warn

__all__ = [
    "EXPORT_RECORD_KEY",
    "DocLinkMixin",
    "PrefixedFeatureNamesMixin",
    "cache_home",
    "check_target",
    "fix_signs",
    "import_optional",
    "interactive_stderr",
    "is_dask_collection",
    "new_directory",
    "normalize_rows",
    "progress_bar",
    "publish_directory",
    "record_warnings",
    "reraise_once",
    "resolve_device",
    "sorted_eigh",
    "spectrum_effective_rank",
    "warn",
    "write_files",
]
