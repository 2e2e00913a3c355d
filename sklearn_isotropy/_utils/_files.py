"""The package's cache homes, and writing files or a directory all at once.

:func:`write_files` writes files so that a reader sees each one whole or
not at all (the reports, the ONNX cache's graphs, a downloaded file);
:func:`publish_directory` does the same for a directory, with the
permissions the user expects.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import uuid
from pathlib import Path


def cache_home(env: str, name: str | None = None) -> Path:
    """Return the directory of one of the package's caches, named ``name``.

    ``$<env>`` when it is set (``~`` expanded), else ``<name>`` under
    ``$XDG_CACHE_HOME/sklearn_isotropy`` (``~/.cache/sklearn_isotropy`` when
    that is unset, on every platform), or that directory itself for
    ``name=None``. The exported ONNX encoders (``onnx``,
    ``SKLEARN_ISOTROPY_ONNX_CACHE``) and the distilled static tables
    (``static``, ``SKLEARN_ISOTROPY_STATIC_CACHE``) live there, and the
    downloaded data sets in the directory itself
    (``SKLEARN_ISOTROPY_DATA``); the embedding cache lives where ``memory=``
    says.
    """
    value = os.environ.get(env)
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path("~", ".cache").expanduser()
    home = Path(base) / "sklearn_isotropy"
    return home if name is None else home / name


def write_files(directory, files):
    """Write every file or none: under temporary names, then rename them all.

    ``files`` maps a name in ``directory`` to its content: a str (written
    as UTF-8), bytes, or ``write(path)``, which writes the file at ``path``
    (a temporary ``.<name>.<random>.tmp`` beside the destination, on the
    same file system, so the rename is atomic). Text and bytes are flushed
    to disk before any rename. A failure while writing leaves every
    previous file as it was and no temporary file behind.

    Returns the paths written, as str, in the order of ``files``.
    """
    directory = Path(directory)
    staged = {}
    try:
        for name, content in files.items():
            staged[name] = path = directory / f".{name}.{uuid.uuid4().hex[:12]}.tmp"
            if callable(content):
                content(path)
                continue
            data = content.encode("utf-8") if isinstance(content, str) else content
            with open(path, "xb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for name, path in staged.items():
            os.replace(path, directory / name)
    finally:
        for path in staged.values():
            with contextlib.suppress(OSError):
                path.unlink()
    return [str(directory / name) for name in files]


def new_directory(parent, prefix):
    """Create a new, uniquely named directory in ``parent`` and return its path.

    Unlike :func:`tempfile.mkdtemp`, whose directories are private (mode
    0700), the directory gets the mode of any directory the user creates:
    0777 masked by the umask (0755 under the usual umask 022). A directory
    that is published under its final name must not be more private than
    one the user would have made.
    """
    while True:
        path = Path(parent) / f"{prefix}{uuid.uuid4().hex[:12]}"
        try:
            os.mkdir(path, 0o777)
        except FileExistsError:
            continue
        return path


def _is_empty_directory(path):
    return path.is_dir() and not any(path.iterdir())


def check_target(path, *, overwrite=False, what="export"):
    """How :func:`publish_directory` would publish at ``path``, or why it cannot.

    Returns "new", "into" (an empty directory) or "replace"; raises what
    :func:`publish_directory` raises. Call it before expensive work, so that
    a refusal comes before the work, not after.
    """
    path = Path(os.fspath(path)).expanduser()
    if path.is_symlink() and not path.exists():
        raise FileExistsError(
            f"{what}: {path} is a symbolic link to {os.readlink(path)}, which does "
            "not exist; remove the link or pass another path."
        )
    if not path.exists():
        return "new"
    if _is_empty_directory(path):
        # written into in place: an empty directory may be a mount point, the
        # working directory or the target of a link, none of which can be
        # renamed
        return "into"
    if not overwrite:
        raise FileExistsError(
            f"{what}: {path} exists and is not an empty directory; pass another "
            "path or overwrite=True."
        )
    resolved = path.resolve()
    if path.is_symlink():
        raise ValueError(
            f"{what}: {path} is a symbolic link to {resolved}; overwrite=True "
            "replaces a directory, not what a link points to. Pass the directory "
            f"itself ({resolved}) to replace it, or remove the link."
        )
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents:
        raise ValueError(
            f"{what}: {path} is the working directory or contains it, which "
            "cannot be replaced; pass a new directory's path, or empty this one "
            "first (the export is then written into it)."
        )
    if path.is_dir() and os.path.ismount(path):
        raise ValueError(
            f"{what}: {path} is a mount point, which cannot be replaced; empty it "
            "first (the export is then written into it) or pass a directory "
            "inside it."
        )
    return "replace"


def publish_directory(path, write, *, overwrite=False, what="export"):
    """Have ``write(directory)`` fill a directory that then appears at ``path``.

    ``write`` works in a staging directory; only once it has returned is the
    result moved into place, so a failure (or a kill) never leaves a
    half-written export at ``path`` nor removes what was there. A missing
    ``path`` is the renamed staging directory; into an empty one (a mount
    point, the working directory) the entries are moved; one that holds
    files (``overwrite=True``) is renamed aside, replaced, then deleted (or
    put back if the rename fails). Folders and files get the modes the
    user's umask gives, not a temporary directory's 0700. ``what`` names the
    caller in the errors, those of :func:`check_target`.

    A new or empty ``path`` that someone else fills while ``write`` works
    (two exports to one path started together) is left as the first to
    finish wrote it; the other fails with the :class:`FileExistsError` of an
    existing path, and its staging directory is removed. The same holds for
    two that replace one ``path`` (``overwrite=True``): one that finds the
    old ``path`` already moved away by the other publishes where it was, as
    into a new path, unless the other has published there first.
    """
    path = Path(os.fspath(path)).expanduser()
    how = check_target(path, overwrite=overwrite, what=what)
    if how == "into":
        target = path.resolve()
        staging = new_directory(target, ".staging-")
    else:
        path = path.absolute()
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = new_directory(path.parent, f".{path.name}.staging-")
    try:
        write(staging)
        _give_default_modes(staging)
        if how == "into":
            _move_entries(staging, target, what=what)
            staging.rmdir()
        elif how == "new":
            _publish_new(staging, path, what=what)
        else:
            _replace(path, staging, what=what)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _give_default_modes(directory):
    """Give every entry of ``directory`` the mode the user's umask gives.

    Libraries write some files as private temporary files (mode 0600). The
    modes come from a probe file: the umask cannot be read without changing it.
    """
    probe = directory / ".mode-probe"
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        file_mode = stat.S_IMODE(probe.stat().st_mode)
    finally:
        probe.unlink()
    dir_mode = stat.S_IMODE(directory.stat().st_mode)
    for path in directory.rglob("*"):
        if not path.is_symlink():
            os.chmod(path, dir_mode if path.is_dir() else file_mode)


def _taken(what, path):
    """The error of a ``path`` that someone else wrote since :func:`check_target`.

    Another export to the same path, say, started at the same time and
    finished first: what it wrote is left as it is.
    """
    return FileExistsError(
        f"{what}: {path} was written by someone else (another export to the same "
        "path, say) while this export was being prepared, and is left as it is; "
        "pass another path or overwrite=True."
    )


def _publish_new(staging, path, *, what):
    """Rename ``staging`` to ``path``, which :func:`check_target` found free.

    ``rename`` replaces an empty directory but fails on one that holds files
    (``ENOTEMPTY`` or ``EEXIST``) or on a file (``ENOTDIR``): a path written
    since the check (two exports to the same path started together) is
    then the :class:`FileExistsError` that an existing path gives, not the
    bare ``OSError`` of the rename.
    """
    try:
        os.replace(staging, path)
    except OSError as exc:
        if os.path.lexists(path):
            raise _taken(what, path) from exc
        raise


def _move_entries(source, target, *, what):
    """Move every entry of ``source`` into the empty directory ``target``.

    An entry that is already in ``target`` (another export into the same
    empty directory got there first) is not replaced: the entries moved so
    far go back and the export fails as one to an existing path does.
    """
    moved = []
    try:
        for entry in sorted(source.iterdir()):
            if os.path.lexists(target / entry.name):
                raise _taken(what, target)
            os.replace(entry, target / entry.name)
            moved.append(target / entry.name)
    except BaseException:
        for entry in moved:  # leave the target empty, as it was
            with contextlib.suppress(OSError):
                os.replace(entry, source / entry.name)
        raise


def _replace(path, staging, *, what):
    """Move the directory ``staging`` to ``path``, replacing what is there.

    What is there is renamed aside first, and deleted once ``staging`` is in
    its place. Another export replacing the same ``path`` at the same time
    (``overwrite=True`` twice) can rename it aside first: ``path`` is then
    free, and this one publishes as to a new path (:func:`_publish_new`),
    unless the other has published there already, which is the
    :class:`FileExistsError` of :func:`_taken`, as for two new exports. The
    staged work is never thrown away for a bare :class:`FileNotFoundError`.
    """
    old = new_directory(path.parent, f".{path.name}.old-")
    old.rmdir()  # reserve a free name next to path
    try:
        os.replace(path, old)
    except FileNotFoundError:
        if os.path.lexists(path):  # a rename that failed for another reason
            raise
        # another export moved the old path aside: it is gone, as this one
        # was asked; publish where it was, unless the other got there first
        _publish_new(staging, path, what=what)
        return
    try:
        os.replace(staging, path)
    except BaseException as exc:
        if isinstance(exc, OSError) and os.path.lexists(path):
            # the other export published at path after this one moved the
            # old one aside: both replaced it, the first to finish stays
            _remove(old)
            raise _taken(what, path) from exc
        os.replace(old, path)  # put the previous content back
        raise
    _remove(old)


def _remove(path):
    """Delete the directory or file ``path``."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
