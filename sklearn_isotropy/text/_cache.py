"""The per-sentence embedding cache behind ``BertPoolingVectorizer(memory=...)``.

One SQLite database per cache key (the model fingerprint, the pooling, the
layers and ``max_length``), with one row per text: the sha256 of the text,
its float32 embedding before ``normalize=`` and a CRC-32 of those bytes.
Each encoded batch is one committed transaction (write-ahead log,
``synchronous=FULL``), so a kill loses at most the batch in flight; several
processes may share a cache; a cache that cannot be written costs no work;
only content that is really damaged is set aside. The user guide's
:ref:`reliability_text` lists the layout and every guarantee.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import sqlite3
import time
import zlib
from pathlib import Path

import numpy as np

from .._utils import warn
from ..exceptions import CacheWarning

#: Version of the cache key; part of every key, so a change of the
#: fingerprint never reads entries of the old one.
KEY_VERSION = 2

#: ``PRAGMA user_version`` of the database layout described above.
SCHEMA_VERSION = 1

#: Seconds a writer waits for another process's transaction to finish.
BUSY_TIMEOUT = 60.0

#: Texts looked up per SQL query (below SQLite's limit of bound variables).
_LOOKUP_CHUNK = 500

# SQLite's primary result codes for content that is damaged: "database disk
# image is malformed" and "file is not a database". Every other error (I/O,
# permissions, a full disk, a lock held too long) says nothing about the
# content, which is then left alone.
_SQLITE_BUSY, _SQLITE_CORRUPT, _SQLITE_READONLY, _SQLITE_NOTADB = 5, 11, 8, 26

_KEY_BYTES = 32  # sha256 of a text


# ------------------------------------------------------------------- keys
def text_keys(texts):
    """sha256 of each text's UTF-8 bytes, as an ``(n, 32)`` uint8 array."""
    keys = np.empty((len(texts), _KEY_BYTES), dtype=np.uint8)
    for i, text in enumerate(texts):
        keys[i] = np.frombuffer(
            hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest(), np.uint8
        )
    return keys


def cache_key(spec):
    """The cache key (32 hex digits) of the settings that determine an embedding.

    ``spec`` holds the model's fingerprint
    (:meth:`~._loading.LoadedEncoder.fingerprint`), the pooling, the layers and
    ``max_length``; :data:`KEY_VERSION` is added.
    """
    spec = {**spec, "version": KEY_VERSION}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]


# ------------------------------------------------------------------ store
class _NewerLayout(Exception):
    """A database whose layout this release does not know."""


# SQLite's own messages for its two codes of damaged content, for Pythons
# whose sqlite3 errors carry no code (before 3.11)
_DAMAGE_MESSAGES = ("database disk image is malformed", "file is not a database")


def _is_damage(exc):
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return isinstance(exc, sqlite3.DatabaseError) and any(
            text in str(exc) for text in _DAMAGE_MESSAGES
        )
    return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


def _reason(exc, path=None):
    """One line saying what failed (and, for a file SQLite could not open, why)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} [{errno.errorcode.get(exc.errno, exc.errno)}]"
    text = " ".join(str(exc).split())[:200]
    name = getattr(exc, "sqlite_errorname", None)
    if name is None:
        return text
    if name.startswith("SQLITE_CANTOPEN") and path is not None:
        # SQLite does not say why it could not open a file; the OS does
        try:
            os.close(os.open(path, os.O_RDONLY))
        except OSError as os_exc:
            return f"{text} [{name}]: {_reason(os_exc)}"
    return f"{text} [{name}]"


def _connect(uri):
    # isolation_level=None: no implicit transactions; each batch is one
    # explicit BEGIN IMMEDIATE ... COMMIT
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT, isolation_level=None)


@contextlib.contextmanager
def _transaction(conn):
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception."""
    conn.execute("BEGIN IMMEDIATE")  # the write lock now, not at the first write
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:  # Ctrl-C too: leave no transaction open
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise


def _while_busy(connect):
    """``connect()``, tried again while SQLite answers busy, up to BUSY_TIMEOUT.

    SQLite does not call its busy handler everywhere: switching a new
    database to WAL while another process opens it too answers
    ``SQLITE_BUSY`` at once (seen with two processes starting on one cache).
    """
    deadline = time.monotonic() + BUSY_TIMEOUT
    while True:
        try:
            return connect()
        except sqlite3.OperationalError as exc:
            code = getattr(exc, "sqlite_errorcode", 0) or 0
            if code & 0xFF != _SQLITE_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _create_file(path):
    """Create ``path`` empty with the user's umask; the OSError if it cannot be.

    SQLite creates files with mode 0644 whatever the umask; the database (and
    the ``-wal`` and ``-shm`` files, which get its mode) must honour it.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return exc
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        return None
    except OSError as exc:
        return exc
    os.close(fd)
    return None


#: ``(path, kind)`` of the cache warnings given in this process: each problem
#: is reported once per file, not once per transform or batch.
_WARNED = set()


def _warn_once(path, kind, message):
    if (str(path), kind) not in _WARNED:
        _WARNED.add((str(path), kind))
        warn(message, CacheWarning)


def cache_directory(root):
    """The directory of the vectorizer's databases under a memory location."""
    return Path(root).absolute() / "sklearn_isotropy" / "BertPoolingVectorizer"


