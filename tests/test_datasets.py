"""Tests for sklearn_isotropy.datasets.load_sts."""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import http.server
import os
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from sklearn_isotropy.datasets import _sts, get_data_home, load_sts

REPO = Path(__file__).resolve().parents[1]


def _stsb_dir():
    candidates = [REPO.parent / "shared" / "data" / "stsb"]
    if os.environ.get("SKLEARN_ISOTROPY_STSB"):
        candidates.append(Path(os.environ["SKLEARN_ISOTROPY_STSB"]))
    for c in candidates:
        if (c / "test.csv").is_file():
            return c
    return None


STSB = _stsb_dir()
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


def _write_sbert(path):
    header = "split\tgenre\tdataset\tyear\tsid\tscore\tsentence1\tsentence2"
    rows = [
        "train\tmain-captions\tMSRvid\t2012test\t1\t5.0\tA man plays.\tA man plays.",
        'dev\tmain-news\theadlines\t2013\t2\t2.5\tStray "quote\tB.',
        "test\tmain-forum\tdeft\t2014\t3\t1.0\tC.\tD.",
        "test\tmain-forum\tdeft\t2014\t4\t4.0\tE.\tF.",
    ]
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join([header, *rows]) + "\n")


def test_sbert_gz(tmp_path):
    p = tmp_path / "stsbenchmark.tsv.gz"
    _write_sbert(p)
    d = load_sts(p)
    assert d.format == "sbert" and len(d.scores) == 4
    test = load_sts(p, split="test")
    assert test.sentences1 == ["C.", "E."]
    np.testing.assert_array_equal(test.scores, [1.0, 4.0])
    dev = load_sts(tmp_path, split="dev")  # directory holding the combined file
    assert dev.sentences1 == ['Stray "quote'] and dev.sentences2 == ["B."]


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
    if os.name == "posix" and os.uname().sysname == "Linux":
        assert get_data_home() == tmp_path / "xdg" / "sklearn_isotropy"


# -------------------------------------------------------------- download


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def http_root(tmp_path):
    """A loopback HTTP server serving the files of a temporary directory."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _point_stsb_at(monkeypatch, url, sha):
    monkeypatch.setattr(_sts, "_STSB_REMOTE", {"test": (url, sha)})
    monkeypatch.setattr(_sts, "_DOWNLOAD_TIMEOUT", 5.0)


def test_download_checksum_match_then_cache(http_root, tmp_path, monkeypatch):
    root, base = http_root
    body = b'A man eats.,"A man, eating.",4.5\nA cat.,A car.,0.2\n'
    (root / "stsb-en-test.csv").write_bytes(body)
    _point_stsb_at(
        monkeypatch, f"{base}/stsb-en-test.csv", hashlib.sha256(body).hexdigest()
    )
    cache = tmp_path / "cache"
    d = load_sts("stsb", split="test", data_home=cache)
    assert d.sentences2 == ["A man, eating.", "A car."]
    np.testing.assert_array_equal(d.scores, [4.5, 0.2])
    cached = cache / "stsb" / "test.csv"
    assert cached.read_bytes() == body
    assert d.filename == str(cached)
    # afterwards it reads from the cache: the server's copy is gone
    (root / "stsb-en-test.csv").unlink()
    assert load_sts("stsb", split="test", data_home=cache).sentences1 == d.sentences1
    # the env var chooses the cache directory too
    monkeypatch.setenv("SKLEARN_ISOTROPY_DATA", str(cache))
    assert load_sts("stsb", split="test").scores.tolist() == [4.5, 0.2]


def test_download_checksum_mismatch(http_root, tmp_path, monkeypatch):
    root, base = http_root
    (root / "stsb-en-test.csv").write_bytes(b"a,b,1\n")
    _point_stsb_at(monkeypatch, f"{base}/stsb-en-test.csv", "0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match="sha256"):
        load_sts("stsb", split="test", data_home=cache)
    # nothing half-written is left behind to be read later
    assert list((cache / "stsb").iterdir()) == []


def test_download_server_down(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _point_stsb_at(monkeypatch, f"http://127.0.0.1:{port}/test.csv", "0" * 64)
    with pytest.raises(OSError, match="could not download.*pass their directory"):
        load_sts("stsb", split="test", data_home=tmp_path / "cache")
    with pytest.raises(OSError, match="not in the cache.*--data path/to/stsb"):
        load_sts(
            "stsb", split="test", data_home=tmp_path / "c2", download_if_missing=False
        )


def test_real_stsb_urls_and_checksums_are_pinned():
    # the real remote stays configured: three https URLs with sha256 digests
    assert set(_sts._STSB_REMOTE) == {"train", "dev", "test"}
    for split, (url, sha) in _sts._STSB_REMOTE.items():
        assert url.startswith("https://") and url.endswith(f"stsb-en-{split}.csv")
        assert len(sha) == 64 and int(sha, 16) >= 0
        if STSB is not None:  # the shared copy is the file the checksum pins
            assert _sts._sha256(STSB / f"{split}.csv") == sha
