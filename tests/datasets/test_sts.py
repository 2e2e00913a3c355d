"""Tests of load_sts: the STS formats, their errors, and where data is kept."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from sklearn_isotropy.datasets import _sts, get_data_home, load_sts
from tests._data import BOM, find_stsb, write_sbert

STSB = find_stsb()


needs_stsb = pytest.mark.skipif(STSB is None, reason="shared/data/stsb not found")


@needs_stsb
@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_stsb_directory_matches_csv_module(split):
    data = load_sts(STSB, split=split)
    with open(STSB / f"{split}.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    assert data.pairs.shape == (len(rows), 2)
    assert data.pairs.dtype == object
    assert data.sentences1 == [r[0] for r in rows]
    assert data.sentences2 == [r[1] for r in rows]
    np.testing.assert_array_equal(data.scores, [float(r[2]) for r in rows])
    np.testing.assert_array_equal(data.pairs[:, 0], data.sentences1)
    assert data.format == "stsb-csv" and data.split == split
    assert {"train": 5749, "dev": 1500, "test": 1379}[split] == len(rows)


@needs_stsb
def test_directory_needs_split():
    with pytest.raises(ValueError, match="several splits"):
        load_sts(STSB)


def test_directory_missing_split(tmp_path):
    (tmp_path / "train.csv").write_text("a,b,1\n")
    with pytest.raises(FileNotFoundError, match="'test'"):
        load_sts(tmp_path, split="test")
    # a single split in a directory is read without split=
    assert load_sts(tmp_path).scores.tolist() == [1.0]


def test_empty_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no STS files"):
        load_sts(tmp_path, split="test")


def test_csv_quoting(tmp_path):
    p = tmp_path / "x.csv"
    with open(p, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(['He said "hi", then left.', "A, B", "3.5"])
        w.writerow(["x", "y", "0"])
    d = load_sts(p)
    assert d.sentences1 == ['He said "hi", then left.', "x"]
    assert d.sentences2 == ["A, B", "y"]
    np.testing.assert_array_equal(d.scores, [3.5, 0.0])


def _senteval_lines():
    return [
        "main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane is taking off.\t"
        "An air plane is taking off.",
        # stray quote characters and trailing extra columns
        'main-news\theadlines\t2013\t0002\t1.5\tHe said "no\tShe "left\textra\tmore',
        "main-forum\tdeft\t2014\t0003\t0.0\tA man.\tA dog.",
    ]


def test_senteval_tsv(tmp_path):
    p = tmp_path / "sts-test.csv"  # the original STS-B names its TSV files .csv
    p.write_text("\n".join(_senteval_lines()) + "\n", encoding="utf-8")
    d = load_sts(p)
    assert d.format == "senteval"
    assert d.sentences1 == ["A plane is taking off.", 'He said "no', "A man."]
    assert d.sentences2 == ["An air plane is taking off.", 'She "left', "A dog."]
    np.testing.assert_array_equal(d.scores, [5.0, 1.5, 0.0])
    # found by split name inside a directory
    d2 = load_sts(tmp_path, split="test")
    assert d2.sentences1 == d.sentences1


def test_senteval_malformed_line(tmp_path):
    p = tmp_path / "sts.tsv"
    lines = _senteval_lines()
    lines.insert(2, "main\tx\t2012\t9\t2.0\tonly one sentence")
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{p.name}:3: expected 7 or more columns"):
        load_sts(p, format="senteval")


def test_sbert_gz(tmp_path):
    p = tmp_path / "stsbenchmark.tsv.gz"
    write_sbert(p)
    d = load_sts(p)
    assert d.format == "sbert" and len(d.scores) == 4
    test = load_sts(p, split="test")
    assert test.sentences1 == ["C.", "E."]
    np.testing.assert_array_equal(test.scores, [1.0, 4.0])
    dev = load_sts(tmp_path, split="dev")  # directory holding the combined file
    assert dev.sentences1 == ['Stray "quote'] and dev.sentences2 == ["B."]


def test_split_of_a_file_without_split_column_is_an_error(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text("a b,c d,1.0\ne f,g h,2.5\n")
    assert len(load_sts(p).scores) == 2
    with pytest.raises(ValueError, match="no split column"):
        load_sts(p, split="test")


def test_semeval_pairs_skip_empty_gold(tmp_path):
    inp = tmp_path / "STS.input.MSRpar.txt"
    gs = tmp_path / "STS.gs.MSRpar.txt"
    inp.write_text("A b.\tA c.\nNo gold.\tHere.\nD e.\tF g.\n", encoding="utf-8")
    gs.write_text("4.2\n\n1\n", encoding="utf-8")
    for given in (inp, gs):
        d = load_sts(given)
        assert d.format == "semeval"
        assert d.sentences1 == ["A b.", "D e."]
        assert d.sentences2 == ["A c.", "F g."]
        np.testing.assert_array_equal(d.scores, [4.2, 1.0])
        assert d.n_skipped == 1


def test_semeval_errors(tmp_path):
    inp = tmp_path / "STS.input.x.txt"
    inp.write_text("a\tb\n")
    with pytest.raises(FileNotFoundError, match="STS.gs.x.txt"):
        load_sts(inp)
    gs = tmp_path / "STS.gs.x.txt"
    gs.write_text("1\n2\n")
    with pytest.raises(ValueError, match="line-aligned"):
        load_sts(inp)
    inp.write_text("a\tb\nonly-one\n")
    with pytest.raises(ValueError, match=r"STS.input.x.txt:2: expected 2 or more"):
        load_sts(inp)
    inp.write_text("a\tb\nc\td\n")
    gs.write_text("1\nabc\n")
    with pytest.raises(ValueError, match=r"STS.gs.x.txt:2: the score 'abc'"):
        load_sts(inp)


def test_sick(tmp_path):
    p = tmp_path / "SICK_test.txt"
    p.write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
        "1\tA kid runs.\tA child runs.\t4.7\tENTAILMENT\n"
        "2\tA cat.\tThe stock market.\t1.0\tNEUTRAL\n",
        encoding="utf-8",
    )
    d = load_sts(p)
    assert d.format == "sick"
    assert d.sentences1 == ["A kid runs.", "A cat."]
    np.testing.assert_array_equal(d.scores, [4.7, 1.0])
    assert load_sts(tmp_path, split="test").sentences2 == d.sentences2


def test_sick_full_split_column(tmp_path):
    p = tmp_path / "SICK.txt"
    p.write_text(
        "pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\t"
        "SemEval_set\n"
        "1\ta\tb\tNEUTRAL\t3.0\tTRAIN\n"
        "2\tc\td\tNEUTRAL\t2.0\tTRIAL\n"
        "3\te\tf\tNEUTRAL\t1.0\tTEST\n",
        encoding="utf-8",
    )
    assert load_sts(p, split="dev").sentences1 == ["c"]
    assert load_sts(p, split="test").sentences1 == ["e"]


@pytest.mark.parametrize(
    "content, match",
    [
        ("a,b,1\nc,d\n", r"bad.csv:2: expected 3 columns"),
        ("a,b,1\nc,d,high\n", r"bad.csv:2: the score 'high' is not a number"),
        ("a,b,1\nc,d,nan\n", r"bad.csv:2: the score 'nan' is not finite"),
        ("a,b,1\nc,d,1,2\n", r"bad.csv:2: expected 3 columns"),
    ],
)
def test_csv_malformed(tmp_path, content, match):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_sts(p)


def test_header_tsv_missing_column(tmp_path):
    p = tmp_path / "x.tsv"
    p.write_text("split\tscore\tsentence1\tfoo\ntest\t1\ta\tb\n")
    with pytest.raises(ValueError, match="sentence2"):
        load_sts(p, format="sbert")


def test_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_sts(tmp_path / "nope.csv")
    with pytest.raises(ValueError, match="format="):
        load_sts(tmp_path, format="xml")
    with pytest.raises(ValueError, match="split="):
        load_sts(tmp_path, split="validation")
    with pytest.raises(TypeError, match="path"):
        load_sts(42)
    with pytest.raises(ValueError, match="needs split"):
        load_sts("stsb")
    empty = tmp_path / "e.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        load_sts(empty)


def test_get_data_home(monkeypatch, tmp_path):
    monkeypatch.setenv("SKLEARN_ISOTROPY_DATA", str(tmp_path / "envdir"))
    assert get_data_home() == tmp_path / "envdir"
    assert get_data_home(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("SKLEARN_ISOTROPY_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # on every platform, the directory of the package's other caches
    assert get_data_home() == tmp_path / "xdg" / "sklearn_isotropy"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert get_data_home() == Path.home() / ".cache" / "sklearn_isotropy"


def test_unclosed_quote_swallowing_the_file_is_one_clear_error(tmp_path):
    limit = csv.field_size_limit()
    p = tmp_path / "pairs.csv"
    rows = [f"sentence {i},other {i},1.0" for i in range(20_000)]
    rows[2] = '"An unclosed quote,B.,1.0'
    p.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_sts(p)
    message = str(err.value)
    assert type(err.value) is ValueError  # not _csv.Error
    assert "pairs.csv:3: a field of the record starting on this line" in message
    assert "131,072 characters" in message and "quote" in message
    assert csv.field_size_limit() == limit  # global csv state left alone


@pytest.mark.parametrize("name", ["pairs.csv", "sts-test.tsv"])
def test_field_over_the_csv_limit_is_one_clear_error(tmp_path, name):
    p = tmp_path / name
    long = "word " * 30_000  # 150,000 characters
    if name.endswith(".csv"):
        p.write_text(f"a,b,1\n{long},b,2\n", encoding="utf-8")
    else:
        p.write_text(
            f"m\tf\t2012\t1\t3.5\ta\tb\nm\tf\t2012\t2\t1\t{long}\tb\n",
            encoding="utf-8",
        )
    with pytest.raises(ValueError, match=rf"{name}:2: a field .* 131,072"):
        load_sts(p)


# ------------------------------------------------------------ header rows


@pytest.mark.parametrize(
    "header, order",
    [
        ("sentence1,sentence2,score", (0, 1, 2)),
        ("Sentence A,Sentence B,Similarity", (0, 1, 2)),
        ("score,text_a,text_b", (1, 2, 0)),
        ("text1,label,text2", (0, 2, 1)),
        ("first,second,relatedness_score", (0, 1, 2)),
    ],
)
def test_header_row_is_detected_and_names_the_columns(tmp_path, header, order):
    pairs = [("A cat.", "A dog.", "1.5"), ('With "quotes", commas.', "B.", "4")]
    p = tmp_path / "pairs.csv"
    with open(p, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header.split(","))
        for s1, s2, score in pairs:
            row = [None, None, None]
            row[order[0]], row[order[1]], row[order[2]] = s1, s2, score
            writer.writerow(row)
    d = load_sts(p)
    assert d.sentences1 == [s1 for s1, _, _ in pairs]
    assert d.sentences2 == [s2 for _, s2, _ in pairs]
    np.testing.assert_array_equal(d.scores, [1.5, 4.0])


def test_header_with_extra_columns(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text(
        BOM + "id,sentence1,sentence2,genre,score\n7,A.,B.,news,3.25\n8,C.,D.,x,0\n",
        encoding="utf-8",
    )
    d = load_sts(p)
    assert d.sentences1 == ["A.", "C."] and d.sentences2 == ["B.", "D."]
    np.testing.assert_array_equal(d.scores, [3.25, 0.0])
    p.write_text("id,sentence1,sentence2,genre,score\n7,A.,B.,3.25\n")
    with pytest.raises(ValueError, match=r"pairs.csv:2: expected 5 columns"):
        load_sts(p)


def test_a_first_pair_is_never_taken_for_a_header(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text("label,score,1.0\nsentence1,sentence2,2\n")  # data, not names
    d = load_sts(p)
    assert d.sentences1 == ["label", "sentence1"]
    np.testing.assert_array_equal(d.scores, [1.0, 2.0])


def test_first_line_neither_pair_nor_header(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text("a,b,high\nc,d,1\n")
    with pytest.raises(ValueError, match=r"pairs.csv:1: the first line .* header"):
        load_sts(p)


def test_format_names_are_public_and_complete(tmp_path):
    from sklearn_isotropy.datasets import STS_FORMATS

    assert isinstance(STS_FORMATS, tuple)
    assert STS_FORMATS == ("stsb-csv", "senteval", "sbert", "semeval", "sick")
    assert set(STS_FORMATS) == set(_sts._READERS)
    with pytest.raises(ValueError) as err:
        load_sts(tmp_path, format="xml")
    assert str(STS_FORMATS) in str(err.value)
    p = tmp_path / "pairs.csv"
    p.write_text("a,b,1\n")
    assert load_sts(p, format=STS_FORMATS[0]).format == "stsb-csv"


def test_blank_lines_before_the_first_pair_are_skipped(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text("\n  \nA cat.,A dog.,1.5\nA man.,A man!,5.0\n", encoding="utf-8")
    d = load_sts(p)
    assert d.sentences1 == ["A cat.", "A man."]
    np.testing.assert_array_equal(d.scores, [1.5, 5.0])
    (tmp_path / "blank.csv").write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the file is empty"):
        load_sts(tmp_path / "blank.csv")
