"""The embedding cache of BertPoolingVectorizer(memory=...) under hostile conditions.

Every test works on real files in a temporary directory and on real
failures: kills are SIGKILLs of a subprocess, permissions are enforced by the
kernel (as root, the test thread drops the capabilities that bypass them),
"too many open files" is a real file descriptor limit, a failed write is a
real file size limit, damage is done to the bytes of the database. The
warnings a process gives once are forgotten between tests (``fresh_process``).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import json
import os
import resource
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

from tests._data import REPO

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn_isotropy import BertPoolingVectorizer  # noqa: E402
from sklearn_isotropy.exceptions import CacheWarning, TruncationWarning  # noqa: E402
from sklearn_isotropy.text import _cache  # noqa: E402

TEXTS = [
    "the cat sat on the mat",
    "a dog ran",
    "",
    "the big red dog was playing fast !",
    "a small blue cat",
    "the woman is reading , the man is walking .",
]

# twenty texts in the tiny model's vocabulary, for tests that need batches
MANY = [
    " ".join(words)
    for words in zip(
        "the a the a big small red blue the a".split() * 2,
        "cat dog man woman cat dog man woman mat cat".split() * 2,
        "sat ran is was sat ran walking reading sat ran".split() * 2,
        [str(i) for i in range(20)],
    )
]


class CallCounter:
    """Forward pre-hook counting the texts that reach the encoder."""

    def __init__(self, module):
        self.texts = 0
        self.handle = module.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        if "input_ids" in kwargs:
            self.texts += kwargs["input_ids"].shape[0]

    def remove(self):
        self.handle.remove()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Run the tiny model on one thread: fastest for it.

    Two threads waiting on each other on a busy machine are slower many times
    over.
    """
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n_threads)


@pytest.fixture(scope="module")
def uncached(tiny_bert):
    return BertPoolingVectorizer(tiny_bert).fit(TEXTS).transform(TEXTS)


def _databases(root):
    return sorted(p for p in Path(root).rglob("*.sqlite3") if ".damaged" not in p.name)


def _files(root):
    """Every file under ``root``, with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(Path(root).rglob("*"))
        if p.is_file()
    }


def _count_rows(db):
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]


def _our_warnings(caught, category=CacheWarning):
    return [w for w in caught if issubclass(w.category, category)]


def _transform_recording(vec, texts):
    counter = CallCounter(vec.model_)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            X = vec.transform(texts)
    finally:
        counter.remove()
    return X, counter.texts, _our_warnings(caught)


def _filled(tiny_bert, root, texts=TEXTS, **params):
    """A vectorizer with memory=root whose cache holds ``texts``; its database."""
    vec = BertPoolingVectorizer(tiny_bert, memory=root, **params).fit(texts)
    vec.transform(texts)
    (db,) = _databases(root)
    return vec, db


# --------------------------------------------------- kills and concurrency


class _Interrupt(BaseException):
    """Stands for a Ctrl-C (a BaseException, as KeyboardInterrupt)."""


def test_each_batch_is_stored_and_an_interrupt_loses_only_the_batch_in_flight(
    tiny_bert, tmp_path, fresh_process
):
    expected = BertPoolingVectorizer(tiny_bert).fit(MANY).transform(MANY)
    vec = BertPoolingVectorizer(tiny_bert, batch_size=4, memory=tmp_path).fit(MANY)
    seen = []

    def interrupt(module, args, kwargs):
        if len(seen) == 3:  # the fourth batch never completes
            raise _Interrupt
        seen.append(kwargs["input_ids"].shape[0])

    handle = vec.model_.register_forward_pre_hook(interrupt, with_kwargs=True)
    try:
        with pytest.raises(_Interrupt):
            vec.transform(MANY)
    finally:
        handle.remove()
    X, n_encoded, caught = _transform_recording(vec, MANY)
    assert n_encoded == len(MANY) - 12  # three batches of four were kept
    assert caught == []
    assert_allclose(X, expected, rtol=1e-6, atol=1e-7)


# The tiny model spells most STS words letter by letter; 24 tokens a text
# keep its runs short without changing the number of rows.
TINY_MAX_LENGTH = 24


@pytest.fixture(scope="module")
def stsb_4000(stsb_dir):
    """The first 4,000 distinct sentences of the STS-B train split."""
    from sklearn_isotropy.datasets import load_sts

    data = load_sts(stsb_dir, split="train")
    pairs = zip(data.sentences1, data.sentences2)
    distinct = list(dict.fromkeys(s for pair in pairs for s in pair))
    assert len(distinct) >= 4000
    return distinct[:4000]


@pytest.fixture(scope="module")
def stsb_4000_tiny(tiny_bert, stsb_4000):
    """What the tiny model returns for them, uncached and uninterrupted."""
    vec = BertPoolingVectorizer(tiny_bert, max_length=TINY_MAX_LENGTH)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        return vec.fit(stsb_4000[:1]).transform(stsb_4000)


# One process encoding texts with memory=; it SIGKILLs itself when
# `kill_after` rows have reached the encoder and the next batch starts, or
# waits for a "go" file to start together with another process (and writes
# a "started" file when its first batch reaches the encoder). Any
# CacheWarning is an error.
WORKER = """
import json, os, signal, sys, time, warnings
import numpy as np
from sklearn_isotropy import BertPoolingVectorizer
from sklearn_isotropy.exceptions import CacheWarning, TruncationWarning