class EmbeddingStore:
    """The cached embeddings of one cache key, in one SQLite database.

    A context manager: ``with EmbeddingStore(root, key, width) as store``
    opens the database (for writing if it can, else for reading only, else
    not at all), :meth:`get` returns the rows cached for some texts and
    :meth:`put` stores rows in one transaction. Nothing is kept between two
    ``with`` blocks, so a cache cleared meanwhile (``joblib.Memory.clear()``
    or by hand) is never served from memory.

    Nothing here raises for a problem of the cache: each one is a
    :class:`~sklearn_isotropy.exceptions.CacheWarning`, given once per file
    and kind of problem in a process, and the caller encodes what the store
    did not return.
    """

    def __init__(self, root, key, width, spec=None):
        self.directory = cache_directory(root)
        self.path = self.directory / f"{key}.sqlite3"
        self.width = int(width)
        self.spec = spec
        self._conn = None
        self._writable = False
        self._write_problem = None
        self._reported = False  # a warning already said why the cache is unused

    @property
    def writable(self):
        """Whether rows given to :meth:`put` are stored."""
        return self._conn is not None and self._writable

    def __enter__(self):
        self._open()
        return self

    def __exit__(self, *exc_info):
        self._close()

    # ------------------------------------------------------------ opening
    def _close(self):
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn, self._writable = None, False

    def _open(self):
        problem = None
        for _ in range(2):  # a second time after moving a damaged file aside
            problem = _create_file(self.path)
            try:
                self._conn = _while_busy(self._connect_for_writing)
            except sqlite3.Error as exc:
                if not _is_damage(exc):
                    problem = problem or exc
                    break
                if not self._set_aside(exc):
                    return
            except _NewerLayout as exc:
                _warn_once(self.path, "layout", str(exc))
                return
            else:
                self._writable = True
                return
        else:  # damaged twice in a row: reported, and given up for this call
            return
        self._conn = self._connect_for_reading()
        if self._conn is not None:
            self._write_problem = _reason(problem, self.path)
        elif not self._reported:
            verb = "open" if os.path.lexists(self.path) else "create"
            _warn_once(
                self.path,
                "open",
                f"Cannot {verb} the embedding cache {self.path} "
                f"({_reason(problem, self.path)}); the texts are encoded without "
                "it and nothing is stored. Check the permissions of the memory= "
                "location and the limit on open files (ulimit -n), or pass "
                "memory=None.",
            )

    def _connect_for_writing(self):
        conn = _connect(self.path.as_uri() + "?mode=rw")
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")  # each commit survives power loss
            if self._layout(conn) != SCHEMA_VERSION:
                with _transaction(conn):
                    self._create_schema(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect_for_reading(self):
        """A read-only connection, or None (after a warning if the file is damaged).

        ``mode=ro`` takes SQLite's locks, so it reads safely beside writers,
        but needs to write the ``-shm`` index beside the database; in a
        read-only directory without one, only ``immutable=1`` opens it.
        """
        uri = self.path.as_uri() + "?mode=ro"
        for query in ("", "&immutable=1"):
            try:
                conn = _connect(uri + query)
            except sqlite3.Error:
                continue
            try:
                if self._layout(conn) == SCHEMA_VERSION:
                    return conn
                conn.close()
                return None  # empty or unknown: nothing to read
            except sqlite3.Error as exc:
                conn.close()
                if _is_damage(exc):
                    self._set_aside(exc)  # warns; cannot start anew read-only
                    return None
            except _NewerLayout as exc:
                conn.close()
                _warn_once(self.path, "layout", str(exc))
                self._reported = True
                return None
        return None

    def _layout(self, conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise _NewerLayout(
                f"The embedding cache {self.path} has layout version {version}, "
                f"written by a later release of sklearn-isotropy (this one reads "
                f"version {SCHEMA_VERSION}); it is left alone and the texts are "
                "encoded without it. Upgrade sklearn-isotropy or pass another "
                "memory= location."
            )
        return version

    def _create_schema(self, conn):
        if self._layout(conn) == SCHEMA_VERSION:  # another process was first
            return
        conn.execute(
            "CREATE TABLE IF NOT EXISTS embeddings ("
            "text_sha256 BLOB PRIMARY KEY, vector BLOB NOT NULL, "
            "crc32 INTEGER NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)"
        )
        meta = {
            "vector": f"float32 little-endian, {self.width} values",
            "key": json.dumps(self.spec, sort_keys=True) if self.spec else None,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _set_aside(self, exc):
        """Move a damaged database aside; whether a new one may be started."""
        self._close()
        self._reported = True
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        target = self.path.with_name(f"{self.path.stem}.damaged-{stamp}.sqlite3")
        try:
            os.replace(self.path, target)
            # the log and index belong to the damaged file: a log left
            # beside a new database would be replayed into it
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(f"{self.path}{suffix}", f"{target}{suffix}")
        except FileNotFoundError:  # another process moved it first
            return True
        except OSError as move_exc:
            warn(
                f"The embedding cache {self.path} is damaged ({_reason(exc)}) and "
                f"could not be moved aside ({move_exc}); the texts are encoded "
                "without it. Delete it (and its -wal file) to start a new cache.",
                CacheWarning,
            )
            return False
        warn(
            f"The embedding cache {self.path} is damaged ({_reason(exc)}): it was "
            f"moved to {target.name} and a new cache is started, so its texts are "
            f"encoded again. Delete {target.name} once you no longer need it.",
            CacheWarning,
        )
        return True

    def _failed(self, exc, doing):
        """Handle an error while reading or writing; whether to try again."""
        if _is_damage(exc):
            if self._set_aside(exc):
                self._open()
                return self.writable
            return False
        if doing == "write":
            self._writable = False
            self._write_problem = _reason(exc, self.path)
            self._not_stored()
        else:
            self._close()
            _warn_once(
                self.path,
                "read",
                f"Cannot read the embedding cache {self.path} "
                f"({_reason(exc, self.path)}); the texts are encoded without it "
                "and it is left as it is.",
            )
        return False

    def _not_stored(self):
        if self._conn is None:
            return  # reported when it could not be opened
        _warn_once(
            self.path,
            "write",
            f"Cannot write to the embedding cache {self.path} "
            f"({self._write_problem}): the embeddings cached in it are read, the "
            "others are encoded and returned but not stored. Make the memory= "
            "location writable (or free disk space) to store them, or pass "
            "another one.",
        )

    # ------------------------------------------------------ reading, writing
    def get(self, keys):
        """The rows cached for some text keys.

        Parameters
        ----------
        keys : ndarray of shape (n, 32), dtype uint8
            :func:`text_keys` of the texts.

        Returns
        -------
        positions : ndarray of shape (m,), dtype intp
            Indices into ``keys`` of the texts found.
        values : ndarray of shape (m, width), dtype float32
            Their embeddings.
        """
        positions, blobs, n_bad = [], [], 0
        if self._conn is not None:
            try:
                found = self._select([key.tobytes() for key in keys])
            except sqlite3.Error as exc:
                self._failed(exc, "read")
                found = {}
            size = 4 * self.width
            for i, key in enumerate(keys):
                hit = found.get(key.tobytes())
                if hit is None:
                    continue
                vector, crc = hit
                if len(vector) != size or zlib.crc32(vector) != crc:
                    n_bad += 1
                    continue
                positions.append(i)
                blobs.append(vector)
        values = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(-1, self.width)
        finite = np.isfinite(values).all(axis=1)
        n_bad += int((~finite).sum()) if blobs else 0
        if n_bad:
            warn(
                f"{n_bad} rows of the embedding cache {self.path} failed their "
                "checks (wrong length, checksum or non-finite values); their "
                "texts are encoded again and the rows replaced.",
                CacheWarning,
            )
        positions = np.asarray(positions, dtype=np.intp)[finite]
        return positions, values[finite].astype(np.float32)

    def _select(self, keys):
        found = {}
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            cursor = self._conn.execute(
                "SELECT text_sha256, vector, crc32 FROM embeddings "
                f"WHERE text_sha256 IN ({marks})",
                chunk,
            )
            for key, vector, crc in cursor:
                found[key] = (vector, crc)
        return found

    def put(self, keys, values):
        """Store rows in one transaction; whether they were stored.

        Rows with a non-finite value are returned to the caller but never
        stored, so the cache holds only rows that pass the checks of
        :meth:`get`.
        """
        if not self.writable:
            self._not_stored()
            return False
        values = np.ascontiguousarray(values, dtype="<f4")
        rows = []
        for key, row in zip(keys, values):
            if np.isfinite(row).all():
                blob = row.tobytes()
                rows.append((key.tobytes(), blob, zlib.crc32(blob)))
        for _ in range(2):
            try:
                with _transaction(self._conn):
                    self._conn.executemany(
                        "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)", rows
                    )
            except sqlite3.Error as exc:
                if self._failed(exc, "write"):
                    continue  # a damaged database was replaced by a new one
                return False
            _WARNED.discard((str(self.path), "write"))
            return True
        return False


def open_store(root, spec, width):
    """The :class:`EmbeddingStore` of ``spec`` under ``root`` (not opened yet)."""
    return EmbeddingStore(root, cache_key(spec), width, spec)


def store_root(memory):
    """Directory of a ``memory`` argument (None, path or joblib.Memory), or None."""
    if memory is None:
        return None
    if isinstance(memory, (str, os.PathLike)):
        return os.path.join(os.path.expanduser(os.fspath(memory)), "joblib")
    backend = getattr(memory, "store_backend", None)
    location = getattr(backend, "location", None)
    if location is None:
        location = getattr(memory, "location", None)
    return None if location is None else os.fspath(location)
