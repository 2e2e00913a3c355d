"""Reading a retrieval data set in the BEIR layout.

A BEIR folder holds ``corpus.jsonl`` (one JSON object per line with
``_id``, ``text`` and optionally ``title``), ``queries.jsonl`` (``_id`` and
``text``) and ``qrels/<split>.tsv`` (a ``query-id``, ``corpus-id``,
``score`` header, then one judgement per line). Every error names the file
and the line.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from sklearn.utils import Bunch

from ._text_files import reading

__all__ = ["load_beir"]


def load_beir(folder: str | os.PathLike, *, split: str = "test") -> Bunch:
    """Read the corpus, the queries and the judgements of a BEIR folder.

    A document is ``title + " " + text`` (as BEIR embeds it), or its text
    when it has no title. Files are UTF-8; a byte-order mark is skipped.

    Parameters
    ----------
    folder : str or path-like
        The BEIR folder.
    split : str, default="test"
        Which qrels file (``qrels/<split>.tsv``).

    Returns
    -------
    data : sklearn.utils.Bunch
        ``corpus_ids`` and ``corpus`` (lists of str, in file order),
        ``query_ids`` and ``queries`` (likewise), and ``judgements``: a list
        of ``(query_id, corpus_id, grade)`` in file order, each pair once.

    Raises
    ------
    FileNotFoundError
        If a file is missing.
    ValueError
        If a file is not UTF-8 or is malformed (not JSON, a missing or
        duplicated ``_id``, a ``text`` that is not a string, an unknown id,
        a grade that is not a finite number >= 0), naming the file and line.

    Examples
    --------
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from sklearn_isotropy.datasets import load_beir
    >>> folder = Path(tempfile.mkdtemp())
    >>> (folder / "qrels").mkdir()
    >>> _ = (folder / "corpus.jsonl").write_text(
    ...     json.dumps({"_id": "d1", "title": "Cats", "text": "a cat sat"}) + "\\n")
    >>> _ = (folder / "queries.jsonl").write_text(
    ...     json.dumps({"_id": "q1", "text": "where did the cat sit"}) + "\\n")
    >>> _ = (folder / "qrels" / "test.tsv").write_text(
    ...     "query-id\\tcorpus-id\\tscore\\nq1\\td1\\t1\\n")
    >>> data = load_beir(folder)
    >>> data.corpus, data.judgements
    (['Cats a cat sat'], [('q1', 'd1', 1.0)])
    """
    folder = Path(folder).expanduser()
    qrels_path = folder / "qrels" / f"{split}.tsv"
    for path in (folder / "corpus.jsonl", folder / "queries.jsonl", qrels_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found; a BEIR folder holds corpus.jsonl, "
                f"queries.jsonl and qrels/{split}.tsv"
            )
    corpus_ids, corpus = _read_jsonl(folder / "corpus.jsonl", title=True)
    query_ids, queries = _read_jsonl(folder / "queries.jsonl", title=False)
    judgements = _read_qrels(qrels_path, set(query_ids), set(corpus_ids))
    return Bunch(
        corpus_ids=corpus_ids,
        corpus=corpus,
        query_ids=query_ids,
        queries=queries,
        judgements=judgements,
    )


def _text_field(obj, key, where, *, required):
    """``obj[key]`` as text: a str; a missing or null optional field is ""."""
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ValueError(
            f"{where}: {key!r} must be a string; got {json.dumps(value)} "
            f"({type(value).__name__}). Write the text as a JSON string"
            + ("" if required else ", or leave the field out")
        )
    return value


def _read_jsonl(path, *, title):
    ids, texts, seen = [], [], set()
    with reading(path, "load_beir") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc})") from None
            if not isinstance(obj, dict) or "_id" not in obj or "text" not in obj:
                raise ValueError(f"{where}: expected an object with '_id' and 'text'")
            key = str(obj["_id"])
            if key in seen:
                raise ValueError(f"{where}: duplicate _id {key!r}")
            seen.add(key)
            text = _text_field(obj, "text", where, required=True)
            head = _text_field(obj, "title", where, required=False) if title else ""
            ids.append(key)
            texts.append(f"{head} {text}".strip() if head else text)
    if not ids:
        raise ValueError(f"{path} holds no record")
    return ids, texts


def _read_qrels(path, query_ids, corpus_ids):
    out, grade_of = [], {}
    with reading(path, "load_beir") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            cells = line.rstrip("\n\r").split("\t")
            where = f"{path}:{lineno}"
            if len(cells) != 3:
                raise ValueError(
                    f"{where}: expected 3 tab-separated columns (query-id, "
                    f"corpus-id, score); got {len(cells)}"
                )
            q, d, score = (c.strip() for c in cells)
            try:
                grade = float(score)
            except ValueError:
                if lineno == 1:  # the header
                    continue
                raise ValueError(f"{where}: score {score!r} is not a number") from None
            if not math.isfinite(grade) or grade < 0:
                raise ValueError(
                    f"{where}: score {score!r} must be a finite number >= 0"
                )
            if q not in query_ids:
                raise ValueError(f"{where}: query-id {q!r} is not in queries.jsonl")
            if d not in corpus_ids:
                raise ValueError(f"{where}: corpus-id {d!r} is not in corpus.jsonl")
            if (q, d) in grade_of:
                if grade_of[(q, d)] != grade:
                    raise ValueError(
                        f"{where}: ({q!r}, {d!r}) was judged {grade_of[(q, d)]} "
                        f"before and {grade} here"
                    )
                continue
            grade_of[(q, d)] = grade
            out.append((q, d, grade))
    if not out:
        raise ValueError(f"{path} holds no judgement")
    return out