warnings.simplefilter("error", CacheWarning)
warnings.simplefilter("ignore", TruncationWarning)
args = json.loads(sys.argv[1])
with open(args["texts"], encoding="utf-8") as fh:
    texts = json.load(fh)
vec = BertPoolingVectorizer(
    args["model"],
    batch_size=args["batch_size"],
    max_length=args["max_length"],
    memory=args["cache"],
).fit(texts[:1])
rows, times = [0], []

def hook(module, hook_args, kwargs):
    if args.get("kill_after") is not None and rows[0] >= args["kill_after"]:
        os.kill(os.getpid(), signal.SIGKILL)
    rows[0] += kwargs["input_ids"].shape[0]
    times.append(time.time())
    if len(times) == 1 and args.get("started"):
        open(args["started"], "w").close()

vec.model_.register_forward_pre_hook(hook, with_kwargs=True)
if args.get("go"):
    open(args["ready"], "w").close()
    while not os.path.exists(args["go"]):
        time.sleep(0.002)
X = vec.transform(texts)
np.save(args["out"], X)
with open(args["report"], "w") as fh:
    json.dump({"rows": rows[0], "times": [times[0], times[-1]] if times else []}, fh)
"""


def _start_worker(tmp_path, name, model, texts, cache, **args):
    (tmp_path / f"{name}.json").write_text(json.dumps(texts), encoding="utf-8")
    args = {
        "model": str(model),
        "texts": str(tmp_path / f"{name}.json"),
        "cache": str(cache),
        "out": str(tmp_path / f"{name}.npy"),
        "report": str(tmp_path / f"{name}-report.json"),
        "ready": str(tmp_path / f"{name}.ready"),
        "batch_size": 32,
        "max_length": TINY_MAX_LENGTH,
        **args,
    }
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path]),
        # one thread each: two torch processes spinning for the same cores
        # would slow each other down many times over
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, json.dumps(args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process, timeout=600):
    out, err = process.communicate(timeout=timeout)
    return process.returncode, err


@pytest.fixture(scope="module")
def workers(tiny_bert, stsb_4000, tmp_path_factory):
    """The worker processes of the two tests below, started together.

    Each spends seconds importing torch and transformers; started at once
    (by whichever of the two tests runs first), they do so side by side.
    ``"killed"`` encodes 4,000 texts into the cache ``killed-cache`` and is
    killed at 1,600 rows; ``"a"`` waits for the file ``go`` and then encodes
    the first 1,000 of 1,500 texts into ``a-cache``, in batches of 8.
    Yields ``(directory, {name: process})``.
    """
    root = tmp_path_factory.mktemp("workers")
    processes = {
        "killed": _start_worker(
            root, "killed", tiny_bert, stsb_4000, root / "killed-cache", kill_after=1600
        ),
        "a": _start_worker(
            root,
            "a",
            tiny_bert,
            stsb_4000[:1000],
            root / "a-cache",
            batch_size=8,
            go=str(root / "go"),
            started=str(root / "a.started"),
        ),
    }
    yield root, processes
    for process in processes.values():  # one whose test did not run or failed
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_killed_encoding_resumes_where_it_stopped(
    tiny_bert, stsb_4000, stsb_4000_tiny, workers, fresh_process
):
    # 4,000 distinct STS-B sentences in batches of 32; the process is killed
    # (SIGKILL) when 1,600 rows have been encoded. The rerun may encode at
    # most 2,656 rows (all but 1,600, plus eight batches of slack), returns
    # what an uninterrupted run returns, and no temporary file is left. The
    # tiny model has the row counts of the default encoder at a fraction of
    # its cost.
    texts, expected = stsb_4000, stsb_4000_tiny
    root, processes = workers
    cache = root / "killed-cache"
    status, err = _finish(processes["killed"])
    assert status == -signal.SIGKILL, err[-2000:]
    stored = sum(_count_rows(db) for db in _databases(cache))

    vec = BertPoolingVectorizer(
        tiny_bert, batch_size=32, max_length=TINY_MAX_LENGTH, memory=cache
    ).fit(texts[:1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        X, n_encoded, caught = _transform_recording(vec, texts)
    assert n_encoded <= 2656
    assert n_encoded == len(texts) - stored and stored >= 1600
    assert caught == []
    assert_allclose(X, expected, rtol=1e-5, atol=1e-6)
    (db,) = _databases(cache)
    assert _count_rows(db) == len(texts)
    assert [p.name for p in root.rglob("*") if "tmp" in p.name] == []


def test_two_processes_write_the_same_cache_at_once(
    tiny_bert, stsb_4000, stsb_4000_tiny, workers, fresh_process
):
    # a worker process and this one encode overlapping parts of 1,500 texts
    # into one cache at the same time, in small batches: many transactions,
    # some on the same rows. The worker starts when this process's first
    # batch reaches the encoder, and the second batch waits for the worker's
    # first: the two encodings overlap however fast either one is.
    texts, expected = stsb_4000[:1500], stsb_4000_tiny[:1500]
    root, processes = workers
    cache, go, worker = root / "a-cache", root / "go", processes["a"]
    vec = BertPoolingVectorizer(
        tiny_bert, batch_size=8, max_length=TINY_MAX_LENGTH, memory=cache
    ).fit(texts[:1])
    times = []

    def wait_for(path, seconds):
        deadline = time.monotonic() + seconds
        while not path.exists():
            assert worker.poll() is None and time.monotonic() < deadline, path
            time.sleep(0.002)

    def hook(*_):
        times.append(time.time())
        if len(times) == 1:
            go.touch()
        elif len(times) == 2:
            wait_for(root / "a.started", 120)

    handle = vec.model_.register_forward_pre_hook(hook)
    try:
        wait_for(root / "a.ready", 300)
        X, n_encoded, caught = _transform_recording(vec, texts[500:])
    finally:
        handle.remove()
        status, err = _finish(worker)
    assert status == 0, err[-3000:]
    assert caught == []
    theirs = json.loads((root / "a-report.json").read_text())["times"]
    assert theirs[0] < times[-1] and times[0] < theirs[1], "no overlap"
    assert_allclose(np.load(root / "a.npy"), expected[:1000], rtol=1e-5, atol=1e-6)
    assert_allclose(X, expected[500:], rtol=1e-5, atol=1e-6)
    (db,) = _databases(cache)
    assert _count_rows(db) == len(texts)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # and a later reader finds every row
    X, n_encoded, caught = _transform_recording(vec, texts)
    assert n_encoded == 0 and caught == []
    assert_allclose(X, expected, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ damaged files


def _as_text(db):
    db.write_text("this is not an embedding cache\n")


def _truncated(db):
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])


def _header(db):
    blob = bytearray(db.read_bytes())
    blob[:16] = b"X" * 16
    db.write_bytes(bytes(blob))


def _page(db):
    # garbage over the start of the second page: a B-tree page header
    blob = bytearray(db.read_bytes())
    blob[4096 : 4096 + 64] = b"\xff" * 64
    db.write_bytes(bytes(blob))


DAMAGED_DATABASES = {
    "text": (_as_text, "file is not a database"),
    "truncated": (_truncated, "malformed"),
    "header": (_header, "file is not a database"),
    "page": (_page, "malformed"),
}


@pytest.mark.parametrize("damage", DAMAGED_DATABASES)
def test_damaged_database_is_set_aside_and_a_new_one_started(
    damage, tiny_bert, tmp_path, fresh_process
):
    damage_fn, reason = DAMAGED_DATABASES[damage]
    expected = BertPoolingVectorizer(tiny_bert).fit(MANY).transform(MANY)
    vec, db = _filled(tiny_bert, tmp_path, MANY)
    damage_fn(db)
    damaged_bytes = db.read_bytes()

    X, n_encoded, caught = _transform_recording(vec, MANY)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert str(db) in message and "damaged" in message and reason in message
    assert n_encoded == len(MANY)
    assert_allclose(X, expected, rtol=1e-6, atol=1e-7)
    (aside,) = Path(tmp_path).rglob("*.damaged-*.sqlite3")
    assert aside.name in message and aside.read_bytes() == damaged_bytes
    assert _count_rows(db) == len(MANY)  # a new database, filled

    fresh_process()
    X, n_encoded, caught = _transform_recording(vec, MANY)
    assert caught == [] and n_encoded == 0
    assert_allclose(X, expected, rtol=1e-6, atol=1e-7)


def test_damage_is_told_apart_without_error_codes():
    # Python 3.10's sqlite3 errors carry no sqlite_errorcode: the message of
    # SQLite's two damage codes decides, and any other error is not damage
    from sklearn_isotropy.text import _cache

    for text in ("file is not a database", "database disk image is malformed"):
        exc = sqlite3.DatabaseError(text)
        assert getattr(exc, "sqlite_errorcode", None) is None
        assert _cache._is_damage(exc)
    assert not _cache._is_damage(sqlite3.OperationalError("unable to open database"))
    assert not _cache._is_damage(sqlite3.OperationalError("database is locked"))


def _set_row(db, index, change):
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        key, vector = conn.execute(
            "SELECT text_sha256, vector FROM embeddings ORDER BY text_sha256"
        ).fetchall()[index]
        vector, crc = change(bytearray(vector))
        conn.execute(
            "UPDATE embeddings SET vector = ?, crc32 = coalesce(?, crc32) "
            "WHERE text_sha256 = ?",
            (bytes(vector), crc, key),
        )


def _short(vector):
    return vector[:-4], None


def _long(vector):
    return vector + b"\0\0\0\0", None


def _flipped(vector):  # same length, stored checksum no longer matches
    vector[5] ^= 0x40
    return vector, None


def _nan(vector):  # a NaN with a matching checksum
    import zlib

    vector[:4] = np.float32(np.nan).tobytes()
    return vector, zlib.crc32(bytes(vector))


@pytest.mark.parametrize("change", [_short, _long, _flipped, _nan])
def test_damaged_row_is_encoded_again_and_replaced(
    change, tiny_bert, tmp_path, fresh_process, uncached
):
    vec, db = _filled(tiny_bert, tmp_path)
    _set_row(db, 2, change)
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert n_encoded == 1
    assert len(caught) == 1 and "1 rows" in str(caught[0].message)
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    assert list(Path(tmp_path).rglob("*.damaged*")) == []  # the file is kept
    X, n_encoded, caught = _transform_recording(vec, TEXTS)  # the row was replaced
    assert n_encoded == 0 and caught == []
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)


def test_database_of_a_later_layout_is_left_alone(
    tiny_bert, tmp_path, fresh_process, uncached
):
    vec, db = _filled(tiny_bert, tmp_path)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA user_version = 99")
    before = _files(tmp_path)
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert len(caught) == 1 and "later release" in str(caught[0].message)
    assert n_encoded == len(TEXTS)
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    assert _files(tmp_path) == before


# -------------------------------------- I/O and permission errors are not damage


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


@contextlib.contextmanager
def permissions_enforced():
    """Make the kernel check file permissions for this thread, even as root.

    Root bypasses permission bits through the capabilities CAP_DAC_OVERRIDE
    and CAP_DAC_READ_SEARCH; they are dropped from this thread's effective
    set (capabilities are per thread on Linux) and restored afterwards.
    """
    if os.geteuid() != 0:
        yield
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
        data = (_CapData * 2)()
        ok = libc.capget(ctypes.byref(header), data) == 0
    except (OSError, AttributeError):
        ok = False
    if not ok:
        pytest.skip("cannot make file permissions bind for root here")
    saved = data[0].effective
    data[0].effective &= ~((1 << 1) | (1 << 2))
    if libc.capset(ctypes.byref(header), data) != 0:
        pytest.skip("cannot make file permissions bind for root here")
    try:
        yield
    finally:
        data[0].effective = saved
        libc.capset(ctypes.byref(header), data)


def _chmod_all(root, file_mode, dir_mode=None):
    for path in sorted(Path(root).rglob("*"), reverse=True):
        if path.is_file():
            path.chmod(file_mode)
        elif dir_mode is not None:
            path.chmod(dir_mode)


def _written_by_another_process(tiny_bert, tmp_path, texts=TEXTS):
    """A cache location holding ``texts``, filled as another process would.

    The cache is filled under one location and copied to a new one, which
    this process has never used: nothing of it can be held in memory.
    """
    BertPoolingVectorizer(tiny_bert, memory=tmp_path / "first").fit(texts).transform(
        texts
    )
    root = tmp_path / "cache"
    shutil.copytree(tmp_path / "first", root)
    return root


def test_unreadable_cache_file_is_reported_and_left_alone(
    tiny_bert, tmp_path, fresh_process, uncached
):
    root = _written_by_another_process(tiny_bert, tmp_path)
    vec = BertPoolingVectorizer(tiny_bert, memory=root).fit(TEXTS)
    before = _files(root)
    _chmod_all(root, 0)
    try:
        with permissions_enforced():
            X, n_encoded, caught = _transform_recording(vec, TEXTS)
    finally:
        _chmod_all(root, 0o644)
    assert _files(root) == before  # nothing renamed, nothing written
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert "Permission denied" in messages[0] and "damaged" not in messages[0]
    assert n_encoded == len(TEXTS)
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    fresh_process()
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert n_encoded == 0 and caught == []  # the data was intact
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)


@contextlib.contextmanager
def _no_free_file_descriptors():
    """Exhaust this process's file descriptors (lowered soft limit, all used)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = [int(fd) for fd in os.listdir("/proc/self/fd")]
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(used) + 1, hard))
    held = []
    try:
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_too_many_open_files_is_reported_and_the_cache_left_alone(
    tiny_bert, tmp_path, fresh_process, uncached
):
    # Another thread of this process (the session's dask cluster, say) may
    # close a descriptor while the test holds all the others, and the cache
    # then opens normally: the output is right either way, and a few tries
    # meet the limit.
    for attempt in range(3):
        cache = tmp_path / f"try-{attempt}"
        vec = BertPoolingVectorizer(tiny_bert, memory=cache).fit(TEXTS)
        vec.transform(TEXTS)
        before = _files(cache)
        with _no_free_file_descriptors():
            X, n_encoded, caught = _transform_recording(vec, TEXTS)
        assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
        if caught:
            break
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert "Too many open files" in messages[0] and "EMFILE" in messages[0]
    assert "ulimit" in messages[0]
    assert n_encoded == len(TEXTS)
    assert _files(cache) == before
    X, n_encoded, _ = _transform_recording(vec, TEXTS)
    assert n_encoded == 0


