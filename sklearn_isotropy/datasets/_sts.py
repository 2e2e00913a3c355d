"""Readers for semantic textual similarity (STS) data sets.

Every reader returns the same :class:`~sklearn.utils.Bunch`: the two sentence
columns, the gold scores and the ``(n, 2)`` object array of pairs that
:class:`~sklearn_isotropy.metrics.PairedCosineSimilarity` takes.
"""

from __future__ import annotations

import csv
import functools
import http.client
import logging
import math
import os
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from .._utils import cache_home
from ..exceptions import NoSplitColumnError
from ._download import fetch
from ._text_files import reading

__all__ = ["STS_FORMATS", "get_data_home", "load_sts"]

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")

# The English files of PhilipMay/stsb-multi-mt, which redistributes the STS
# Benchmark (Cer et al., 2017). The checksums are those of the files this
# project's tests and benchmarks use (``shared/data/stsb``).
_STSB_BASE_URL = "https://raw.githubusercontent.com/PhilipMay/stsb-multi-mt/main/data"
_STSB_REMOTE = {
    "train": (
        f"{_STSB_BASE_URL}/stsb-en-train.csv",
        "e1e84fec60bbb598735552f54a35f4949904a484750fd2cb11e2720e49f63da6",
    ),
    "dev": (
        f"{_STSB_BASE_URL}/stsb-en-dev.csv",
        "d29586e96558c4eb52cf5ea5d14e9c24d3bf0e44f111b017caba43a5adc33226",
    ),
    "test": (
        f"{_STSB_BASE_URL}/stsb-en-test.csv",
        "11523b625219e94e9ca05d2816b5f02cac1614c5894fe657376fa0806378d053",
    ),
}

# File names a directory is searched for, per split, in this order.
_SPLIT_FILE_PATTERNS = (
    "{split}.csv",
    "stsb-en-{split}.csv",
    "sts-{split}.csv",
    "{split}.tsv",
    "sts-{split}.tsv",
    "SICK_{split}.txt",
)
_SPLIT_ALIASES = {"dev": ("dev", "trial", "validation")}


def get_data_home(data_home: str | os.PathLike | None = None) -> Path:
    """Return the directory where downloaded data sets are cached.

    Parameters
    ----------
    data_home : str or path-like, default=None
        Explicit directory. When None, the environment variable
        ``SKLEARN_ISOTROPY_DATA`` is used if set, otherwise the package's
        cache directory, where its other caches live too:
        ``$XDG_CACHE_HOME/sklearn_isotropy`` (``~/.cache/sklearn_isotropy``
        when ``XDG_CACHE_HOME`` is unset, on every platform).

    Returns
    -------
    path : pathlib.Path
        The directory (not created by this function).

    Examples
    --------
    >>> from sklearn_isotropy.datasets import get_data_home
    >>> str(get_data_home("/tmp/sts-cache"))
    '/tmp/sts-cache'
    """
    if data_home is not None:
        return Path(data_home).expanduser()
    return cache_home("SKLEARN_ISOTROPY_DATA")


# ---- low-level readers: each returns (sentences1, sentences2, scores, extra)


def _csv_rows(fh, path: Path, **fmtparams):
    """``(line number, row)`` of each record; csv errors name the line.

    The line number is that of the record's first line (a quoted field may
    span several lines).
    """
    reader = csv.reader(fh, **fmtparams)
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise _csv_error(path, start, reader.line_num, exc) from None
        yield start, row
        start = reader.line_num + 1


def _csv_error(path: Path, start: int, end: int, exc) -> ValueError:
    if "field larger than field limit" in str(exc):
        limit = csv.field_size_limit()
        return ValueError(
            f"{path}:{start}: a field of the record starting on this line is "
            f"longer than {limit:,} characters (the csv module's limit; read up "
            f"to line {end}). Most often a quote character opens a field that "
            "is never closed, so it swallows the lines after it: check the "
            f"quotes on line {start}. A real sentence that long is no STS pair; "
            "shorten it"
        )
    return ValueError(f"{path}:{start}: cannot parse this line ({exc})")


def _parse_score(text: str, path: Path, lineno: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"{path}:{lineno}: the score {text!r} is not a number; fix or remove "
            "this line, or pass the right `format=`"
        ) from None
    if not math.isfinite(value):
        raise ValueError(f"{path}:{lineno}: the score {text!r} is not finite")
    return value


