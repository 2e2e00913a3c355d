"""The splits of an STS data set at once, as an evaluation reads them.

:func:`load_sts_splits` loads the train, dev and test splits that a run
needs from a directory, a single file or the STS Benchmark's name, with a
fixed random subset for quick runs, and turns every failure into one
:class:`~sklearn_isotropy.exceptions.EvaluationError` that says what to
pass instead.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from ..exceptions import EvaluationError, NoSplitColumnError
from ._sts import load_sts

__all__ = ["load_sts_splits"]


def load_sts_splits(
    data: str | os.PathLike,
    splits: Sequence[str] = ("test",),
    *,
    max_pairs: int | None = None,
    random_state: int = 0,
    format: str | None = None,
) -> dict[str, Bunch]:
    """Load the named splits of an STS data set.

    Parameters
    ----------
    data : str or path-like
        A directory with one file per split, one file (used as the test
        split; a file with a split column gives its test rows), or
        ``"stsb"`` (the STS Benchmark, downloaded once into the cache; see
        :func:`~sklearn_isotropy.datasets.load_sts`).
    splits : sequence of {"train", "dev", "test"}, default=("test",)
        The splits to load.
    max_pairs : int, default=None
        Keep a fixed random subset of at most this many pairs per split (for
        quick runs), in the original order.
    random_state : int, default=0
        Seeds the subset.
    format : str, default=None
        The file format of every split (see
        :func:`~sklearn_isotropy.datasets.load_sts`); detected when None.

    Returns
    -------
    splits : dict of str to sklearn.utils.Bunch
        ``{split: load_sts(...)}``, each with ``pairs`` and ``scores``.

    Raises
    ------
    EvaluationError
        If the data cannot be found or read, with what to pass instead.

    Examples
    --------
    >>> import tempfile, os
    >>> from sklearn_isotropy.datasets import load_sts_splits
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.csv")
    >>> with open(path, "w") as f:
    ...     _ = f.write("A cat.,A dog.,1.0\\nA man.,A man!,5.0\\nHi.,Bye.,0.5\\n")
    >>> splits = load_sts_splits(path, max_pairs=2)
    >>> splits["test"].pairs.shape
    (2, 2)
    """
    path = Path(data).expanduser()
    named = str(data) == "stsb"
    single_file = not named and path.is_file()
    if not named and not path.exists():
        raise EvaluationError(
            f"data not found: {str(data)!r} is neither a file nor a directory; pass "
            "a directory with train/dev/test files (e.g. path/to/stsb) or 'stsb' "
            "to download the STS Benchmark"
        )
    out = {}
    for split in splits:
        if single_file and split != "test":
            raise EvaluationError(
                f"{data} is a single file, used as the test split; the requested "
                f"methods, protocol or encoder also need a {split!r} split: pass "
                "a directory with train/dev/test files"
            )
        try:
            if not single_file:
                bunch = load_sts(data, split=split, format=format)
            else:
                try:  # a file holding every split (sbert tsv.gz): its test rows
                    bunch = load_sts(path, split="test", format=format)
                except NoSplitColumnError:  # a file of pairs: all of it is test
                    bunch = load_sts(path, format=format)
        except (OSError, ValueError) as exc:
            what = data if single_file else f"the {split} split of {data}"
            raise EvaluationError(f"cannot read {what}: {exc}") from exc
        if max_pairs is not None and len(bunch.scores) > max_pairs:
            rng = np.random.RandomState(random_state)
            keep = np.sort(rng.choice(len(bunch.scores), max_pairs, replace=False))
            bunch.pairs = bunch.pairs[keep]
            bunch.scores = bunch.scores[keep]
        out[split] = bunch
    return out