def test_a_busy_answer_while_opening_is_waited_out(
    tiny_bert, tmp_path, fresh_process, uncached, monkeypatch
):
    # two processes starting on one new cache: SQLite answers the switch to
    # WAL with SQLITE_BUSY at once, without calling its busy handler
    connect, calls = _cache.EmbeddingStore._connect_for_writing, []

    def busy_twice(self):
        calls.append(1)
        if len(calls) <= 2:
            exc = sqlite3.OperationalError("database is locked")
            exc.sqlite_errorcode, exc.sqlite_errorname = 5, "SQLITE_BUSY"
            raise exc
        return connect(self)

    monkeypatch.setattr(_cache.EmbeddingStore, "_connect_for_writing", busy_twice)
    vec = BertPoolingVectorizer(tiny_bert, memory=tmp_path).fit(TEXTS)
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert caught == [] and len(calls) == 3
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    (db,) = _databases(tmp_path)
    assert _count_rows(db) == len(TEXTS)


@pytest.mark.parametrize("read_only", ["directory", "file"])
def test_read_only_cache_serves_its_rows_and_stores_nothing(
    read_only, tiny_bert, tmp_path, fresh_process, uncached
):
    vec, db = _filled(tiny_bert, tmp_path, TEXTS[:4])
    before = _files(tmp_path)
    target = db.parent if read_only == "directory" else db
    target.chmod(0o555 if read_only == "directory" else 0o444)
    try:
        with permissions_enforced():
            X, n_encoded, caught = _transform_recording(vec, TEXTS)
            X2, n_encoded2, caught2 = _transform_recording(vec, TEXTS)
    finally:
        target.chmod(0o755 if read_only == "directory" else 0o644)
    assert n_encoded == 2  # the two texts not cached; four rows read
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert "Cannot write to the embedding cache" in message and "read" in message
    assert (n_encoded2, caught2) == (2, [])  # warned once
    assert_allclose(X2, uncached, rtol=1e-6, atol=1e-7)
    # nothing written; beside a read-only file in a writable directory,
    # SQLite may leave the (empty) log and the index it reads a WAL through
    after = _files(tmp_path)
    extra = {name: after.pop(name) for name in set(after) - set(before)}
    assert after == before
    assert {name[-4:] for name in extra} <= {"-wal", "-shm"}
    assert all(extra[name] == b"" for name in extra if name.endswith("-wal"))


