"""Where the benchmarks find STS-B: beside the repository, or $SKLEARN_ISOTROPY_STSB."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from _common import REPO


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


def load_sentences(n):
    """The first ``n`` distinct sentences of STS-B's train split, in file order."""
    seen = {}
    with open(stsb_dir() / "train.csv", newline="", encoding="utf-8") as fh:
        for row in csv.reader(fh):
            for text in row[:2]:
                seen.setdefault(text, None)
                if len(seen) == n:
                    return list(seen)
    return list(seen)
