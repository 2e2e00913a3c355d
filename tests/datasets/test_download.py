"""Tests of the STS-B download: checksummed, cached, bounded in time and size.

A loopback HTTP server in a thread serves the files, trickles them, or cuts
them short.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import socket
import threading
import time

import numpy as np
import pytest

from sklearn_isotropy.datasets import _download, _sts, load_sts
from tests._data import find_stsb

STSB = find_stsb()


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


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers as a test needs, without logging each request to stderr."""

    def log_message(self, *args):
        pass

    def trickle(self, data):
        """Send ``data`` one byte every 20 ms, until the client gives up."""
        for byte in data:
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:  # the client gave up
                return
            time.sleep(0.02)


class _TrickleHandler(_Handler):
    """Announces a large file, then sends one byte every 20 ms (for 30 s)."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        self.trickle(b"a" * 1500)


class _TrickleHeadersHandler(_Handler):
    """Sends its status line and headers one byte every 20 ms (for 30 s)."""

    def do_GET(self):
        self.trickle(b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"p" * 1500 + b"\r\n")


class _ShortHandler(_Handler):
    """Announces 1,000 bytes, sends 10 and closes the connection."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"a,b,1.0\nc,")


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


def _load_before_the_deadline(serve, handler, monkeypatch, cache):
    """Load STS-B from a server of ``handler`` with a deadline of 0.5 s.

    Returns what the load raised (``pytest.raises``'s record) and when it
    started.
    """
    url = serve(handler)
    _point_stsb_at(monkeypatch, url, "0" * 64)
    monkeypatch.setattr(_download, "DOWNLOAD_DEADLINE", 0.5)
    start = time.monotonic()
    with pytest.raises(OSError, match=r"did not finish within 0.5 s") as err:
        load_sts("stsb", split="test", data_home=cache)
    return err, start


def test_download_that_trickles_hits_the_total_deadline(serve, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    err, start = _load_before_the_deadline(serve, _TrickleHandler, monkeypatch, cache)
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
    cache = tmp_path / "cache"
    handler = _TrickleHeadersHandler
    err, start = _load_before_the_deadline(serve, handler, monkeypatch, cache)
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