def _bad_columns(path, lineno, expected, got, fmt):
    return ValueError(
        f"{path}:{lineno}: expected {expected} columns for format {fmt!r}, got "
        f"{got}; fix this line, or pass the right `format=` (one of "
        f"{STS_FORMATS})"
    )


# Column names a header row of a CSV may use, compared after lower-casing
# and dropping spaces, "_" and "-" ("Sentence 1", "sentence_A", "Score").
_CSV_HEADER_NAMES = {
    "s1": frozenset({"sentence1", "sentencea", "sent1", "s1", "text1", "texta"}),
    "s2": frozenset({"sentence2", "sentenceb", "sent2", "s2", "text2", "textb"}),
    "score": frozenset(
        {
            "score",
            "similarity",
            "similarityscore",
            "sim",
            "label",
            "gold",
            "goldscore",
            "relatedness",
            "relatednessscore",
            "rating",
        }
    ),
}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _header_columns(row):
    """``{"s1": i, "s2": j, "score": k}`` if ``row`` is a header naming them."""
    names = ["".join(c for c in f.lower() if c not in " _-") for f in row]
    found = {}
    for key, aliases in _CSV_HEADER_NAMES.items():
        hits = [i for i, name in enumerate(names) if name in aliases]
        if len(hits) == 1:
            found[key] = hits[0]
    if "score" not in found:
        return None
    if len(row) == 3 and len(found) < 3:
        # three columns and a named score: the other two are the sentences,
        # in their order
        rest = [i for i in range(3) if i != found["score"]]
        found = {"s1": rest[0], "s2": rest[1], "score": found["score"]}
    return found if len(found) == 3 else None


def _read_stsb_csv(path: Path):
    s1, s2, y = [], [], []
    columns = {"s1": 0, "s2": 1, "score": 2}
    width = 3
    first = True
    with reading(path) as fh:
        for lineno, row in _csv_rows(fh, path, dialect="excel"):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # a blank line, or one of only spaces
            if first:
                first = False
                # a first row that does not read as a pair with a numeric
                # score, but names the columns, is a header: use its names
                as_pair = len(row) == 3 and _is_number(row[2])
                header = None if as_pair else _header_columns(row)
                if header is not None:
                    columns, width = header, len(row)
                    logger.info("%s: header row %s", path, row)
                    continue
                if len(row) == 3 and not as_pair:
                    raise ValueError(
                        f"{path}:{lineno}: the first line {row} is neither a "
                        "pair with a numeric score nor a header naming the "
                        "columns (e.g. sentence1,sentence2,score); fix or remove "
                        "this line, or pass the right `format=`"
                    )
            if len(row) != width:
                raise _bad_columns(path, lineno, width, len(row), "stsb-csv")
            s1.append(row[columns["s1"]])
            s2.append(row[columns["s2"]])
            y.append(_parse_score(row[columns["score"]], path, lineno))
    return s1, s2, y, {}


def _read_senteval(path: Path):
    s1, s2, y = [], [], []
    with reading(path) as fh:
        reader = _csv_rows(fh, path, delimiter="\t", quoting=csv.QUOTE_NONE)
        for lineno, row in reader:
            if not row or row == [""]:
                continue
            if len(row) < 7:
                raise _bad_columns(path, lineno, "7 or more", len(row), "senteval")
            y.append(_parse_score(row[4], path, lineno))
            s1.append(row[5])
            s2.append(row[6])
    return s1, s2, y, {}


# the header TSV formats: their column names, and the split column
_HEADER_COLUMNS = {
    "sbert": ({"s1": "sentence1", "s2": "sentence2", "score": "score"}, "split"),
    "sick": (
        {"s1": "sentence_A", "s2": "sentence_B", "score": "relatedness_score"},
        "SemEval_set",
    ),
}


def _read_header_tsv(path: Path, fmt: str):
    """Read a tab-separated file with a header, picking columns by name."""
    columns, split_column = _HEADER_COLUMNS[fmt]
    s1, s2, y, split_values = [], [], [], []
    with reading(path) as fh:
        reader = _csv_rows(fh, path, delimiter="\t", quoting=csv.QUOTE_NONE)
        _, header = next(reader, (None, None))
        if header is None:
            raise ValueError(f"{path}: the file is empty; expected a header row")
        header = [h.strip() for h in header]
        missing = [c for c in columns.values() if c not in header]
        if missing:
            raise ValueError(
                f"{path}:1: header {header} lacks the column(s) {missing} of "
                f"format {fmt!r}; pass the right `format=`"
            )
        idx = {key: header.index(name) for key, name in columns.items()}
        split_idx = header.index(split_column) if split_column in header else None
        for lineno, row in reader:
            if not row or row == [""]:
                continue
            if len(row) < len(header):
                raise _bad_columns(path, lineno, len(header), len(row), fmt)
            s1.append(row[idx["s1"]])
            s2.append(row[idx["s2"]])
            y.append(_parse_score(row[idx["score"]], path, lineno))
            if split_idx is not None:
                split_values.append(row[split_idx].strip().lower())
    extra = {"split_values": split_values} if split_idx is not None else {}
    return s1, s2, y, extra


