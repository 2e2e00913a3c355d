"""``python -m sklearn_isotropy``: the same as the ``sklearn-isotropy`` command."""

from __future__ import annotations

import os
import sys

from .cli import main

if __name__ == "__main__":  # pytest imports this module when collecting doctests
    status = main()
    if status == 130:
        # Under ``python -m``, CPython exits by SIGINT (status -2, not 130)
        # when the KeyboardInterrupt that main caught had passed through C
        # code running Python (PyRun_*) while scikit-learn was imported: the
        # interpreter remembers it as unhandled. Exit now with main's status.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
