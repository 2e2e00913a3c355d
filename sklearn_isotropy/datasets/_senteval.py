"""Reading SentEval's single-sentence classification tasks from their folders.

SentEval (Conneau and Kiela, 2018) ships MR, CR, SUBJ, MPQA and TREC as
one sentence a line in Latin-1, two files a binary task (the positive
class first) and a train and a test file for TREC, whose lines are
``COARSE:fine question``. :func:`load_senteval` reads that layout under the
names SentEval gives its files, so a user's own SentEval download reads the
same way. Lines are split on ``\\n`` only: the byte 0x85 inside MR and SUBJ
sentences is the Latin-1 character NEL, which ``str.splitlines`` would
take for a line break.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

__all__ = ["SENTEVAL_TASKS", "load_senteval"]

#: The binary tasks: the file of class 1, then the file of class 0, and the
#: two class names, as SentEval's ``BinaryClassifierEval`` reads them.
_BINARY = {
    "MR": ("rt-polarity.pos", "rt-polarity.neg", ("negative", "positive")),
    "CR": ("custrev.pos", "custrev.neg", ("negative", "positive")),
    "SUBJ": ("subj.objective", "subj.subjective", ("subjective", "objective")),
    "MPQA": ("mpqa.pos", "mpqa.neg", ("negative", "positive")),
}
#: TREC's files by subset, and its six coarse classes in SentEval's order.
_TREC_FILES = {"train": "train_5500.label", "test": "TREC_10.label"}
_TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")

#: The task names :func:`load_senteval` reads, in SentEval's order.
SENTEVAL_TASKS = ("MR", "CR", "SUBJ", "MPQA", "TREC")

_SUBSETS = ("train", "test", "all")


def load_senteval(
    task: str, *, data_home: str | os.PathLike, subset: str = "all"
) -> Bunch:
    """Load one of SentEval's sentence classification tasks.

    Reads the files of SentEval's ``data/downstream`` layout: ``MR/``
    (``rt-polarity.pos``, ``rt-polarity.neg``), ``CR/`` (``custrev.*``),
    ``SUBJ/`` (``subj.objective``, ``subj.subjective``), ``MPQA/``
    (``mpqa.*``) and ``TREC/`` (``train_5500.label``, ``TREC_10.label``).
    Files are Latin-1, as SentEval reads them, and split on ``\\n`` only.

    Each line is one sentence, kept as written but for its line ending.
    Whitespace-only lines (CR has four, MPQA three) are kept, as SentEval
    keeps them, so the counts are the published ones: MR 10,662, CR 3,775,
    SUBJ 10,000, MPQA 10,606, TREC 5,452 train and 500 test. A binary task
    lists its class-1 file first (positive; objective for SUBJ), as
    SentEval does; a TREC line ``DESC:manner How did ...`` has the coarse
    label ``DESC`` and the text after the first space.

    Parameters
    ----------
    task : {"MR", "CR", "SUBJ", "MPQA", "TREC"}
        The task (case-insensitive).
    data_home : str or path-like
        The folder holding the task folders (SentEval's ``data/downstream``).
    subset : {"all", "train", "test"}, default="all"
        Only TREC has a split: ``"all"`` is its train file, then its test
        file. The other tasks are one set (evaluated by cross-validation)
        and accept ``"all"`` only.

    Returns
    -------
    data : sklearn.utils.Bunch
        ``data`` (list of str), ``target`` (int64 array of class indices),
        ``target_names`` (list of str; ``target_names[target[i]]`` names
        sentence ``i``'s class), ``task`` and ``subset``.

    Raises
    ------
    ValueError
        For an unknown task or subset, a split asked of a task without one,
        an empty file, or a TREC line without a known ``COARSE:fine`` label
        (naming the file and the line).
    FileNotFoundError
        If a file is missing (naming it).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from sklearn_isotropy.datasets import load_senteval
    >>> home = Path(tempfile.mkdtemp())
    >>> (home / "MR").mkdir()
    >>> _ = (home / "MR" / "rt-polarity.pos").write_bytes(b"a gem .\\n")
    >>> _ = (home / "MR" / "rt-polarity.neg").write_bytes(b"dull .\\nflat .\\n")
    >>> mr = load_senteval("MR", data_home=home)
    >>> mr.data, mr.target.tolist(), mr.target_names
    (['a gem .', 'dull .', 'flat .'], [1, 0, 0], ['negative', 'positive'])
    """
    name = str(task).upper()
    if name not in SENTEVAL_TASKS:
        raise ValueError(
            f"unknown SentEval task {task!r}; choose from {', '.join(SENTEVAL_TASKS)}"
        )
    if subset not in _SUBSETS:
        raise ValueError(f"subset must be one of {_SUBSETS}; got {subset!r}")
    folder = Path(data_home).expanduser() / name
    if name == "TREC":
        parts = ("train", "test") if subset == "all" else (subset,)
        data, target = [], []
        for part in parts:
            texts, labels = _read_trec(folder / _TREC_FILES[part])
            data += texts
            target += labels
        target_names = list(_TREC_CLASSES)
    else:
        if subset != "all":
            raise ValueError(
                f"{name} has no {subset!r} split (only TREC has train and test); "
                "pass subset='all' and cross-validate"
            )
        pos_file, neg_file, classes = _BINARY[name]
        pos, neg = _read_lines(folder / pos_file), _read_lines(folder / neg_file)
        data = pos + neg
        target = [1] * len(pos) + [0] * len(neg)
        target_names = list(classes)
    return Bunch(
        data=data,
        target=np.asarray(target, dtype=np.int64),
        target_names=target_names,
        task=name,
        subset=subset,
    )


def _read_lines(path: Path) -> list[str]:
    """The lines of a Latin-1 file, split on ``\\n`` only, without endings."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found; load_senteval reads SentEval's layout: "
            "data_home/<TASK>/<file> (e.g. MR/rt-polarity.pos), as SentEval's "
            "data/downstream folder holds it"
        )
    lines = path.read_bytes().decode("latin-1").split("\n")
    if lines[-1] == "":  # the end of the last line, not an empty sentence
        lines.pop()
    if not lines:
        raise ValueError(f"{path} is empty; expected one sentence a line")
    return [line.removesuffix("\r") for line in lines]


def _read_trec(path: Path) -> tuple[list[str], list[int]]:
    """TREC's questions and the index of each coarse label."""
    index = {label: i for i, label in enumerate(_TREC_CLASSES)}
    texts, labels = [], []
    for lineno, line in enumerate(_read_lines(path), start=1):
        head, _, question = line.partition(" ")
        coarse, colon, _fine = head.partition(":")
        if not colon or coarse not in index or not question.strip():
            raise ValueError(
                f"{path}:{lineno}: expected 'COARSE:fine question' with COARSE "
                f"one of {', '.join(_TREC_CLASSES)}; got {line[:60]!r}"
            )
        texts.append(question)
        labels.append(index[coarse])
    return texts, labels
