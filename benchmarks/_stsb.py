"""Where the benchmarks find STS-B: beside the repository, or $SKLEARN_ISOTROPY_STSB."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def stsb_dir(required: bool = True):
    """The directory holding STS-B's train/dev/test.csv.

    ``<repo>/../shared/data/stsb`` first, then the directory named by the
    ``SKLEARN_ISOTROPY_STSB`` environment variable. When neither exists,
    raise ``FileNotFoundError``, or return ``"stsb"`` (``load_sts`` then
    downloads it) with ``required=False``.
    """
    local = REPO.parent / "shared" / "data" / "stsb"
    if (local / "test.csv").is_file():
        return local
    env = os.environ.get("SKLEARN_ISOTROPY_STSB")
    if env and (Path(env) / "test.csv").is_file():
        return Path(env)
    if not required:
        return "stsb"
    raise FileNotFoundError(
        f"STS-B not found at {local}; set SKLEARN_ISOTROPY_STSB to the "
        "directory holding train.csv, dev.csv and test.csv"
    )
