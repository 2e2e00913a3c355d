"""``python -m sklearn_isotropy``: the same as the ``sklearn-isotropy`` command."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":  # pytest imports this module when collecting doctests
    sys.exit(main())
