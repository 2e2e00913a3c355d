"""Tests for sklearn_isotropy.datasets.load_senteval."""

from __future__ import annotations

import numpy as np
import pytest

from sklearn_isotropy.datasets import SENTEVAL_TASKS, load_senteval

#: The published sizes (SentEval's paper and the data's README).
PUBLISHED = {"MR": 10662, "CR": 3775, "SUBJ": 10000, "MPQA": 10606, "TREC": 5952}
#: The file of class 1, then of class 0, as SentEval reads them.
FILES = {
    "MR": ("rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("custrev.pos", "custrev.neg"),
    "SUBJ": ("subj.objective", "subj.subjective"),
    "MPQA": ("mpqa.pos", "mpqa.neg"),
}


def _lines(path):
    """Each line of a Latin-1 file, split on b"\\n" only (an independent read)."""
    return [b.decode("latin-1") for b in path.read_bytes().split(b"\n")[:-1]]


@pytest.mark.parametrize("task", SENTEVAL_TASKS)
def test_published_counts_and_class_order(senteval_dir, task):
    data = load_senteval(task, data_home=senteval_dir)
    assert len(data.data) == len(data.target) == PUBLISHED[task]
    assert data.target.dtype == np.int64
    assert all(isinstance(t, str) for t in data.data)
    if task == "TREC":
        return
    first, second = (senteval_dir / task / name for name in FILES[task])
    expected = _lines(first) + _lines(second)
    assert data.data == expected
    n_first = len(_lines(first))
    np.testing.assert_array_equal(data.target[:n_first], 1)
    np.testing.assert_array_equal(data.target[n_first:], 0)
    assert data.target_names[1] == ("objective" if task == "SUBJ" else "positive")


def test_whitespace_lines_are_kept_and_0x85_is_not_a_line_break(senteval_dir):
    cr = load_senteval("CR", data_home=senteval_dir)
    assert sum(not t.strip() for t in cr.data) == 4
    mr = load_senteval("MR", data_home=senteval_dir)
    inside = [t for t in mr.data if "\x85" in t]
    assert sum(t.count("\x85") for t in inside) == 23  # the file's 13 + 10 bytes
    assert all(len(t) > 20 for t in inside)  # each within a sentence


def test_trec_split_labels_and_text(senteval_dir):
    train = load_senteval("trec", data_home=senteval_dir, subset="train")
    test = load_senteval("TREC", data_home=senteval_dir, subset="test")
    both = load_senteval("TREC", data_home=senteval_dir)
    assert (len(train.data), len(test.data)) == (5452, 500)
    assert both.data == train.data + test.data
    assert train.target_names == ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    first = _lines(senteval_dir / "TREC" / "train_5500.label")[0]
    assert first.startswith("DESC:manner ")
    assert train.data[0] == first.partition(" ")[2]
    assert train.target_names[train.target[0]] == "DESC"
    assert np.bincount(test.target).tolist() == [9, 138, 94, 65, 81, 113]


def _tiny(tmp_path, task, files):
    (tmp_path / task).mkdir()
    for name, content in files.items():
        (tmp_path / task / name).write_bytes(content)
    return tmp_path


def test_crlf_endings_and_last_line_without_newline(tmp_path):
    home = _tiny(
        tmp_path,
        "MR",
        {"rt-polarity.pos": b"good\r\nfine", "rt-polarity.neg": b"bad\n"},
    )
    data = load_senteval("MR", data_home=home)
    assert data.data == ["good", "fine", "bad"]
    assert data.target.tolist() == [1, 1, 0]


def test_missing_file_is_named(tmp_path):
    home = _tiny(tmp_path, "CR", {"custrev.pos": b"good\n"})
    with pytest.raises(FileNotFoundError, match=r"CR/custrev\.neg not found"):
        load_senteval("CR", data_home=home)


def test_empty_file_is_named(tmp_path):
    home = _tiny(tmp_path, "MPQA", {"mpqa.pos": b"good\n", "mpqa.neg": b""})
    with pytest.raises(ValueError, match=r"mpqa\.neg is empty"):
        load_senteval("MPQA", data_home=home)


@pytest.mark.parametrize(
    "line", [b"DESC How did it go ?", b"WHAT:x How ?", b"DESC:manner", b"DESC:x   "]
)
def test_malformed_trec_line_names_file_and_line(tmp_path, line):
    good = b"NUM:count How many ?\n"
    home = _tiny(
        tmp_path,
        "TREC",
        {"train_5500.label": good + line + b"\n", "TREC_10.label": good},
    )
    with pytest.raises(ValueError, match=r"train_5500\.label:2: expected 'COARSE:fine"):
        load_senteval("TREC", data_home=home)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown SentEval task 'SST2'"):
        load_senteval("SST2", data_home=tmp_path)
    with pytest.raises(ValueError, match="subset must be one of"):
        load_senteval("TREC", data_home=tmp_path, subset="dev")
    with pytest.raises(ValueError, match="MR has no 'train' split"):
        load_senteval("MR", data_home=tmp_path, subset="train")
