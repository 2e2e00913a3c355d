"""Old module paths, for pickles made before the package was split into families.

Release 0.1.0.dev0 kept every module at the top of the package
(``sklearn_isotropy._whitening``, ``sklearn_isotropy._glow``, ...). A pickle
names the module of each class it holds, so those names must keep importing:
this finder maps each old name to the module that holds its code now, lazily
(importing ``sklearn_isotropy._glow`` imports the flow family, nothing more).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

#: old module name -> module holding its contents now
MOVED_MODULES = {
    "sklearn_isotropy._base": "sklearn_isotropy.linear._base",
    "sklearn_isotropy._moments": "sklearn_isotropy.linear._moments",
    "sklearn_isotropy._whitening": "sklearn_isotropy.linear._whitening",
    "sklearn_isotropy._natsv": "sklearn_isotropy.linear._natsv",
    "sklearn_isotropy._standard": "sklearn_isotropy.linear._standard",
    "sklearn_isotropy._glow": "sklearn_isotropy.flow._glow",
    "sklearn_isotropy._flow_layers": "sklearn_isotropy.flow._layers",
    "sklearn_isotropy._vectorizer": "sklearn_isotropy.text._vectorizer",
    # the hidden-state taps a pickled model object carries as forward hooks
    "sklearn_isotropy._pooling": "sklearn_isotropy.text._taps",
    "sklearn_isotropy._cli": "sklearn_isotropy.cli",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import an old module name as the module that replaced it."""

    def __init__(self):
        self._real_specs = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED_MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module(MOVED_MODULES[spec.name])
        # the import system stamps the old name's spec on the module it gets
        # back; keep the real one, so that the module's relative imports and
        # importlib.reload still see its true package
        self._real_specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module):
        # already executed under its new name; undo the stamp
        module.__spec__ = self._real_specs[module.__name__]


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