def test_failed_writes_keep_what_was_stored(tiny_bert, tmp_path, fresh_process):
    # a file size limit makes the writes of the log fail as a full disk does
    if not hasattr(signal, "SIGXFSZ"):
        pytest.skip("needs RLIMIT_FSIZE")
    texts = [f"{text} {i}" for i in range(20) for text in TEXTS[:4]]
    expected = BertPoolingVectorizer(tiny_bert).fit(texts).transform(texts)
    vec = BertPoolingVectorizer(tiny_bert, batch_size=4, memory=tmp_path).fit(texts)
    vec.transform(texts[:4])
    (db,) = _databases(tmp_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(
        resource.RLIMIT_FSIZE, (40 * 1024, hard)
    )  # above the 32 KiB -shm
    try:
        X, n_encoded, caught = _transform_recording(vec, texts)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert n_encoded == len(texts) - 4
    assert_allclose(X, expected, rtol=1e-6, atol=1e-7)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "Cannot write to the embedding cache" in messages[0]
    stored = _count_rows(db)
    assert 4 < stored < len(texts)  # the batches before the failure were kept
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    X, n_encoded, caught = _transform_recording(vec, texts)
    assert n_encoded == len(texts) - stored and caught == []
    assert_allclose(X, expected, rtol=1e-6, atol=1e-7)


def test_memory_pointing_at_a_file_warns_once_and_returns(
    tiny_bert, tmp_path, fresh_process, uncached
):
    target = tmp_path / "not-a-directory"
    target.write_text("a file\n")
    vec = BertPoolingVectorizer(tiny_bert, memory=target).fit(TEXTS)
    X, n_encoded, caught = _transform_recording(vec, TEXTS[:3])
    assert len(caught) == 1
    assert "Cannot create the embedding cache" in str(caught[0].message)
    assert "Not a directory" in str(caught[0].message)
    assert_allclose(X, uncached[:3], rtol=1e-6, atol=1e-7)
    X, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert caught == []  # warned once
    assert_allclose(X, uncached, rtol=1e-6, atol=1e-7)
    assert target.read_text() == "a file\n"


# ------------------------------------------------------------------ files


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_cache_files_get_the_users_umask(umask, tiny_bert, tmp_path, fresh_process):
    root = tmp_path / "cache"
    old = os.umask(umask)
    try:
        vec = BertPoolingVectorizer(tiny_bert, memory=root).fit(TEXTS)
        vec.transform(TEXTS[:2])
        (db,) = _databases(root)
        # a reader keeps the log and index files alive while a write happens
        with contextlib.closing(sqlite3.connect(db)) as reader:
            reader.execute("SELECT count(*) FROM embeddings").fetchone()
            vec.transform(TEXTS)
            files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}
        dirs = {stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*") if p.is_dir()}
    finally:
        os.umask(old)
    assert set(modes.values()) == {0o666 & ~umask}, modes
    assert dirs == {0o777 & ~umask}


# ---------------------------------------------------------------- the key


def _namespaces(root):
    return [p.stem for p in _databases(Path(root) / "joblib")]


def _fresh_pair(path):
    from transformers import AutoModel, AutoTokenizer

    return AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def _unsampled_weight(model):
    """A weight element the old 512-values-a-tensor sample never read."""
    weight = model.encoder.layer[0].intermediate.dense.weight
    step = max(1, weight.numel() // 512)
    assert step > 1
    return weight, (0, 1)  # flat index 1, between samples 0 and step


def test_a_change_to_any_weight_changes_the_key(tiny_bert, tmp_path):
    model, tokenizer = _fresh_pair(tiny_bert)
    changed = copy.deepcopy(model)
    weight, index = _unsampled_weight(changed)
    with torch.no_grad():
        weight[index] += 0.5
    # tokenize once first, so both keys see the tokenizer in the same state
    BertPoolingVectorizer((model, tokenizer)).fit(TEXTS).transform(TEXTS)
    vec = BertPoolingVectorizer((model, tokenizer), memory=tmp_path).fit(TEXTS)
    before = vec.transform(TEXTS)
    vec2 = BertPoolingVectorizer((changed, tokenizer), memory=tmp_path).fit(TEXTS)
    after, n_encoded, _ = _transform_recording(vec2, TEXTS)
    assert n_encoded == len(TEXTS)
    assert len(_namespaces(tmp_path)) == 2
    expected = BertPoolingVectorizer((changed, tokenizer)).fit(TEXTS).transform(TEXTS)
    assert_allclose(after, expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(after, before)


def test_weights_changed_in_place_after_fit_are_noticed(tiny_bert, tmp_path):
    model, tokenizer = _fresh_pair(tiny_bert)
    vec = BertPoolingVectorizer((model, tokenizer), memory=tmp_path).fit(TEXTS)
    before = vec.transform(TEXTS)
    weight, index = _unsampled_weight(model)
    with torch.no_grad():
        weight[index] -= 0.5
    after, n_encoded, _ = _transform_recording(vec, TEXTS)
    assert n_encoded == len(TEXTS)
    expected = BertPoolingVectorizer((model, tokenizer)).fit(TEXTS).transform(TEXTS)
    assert_allclose(after, expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(after, before)


def test_key_does_not_depend_on_a_previous_uncached_run(
    tiny_bert, tmp_path, fresh_process
):
    # process A: encodes first without memory= (which leaves the tokenizer's
    # truncation set), then with it
    model, tokenizer = _fresh_pair(tiny_bert)
    pair = (model, tokenizer)
    with pytest.warns(TruncationWarning):
        BertPoolingVectorizer(pair, max_length=12).fit(TEXTS).transform(TEXTS)
    BertPoolingVectorizer(pair, memory=tmp_path).fit(TEXTS).transform(TEXTS)
    # process B: a fresh tokenizer and model, straight to the cache
    fresh_process()
    vec = BertPoolingVectorizer(_fresh_pair(tiny_bert), memory=tmp_path).fit(TEXTS)
    _, n_encoded, caught = _transform_recording(vec, TEXTS)
    assert len(_namespaces(tmp_path)) == 1
    assert n_encoded == 0 and caught == []


def test_same_model_in_another_directory_shares_the_cache(
    tiny_bert, tmp_path, fresh_process
):
    copy_dir = tmp_path / "elsewhere" / "model"
    shutil.copytree(tiny_bert, copy_dir)
    cache = tmp_path / "cache"
    BertPoolingVectorizer(tiny_bert, memory=cache).fit(TEXTS).transform(TEXTS)
    fresh_process()
    vec = BertPoolingVectorizer(_fresh_pair(copy_dir), memory=cache).fit(TEXTS)
    _, n_encoded, _ = _transform_recording(vec, TEXTS)
    assert n_encoded == 0
    assert len(_namespaces(cache)) == 1


def test_key_records_what_it_was_made_of(tiny_bert, tmp_path):
    vec, db = _filled(tiny_bert, tmp_path, pooling="first_last_avg", max_length=20)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        meta = dict(conn.execute("SELECT name, value FROM meta"))
    spec = json.loads(meta["key"])
    assert spec["pooling"] == "first_last_avg" and spec["max_length"] == 20
    assert spec["layers"] == [1, 2] and len(spec["model"]) == 64
    assert db.stem == _cache.cache_key(spec)
    assert meta["vector"] == "float32 little-endian, 32 values"


def test_a_whole_tensor_changed_through_data_is_noticed(tiny_bert, tmp_path):
    # .data bypasses torch's version counter; the sampled entries catch it
    model, tokenizer = _fresh_pair(tiny_bert)
    vec = BertPoolingVectorizer((model, tokenizer), memory=tmp_path).fit(TEXTS)
    before = vec.transform(TEXTS)
    model.embeddings.word_embeddings.weight.data.mul_(2.0)
    after, n_encoded, _ = _transform_recording(vec, TEXTS)
    assert n_encoded == len(TEXTS)
    expected = BertPoolingVectorizer((model, tokenizer)).fit(TEXTS).transform(TEXTS)
    assert_allclose(after, expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(after, before)
