"""Tests of how the loaders open text files: byte-order marks and encodings.

A byte-order mark is skipped; a file in another encoding is one clear error
naming the file, the line and the byte.
"""

from __future__ import annotations

import csv
import gzip

import pytest

from sklearn_isotropy.datasets import load_sts
from tests._data import BOM, write_sbert


def test_bom_is_not_part_of_the_first_sentence(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text(BOM + "A cat.,A dog.,1.5\nB.,C.,2\n", encoding="utf-8")
    d = load_sts(p)
    assert d.sentences1 == ["A cat.", "B."]
    # Python's own "utf-8-sig" codec is the independent reference
    with open(p, encoding="utf-8-sig", newline="") as fh:
        assert d.sentences1[0] == next(csv.reader(fh))[0]


@pytest.mark.parametrize("name", ["stsbenchmark.tsv", "stsbenchmark.tsv.gz"])
def test_bom_does_not_hide_the_split_column_of_an_sbert_file(tmp_path, name):
    p = tmp_path / name
    write_sbert(p)  # gzip-compressed, whatever the name
    raw = BOM.encode("utf-8") + gzip.decompress(p.read_bytes())
    p.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    test = load_sts(p, split="test")
    assert test.format == "sbert"
    assert test.sentences1 == ["C.", "E."]
    assert load_sts(tmp_path, split="dev").sentences2 == ["B."]


def test_bom_in_senteval_sick_and_semeval_files(tmp_path):
    st = tmp_path / "sts-test.tsv"
    st.write_text(BOM + "main\tfile\t2012\t1\t3.5\tA b.\tC d.\n", encoding="utf-8")
    assert load_sts(st).sentences1 == ["A b."]
    sick = tmp_path / "SICK_test.txt"
    sick.write_text(
        BOM + "pair_ID\tsentence_A\tsentence_B\trelatedness_score\n1\ta\tb\t4\n",
        encoding="utf-8",
    )
    assert load_sts(sick).format == "sick"
    inp = tmp_path / "STS.input.x.txt"
    gs = tmp_path / "STS.gs.x.txt"
    inp.write_text(BOM + "a\tb\n", encoding="utf-8")
    gs.write_text(BOM + "4.0\n", encoding="utf-8")
    d = load_sts(inp)
    assert d.sentences1 == ["a"] and d.scores.tolist() == [4.0]


@pytest.mark.parametrize(
    "name, content",
    [
        ("pairs.csv", "A cat.,A dog.,1.5\nUn café.,Un thé.,2\n"),
        ("sts-test.tsv", "m\tf\t2012\t1\t3.5\tA.\tB.\nm\tf\t2012\t2\t1\tcafé\tb\n"),
        (
            "stsbenchmark.tsv",
            "split\tscore\tsentence1\tsentence2\ntest\t1\ta\tb\ntest\t2\tcafé\tb\n",
        ),
    ],
)
def test_latin1_file_is_one_clear_error_naming_the_line(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content.encode("latin-1"))
    with pytest.raises(ValueError) as err:
        load_sts(p)
    message = str(err.value)
    assert type(err.value) is ValueError  # not a UnicodeDecodeError
    lines = content.encode("latin-1").split(b"\n")
    lineno, line = next((i, x) for i, x in enumerate(lines, 1) if 0xE9 in x)
    # the line and the byte's 1-based column on it are right
    column = line.index(0xE9) + 1
    assert f"{name}:{lineno}: byte 0xe9 at column {column} " in message
    assert "not UTF-8" in message and "iconv" in message and "\n" not in message


def test_semeval_latin1_gold_file(tmp_path):
    (tmp_path / "STS.input.x.txt").write_text("a\tb\n", encoding="utf-8")
    (tmp_path / "STS.gs.x.txt").write_bytes("4.0 \xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"STS.gs.x.txt:1: byte 0xe9"):
        load_sts(tmp_path / "STS.input.x.txt")


def test_utf16_and_compressed_files_are_named_as_such(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text("A cat.,A dog.,1.5\n", encoding="utf-16")
    with pytest.raises(ValueError, match="UTF-16") as err:
        load_sts(p)
    assert "iconv -f utf-16 -t utf-8" in str(err.value)
    p.write_bytes(gzip.compress(b"A cat.,A dog.,1.5\n"))
    with pytest.raises(ValueError, match=r"gzip-compressed; give it a \.gz suffix"):
        load_sts(p)