def _semeval_partner(path: Path) -> tuple[Path, Path]:
    name = path.name
    if name.startswith("STS.input."):
        return path, path.with_name("STS.gs." + name[len("STS.input.") :])
    if name.startswith("STS.gs."):
        return path.with_name("STS.input." + name[len("STS.gs.") :]), path
    raise ValueError(
        f"{path}: SemEval STS files are named STS.input.<name>.txt and "
        "STS.gs.<name>.txt; rename the file or pass another `format=`"
    )


def _read_semeval(path: Path):
    input_path, gs_path = _semeval_partner(path)
    for p in (input_path, gs_path):
        if not p.is_file():
            raise FileNotFoundError(
                f"{p}: not found; a SemEval STS input file needs its gold-score "
                "file beside it (STS.input.<name>.txt and STS.gs.<name>.txt)"
            )
    with reading(input_path) as fh:
        input_lines = fh.read().splitlines()
    with reading(gs_path) as fh:
        gs_lines = fh.read().splitlines()
    # a trailing newline at the end of the file is not a record
    while input_lines and input_lines[-1] == "" and len(input_lines) > len(gs_lines):
        input_lines.pop()
    while gs_lines and gs_lines[-1] == "" and len(gs_lines) > len(input_lines):
        gs_lines.pop()
    if len(input_lines) != len(gs_lines):
        raise ValueError(
            f"{input_path} has {len(input_lines)} lines but {gs_path} has "
            f"{len(gs_lines)}; the two files must be line-aligned"
        )
    s1, s2, y = [], [], []
    n_skipped = 0
    for lineno, (line, gold) in enumerate(zip(input_lines, gs_lines), start=1):
        if gold.strip() == "":
            n_skipped += 1  # documented: no gold score, pair is not scored
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise _bad_columns(input_path, lineno, "2 or more", len(fields), "semeval")
        s1.append(fields[0])
        s2.append(fields[1])
        y.append(_parse_score(gold.strip(), gs_path, lineno))
    return s1, s2, y, {"n_skipped": n_skipped}


_READERS = {
    "stsb-csv": _read_stsb_csv,
    "senteval": _read_senteval,
    "sbert": functools.partial(_read_header_tsv, fmt="sbert"),
    "semeval": _read_semeval,
    "sick": functools.partial(_read_header_tsv, fmt="sick"),
}

#: The names :func:`load_sts` accepts as ``format=``, in the order they are
#: documented (a tuple, e.g. for a command line's ``choices=``).
STS_FORMATS = tuple(_READERS)


def _detect_format(path: Path) -> str:
    name = path.name
    if name.startswith(("STS.input.", "STS.gs.")):
        return "semeval"
    with reading(path) as fh:
        # the first non-blank line (the readers skip blank lines too)
        first = next((ln.rstrip("\r\n") for ln in fh if ln.strip()), "")
    if not first:
        raise ValueError(f"{path}: the file is empty (no line holds any text)")
    fields = first.split("\t")
    lowered = [f.strip().lower() for f in fields]
    if "sentence1" in lowered and "score" in lowered:
        return "sbert"
    if "sentence_a" in lowered and "relatedness_score" in lowered:
        return "sick"
    if len(fields) >= 7:
        return "senteval"
    return "stsb-csv"


