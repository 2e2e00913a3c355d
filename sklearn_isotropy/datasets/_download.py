"""Downloading a data file: checksummed, atomic, and bounded in time and size.

:func:`fetch` is the only network access of the package. A download either
puts the exact expected file in place or leaves nothing behind (no partial
file, no directory it created), and it ends by a total deadline however the
server behaves: a watchdog shuts the connection's socket when the deadline
passes, so a server that trickles the status line, the headers or the body
a byte at a time cannot hold it (each read also has its own timeout).

Why not :func:`sklearn.datasets.fetch_file` (scikit-learn 1.6, our
minimum), which checks a sha256 and renames a temporary file into place as
this does: it downloads with ``urllib.request.urlretrieve``, which takes no
timeout, so a server that accepts the connection and then says nothing
holds it for ever (the socket's default timeout is None), and nothing of
its bounds a server that trickles bytes; it retries three more times on a
``URLError`` or ``TimeoutError`` (a body cut short included), a second
apart, each with a ``UserWarning``, which multiplies any wait; it reads a
body of any size; and it writes into a folder that must exist, which it
never removes. A thin wrapper cannot reach urlretrieve's connection (only a
process-wide opener or socket timeout would), so the few lines that give
the deadline, the size cap and the clean failure stay here.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import socket
import threading
import time
import urllib.request
from pathlib import Path

from .._utils import write_files

logger = logging.getLogger(__name__)

# Seconds a read may wait for the next byte; seconds the whole request may
# take, headers included (a server that trickles bytes never trips the
# first); largest file taken (the STS-B files are about 0.5 MB). Module
# constants, so tests can shrink them.
DOWNLOAD_TIMEOUT = 30.0
DOWNLOAD_DEADLINE = 300.0
DOWNLOAD_MAX_BYTES = 64 << 20


def sha256_of(path: Path) -> str:
    """The sha256 of a file's bytes, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _make_dirs(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing parents; return those created."""
    missing = []
    for d in (directory, *directory.parents):
        if d.exists():
            break
        missing.append(d)
    directory.mkdir(parents=True, exist_ok=True)
    return missing


def _remove_empty(directories) -> None:
    for d in directories:  # deepest first
        try:
            d.rmdir()
        except OSError:  # not empty (someone else wrote there) or gone
            return


class _Deadline:
    """Shuts the sockets of every connection it made once time is up.

    urllib gives no access to its connection before ``urlopen`` returns,
    which is after the status line and headers have arrived; the connection
    classes below register themselves here, so the watchdog can end a
    request stuck at any stage. A shut socket makes the blocked read return
    or fail at once.
    """

    def __init__(self, seconds):
        self.seconds = seconds
        self.start = time.monotonic()
        self.expired = False
        self._connections = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def connection_class(self, base):
        deadline = self

        class Connection(base):
            def connect(self):
                super().connect()
                deadline._register(self)

        return Connection

    def _register(self, connection):
        with self._lock:
            self._connections.append(connection)
            expired = self.expired
        if expired:  # connected after the deadline passed
            self._shut(connection)

    @staticmethod
    def _shut(connection):
        sock = getattr(connection, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass

    def _expire(self):
        with self._lock:
            self.expired = True
            connections = list(self._connections)
        for connection in connections:
            self._shut(connection)

    def check(self, received=None):
        """Raise :class:`TimeoutError` if the deadline has passed."""
        if self.expired or time.monotonic() - self.start > self.seconds:
            got = "" if received is None else f" ({received:,} bytes received)"
            raise TimeoutError(
                f"the download did not finish within {self.seconds:g} s{got}: "
                "the server is too slow"
            )

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()


def _opener(deadline):
    """A urllib opener whose HTTP(S) connections the deadline can shut."""
    http_class = deadline.connection_class(http.client.HTTPConnection)
    https_class = deadline.connection_class(http.client.HTTPSConnection)

    class HTTPHandler(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(http_class, req)

    class HTTPSHandler(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(https_class, req, context=self._context)

    return urllib.request.build_opener(HTTPHandler, HTTPSHandler)


def _copy_response(response, out, url: str, deadline: _Deadline) -> int:
    """Copy an HTTP body to ``out`` within the total deadline; return its size."""
    received = 0
    while True:
        # read1 returns whatever one read brings, so a server that sends a
        # byte at a time cannot keep a read going past the deadline
        chunk = response.read1(1 << 16)
        if not chunk:
            break
        received += len(chunk)
        if received > DOWNLOAD_MAX_BYTES:
            raise OSError(
                f"the file at {url} is larger than {DOWNLOAD_MAX_BYTES:,} bytes, "
                "far more than an STS data set; the download was stopped"
            )
        out.write(chunk)
        deadline.check(received)
    deadline.check(received)  # the watchdog may have cut the body short
    left = getattr(response, "length", None)
    if left:
        raise ConnectionError(
            f"the server closed the connection after {received:,} bytes, "
            f"{left:,} short of the announced size"
        )
    return received


def fetch(url: str, target: Path, sha256: str) -> Path:
    """Download ``url`` to ``target`` atomically, checking its sha256.

    Nothing is left behind on failure: no partial file, and no directory
    that this call created. The request, from connecting to the last byte,
    ends within :data:`DOWNLOAD_DEADLINE` seconds (plus the time to resolve
    the host name), or raises :class:`TimeoutError`.

    Raises
    ------
    OSError
        A checksum mismatch, a file too large, or a network error
        (``urllib.error.URLError``, ``TimeoutError``, ``ConnectionError``,
        ``http.client.HTTPException``).
    """
    created = _make_dirs(target.parent)
    logger.info("downloading %s to %s", url, target)

    def download(tmp):  # write_files renames it into place once it returns
        with open(tmp, "xb") as out, _Deadline(DOWNLOAD_DEADLINE) as deadline:
            try:
                with _opener(deadline).open(url, timeout=DOWNLOAD_TIMEOUT) as response:
                    _copy_response(response, out, url, deadline)
            except TimeoutError:
                raise
            except (OSError, http.client.HTTPException):
                deadline.check()  # a cut by the watchdog is a timeout
                raise
        got = sha256_of(tmp)
        if got != sha256:
            raise OSError(
                f"the file downloaded from {url} has sha256 {got}, expected "
                f"{sha256}; it was discarded. The source may have changed or "
                "the download was corrupted: retry, or pass a local copy to "
                "load_sts"
            )

    try:
        write_files(target.parent, {target.name: download})
    except BaseException:
        _remove_empty(created)
        raise
    return target
