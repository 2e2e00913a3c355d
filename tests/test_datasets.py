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
import time
from pathlib import Path

import numpy as np
import pytest

from sklearn_isotropy.datasets import _download, _sts, get_data_home, load_sts

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


# -------------------------------------------------------------- download


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _start_server(handler):
    """A loopback HTTP server with ``handler``, serving from a thread."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # shutdown() waits for the loop to poll: every 10 ms, not the default 0.5 s
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    return server, thread


def _stop_server(server, thread):
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def http_root(tmp_path):
    """A loopback HTTP server serving the files of a temporary directory."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server, thread = _start_server(handler)
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        _stop_server(server, thread)


def _point_stsb_at(monkeypatch, url, sha):
    monkeypatch.setattr(_sts, "_STSB_REMOTE", {"test": (url, sha)})
    monkeypatch.setattr(_download, "DOWNLOAD_TIMEOUT", 5.0)


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
    # nothing half-written is left behind to be read later, not even the
    # directories the download created
    assert not cache.exists()
    # a cache directory that existed before is kept (and stays empty)
    (cache / "stsb").mkdir(parents=True)
    with pytest.raises(OSError, match="sha256"):
        load_sts("stsb", split="test", data_home=cache)
    assert list((cache / "stsb").iterdir()) == []


def test_download_server_down(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _point_stsb_at(monkeypatch, f"http://127.0.0.1:{port}/test.csv", "0" * 64)
    with pytest.raises(OSError, match="could not download.*pass their directory"):
        load_sts("stsb", split="test", data_home=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # no empty cache left behind
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
            assert _download.sha256_of(STSB / f"{split}.csv") == sha


class _TrickleHandler(http.server.BaseHTTPRequestHandler):
    """Announces a large file, then sends one byte every 20 ms (for 30 s)."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        for _ in range(1500):
            try:
                self.wfile.write(b"a")
                self.wfile.flush()
            except OSError:  # the client gave up
                return
            time.sleep(0.02)

    def log_message(self, *args):
        pass


class _TrickleHeadersHandler(http.server.BaseHTTPRequestHandler):
    """Sends its status line and headers one byte every 20 ms (for 30 s)."""

    def do_GET(self):
        head = b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"p" * 1500 + b"\r\n"
        for byte in head:
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:  # the client gave up
                return
            time.sleep(0.02)

    def log_message(self, *args):
        pass


class _ShortHandler(http.server.BaseHTTPRequestHandler):
    """Announces 1,000 bytes, sends 10 and closes the connection."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"a,b,1.0\nc,")

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    """Start a loopback HTTP server with a given handler class; yield its URL."""
    servers = []

    def start(handler):
        server, thread = _start_server(handler)
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}/stsb-en-test.csv"

    yield start
    for server, thread in servers:
        _stop_server(server, thread)


def test_download_that_trickles_hits_the_total_deadline(serve, tmp_path, monkeypatch):
    url = serve(_TrickleHandler)
    _point_stsb_at(monkeypatch, url, "0" * 64)
    monkeypatch.setattr(_download, "DOWNLOAD_DEADLINE", 0.5)
    cache = tmp_path / "cache"
    start = time.monotonic()
    with pytest.raises(OSError, match=r"did not finish within 0.5 s") as err:
        load_sts("stsb", split="test", data_home=cache)
    # the deadline, not the 5 s per-read timeout (never reached by a trickle)
    # nor the 30 s the server would keep trickling, ended it
    assert time.monotonic() - start < _download.DOWNLOAD_TIMEOUT
    assert "could not download STS-B split 'test'" in str(err.value)
    assert "\n" not in str(err.value)
    assert not cache.exists()


def test_download_whose_headers_trickle_hits_the_total_deadline(
    serve, tmp_path, monkeypatch
):
    # urlopen returns only once the headers are in: the deadline must cover
    # the wait for them too
    url = serve(_TrickleHeadersHandler)
    _point_stsb_at(monkeypatch, url, "0" * 64)
    monkeypatch.setattr(_download, "DOWNLOAD_DEADLINE", 0.5)
    cache = tmp_path / "cache"
    start = time.monotonic()
    with pytest.raises(OSError, match=r"did not finish within 0.5 s") as err:
        load_sts("stsb", split="test", data_home=cache)
    assert time.monotonic() - start < 3.0
    assert "could not download STS-B split 'test'" in str(err.value)
    assert not cache.exists()


def test_download_larger_than_any_sts_file_is_stopped(http_root, tmp_path, monkeypatch):
    root, base = http_root
    (root / "big.csv").write_bytes(b"a,b,1.0\n" * 1000)
    _point_stsb_at(monkeypatch, f"{base}/big.csv", "0" * 64)
    monkeypatch.setattr(_download, "DOWNLOAD_MAX_BYTES", 1000)
    with pytest.raises(OSError, match="larger than 1,000 bytes"):
        load_sts("stsb", split="test", data_home=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_download_cut_short_is_a_clear_error(serve, tmp_path, monkeypatch):
    _point_stsb_at(monkeypatch, serve(_ShortHandler), "0" * 64)
    with pytest.raises(OSError, match="could not download.*closed the connection"):
        load_sts("stsb", split="test", data_home=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_cli_without_network_leaves_no_cache_directory(tmp_path, monkeypatch, capsys):
    from sklearn_isotropy.cli import main

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _point_stsb_at(monkeypatch, f"http://127.0.0.1:{port}/test.csv", "0" * 64)
    data_home = tmp_path / "data-home"
    monkeypatch.setenv("SKLEARN_ISOTROPY_DATA", str(data_home))
    monkeypatch.chdir(tmp_path)
    status = main(["evaluate", "--methods", "raw", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "could not download" in err
    assert not data_home.exists()


# ------------------------------------------------ byte-order marks, encodings

BOM = "\ufeff"


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
    _write_sbert(p)  # gzip-compressed, whatever the name
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


def test_cli_reports_a_non_utf8_file_in_one_line(tmp_path, capsys):
    from sklearn_isotropy.cli import main

    bad = tmp_path / "test.csv"
    bad.write_bytes("a,b,1\ncaf\xe9,d,2\n".encode("latin-1"))
    status = main(["evaluate", "--data", str(bad), "--methods", "raw", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert "test.csv:2: byte 0xe9" in err and "UTF-8" in err


def test_blank_lines_before_the_first_pair_are_skipped(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text("\n  \nA cat.,A dog.,1.5\nA man.,A man!,5.0\n", encoding="utf-8")
    d = load_sts(p)
    assert d.sentences1 == ["A cat.", "A man."]
    np.testing.assert_array_equal(d.scores, [1.5, 5.0])
    (tmp_path / "blank.csv").write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the file is empty"):
        load_sts(tmp_path / "blank.csv")