def _find_split_file(directory: Path, split: str | None) -> tuple[Path, str | None]:
    """Pick the file of `split` inside `directory`.

    Returns the path and the split to filter rows on (for single files holding
    every split, such as the sentence-transformers ``stsbenchmark.tsv.gz``).
    """
    names = {p.name for p in directory.iterdir() if p.is_file()}
    available = []
    for s in SPLITS:
        for pattern in _SPLIT_FILE_PATTERNS:
            if pattern.format(split=s) in names:
                available.append((s, directory / pattern.format(split=s)))
                break
    for combined in ("stsbenchmark.tsv.gz", "stsbenchmark.tsv", "SICK.txt"):
        if combined in names and not available:
            return directory / combined, split
    if not available:
        raise FileNotFoundError(
            f"{directory}: no STS files found; expected train/dev/test files named "
            f"like {', '.join(p.format(split='test') for p in _SPLIT_FILE_PATTERNS)}"
            ", or stsbenchmark.tsv.gz; pass a file path instead"
        )
    if split is None:
        if len(available) == 1:
            return available[0][1], None
        raise ValueError(
            f"{directory} holds several splits ({', '.join(s for s, _ in available)});"
            " pass split='train', 'dev' or 'test'"
        )
    for s, p in available:
        if s == split:
            return p, None
    raise FileNotFoundError(
        f"{directory}: no file for split {split!r}; found splits "
        f"{[s for s, _ in available]}"
    )


# ---- download


def _stsb_cached(split: str, data_home, download_if_missing: bool) -> Path:
    url, sha256 = _STSB_REMOTE[split]
    target = get_data_home(data_home) / "stsb" / f"{split}.csv"
    if target.is_file():
        return target
    how_to = (
        "Download train.csv/dev.csv/test.csv of the STS Benchmark elsewhere and "
        "pass their directory, e.g. load_sts('path/to/stsb', split='test') "
        "(or `--data path/to/stsb` on the command line), or copy them into "
        f"{target.parent} (set SKLEARN_ISOTROPY_DATA to choose the cache dir)"
    )
    if not download_if_missing:
        raise OSError(f"STS-B split {split!r} is not in the cache {target}. {how_to}")
    try:
        return fetch(url, target, sha256)
    except PermissionError as exc:
        raise OSError(
            f"cannot write the STS-B cache {target.parent} ({exc.strerror}); set "
            "SKLEARN_ISOTROPY_DATA or pass data_home= to choose a writable "
            f"directory. {how_to}"
        ) from exc
    except (
        urllib.error.URLError,
        TimeoutError,
        ConnectionError,
        http.client.HTTPException,
    ) as exc:
        reason = getattr(exc, "reason", exc)
        raise OSError(
            f"could not download STS-B split {split!r} from {url} ({reason}), and "
            f"it is not in the cache {target}. {how_to}"
        ) from exc


# ---- public loader


