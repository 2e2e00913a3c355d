"""The caches' homes, and files and directories written all at once.

What the exporters, the downloader and the caches rely on, checked on small
folders of text files: where each cache lives, that a write is whole or
absent, which targets a publication accepts, and what two publications to
one path at once leave behind.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from sklearn_isotropy._utils import (
    _files,
    cache_home,
    check_target,
    new_directory,
    publish_directory,
    write_files,
)


def snapshot(folder):
    """``{relative path: bytes}`` of the files under ``folder``.

    Those of a staging folder in it (a publication into an empty folder
    stages there) left out.
    """
    files = (p for p in sorted(folder.rglob("*")) if p.is_file())
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in files
        if not p.relative_to(folder).parts[0].startswith(".staging-")
    }


def write_model(directory):
    """What the publications of these tests write: two files, one in a folder.

    Private (0600, 0700), as libraries write their temporary files.
    """
    (directory / "model.txt").write_text("the new export")
    (directory / "parts").mkdir(mode=0o700)
    (directory / "parts" / "0.bin").write_bytes(b"\x00\x01")
    os.chmod(directory / "model.txt", 0o600)


NEW_EXPORT = {"model.txt": b"the new export", "parts/0.bin": b"\x00\x01"}


# ------------------------------------------------------------- cache homes
def test_cache_home_reads_its_variable_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("SKLEARN_ISOTROPY_TEST_CACHE", "~/mine")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_home("SKLEARN_ISOTROPY_TEST_CACHE", "onnx") == tmp_path / "mine"
    monkeypatch.setenv("SKLEARN_ISOTROPY_TEST_CACHE", "")  # empty: unset
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    home = tmp_path / "xdg" / "sklearn_isotropy"
    assert cache_home("SKLEARN_ISOTROPY_TEST_CACHE", "onnx") == home / "onnx"
    monkeypatch.delenv("XDG_CACHE_HOME")
    home = tmp_path / ".cache" / "sklearn_isotropy"
    assert cache_home("SKLEARN_ISOTROPY_TEST_CACHE") == home


# ------------------------------------------------------------ write_files
def test_write_files_writes_text_bytes_and_callables(tmp_path):
    paths = write_files(
        tmp_path,
        {
            "a.txt": "caf\xe9",
            "b.bin": b"\xff",
            "c.npy": lambda path: Path(path).write_text("by the callable"),
        },
    )
    assert paths == [str(tmp_path / name) for name in ("a.txt", "b.bin", "c.npy")]
    assert (tmp_path / "a.txt").read_bytes() == "caf\xe9".encode()
    assert (tmp_path / "b.bin").read_bytes() == b"\xff"
    assert (tmp_path / "c.npy").read_text() == "by the callable"


def test_a_failed_write_leaves_every_file_as_it_was(tmp_path):
    (tmp_path / "a.txt").write_text("old a")

    def fail(path):
        Path(path).write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_files(tmp_path, {"a.txt": "new a", "b.txt": fail})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]  # no .tmp
    assert (tmp_path / "a.txt").read_text() == "old a"


# ---------------------------------------------------------- new_directory
def test_new_directories_are_unique_and_get_the_users_umask(tmp_path):
    old = os.umask(0o027)
    try:
        first, second = new_directory(tmp_path, "x-"), new_directory(tmp_path, "x-")
    finally:
        os.umask(old)
    assert first != second and first.name.startswith("x-")
    assert stat.S_IMODE(first.stat().st_mode) == 0o750  # not mkdtemp's 0700


# ----------------------------------------------------------- check_target
def test_check_target_says_how_a_path_would_be_published(tmp_path, monkeypatch):
    assert check_target(tmp_path / "absent") == "new"
    (tmp_path / "empty").mkdir()
    assert check_target(tmp_path / "empty") == "into"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    with pytest.raises(FileExistsError, match="full exists.*overwrite=True"):
        check_target(tmp_path / "full", what="probe")
    assert check_target(tmp_path / "full", overwrite=True) == "replace"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError, match="symbolic link to .*nowhere"):
        check_target(tmp_path / "dangling")
    (tmp_path / "link").symlink_to(tmp_path / "full")
    with pytest.raises(ValueError, match="Pass the directory itself"):
        check_target(tmp_path / "link", overwrite=True)
    monkeypatch.chdir(tmp_path / "full")
    with pytest.raises(ValueError, match="working directory"):
        check_target(tmp_path, overwrite=True)


# ------------------------------------------------------ publish_directory
@pytest.mark.parametrize("target", ["new", "empty", "full"])
def test_publish_directory_leaves_only_the_written_files(tmp_path, target):
    path = tmp_path / "export"
    if target != "new":
        path.mkdir()
    if target == "full":
        (path / "previous.txt").write_text("replaced")
    old = os.umask(0o022)
    try:
        publish_directory(path, write_model, overwrite=True)
    finally:
        os.umask(old)
    assert snapshot(path) == NEW_EXPORT
    assert [p.name for p in tmp_path.iterdir()] == ["export"]  # no staging
    modes = {stat.S_IMODE(p.stat().st_mode) for p in path.rglob("*")}
    assert modes == {0o755, 0o644}  # the umask's, not a temporary folder's


def test_a_failed_publication_leaves_the_path_as_it_was(tmp_path):
    path = tmp_path / "export"
    path.mkdir()
    (path / "previous.txt").write_text("kept")

    def fail(directory):
        write_model(directory)
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        publish_directory(path, fail, overwrite=True)
    assert snapshot(path) == {"previous.txt": b"kept"}
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


@pytest.mark.parametrize("target", ["new path", "empty folder"])
def test_two_publications_to_one_path_at_once(tmp_path, monkeypatch, target):
    """The publication that finishes second fails as one to an existing path does.

    Two publications (two exports) started together both find the path free
    (new, or an empty folder); the other one is made to finish between this
    one's writing and its publication. This one used to fail with a bare
    ``OSError`` (Errno 39, directory not empty), or to write its files over
    the other's in the folder.
    """
    path = tmp_path / "m2v"
    if target == "empty folder":
        path.mkdir()
    written = _files._give_default_modes  # once written, before publication
    other = {}

    def the_other_export_finishes_first(directory):
        written(directory)
        shutil.copytree(directory, path, dirs_exist_ok=True)
        (path / "other").write_text("the export that finished first")
        other.update(snapshot(path))

    monkeypatch.setattr(_files, "_give_default_modes", the_other_export_finishes_first)
    message = r"m2v was written by someone else.*pass another path or overwrite=True"
    with pytest.raises(FileExistsError, match=message):
        publish_directory(path, write_model)
    assert snapshot(path) == other  # left as the other export wrote it
    # no staging folder left, beside the path or in it
    assert [p.name for p in tmp_path.iterdir()] == ["m2v"]
    assert not [p for p in path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    "race",
    ["moved the old one aside", "then published first", "published in between"],
)
def test_two_overwriting_publications_to_one_path(tmp_path, monkeypatch, race):
    """Two ``overwrite=True`` publications replacing one folder at once.

    Each renames the old folder aside, then its staged folder into place.
    The other one can do either first: this one used to fail with a bare
    ``FileNotFoundError`` (the old folder already moved away) and discard its
    staged work. Now it publishes where the old folder was, or, when the
    other has published there first (before this one's rename into place,
    whichever moved the old folder aside), fails with the documented
    ``FileExistsError``, leaving what the other wrote. (A publication that
    finished before this one started to replace the folder is simply
    replaced, as ``overwrite=True`` says.)
    """
    path = tmp_path / "m2v"
    path.mkdir()
    (path / "previous.txt").write_text("the export both replace")
    other = tmp_path / "other"  # what the other export publishes
    other.mkdir()
    (other / "other.txt").write_text("the export that finished first")
    aside = tmp_path / ".m2v.old-of-the-other"
    written = _files._give_default_modes  # once written, before publication
    real_replace = os.replace

    def the_other_export(directory):
        written(directory)
        if race != "published in between":
            real_replace(path, aside)  # the other's first rename

    def publish_first(src, dst):  # just before this export's rename into place
        if Path(dst) == path and ".staging-" in Path(src).name and other.exists():
            real_replace(other, path)
        return real_replace(src, dst)

    monkeypatch.setattr(_files, "_give_default_modes", the_other_export)
    if race != "moved the old one aside":
        monkeypatch.setattr(_files.os, "replace", publish_first)
    if race == "moved the old one aside":
        publish_directory(path, write_model, overwrite=True)
        assert snapshot(path) == NEW_EXPORT
    else:
        message = r"m2v was written by someone else.*pass another path"
        with pytest.raises(FileExistsError, match=message):
            publish_directory(path, write_model, overwrite=True)
        assert [p.name for p in path.iterdir()] == ["other.txt"]
    # no staging folder left, nor the old folder this export moved aside
    # (the other export's is its own to delete)
    left = {p.name for p in tmp_path.iterdir()} - {aside.name, "other"}
    assert left == {"m2v"}