def load_sts(
    source: str | os.PathLike,
    *,
    split: str | None = None,
    format: str | None = None,
    data_home: str | os.PathLike | None = None,
    download_if_missing: bool = True,
) -> Bunch:
    """Load a semantic textual similarity data set as sentence pairs and scores.

    Parameters
    ----------
    source : str or path-like
        A file, a directory, or the name ``"stsb"``.

        - A file in one of the formats below (detected unless `format` is
          given).
        - A directory holding one file per split (``train.csv``,
          ``dev.csv``, ``test.csv``; also ``stsb-en-<split>.csv``,
          ``sts-<split>.csv``, ``<split>.tsv``, ``SICK_<split>.txt``), or a
          single ``stsbenchmark.tsv.gz`` / ``SICK.txt`` holding every split.
        - ``"stsb"``: the English STS Benchmark, downloaded once from
          PhilipMay/stsb-multi-mt into :func:`get_data_home` and checked
          against its sha256 (a local ``stsb`` file or folder wins).

    split : {"train", "dev", "test"}, default=None
        Which split to read: required for a directory of splits and for
        ``"stsb"``; for a file holding every split it filters the rows (None
        keeps all). SICK's ``TRIAL`` set is its ``"dev"`` split.
    format : {"stsb-csv", "senteval", "sbert", "semeval", "sick"}, default=None
        The file format; detected when None. The names are also in
        :data:`STS_FORMATS`.

        - ``"stsb-csv"``: CSV (``excel`` dialect), three columns
          ``sentence1,sentence2,score``. A first line that is not a pair
          with a numeric score but names the columns is a header and is
          used: ``sentence1``/``sentence_a``/``text1``..., ``sentence2``/
          ``sentence_b``/``text2``..., ``score``/``similarity``/``label``...
          (case, spaces, ``_`` and ``-`` ignored); with a header, more
          columns are allowed and the columns may come in any order.
        - ``"senteval"``: the original STS-B / SentEval tab-separated files,
          seven or more columns ``genre file year id score sentence1
          sentence2``; extra columns are ignored; quote characters are read
          literally.
        - ``"sbert"``: sentence-transformers' ``stsbenchmark.tsv.gz``, with a
          header row naming ``split``, ``score``, ``sentence1``, ``sentence2``.
        - ``"semeval"``: SemEval STS 2012-2016 ``STS.input.<name>.txt`` (two
          tab-separated sentences a line) beside ``STS.gs.<name>.txt`` (one
          score a line). Either file may be passed. A pair whose gold line is
          empty has no gold score and is **skipped**; the number skipped is
          returned as ``n_skipped``.
        - ``"sick"``: SICK, tab-separated with a header naming
          ``sentence_A``, ``sentence_B`` and ``relatedness_score``.
    data_home : str or path-like, default=None
        Cache directory for ``"stsb"``; see :func:`get_data_home`.
    download_if_missing : bool, default=True
        If False, ``"stsb"`` raises :class:`OSError` when not cached instead of
        downloading.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``sentences1``, ``sentences2`` (lists of str), ``scores`` (float64,
        shape (n_pairs,)), ``pairs`` (object array of shape (n_pairs, 2), the
        input of :class:`~sklearn_isotropy.metrics.PairedCosineSimilarity`),
        ``filename``, ``format``, ``split`` and ``n_skipped`` (SemEval pairs
        without a gold score).

    Raises
    ------
    FileNotFoundError
        If `source` does not exist or a directory lacks the requested split.
    ValueError
        If a line is malformed (an unclosed quote included) or the file is not
        UTF-8 text (naming file and line), or an argument is invalid.
    OSError
        If ``"stsb"`` is not cached and cannot be downloaded within 300 s, or
        the download does not match its checksum.

    Notes
    -----
    Files are read as UTF-8 (a byte-order mark is dropped); a download is
    renamed into the cache only once its checksum matches. See
    :ref:`reliability_data`.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from sklearn_isotropy.datasets import load_sts
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "test.csv"
    >>> _ = path.write_text('A cat sits.,"A cat, sitting.",4.2\\nA dog.,A car.,0.4\\n')
    >>> data = load_sts(path)
    >>> data.pairs.shape, data.scores.tolist()
    ((2, 2), [4.2, 0.4])
    >>> data.sentences2[0]
    'A cat, sitting.'
    """
    if format is not None and format not in STS_FORMATS:
        raise ValueError(f"format={format!r} is not one of {STS_FORMATS}")
    if split is not None and split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS} or None")
    if isinstance(source, (bytes, bytearray)) or not isinstance(
        source, (str, os.PathLike)
    ):
        raise TypeError(
            f"source must be a path or the name 'stsb', got {type(source).__name__}"
        )

    filter_split = None
    if isinstance(source, str) and source == "stsb" and not Path(source).exists():
        if split is None:
            raise ValueError("load_sts('stsb') needs split='train', 'dev' or 'test'")
        path = _stsb_cached(split, data_home, download_if_missing)
        fmt = "stsb-csv"
    else:
        path = Path(source).expanduser()
        if not path.exists():
            raise FileNotFoundError(
                f"{path}: no such file or directory; pass an STS file or a "
                "directory of train/dev/test files, or 'stsb' to download the "
                "STS Benchmark"
            )
        if path.is_dir():
            path, filter_split = _find_split_file(path, split)
        else:
            filter_split = split
        fmt = format or _detect_format(path)

    s1, s2, y, extra = _READERS[fmt](path)
    values = extra.get("split_values")
    if filter_split is not None and values is None:
        raise NoSplitColumnError(
            f"{path}: this {fmt} file has no split column, so split="
            f"{filter_split!r} cannot select its rows; drop split= to read the "
            "whole file, or pass the directory that holds the train/dev/test files"
        )
    if filter_split is not None and values is not None:
        # a file holding every split: keep the rows of the requested one
        wanted = set(_SPLIT_ALIASES.get(filter_split, (filter_split,)))
        keep = [i for i, v in enumerate(values) if v in wanted]
        if not keep:
            raise ValueError(
                f"{path}: no rows of split {filter_split!r}; the file's "
                f"splits are {sorted(set(values))}"
            )
        s1 = [s1[i] for i in keep]
        s2 = [s2[i] for i in keep]
        y = [y[i] for i in keep]
    if not y:
        raise ValueError(f"{path}: no sentence pairs found")

    pairs = np.empty((len(s1), 2), dtype=object)
    pairs[:, 0] = s1
    pairs[:, 1] = s2
    return Bunch(
        sentences1=s1,
        sentences2=s2,
        scores=np.asarray(y, dtype=np.float64),
        pairs=pairs,
        filename=str(path),
        format=fmt,
        split=split,
        n_skipped=int(extra.get("n_skipped", 0)),
    )
